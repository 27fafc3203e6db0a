"""Workloads generated as they are consumed: a synthetic workload's requests in chunks.

A workload drawn from its spec alone (an arrival process and length distributions, with or
without a mix, predicted outputs and shared prefixes) is produced by `iter_requests` in chunks
of `CHUNK_REQUESTS`, each drawn when it is asked for. The chunks' concatenation is what
`generate_requests` returns, bit for bit: it is built from them. That holds because every
column is drawn from its own child stream (`sim.workload.generate`) by numpy samplers that draw
element by element (a draw of n values equals draws of a and n - a in a row), and because the
two places where a column does not draw in arrival order are replayed on stream copies placed
where the whole draw would have them:

- in a mix, class k's lengths come after every length of the classes before it (the whole
  draw takes them class by class), so class k draws from a copy of the stream advanced by
  drawing (and dropping) the counts of classes 0..k-1; the counts come from a first pass over
  copies of the arrival and class streams;
- a shared prefix's choice takes one uniform per request before any use draw, so the use
  draws come from a copy advanced past as many uniforms as there are requests.

A streamed run (`simulate(tables=False)`) regenerates its variant's chunks from the seed as its
arrivals come (`Workload.chunks`) instead of keeping the columns of every request: memory is
flat in the number of requests. Variants that replay one workload share its arrays only when
they keep tables (the tables are that long anyway). `benchmarks/bench_sim.py --workload` prints
what regenerating costs against sharing.

Traces, measured runs, sessions, closed-loop clients and per-request speculative acceptance
rates stay whole (`Workload.whole`): a trace is as long as its file, and a session's later turns
refer to requests anywhere in the workload.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sim.errors import ScenarioError
from sim.workload.arrays import Content, RequestArrays, Sessions
from sim.workload.arrivals import iter_arrivals
from sim.workload.budget import STREAM_CHUNK_REQUESTS, content_problem
from sim.workload.content import UNIT_TOKENS, build_content
from sim.workload.lengths import TraceCache, sample_lengths
from sim.workload.spec import LengthDist, WorkloadSpec

CHUNK_REQUESTS = STREAM_CHUNK_REQUESTS  # requests generated at a time by a streamed run
_BURN = 1 << 16  # draws dropped at a time when a class's stream is advanced


@dataclass(frozen=True)
class WorkloadPlan:
    """What a run reads of its workload's spec before any request exists: whether the spec
    alone draws it (`streams`), and the tiers its requests carry (None: a trace's tier column,
    known once read)."""

    streams: bool
    tier_names: tuple[str, ...] | None


def plan_of(spec: WorkloadSpec) -> WorkloadPlan:
    tiers = spec.tier_names()
    return WorkloadPlan(streams(spec), None if tiers is None else tuple(tiers))


def streams(spec: WorkloadSpec) -> bool:
    """Whether `spec` is drawn from the spec alone, so `iter_requests` can generate it."""
    return (
        spec.trace is None
        and spec.sessions is None
        and spec.clients is None
        and spec.arrival is not None
    )


def iter_requests(
    spec: WorkloadSpec, rng: np.random.Generator, base_dir: Path, chunk: int = CHUNK_REQUESTS
) -> Iterator[tuple[int, RequestArrays]]:
    """The requests of a synthetic workload (`streams(spec)`) as (first id, columns) in arrival
    order, `chunk` requests each (the last may hold fewer); relative paths resolve against
    `base_dir`. The generator `rng` is split as `generate_requests` splits it."""
    if chunk < 1:
        raise ValueError(f"chunk must be at least 1, got {chunk}")
    assert spec.arrival is not None
    arrival_rng, class_rng, prompt_rng, output_rng, predict_rng = rng.spawn(5)
    prefix_rng = rng.spawn(1)[0] if spec.shared_prefix is not None else None
    traces = TraceCache(base_dir)
    arrival, count, duration = spec.arrival, spec.num_requests, spec.duration_s

    def arrivals(stream: np.random.Generator) -> Iterator[np.ndarray]:
        return iter_arrivals(arrival, stream, count, duration, base_dir=base_dir)

    total = 0
    if spec.mix is not None or spec.shared_prefix is not None:  # the count, from a first pass
        total = sum(len(part) for part in arrivals(copy.deepcopy(arrival_rng)))
    chunks = _Chunks(spec, class_rng, prompt_rng, output_rng, predict_rng, traces, total)
    if prefix_rng is not None:
        chunks.prefixes(prefix_rng, total)
    parts: list[np.ndarray] = []
    held = first = 0
    for part in arrivals(arrival_rng):
        parts.append(part)
        held += len(part)
        while held >= chunk:
            times = np.concatenate(parts) if len(parts) > 1 else parts[0]
            yield first, chunks.build(times[:chunk], first)
            first += chunk
            held -= chunk
            parts = [times[chunk:]] if held else []
    if held or not first:  # the rest; a workload of no requests is one empty chunk
        yield first, chunks.build(np.concatenate(parts) if parts else np.empty(0), first)


class _Chunks:
    """The columns of each chunk, from the streams `generate_requests` splits off."""

    def __init__(
        self,
        spec: WorkloadSpec,
        class_rng: np.random.Generator,
        prompt_rng: np.random.Generator,
        output_rng: np.random.Generator,
        predict_rng: np.random.Generator,
        traces: TraceCache,
        total: int,
    ) -> None:
        self.spec = spec
        self.traces = traces
        self.class_rng, self.predict_rng = class_rng, predict_rng
        self.prompt_rng, self.output_rng = prompt_rng, output_rng
        # the shared prefixes' pool lengths, popularity, and choice and use streams (`prefixes`)
        self.prefix: (
            tuple[np.ndarray, np.ndarray, np.random.Generator, np.random.Generator] | None
        ) = None
        if spec.mix is None:
            assert spec.prompt_tokens is not None and spec.output_tokens is not None
            self.tier_names: tuple[str, ...] = (spec.tier,)
            self.class_names: tuple[str, ...] = ("default",)
            return
        mix = spec.mix
        weights = np.array([cls.weight for cls in mix], dtype=np.float64)
        self.p = weights / weights.sum()
        counter = copy.deepcopy(class_rng)  # the classes of the whole workload, counted
        counts = np.zeros(len(mix), dtype=np.int64)
        for start in range(0, total, _BURN):
            size = min(_BURN, total - start)
            counts += np.bincount(counter.choice(len(mix), size=size, p=self.p),
                                  minlength=len(mix))  # fmt: skip
        self.prompt_streams = _class_streams(
            [cls.prompt_tokens for cls in mix], counts, prompt_rng, traces
        )
        self.output_streams = _class_streams(
            [cls.output_tokens for cls in mix], counts, output_rng, traces
        )
        self.tier_names = tuple(dict.fromkeys(cls.tier for cls in mix))
        self.tier_of_class = np.array(
            [self.tier_names.index(cls.tier) for cls in mix], dtype=np.int64
        )
        self.class_names = tuple(cls.name for cls in mix)

    def prefixes(self, rng: np.random.Generator, total: int) -> None:
        """The shared prefixes' pool, and their choice and use streams (`draw_prefixes`)."""
        spec = self.spec.shared_prefix
        assert spec is not None
        lengths = sample_lengths(spec.length, spec.num_prefixes, rng, self.traces)
        weights = 1.0 / np.arange(1, spec.num_prefixes + 1, dtype=np.float64) ** spec.zipf
        uses = copy.deepcopy(rng)
        for start in range(0, total, _BURN):  # past the choices: one uniform per request
            uses.random(min(_BURN, total - start))
        self.prefix = (lengths, weights / weights.sum(), rng, uses)

    def build(self, arrival_s: np.ndarray, first: int) -> RequestArrays:
        spec, traces, m = self.spec, self.traces, len(arrival_s)
        if spec.mix is None:
            assert spec.prompt_tokens is not None and spec.output_tokens is not None
            output = sample_lengths(spec.output_tokens, m, self.output_rng, traces)
            prompt = sample_lengths(spec.prompt_tokens, m, self.prompt_rng, traces)
            class_index = np.zeros(m, dtype=np.int64)
            tier_index = None
        else:
            class_index = self.class_rng.choice(len(spec.mix), size=m, p=self.p).astype(np.int64)
            prompt = np.empty(m, dtype=np.int64)
            output = np.empty(m, dtype=np.int64)
            for index, cls in enumerate(spec.mix):
                members = class_index == index
                count = int(members.sum())
                prompt[members] = sample_lengths(
                    cls.prompt_tokens, count, self.prompt_streams[index], traces
                )
                output[members] = sample_lengths(
                    cls.output_tokens, count, self.output_streams[index], traces
                )
            tier_index = self.tier_of_class[class_index]
        predicted = _predict(output, spec.output_prediction_sigma, self.predict_rng)
        content = None
        if spec.shared_prefix is not None:
            assert self.prefix is not None  # `prefixes` ran: iter_requests calls it
            lengths, p, choose, uses = self.prefix
            chosen = choose.choice(spec.shared_prefix.num_prefixes, size=m, p=p)
            used = uses.random(m) < spec.shared_prefix.fraction
            prefix = np.where(used, chosen, -1).astype(np.int64)
            prefix_tokens = np.where(used, lengths[chosen], 0).astype(np.int64)
            prompt = prompt + prefix_tokens
            content = build_content(prefix, prefix_tokens, prompt, first=first)
        return RequestArrays(
            arrival_s=arrival_s,
            prompt_tokens=prompt,
            output_tokens=output,
            class_index=class_index,
            class_names=self.class_names,
            tier_index=tier_index,
            tier_names=self.tier_names,
            predicted_output_tokens=predicted,
            content=content,
        )


