"""What the benchmark measures: grid presets and the step shapes (points) they expand to.

A point is one step shape: `num_decodes` sequences decoding one token each over `context` cached
tokens, and/or a prefill of `chunk` tokens split evenly over `prompts` prompts with an empty
cache. `features()` gives the columns of the raw CSV, counted exactly as the simulator's
`StepPlan` counts them (context after the step), so a fitted profile prices the same step the
same way.

Presets: `full` is the GPU grid of the issue (B 1..256, L 128..8192, prefill up to 8192 tokens,
mixed steps), sized with `layers_timed=4` and modest repeats so two 7-8B models finish in a few
minutes on an H100/H200; `cpu` measured the committed CPU example in about two minutes; `tiny` is
for tests and runs in seconds.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any


@dataclass(frozen=True)
class Point:
    kind: str  # decode | prefill | mixed
    num_decodes: int = 0
    context: int = 0
    chunk: int = 0
    prompts: int = 1

    @property
    def num_seqs(self) -> int:
        return self.num_decodes + (self.prompts if self.chunk else 0)

    @property
    def num_tokens(self) -> int:
        return self.num_decodes + self.chunk

    @property
    def kv_tokens(self) -> int:
        return self.num_decodes * (self.context + 1) + self.chunk

    @property
    def attention_pairs(self) -> int:
        # query-key pairs scored: decodes see their whole cache, prompts their own tokens
        return self.num_decodes * (self.context + 1) + self.chunk**2 // self.prompts

    def features(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "num_seqs": self.num_seqs,
            "num_tokens": self.num_tokens,
            "num_prefill_tokens": self.chunk,
            "context_tokens_per_seq": self.context,
            "sum_context_tokens": self.kv_tokens,
            "prefill_attention_term": self.chunk**2 // self.prompts,
        }

    def label(self) -> str:
        parts = []
        if self.num_decodes:
            parts.append(f"B={self.num_decodes} L={self.context}")
        if self.chunk:
            parts.append(f"P={self.chunk} in {self.prompts} prompt(s)")
        return f"{self.kind} " + " + ".join(parts)


@dataclass(frozen=True)
class Grid:
    decode_batches: tuple[int, ...]
    decode_contexts: tuple[int, ...]
    prefill_tokens: tuple[int, ...]
    prefill_prompts: tuple[int, ...]
    mixed: tuple[tuple[int, int, int], ...]  # (prefill chunk, decodes B, context L)
    warmup: int
    repeats: int
    layers_timed: int
    cuda_graphs: bool = False

    def points(self) -> list[Point]:
        out = [
            Point("decode", num_decodes=b, context=ctx)
            for ctx in self.decode_contexts
            for b in self.decode_batches
        ]
        out += [
            Point("prefill", chunk=p, prompts=n)
            for n in self.prefill_prompts
            for p in self.prefill_tokens
            if p % n == 0 and p // n >= 16  # a prompt of a few tokens is a decode, not a prefill
        ]
        out += [Point("mixed", num_decodes=b, context=ctx, chunk=c) for c, b, ctx in self.mixed]
        return out

    def describe(self) -> dict[str, Any]:
        return asdict(self)


PRESETS = {
    "full": Grid(
        decode_batches=(1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256),
        decode_contexts=(128, 256, 512, 1024, 2048, 4096, 8192),
        prefill_tokens=(128, 256, 512, 1024, 2048, 4096, 8192),
        prefill_prompts=(1, 4),
        mixed=((256, 32, 1024), (512, 64, 2048), (1024, 16, 512), (2048, 128, 1024)),
        warmup=3,
        repeats=10,
        layers_timed=4,
        cuda_graphs=True,
    ),
    "cpu": Grid(
        decode_batches=(1, 2, 4, 8, 16, 32, 64),
        decode_contexts=(128, 512, 2048),
        prefill_tokens=(32, 64, 128, 256, 512, 1024),
        prefill_prompts=(1, 4),
        mixed=((128, 8, 512), (256, 16, 128), (64, 32, 2048)),
        warmup=1,
        repeats=5,
        layers_timed=8,
    ),
    "tiny": Grid(
        decode_batches=(1, 4, 16, 64),
        decode_contexts=(16, 1024),
        prefill_tokens=(16, 64, 256),
        prefill_prompts=(1,),
        mixed=((32, 4, 64),),
        warmup=1,
        repeats=3,
        layers_timed=2,
    ),
}


def preset(name: str, **changes: Any) -> Grid:
    """A preset with some fields replaced (None values keep the preset's)."""
    return replace(PRESETS[name], **{k: v for k, v in changes.items() if v is not None})
