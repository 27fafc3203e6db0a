"""The policy <-> engine contract: what a policy sees, and the plan it returns.

A policy decides; the engine applies. At every step boundary the engine hands the policy a
read-only `InstanceView` (queues, running requests, free KV, clock) and gets back a `StepPlan`, or
None when there is nothing to run. The policy changes nothing: it reads requests and the view,
and keeps only its own decision state (static batching's current batch, say). The engine then
applies the plan in a fixed order, at the step's start:

1. `seat`: (decode instances of P/D serving) transferred requests, KV already here, join;
2. `preempt`: victims leave the batch in the order given; by recompute (blocks freed, back to
   the front of the waiting queue) or by swap (KV copied to host memory);
3. `swap_in`: swapped requests come back (oldest first), their blocks allocated;
4. `admit`: waiting requests become running, in queue order, each holding the cached blocks of
   its prompt prefix that `cached` says it starts from (prefix caching), and having the `loaded`
   blocks after them read from a KV tier below the GPU (their blocks come with step 5);
5. blocks: every request in `prefill` gets a holding that covers its computed tokens plus its
   tokens this step (or `hold`'s larger reservation); if `decode`, every decoding request gets
   room for one more token, and each request in `speculate` for its lookahead tokens too. The
   policy must have planned within the free blocks it saw: an allocation that fails is an
   engine error, not a preemption.

Then the step is priced (`sim.costs`), time passes, and at its end the token rule runs (each
request computes its tokens; a request whose computed tokens catch up emits one), finished
requests leave and free their KV, and the step is recorded.

Speculation. A decoding request in `speculate` with k lookahead tokens has k proposed tokens
verified with its own next token in this step (k + 1 tokens of the target, their KV slots held
for the step); the engine draws how many the target accepts (`sim.core.acceptance`), the request
emits those and one more at the step's end, and the slots of the rejected ones are freed. A plan
that speculates runs one step (`repeat` 1): each request emits its own number of tokens.

Repeating. A plan whose step would repeat unchanged may say so with `repeat > 1`: the same
requests get the same tokens step after step, with no eviction or KV copy (decodes alone, or
decodes and one prompt chunk that fills the token budget). The engine runs up to that many steps
as one event, fewer if a request finishes or the KV pool would run dry first (it knows when).
With `interruptible`, an arrival during the run may change the next plan, so the engine ends the
run at the first step boundary at or after the arrival: a run is exactly the steps the policy
would have planned one by one.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence, Set
from types import MappingProxyType
from typing import NamedTuple, Protocol

from sim.core.request import Request

# plans are immutable records (tuples: cheap to build on the hot path); this is the empty mapping
NO_TOKENS: Mapping[Request, int] = MappingProxyType({})


class Preemption(NamedTuple):
    request: Request  # a running request
    swap: bool  # True: its KV is copied to host memory; False: dropped, recomputed later


class Padding(NamedTuple):
    """Batch slots a step pays for that do no useful work (static batching): finished members
    still decoding padding, and prompts padded to the longest in the batch."""

    num_seqs: int = 0  # padded slots (each also computes a token per decode step)
    context_tokens: int = 0  # KV the padded slots read in the first step
    prefill_tokens: int = 0  # extra prompt tokens computed (prompts padded to the longest)
    attention_term: int = 0  # extra prefill attention work (chunk x context)


NO_PADDING = Padding()


class StepPlan(NamedTuple):
    # prompt tokens (a whole prompt, a chunk, or a recompute) each request computes this step,
    # in the order planned; admitted, swapped-in and running requests alike
    prefill: Mapping[Request, int] = NO_TOKENS
    # whether every decoding request (after the preemptions) computes its next token
    decode: bool = False
    # waiting requests that start running, in queue order (each is also in `prefill`)
    admit: tuple[Request, ...] = ()
    # running requests evicted before the step, in order
    preempt: tuple[Preemption, ...] = ()
    # swapped requests whose KV is copied back before the step, oldest eviction first
    swap_in: tuple[Request, ...] = ()
    # transferred requests (KV already in this pool) that join the batch, oldest first
    seat: tuple[Request, ...] = ()
    # tokens a request's KV holding must cover beyond its tokens after this step (contiguous
    # reservations made at admission; a swap-in's room for its next token)
    hold: Mapping[Request, int] = NO_TOKENS
    # slots paid for but idle (static batching)
    padding: Padding = NO_PADDING
    # identical steps the policy accepts in a row (decodes, and at most one prompt chunk)
    repeat: int = 1
    # whether an arrival during a repeated run could change the next plan
    interruptible: bool = True
    # prefix caching: leading cached blocks each admitted request starts from
    cached: Mapping[Request, int] = NO_TOKENS
    # speculative decoding: lookahead tokens (k >= 1, at most its output left - 1) that each of
    # these decoding requests proposes and has verified this step (needs `decode`)
    speculate: Mapping[Request, int] = NO_TOKENS
    # KV tiers: blocks after its cached ones that each admitted request loads from below
    loaded: Mapping[Request, int] = NO_TOKENS

    @property
    def has_work(self) -> bool:
        return bool(self.prefill) or self.decode


class QueueView(Protocol):
    """What a policy reads of the waiting queue (`sim.policies.queues`)."""

    def peek(self, now: float) -> Request: ...

    def may_be_overtaken(self) -> bool:
        """Whether a newcomer could be ordered before the present head."""
        ...

    def ordered(self) -> Iterator[Request]:
        """The queued requests in the order they would be popped."""
        ...

    def oldest_arrival_s(self) -> float:
        """The earliest arrival among the queued requests."""
        ...

    def __len__(self) -> int: ...


class ReleasePlan(Protocol):
    """What a plan's evictions free, worked out as the plan is drafted
    (`sim.core.kv.planning.PlannedReleases`)."""

    @property
    def cached_free(self) -> Set[int]:
        """Hashes left cached and free once the victims are gone."""
        ...

    def release(self, req: Request) -> int:
        """Blocks the victim `req` leaves free."""
        ...


class KVView(Protocol):
    """What a policy reads of the KV pool (`sim.core.kv.pool.KVPool`): counts, and answers
    about prefix-cache hits; a pool without caching answers "nothing cached"."""

    @property
    def num_free(self) -> int: ...

    @property
    def num_total(self) -> int: ...

    @property
    def block_size(self) -> int: ...

    @property
    def capacity_tokens(self) -> int: ...

    def blocks_for(self, num_tokens: int) -> int: ...

    def blocks_needed(self, req: Request, num_tokens: int) -> int: ...

    def hits(
        self, req: Request, limit: int, taken: Set[int], released: Set[int] = ...
    ) -> tuple[int, int, int]:
        """The leading cached GPU blocks `req` would start from (at most `limit`), how many of
        them are cached free blocks, and how many blocks after them a lower tier would load.
        `taken`: hashes this plan's admissions hold; `released`: cached free after evictions."""
        ...

    def planned_releases(self) -> ReleasePlan:
        """A fresh account of what this plan's evictions will free."""
        ...