def _class_streams(
    dists: list[LengthDist], counts: np.ndarray, rng: np.random.Generator, traces: TraceCache
) -> list[np.random.Generator]:
    """One stream per class, each where the class-by-class draw starts that class's lengths:
    after every draw of the classes before it."""
    out = []
    for index, dist in enumerate(dists):
        out.append(copy.deepcopy(rng))
        if index + 1 < len(dists):
            drawn = int(counts[index])
            for start in range(0, drawn, _BURN):
                sample_lengths(dist, min(_BURN, drawn - start), rng, traces)
    return out


def _predict(output: np.ndarray, sigma: float, rng: np.random.Generator) -> np.ndarray:
    """True length times lognormal noise exp(N(0, sigma)), rounded, at least 1."""
    if sigma == 0.0:  # the true lengths themselves (the columns are read-only)
        return output
    noisy = np.rint(output * np.exp(rng.normal(0.0, sigma, size=len(output))))
    return np.maximum(noisy, 1).astype(np.int64)


def concat(chunks: Iterable[tuple[int, RequestArrays]]) -> RequestArrays:
    """The chunks of one workload (at least one) as one set of columns."""
    parts = [arrays for _, arrays in chunks]
    if len(parts) == 1:
        return parts[0]
    head = parts[0]
    content = None
    if head.content is not None:
        pieces = [a.content for a in parts if a.content is not None]
        units = sum(len(c.ids) for c in pieces)
        too_many = content_problem(units)
        if too_many is not None:
            raise ScenarioError(too_many, path="workload")
        offsets = [pieces[0].offsets]
        for c in pieces[1:]:
            offsets.append(c.offsets[1:] + offsets[-1][-1])
        content = Content(
            ids=np.concatenate([c.ids for c in pieces]),
            offsets=np.concatenate(offsets),
            unit=UNIT_TOKENS,
            tokens=np.concatenate([c.tokens for c in pieces]),
        )

    def joined(name: str) -> np.ndarray:
        return np.concatenate([getattr(a, name) for a in parts])

    predicted = joined("predicted_output_tokens")
    output = joined("output_tokens")
    if all(a.predicted_output_tokens is a.output_tokens for a in parts):
        predicted = output  # the true lengths, as one column
    return RequestArrays(
        arrival_s=joined("arrival_s"),
        prompt_tokens=joined("prompt_tokens"),
        output_tokens=output,
        class_index=joined("class_index"),
        class_names=head.class_names,
        tier_index=joined("tier_index"),
        tier_names=head.tier_names,
        predicted_output_tokens=predicted,
        content=content,
    )


