"""A request's prompt tokens, and the routes that show them: `POST /tokenize`, `POST
/detokenize` and `GET /version`, with vLLM's request and response shapes
(vllm/entrypoints/openai/serving_tokenization.py, protocol.py).

`prompt_of` turns a parsed request into its token ids and the text `echo` starts its answer
with. `/tokenize` takes a completion's `prompt` (`add_special_tokens`, default true) or a chat's
`messages` (`add_generation_prompt`, default true; `add_special_tokens`, default false), and
`return_token_strs`; it answers `{"count", "max_model_len", "tokens", "token_strs"}`.
`/detokenize` takes `tokens` and answers `{"prompt"}`; it needs a tokenizer (`--tokenizer`):
the rule's token ids (CRC-32 of 4 bytes) cannot be turned back into text, and are refused.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from aiohttp import web

from sim.serve.protocol import BadRequest, Call, _bool, _messages
from sim.serve.tokens import Tokens
from sim.version import __version__

MAX_TOKENS_LISTED = 1 << 20  # ids a /detokenize request may carry


def prompt_of(call: Call, tokens: Tokens) -> tuple[np.ndarray, str]:
    """The request's prompt token ids and its echoed text ("" without `echo`)."""
    if call.messages is not None:
        ids = chat_ids(call.messages, tokens, generation=True, special=None)
        last = call.messages[-1] if call.messages else None
        echo = last["content"] if call.echo and last and last["role"] == "assistant" else ""
        return ids, echo
    if call.prompt is not None:
        return tokens.encode(call.prompt), call.prompt if call.echo else ""
    ids = tokens.ids(call.prompt_ids or [])
    if not call.echo:
        return ids, ""
    if not tokens.can_decode:
        raise BadRequest("echo: a prompt of token ids is echoed only with a tokenizer "
                         "(--tokenizer)", "echo")  # fmt: skip
    return ids, tokens.decode([int(i) for i in ids])


def chat_ids(messages: tuple[dict[str, str], ...], tokens: Tokens, *, generation: bool,
             special: bool | None) -> np.ndarray:  # fmt: skip
    """A chat's prompt tokens: the template's text, encoded without special tokens (the
    template writes them) unless `special`; without a template (None: as the text has none)."""
    try:
        text = tokens.chat_prompt(messages, generation)
    except ValueError as exc:
        raise BadRequest(str(exc), "messages") from None
    if special is None:
        special = not tokens.has_template
    return tokens.encode(text, special)


def _body(raw: bytes, model: str) -> dict[str, Any]:
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest(f"the body is not JSON ({str(exc).splitlines()[0]:.80})") from None
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    name = body.get("model", model)
    if name is not None and not isinstance(name, str):
        raise BadRequest("model must be a string", "model")
    if name is not None and name != model:
        raise BadRequest(f"the model `{name:.80}` does not exist; this server has `{model}`",
                         "model", status=404, kind="NotFoundError")  # fmt: skip
    return body


def tokenize(raw: bytes, model: str, tokens: Tokens, max_model_len: int) -> dict[str, Any]:
    """The answer of `POST /tokenize` (see the module docstring)."""
    body = _body(raw, model)
    strs = _bool(body, "return_token_strs")
    if "messages" in body:
        generation = body.get("add_generation_prompt", True)
        if not isinstance(generation, bool):
            raise BadRequest("add_generation_prompt must be true or false",
                             "add_generation_prompt")  # fmt: skip
        given = body.get("add_special_tokens")  # default: as a chat completion encodes
        if given is not None and not isinstance(given, bool):
            raise BadRequest("add_special_tokens must be true or false", "add_special_tokens")
        ids = chat_ids(_messages(body["messages"]), tokens, generation=generation,
                       special=given)  # fmt: skip
    elif isinstance(body.get("prompt"), str):
        special = body.get("add_special_tokens", True)
        if not isinstance(special, bool):
            raise BadRequest("add_special_tokens must be true or false", "add_special_tokens")
        ids = tokens.encode(body["prompt"], special)
    else:
        raise BadRequest("prompt must be a string (or give messages)", "prompt")
    listed = [int(i) for i in ids]
    if strs and not tokens.can_decode:
        raise BadRequest("return_token_strs: token strings need a tokenizer (--tokenizer)",
                         "return_token_strs")  # fmt: skip
    return {"count": len(listed), "max_model_len": max_model_len, "tokens": listed,
            "token_strs": tokens.token_strs(listed) if strs else None}  # fmt: skip


def detokenize(raw: bytes, model: str, tokens: Tokens) -> dict[str, Any]:
    """The answer of `POST /detokenize` (see the module docstring)."""
    body = _body(raw, model)
    ids = body.get("tokens")
    if not isinstance(ids, list) or not all(
        isinstance(t, int) and not isinstance(t, bool) for t in ids
    ):
        raise BadRequest("tokens must be a list of token ids", "tokens")
    if len(ids) > MAX_TOKENS_LISTED:
        raise BadRequest(f"tokens: over {MAX_TOKENS_LISTED} ids", "tokens")
    if not tokens.can_decode:
        raise BadRequest("tokens: detokenizing needs a tokenizer (--tokenizer)", "tokens")
    vocab = tokens.vocab_size()
    bad = next((t for t in ids if not 0 <= t < vocab), None)
    if bad is not None:
        raise BadRequest(f"tokens: {bad} is not a token id (0 to {vocab - 1})", "tokens")
    return {"prompt": tokens.decode(ids)}


def version() -> web.Response:
    """`GET /version`: `{"version": ...}` (batchsim's version)."""
    return web.json_response({"version": __version__})