class InstanceView(Protocol):
    """A read-only view of one instance, as a policy sees it at a step boundary."""

    @property
    def now(self) -> float: ...

    @property
    def waiting(self) -> QueueView: ...

    @property
    def running(self) -> Sequence[Request]:
        """Running requests in admission order (prefilling and decoding)."""
        ...

    @property
    def prefilling(self) -> Sequence[Request]:
        """Running requests whose prompt (or recompute) is not done, in admission order."""
        ...

    @property
    def num_decoding(self) -> int:
        """Running requests whose next token is a decode."""
        ...

    @property
    def swapped(self) -> Sequence[Request]:
        """Requests evicted to host memory, oldest eviction first."""
        ...

    @property
    def arrived(self) -> Sequence[Request]:
        """P/D decode instances: transferred requests (KV here) waiting for a seat."""
        ...

    @property
    def kv(self) -> KVView: ...

    @property
    def host_bytes_free(self) -> float:
        """Host memory left for swapped-out KV."""
        ...

    @property
    def receives_transfers(self) -> bool:
        """Whether requests can land here from a KV link (P/D decode instances)."""
        ...

    def decode_block_demand(self) -> int:
        """Blocks the decoding requests need, all together, to decode one more token."""
        ...

    def needs_block(self, req: Request) -> bool:
        """Whether a decoding request needs a new block for its next token."""
        ...

    def swap_bytes(self, req: Request) -> int:
        """Bytes a swap of this running request would copy to host memory."""
        ...


class Policy(Protocol):
    """A batching policy: it decides, it never changes state (see the module docstring)."""

    # static batching keeps finished members' KV until its batch ends; others free it at once
    releases_kv_on_finish: bool
    # whether KV holdings grow block by block as tokens are computed (else reserved up front)
    paged_kv: bool

    def rejection(self, req: Request, kv: KVView) -> str:
        """Why an arriving request can never be served here ("" when it can be)."""
        ...

    def schedule(self, view: InstanceView) -> StepPlan | None:
        """The next step, or None when there is nothing to run now."""
        ...

    def next_wakeup_s(self, view: InstanceView) -> float | None:
        """When an idle instance should ask again even if nothing arrives (timers)."""
        ...

    def transfer_blocks(self, req: Request, kv: KVView) -> int:
        """Blocks a P/D decode instance reserves for a request whose KV is moved to it."""
        ...

    def can_ever_take(self, req: Request, kv: KVView) -> bool:
        """Whether this pool could ever hold the request's whole sequence."""
        ...


class StepFeatures(NamedTuple):
    """What a step costs depends on (`docs/profiles.md`), as the engine counts it."""

    num_seqs: int  # batch slots paid for
    num_tokens: int  # tokens computed: prefill + decode + padding
    num_prefill_tokens: int
    num_decode_tokens: int  # useful decode tokens
    sum_context_tokens: int  # KV read by attention: each slot's context after the step
    prefill_attention_term: int  # sum over prefill chunks of chunk x context after the step
    context_growth_per_step: int = 0  # growth of sum_context_tokens per repeated step
    num_active_seqs: int = 0  # slots doing useful work
    attention_growth_per_step: int = 0  # growth of prefill_attention_term per repeated step
    # each prefill chunk's (tokens, context before it), for costs that price chunk shapes
    chunks: tuple[tuple[int, int], ...] = ()
