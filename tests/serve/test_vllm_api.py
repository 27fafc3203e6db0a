"""vLLM's API beyond completions: `/version`, `/tokenize`, `/detokenize` with vLLM's shapes;
`echo` answered, `logprobs` refused naming the field, `min_tokens` checked against the
`max_tokens` in force, a tokenizer's chat template applied; every bad input a 400 naming the
field."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from helpers_serve import events, get, post, serving
from scenario_factory import scenario

from sim.serve.tokens import Tokens

FIXTURE = Path(__file__).parent / "fixtures" / "tokenizer"
TEMPLATE = ("{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}"
            "{{ eos_token }}{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}")


@pytest.fixture(scope="module")
def server():  # type: ignore[no-untyped-def]
    with serving(scenario(profile=None), speed=20.0) as (ports, srv):
        yield ports[0], srv


@pytest.fixture(scope="module")
def templated(tmp_path_factory):  # type: ignore[no-untyped-def]
    folder = tmp_path_factory.mktemp("tok")
    shutil.copy(FIXTURE / "tokenizer.json", folder / "tokenizer.json")
    config = json.loads((FIXTURE / "tokenizer_config.json").read_text())
    config["chat_template"] = TEMPLATE
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    tokens = Tokens(folder)
    with serving(scenario(profile=None), speed=20.0, tokens=tokens) as (ports, _):
        yield ports[0], tokens


def test_version(server) -> None:  # type: ignore[no-untyped-def]
    status, raw = get(server[0], "/version")
    assert status == 200 and isinstance(json.loads(raw)["version"], str)


def test_tokenize_counts_what_a_completion_counts(server) -> None:  # type: ignore[no-untyped-def]
    port, _ = server
    status, raw = post(port, "/tokenize", {"model": "m", "prompt": "x" * 41})
    doc = json.loads(raw)
    assert status == 200 and set(doc) == {"count", "max_model_len", "tokens", "token_strs"}
    assert doc["count"] == len(doc["tokens"]) == 11 and doc["token_strs"] is None
    usage = json.loads(post(port, "/v1/completions", {"prompt": "x" * 41, "max_tokens": 1})[1])
    assert usage["usage"]["prompt_tokens"] == doc["count"]


def test_echo_starts_the_answer_with_the_prompt(server) -> None:  # type: ignore[no-untyped-def]
    port, _ = server
    whole = json.loads(post(port, "/v1/completions", {"prompt": "say", "max_tokens": 2,
                                                      "echo": True})[1])  # fmt: skip
    assert whole["choices"][0]["text"] == "say tok tok"
    assert whole["usage"]["completion_tokens"] == 2
    raw = post(port, "/v1/completions", {"prompt": "say", "max_tokens": 3, "echo": True,
                                         "stream": True})[1]  # fmt: skip
    texts = [json.loads(e)["choices"][0]["text"] for e in events(raw)[:-1]]
    assert texts == ["say tok", " tok", " tok"]


def test_min_tokens_is_checked_against_the_default_max_tokens(server) -> None:  # type: ignore[no-untyped-def]
    port, _ = server
    status, raw = post(port, "/v1/completions", {"prompt": "x", "min_tokens": 17})
    assert status == 400 and json.loads(raw)["error"]["param"] == "min_tokens"
    status, raw = post(port, "/v1/completions", {"prompt": "x", "min_tokens": 16})
    assert status == 200 and json.loads(raw)["usage"]["completion_tokens"] == 16


def test_the_chat_template_makes_the_prompt(templated) -> None:  # type: ignore[no-untyped-def]
    port, tokens = templated
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    text = "<|bos|><|system|>be brief<|endoftext|><|user|>hi<|endoftext|><|assistant|>"
    want = len(tokens.encode(text, special=False))
    doc = json.loads(post(port, "/v1/chat/completions", {"messages": messages,
                                                         "max_tokens": 1})[1])  # fmt: skip
    assert doc["usage"]["prompt_tokens"] == want
    assert want != len(tokens.encode("be brief\nhi"))  # not the contents alone
    shown = json.loads(post(port, "/tokenize", {"messages": messages,
                                                "return_token_strs": True})[1])  # fmt: skip
    assert shown["count"] == want and len(shown["token_strs"]) == want
    back = json.loads(post(port, "/detokenize", {"tokens": shown["tokens"]})[1])
    assert back["prompt"] == text


BAD = [
    ("/v1/completions", {"prompt": "x", "logprobs": 1}, 400, "logprobs"),
    ("/v1/completions", {"prompt": "x", "logprobs": 0}, 400, "logprobs"),
    ("/v1/completions", {"prompt": "x", "prompt_logprobs": 1}, 400, "prompt_logprobs"),
    ("/v1/completions", {"prompt": "x", "echo": "yes"}, 400, "echo"),
    ("/v1/completions", {"prompt": [1, 2], "echo": True}, 400, "echo"),
    ("/v1/completions", {"prompt": "x", "best_of": 2}, 400, "best_of"),
    ("/v1/completions", {"prompt": "x", "best_of": "2"}, 400, "best_of"),
    ("/v1/completions", {"prompt": "x", "min_tokens": 40}, 400, "min_tokens"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                              "logprobs": True}, 400, "logprobs"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                              "top_logprobs": 3}, 400, "top_logprobs"),
    ("/tokenize", b"{nope", 400, None),
    ("/tokenize", [], 400, None),
    ("/tokenize", {"prompt": 3}, 400, "prompt"),
    ("/tokenize", {}, 400, "prompt"),
    ("/tokenize", {"prompt": "x", "model": "other"}, 404, "model"),
    ("/tokenize", {"prompt": "x", "add_special_tokens": "no"}, 400, "add_special_tokens"),
    ("/tokenize", {"prompt": "x", "return_token_strs": 1}, 400, "return_token_strs"),
    ("/tokenize", {"prompt": "x", "return_token_strs": True}, 400, "return_token_strs"),
    ("/tokenize", {"messages": "hi"}, 400, "messages"),
    ("/tokenize", {"messages": [{"role": "user", "content": "x"}],
                   "add_generation_prompt": 1}, 400, "add_generation_prompt"),
    ("/detokenize", {"tokens": "1 2"}, 400, "tokens"),
    ("/detokenize", {"tokens": [1, True]}, 400, "tokens"),
    ("/detokenize", {"tokens": [1, 2]}, 400, "tokens"),  # the rule's ids have no text
    ("/detokenize", {"tokens": [1], "model": 7}, 400, "model"),
]  # fmt: skip


@pytest.mark.parametrize(("path", "body", "status", "param"), BAD, ids=range(len(BAD)))
def test_bad_inputs_get_a_4xx_naming_the_field(server, path, body, status, param) -> None:  # type: ignore[no-untyped-def]
    port, _ = server
    got, raw = post(port, path, body)
    assert got == status
    error = json.loads(raw)["error"]
    assert error["code"] == status and "\n" not in error["message"]
    assert error["param"] == param
    assert get(port, "/health")[0] == 200


def test_detokenize_refuses_ids_outside_the_vocabulary(templated) -> None:  # type: ignore[no-untyped-def]
    port, tokens = templated
    got, raw = post(port, "/detokenize", {"tokens": [tokens.vocab_size()]})
    assert got == 400 and json.loads(raw)["error"]["param"] == "tokens"