@dataclass(frozen=True)
class Shape:
    """What a run must know of its workload before the first request: how many requests, and
    the first and last known arrivals (NaN: none known)."""

    num_requests: int
    first_s: float
    last_s: float
    all_known: bool  # False: closed-loop turns whose arrivals follow earlier finishes


def shape_of(arrays: RequestArrays) -> Shape:
    known = arrays.arrival_s[~np.isnan(arrays.arrival_s)]
    first = float(known.min()) if known.size else float("nan")
    last = float(known.max()) if known.size else float("nan")
    return Shape(len(arrays), first, last, known.size == len(arrays))


class Workload:
    """A run's requests as chunks of columns (`chunks`): a workload's arrays, whole (`whole`:
    shared by the variants that replay it), or a synthetic workload regenerated from its seed
    each time it is read (`streamed`: a streamed run holds only the chunks it still needs)."""

    def __init__(
        self,
        shape: Shape,
        tier_names: tuple[str, ...],
        arrays: RequestArrays | None = None,
        regenerate: tuple[WorkloadSpec, int, Path] | None = None,
    ) -> None:
        self.shape = shape
        self.tier_names = tier_names
        self.arrays = arrays  # the whole columns; None: streamed
        self._regenerate = regenerate
        self.num_requests = shape.num_requests
        # what generating them dropped or clipped, and their sessions (none when streamed)
        self.notes: dict[str, int] = arrays.notes if arrays is not None else {}
        self.sessions: Sessions | None = arrays.sessions if arrays is not None else None
        # closed-loop sessions: a later turn arrives a think time after the previous finishes
        self.closed_loop = self.sessions is not None and self.sessions.closed_loop

    @classmethod
    def whole(cls, arrays: RequestArrays) -> Workload:
        return cls(shape_of(arrays), arrays.tier_names, arrays=arrays)

    @classmethod
    def of(cls, requests: RequestArrays | Workload) -> Workload:
        """`requests` as a workload (arrays: `whole`)."""
        return requests if isinstance(requests, Workload) else cls.whole(requests)

    @classmethod
    def streamed(cls, spec: WorkloadSpec, seed: int, base_dir: Path) -> Workload:
        """The workload of `spec` (`streams(spec)`) under `seed`; its shape comes from one pass
        over its arrival stream (only the arrivals are drawn)."""
        assert spec.arrival is not None and streams(spec)
        (arrival_rng, *_) = np.random.default_rng(seed).spawn(5)
        count, first, last = 0, float("nan"), float("nan")
        for part in iter_arrivals(
            spec.arrival, arrival_rng, spec.num_requests, spec.duration_s, base_dir=base_dir
        ):
            if len(part):
                first = float(part[0]) if not count else first
                last = float(part[-1])
                count += len(part)
        tiers = spec.tier_names()
        assert tiers is not None  # only a trace's tier column is unknown before generation
        return cls(Shape(count, first, last, True), tuple(tiers), regenerate=(spec, seed, base_dir))

    def chunks(self) -> Iterator[tuple[int, RequestArrays]]:
        """The requests as (first id, columns), in id order."""
        if self.arrays is not None:
            return iter(((0, self.arrays),))
        assert self._regenerate is not None
        spec, seed, base_dir = self._regenerate
        return iter_requests(spec, np.random.default_rng(seed), base_dir, chunk=CHUNK_REQUESTS)
