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
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from pathlib import Path

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

    def _one_token_piece(self, file: Path) -> str:
        assert self._tok is not None
        for piece in CANDIDATES:
            if all(len(self._tok.encode(piece * n, add_special_tokens=False).ids) == n
                   for n in (1, 2, 7, 64)):  # fmt: skip
                return piece
        raise ValueError(f"{file}: none of {list(CANDIDATES)} is one token when repeated")

    def encode(self, text: str) -> np.ndarray:
        """The token ids of `text` (int64)."""
        if self._tok is not None:
            return np.asarray(self._tok.encode(text).ids, dtype=np.int64)
        data = text.encode("utf-8", errors="surrogatepass")
        return np.fromiter(
            (zlib.crc32(data[i : i + RULE_BYTES]) for i in range(0, len(data), RULE_BYTES)),
            dtype=np.int64,
        )

    def ids(self, ids: Sequence[int]) -> np.ndarray:
        return np.asarray(ids, dtype=np.int64)

    def filler(self, num_tokens: int) -> str:
        return self.piece * num_tokens
