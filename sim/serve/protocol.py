"""OpenAI's completions and chat completions, as `batchsim serve` reads and answers them.

`parse` turns a request body into a `Call` or raises `BadRequest`, whose message is one line
naming the field (the status and OpenAI's error document: `error_body`). Fields the simulation
has no use for (temperature, top_p, seed, stop, ...) are accepted and ignored, as a stand-in
must; `echo` is answered as vLLM answers it (a completion's text starts with its prompt; a chat
answer with the last message when that is the assistant's: vllm/entrypoints/openai/
serving_completion.py, serving_chat.py); those that would change what is sent and that the
simulation cannot give (`n` > 1, `best_of` > 1, `logprobs`, `top_logprobs`, `prompt_logprobs`,
tools) are refused.

A request generates exactly `max_tokens` tokens (`max_completion_tokens` in chat): the
simulated model never stops early, as a real one with `ignore_eos` does. Without it, a
completion gets 16 (OpenAI's and vLLM's default) and a chat completion the rest of the context.
`min_tokens` is therefore always met; above the `max_tokens` in force (given or default) it is
refused, as vLLM's `SamplingParams` refuses it.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

COMPLETION_DEFAULT_TOKENS = 16
MAX_PROMPT_CHARS = 1 << 24  # also bounded by the body size the server reads
MAX_TOKEN_ID = (1 << 63) - 1  # token ids are kept as int64
MAX_ID_CHARS = 200  # a request id longer than this is cut to it


class BadRequest(Exception):
    """A request the server refuses: HTTP `status`, OpenAI's error `kind`, the `param`."""

    def __init__(self, message: str, param: str | None = None, status: int = 400,
                 kind: str = "invalid_request_error") -> None:  # fmt: skip
        super().__init__(message)
        self.message = message
        self.param = param
        self.status = status
        self.kind = kind


