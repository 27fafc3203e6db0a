"""Prompt tokens and output text of a served request.

With a tokenizer (`--tokenizer DIR`: a `tokenizers`/`transformers` directory holding
`tokenizer.json`), a prompt's tokens are what it encodes to, and their ids are the request's
content (prefix caching sees real shared prefixes). Without one, the rule is: one token per 4
bytes of the prompt's UTF-8 text (the last may be shorter), each token's id the CRC-32 of its
bytes, so equal text prefixes are equal token prefixes. A prompt given as token ids is taken
as it is either way.

Output text is filler of exactly the simulated token count: one `piece` per token, a word that
the tokenizer encodes to exactly one token each time it repeats (" tok" under the rule: 4
bytes).

A chat request's prompt is its messages rendered by the tokenizer's chat template
(`chat_template` of `tokenizer_config.json`, or `chat_template.jinja` beside it) with the
generation prompt added, as vLLM renders it (transformers' `apply_chat_template`: Jinja2 in a
sandbox, `trim_blocks` and `lstrip_blocks`), then encoded without special tokens (the template
writes them; vllm/entrypoints/openai/serving_chat.py). Without a template, the messages'
contents joined by newlines.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

RULE_BYTES = 4  # bytes per token under the rule
RULE_PIECE = " tok"
CANDIDATES = (" the", " a", " and", " of", " to", " x", " tok", " is")


class Tokens:
    """Counts prompt tokens and makes filler text (see the module docstring)."""

    def __init__(self, directory: Path | None = None) -> None:
        self.name = "rule: one token per 4 bytes"
        self.piece = RULE_PIECE
        self._tok = None
        self._template: Any = None  # the chat template, compiled
        self._special: dict[str, str] = {}
        if directory is None:
            return
        file = directory / "tokenizer.json"
        if not file.is_file():
            raise ValueError(f"{directory}: no tokenizer.json in it")
        try:
            from tokenizers import Tokenizer
        except ImportError as exc:  # an optional dependency
            raise ValueError("reading a tokenizer needs the tokenizers package") from exc
        try:
            self._tok = Tokenizer.from_file(str(file))
        except Exception as exc:  # the library's own parse errors
            raise ValueError(f"{file}: not a tokenizer ({exc})") from None
        self.name = str(directory)
        self.piece = self._one_token_piece(file)
        self._read_template(directory)

    def _read_template(self, directory: Path) -> None:
        """The chat template and the special tokens it names, if the folder has one."""
        config: dict[str, Any] = {}
        file = directory / "tokenizer_config.json"
        if file.is_file():
            try:
                config = json.loads(file.read_text(encoding="utf-8"))
            except (ValueError, UnicodeDecodeError) as exc:
                raise ValueError(f"{file}: not JSON ({str(exc).splitlines()[0]:.80})") from None
            if not isinstance(config, dict):
                raise ValueError(f"{file}: not a JSON object")
        for name in ("bos_token", "eos_token", "pad_token", "unk_token"):
            value = config.get(name)
            value = value.get("content") if isinstance(value, dict) else value
            if isinstance(value, str):
                self._special[name] = value
        text = config.get("chat_template")
        if isinstance(text, list):  # named templates: vLLM's default is the "default" one
            named = {t.get("name"): t.get("template") for t in text if isinstance(t, dict)}
            text = named.get("default")
        jinja_file = directory / "chat_template.jinja"
        if text is None and jinja_file.is_file():
            text = jinja_file.read_text(encoding="utf-8")
        if text is None:
            return
        if not isinstance(text, str):
            raise ValueError(f"{file}: chat_template must be a string")
        try:
            from jinja2 import TemplateError
            from jinja2.sandbox import ImmutableSandboxedEnvironment
        except ImportError as exc:  # an optional dependency
            raise ValueError("a tokenizer's chat template needs the jinja2 package") from exc

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.filters["tojson"] = lambda x, indent=None, **_: json.dumps(x, indent=indent)
        env.globals["raise_exception"] = _raise
        try:
            self._template = env.from_string(text)
        except TemplateError as exc:
            raise ValueError(f"{file}: the chat template does not parse ({exc})") from None

    @property
    def has_template(self) -> bool:
        return self._template is not None

    def chat_prompt(self, messages: Sequence[dict[str, str]], generation: bool = True) -> str:
        """The messages as the chat template renders them (`generation`: with the assistant's
        turn opened), or their contents joined by newlines without a template. ValueError
        when the template refuses them."""
        if self._template is None:
            return "\n".join(m["content"] for m in messages)
        from jinja2 import TemplateError

        try:
            text = self._template.render(messages=list(messages),
                                         add_generation_prompt=generation, **self._special)
            return str(text)
        except TemplateError as exc:
            raise ValueError(f"the chat template refused the messages: {exc}") from None

    @property
    def can_decode(self) -> bool:
        """Whether token ids can be turned back into text (a tokenizer, not the rule)."""
        return self._tok is not None

    def decode(self, ids: Sequence[int]) -> str:
        assert self._tok is not None
        return str(self._tok.decode(list(ids), skip_special_tokens=False))

    def token_strs(self, ids: Sequence[int]) -> list[str | None]:
        assert self._tok is not None
        return [self._tok.id_to_token(i) for i in ids]

    def vocab_size(self) -> int:
        """Token ids below this are the tokenizer's (2^32 under the rule: CRC-32 values)."""
        return int(self._tok.get_vocab_size()) if self._tok is not None else 1 << 32

    def _one_token_piece(self, file: Path) -> str:
        assert self._tok is not None
        for piece in CANDIDATES:
            if all(len(self._tok.encode(piece * n, add_special_tokens=False).ids) == n
                   for n in (1, 2, 7, 64)):  # fmt: skip
                return piece
        raise ValueError(f"{file}: none of {list(CANDIDATES)} is one token when repeated")

    def encode(self, text: str, special: bool = True) -> np.ndarray:
        """The token ids of `text` (int64); `special`: with the tokenizer's special tokens."""
        if self._tok is not None:
            ids = self._tok.encode(text, add_special_tokens=special).ids
            return np.asarray(ids, dtype=np.int64)
        data = text.encode("utf-8", errors="surrogatepass")
        return np.fromiter(
            (zlib.crc32(data[i : i + RULE_BYTES]) for i in range(0, len(data), RULE_BYTES)),
            dtype=np.int64,
        )

    def ids(self, ids: Sequence[int]) -> np.ndarray:
        return np.asarray(ids, dtype=np.int64)

    def filler(self, num_tokens: int) -> str:
        return self.piece * num_tokens


def _raise(message: str) -> None:
    from jinja2 import TemplateError

    raise TemplateError(message)
