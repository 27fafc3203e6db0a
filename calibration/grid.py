"""What the benchmark measures: grid presets and the step shapes (points) they expand to.

A point is one step shape: `num_decodes` sequences decoding one token each over `context` cached
tokens, and/or a prefill of `chunk` tokens split evenly over `prompts` prompts after `prefix`
cached tokens each (0: a whole prompt; a later chunk of a chunked prefill otherwise). A `linear`
point computes `chunk` tokens without attention (the linear layers, norms, rotary and the LM head
on one sequence): a table profile's token axis. `features()` gives the columns of the raw CSV,
counted exactly as the simulator's `StepPlan` counts them (context after the step), so a fitted
profile prices the same step the same way.

Presets: `full` is the GPU grid of the issue (B 1..256, L 128..8192, prefill up to 8192 tokens,
mixed steps), sized with `layers_timed=4` and modest repeats so two 7-8B models finish in a few
minutes on an H100/H200; `cpu` measured the committed CPU example in about two minutes; `tiny` is
for tests and runs in seconds. `tables` is the grid of a table profile
(`calibration/gpu_tables.py`): a dense attention-free token sweep (every multiple of 8 up to
2,048 tokens, then every 128 up to 8,192), decode batch x context and prefill chunk x prefix
grids, everything in CUDA graphs; about 460 points, under a minute per 7-8B model on an
H100/H200. `tiny-tables` is its test-sized version.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any


@dataclass(frozen=True)
class Point:
    kind: str  # decode | prefill | mixed | linear
    num_decodes: int = 0
    context: int = 0
    chunk: int = 0
    prompts: int = 1
    prefix: int = 0  # tokens cached before each prompt's chunk

    @property
    def num_seqs(self) -> int:
        if self.kind == "linear":
            return 1
        return self.num_decodes + (self.prompts if self.chunk else 0)

    @property
    def num_tokens(self) -> int:
        return self.num_decodes + self.chunk

    @property
    def kv_tokens(self) -> int:
        if self.kind == "linear":
            return 0
        return self.num_decodes * (self.context + 1) + self.chunk + self.prompts * self.prefix

    @property
    def attention_term(self) -> int:
        """sum over prompt chunks of chunk x context after it"""
        if self.kind == "linear" or not self.chunk:
            return 0
        per_prompt = self.chunk // self.prompts
        return self.prompts * per_prompt * (self.prefix + per_prompt)

    @property
    def attention_pairs(self) -> int:
        # query-key pairs scored: decodes see their whole cache, prompts their prefix and own
        # tokens
        return self.num_decodes * (self.context + 1) + self.attention_term

    def features(self) -> dict[str, Any]:
        linear = self.kind == "linear"
        return {
            "kind": self.kind,
            "num_seqs": self.num_seqs,
            "num_tokens": self.num_tokens,
            "num_prefill_tokens": self.chunk,
            "context_tokens_per_seq": self.context,
            "sum_context_tokens": self.kv_tokens,
            "prefill_attention_term": self.attention_term,
            "num_prefills": 1 if linear else self.prompts if self.chunk else 0,
            "prefill_prefix_tokens": self.prefix,
        }

    def label(self) -> str:
        if self.kind == "linear":
            return f"linear n={self.chunk}"
        parts = []
        if self.num_decodes:
            parts.append(f"B={self.num_decodes} L={self.context}")
        if self.chunk:
            after = f" after {self.prefix}" if self.prefix else ""
            parts.append(f"P={self.chunk} in {self.prompts} prompt(s){after}")
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
    cuda_graphs: bool = False  # decode steps run as captured CUDA graphs
    # table grids: attention-free steps at these token counts; one-prompt prefill chunks
    # after these prefixes (chunk + prefix at most max_context); graphs for every kind
    linear_tokens: tuple[int, ...] = ()
    prefill_prefixes: tuple[int, ...] = ()
    max_context: int | None = None
    graphs_everywhere: bool = False

    def points(self) -> list[Point]:
        out = [Point("linear", chunk=n) for n in self.linear_tokens]
        out += [
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
        out += [
            Point("prefill", chunk=c, prefix=prefix)
            for prefix in self.prefill_prefixes
            for c in self.prefill_tokens
            if prefix > 0 and (self.max_context is None or c + prefix <= self.max_context)
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


TABLE_TOKENS = (1, 2, 4, *range(8, 2049, 8), *range(2176, 8193, 128))
PRESETS["tables"] = Grid(
    decode_batches=(1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256),
    decode_contexts=(16, 64, 128, 256, 512, 1024, 2048, 4096, 8192),
    prefill_tokens=(16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192),
    prefill_prompts=(1,),
    mixed=((256, 32, 1024), (512, 64, 2048), (1024, 16, 512), (2048, 128, 1024)),
    warmup=2,
    repeats=6,
    layers_timed=4,
    cuda_graphs=True,
    linear_tokens=TABLE_TOKENS,
    prefill_prefixes=(256, 1024, 2048, 4096),
    graphs_everywhere=True,
)
PRESETS["tiny-tables"] = Grid(
    decode_batches=(1, 4, 16),
    decode_contexts=(16, 128),
    prefill_tokens=(16, 64),
    prefill_prompts=(1,),
    mixed=((32, 4, 64),),
    warmup=1,
    repeats=2,
    layers_timed=2,
    linear_tokens=(1, 4, 8, 16, 32, 64, 96),
    prefill_prefixes=(64,),
    max_context=256,
)


def preset(name: str, **changes: Any) -> Grid:
    """A preset with some fields replaced (None values keep the preset's)."""
    return replace(PRESETS[name], **{k: v for k, v in changes.items() if v is not None})