def error_body(message: str, kind: str, status: int, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": param, "code": status}}


@dataclass(frozen=True)
class Call:
    """One parsed request."""

    chat: bool
    prompt: str | None  # text to tokenize, or
    prompt_ids: list[int] | None  # token ids as given, or
    messages: tuple[dict[str, str], ...] | None  # a chat's messages (role, content)
    max_tokens: int | None  # None: the default for its kind
    min_tokens: int
    stream: bool
    include_usage: bool
    model: str
    echo: bool = False
    request_id: str = ""  # the client's `request_id` ("": none)
    # the client's `user` ("": none): an agent's task or a chat's session, what a
    # session-sticky router keeps on one instance
    session: str = ""


def _int(body: dict[str, Any], name: str, low: int) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequest(f"{name} must be an integer, not {type(value).__name__}", name)
    if value < low:
        raise BadRequest(f"{name} must be at least {low}, not {value}", name)
    return value


def _bool(body: dict[str, Any], name: str) -> bool:
    value = body.get(name, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise BadRequest(f"{name} must be true or false, not {value!r:.40}", name)
    return value


def _prompt(value: Any, batch: bool = True) -> tuple[str | None, list[int] | None]:
    if isinstance(value, str):
        return value, None
    if batch and isinstance(value, list) and len(value) == 1 and isinstance(value[0], (str, list)):
        return _prompt(value[0], batch=False)  # a batch of one
    if isinstance(value, list) and value and all(
        isinstance(t, int) and not isinstance(t, bool) and 0 <= t <= MAX_TOKEN_ID for t in value
    ):
        return None, list(value)
    if isinstance(value, list) and any(isinstance(t, int) and t > MAX_TOKEN_ID for t in value):
        raise BadRequest(f"prompt: token ids must be from 0 to {MAX_TOKEN_ID}", "prompt")
    if isinstance(value, list) and len(value) > 1:
        raise BadRequest("prompt: only one prompt per request is served", "prompt")
    raise BadRequest("prompt must be a string or a list of token ids", "prompt")


def _messages(value: Any) -> tuple[dict[str, str], ...]:
    """Each message's role and text (a list of text parts joined by newlines, as vLLM joins
    them for a template that takes strings)."""
    if not isinstance(value, list) or not value:
        raise BadRequest("messages must be a non-empty list", "messages")
    out: list[dict[str, str]] = []
    for i, message in enumerate(value):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise BadRequest(f"{where} must be an object", where)
        if not isinstance(message.get("role"), str):
            raise BadRequest(f"{where}.role must be a string", f"{where}.role")
        content = message.get("content")
        if content is None:
            continue
        if isinstance(content, str):
            text = content
        elif isinstance(content, list):
            parts: list[str] = []
            for j, part in enumerate(content):
                piece = part.get("text") if isinstance(part, dict) else None
                if not isinstance(piece, str) or part.get("type", "text") != "text":
                    raise BadRequest(f"{where}.content[{j}]: only text parts are served",
                                     f"{where}.content")  # fmt: skip
                parts.append(piece)
            text = "\n".join(parts)
        else:
            raise BadRequest(f"{where}.content must be a string or a list of parts",
                             f"{where}.content")  # fmt: skip
        out.append({"role": message["role"], "content": text})
    return tuple(out)


def _refused(body: dict[str, Any], chat: bool) -> None:
    """The fields whose answer the simulation cannot give: 400 naming the field."""
    if body.get("tools"):
        raise BadRequest("tools is not served by the simulated engine", "tools")
    best_of = _int(body, "best_of", 1)
    if best_of is not None and best_of != 1:
        raise BadRequest("best_of: only best_of = 1 is served", "best_of")
    fields = ("logprobs", "top_logprobs", "prompt_logprobs") if chat else (
        "logprobs", "prompt_logprobs")  # fmt: skip
    for field in fields:
        value = body.get(field)
        if value is not None and value is not False and not (field == "top_logprobs"
                                                              and value == 0):  # fmt: skip
            raise BadRequest(f"{field} is not served: the simulated model has no token "
                             "probabilities", field)  # fmt: skip


def parse(raw: bytes, *, chat: bool, model: str) -> Call:
    """The body of a POST to /v1/completions (`chat` False) or /v1/chat/completions."""
    try:
        body = json.loads(raw.decode("utf-8-sig"))  # JSON is UTF-8 (RFC 8259), a BOM allowed
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest(f"the body is not JSON ({str(exc).splitlines()[0]:.80})") from None
    except RecursionError:
        raise BadRequest("the body is not JSON that can be read: nested too deeply") from None
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    name = body.get("model", model)
    if not isinstance(name, str):
        raise BadRequest("model must be a string", "model")
    if name != model:
        raise BadRequest(f"the model `{name:.80}` does not exist; this server has `{model}`",
                         "model", status=404, kind="NotFoundError")  # fmt: skip
    n = _int(body, "n", 1)
    if n is not None and n != 1:
        raise BadRequest("n: only n = 1 is served", "n")
    _refused(body, chat)
    echo = _bool(body, "echo")
    text: str | None
    ids: list[int] | None
    messages = None
    if chat:
        text, ids, messages = None, None, _messages(body.get("messages"))
        max_tokens = _int(body, "max_completion_tokens", 1)
        if max_tokens is None:
            max_tokens = _int(body, "max_tokens", 1)
    else:
        if "prompt" not in body:
            raise BadRequest("prompt is missing", "prompt")
        text, ids = _prompt(body["prompt"])
        max_tokens = _int(body, "max_tokens", 1)
    size = len(text) if text is not None else sum(len(m["content"]) for m in messages or ())
    if size > MAX_PROMPT_CHARS:
        raise BadRequest(f"the prompt is over {MAX_PROMPT_CHARS} characters", "prompt")
    min_tokens = _int(body, "min_tokens", 0) or 0
    if max_tokens is not None:
        check_min_tokens(min_tokens, max_tokens)
    _bool(body, "ignore_eos")
    stream = _bool(body, "stream")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise BadRequest("stream_options must be an object", "stream_options")
    include = _bool(options, "include_usage") if options else False
    return Call(chat, text, ids, messages, max_tokens, min_tokens, stream, include, model, echo,
                request_id(body.get("request_id"), "request_id"),
                request_id(body.get("user"), "user"))


def request_id(value: Any, field: str) -> str:
    """A client's request id as the results keep it: text that is UTF-8 (anything else is
    refused, naming `field`), its first `MAX_ID_CHARS` characters; "" for none."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise BadRequest(f"{field} must be a string, not {type(value).__name__}", field)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise BadRequest(f"{field} is not UTF-8 text", field) from None
    return value[:MAX_ID_CHARS]


def check_min_tokens(min_tokens: int, max_tokens: int) -> None:
    """vLLM's `SamplingParams` check: `min_tokens` at most the `max_tokens` in force."""
    if min_tokens > max_tokens:
        raise BadRequest(f"min_tokens must be less than or equal to max_tokens={max_tokens}, "
                         f"got {min_tokens}", "min_tokens")  # fmt: skip


class Answer:
    """The JSON documents of one response (streamed chunks or a whole one)."""

    def __init__(self, call: Call, rid: str, prompt_tokens: int, echo: str = "") -> None:
        self.call = call
        self.id = rid
        self.created = int(time.time())
        self.prompt_tokens = prompt_tokens
        self.echo = echo  # the text the first event (or the whole answer) starts with
        self.cached_tokens = 0  # prompt tokens found in the prefix cache (set before `usage`)
        self._chunks: dict[tuple[str, str | None, bool], bytes] = {}  # a stream repeats them

    def _doc(self, choices: list[dict[str, Any]], chunk: bool) -> dict[str, Any]:
        if self.call.chat:
            kind = "chat.completion.chunk" if chunk else "chat.completion"
        else:
            kind = "text_completion"
        return {"id": self.id, "object": kind, "created": self.created,
                "model": self.call.model, "choices": choices}  # fmt: skip

    @property
    def opens(self) -> bool:
        """Whether its first event differs from the rest (the chat role, or echoed text)."""
        return self.call.chat or bool(self.echo)

    def usage(self, completion_tokens: int) -> dict[str, Any]:
        doc: dict[str, Any] = {"prompt_tokens": self.prompt_tokens,
                               "completion_tokens": completion_tokens,
                               "total_tokens": self.prompt_tokens + completion_tokens}  # fmt: skip
        if self.cached_tokens:  # vLLM's `--enable-prompt-tokens-details`
            doc["prompt_tokens_details"] = {"cached_tokens": self.cached_tokens}
        return doc

    def chunk(self, text: str, finish: str | None = None, role: bool = False) -> bytes:
        """A server-sent event of `text` (and the finish reason on the last)."""
        key = (text, finish, role)
        event = self._chunks.get(key)
        if event is None:
            event = self._chunks[key] = self._chunk(text, finish, role)
        return event

    def _chunk(self, text: str, finish: str | None, role: bool) -> bytes:
        if role:  # the first event: the echoed text comes first
            text = self.echo + text
        if self.call.chat:
            delta: dict[str, Any] = {"role": "assistant", "content": text} if role else (
                {"content": text} if text or finish is None else {})
            choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None,
                                      "finish_reason": finish}  # fmt: skip
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
        return b"data: " + json.dumps(self._doc([choice], True)).encode() + b"\n\n"

    def usage_chunk(self, completion_tokens: int) -> bytes:
        doc = self._doc([], True)
        doc["usage"] = self.usage(completion_tokens)
        return b"data: " + json.dumps(doc).encode() + b"\n\n"

    def whole(self, text: str, completion_tokens: int, finish: str) -> dict[str, Any]:
        text = self.echo + text
        if self.call.chat:
            choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant",
                                      "content": text}, "logprobs": None,
                                      "finish_reason": finish}  # fmt: skip
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
        doc = self._doc([choice], False)
        doc["usage"] = self.usage(completion_tokens)
        return doc
