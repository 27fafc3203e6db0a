"""One serving instance's state, what its policy sees of it, and what the outside world may do.

`InstanceState` owns everything that changes while an instance serves: its queues (waiting,
running, swapped, and in P/D serving the hand-off and arrived lists), its KV pool (`sim.core.kv`)
and usage integrals, its host swap space, its decode batch and its records. A policy reads it
through `sim.core.plan.InstanceView` (the properties below); routers and the KV link call its
methods (`submit`, `load`, `reserve`, `receive`, `release`). Each of those first calls `settle()`:
a run of coalesced steps in flight is applied up to now, so the instance looks exactly as it
would have stepped one step at a time. The step loop that applies plans is the subclass
`sim.core.engine.Instance`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, Protocol

import simpy
from simpy.events import Event

from sim.core.acceptance import AcceptanceSampler
from sim.core.arrivals import FOREVER_S, ArrivalFeed
from sim.core.decode_batch import DecodeBatch
from sim.core.kv.host import HostMemory
from sim.core.kv.pool import KVPool
from sim.core.kv_usage import KVUsage
from sim.core.plan import Policy, StepFeatures
from sim.core.prefill_curve import PrefillCurve
from sim.core.recorder import ItlLog, RequestLog, StepLog
from sim.core.request import Request
from sim.core.run import Run
from sim.core.speculative_step import ProposalPricer, Speculator

NO_CARRY = (0, 0.0)
FOREVER = 1 << 62


class StepPricer(Protocol):
    """Prices a step from its features (`sim.costs.cost_model.CostModel`)."""

    def run_times(self, features: StepFeatures) -> tuple[float, float]:
        """The first step's seconds, and how much longer each repeated step is."""
        ...

    def linear_steps(self, features: StepFeatures) -> int:
        """How many repeated steps grow by that same increment."""
        ...

    def cpu_overhead_s(self, features: StepFeatures) -> float:
        """Host seconds per step of the run (scheduling, input preparation, sampling)."""
        ...

    @property
    def last_extrapolated(self) -> bool:
        """Whether the run just priced fell outside the profile's measured tables."""
        ...


@dataclass(frozen=True, slots=True)
class Load:
    """An instance's load at one instant, for routing decisions."""

    num_waiting: int
    num_running: int
    outstanding_tokens: int  # prompt tokens not yet prefilled + output tokens not yet generated
    kv_blocks_used: int
    kv_blocks_total: int


@dataclass(frozen=True, slots=True)
class WorkLoad:
    """An instance's queues and outstanding work at one instant (`Load` less its KV blocks):
    what most routers read, known without applying the run in flight (`work_load`)."""

    num_waiting: int
    num_running: int
    outstanding_tokens: int


@dataclass(frozen=True, slots=True)
class KVSpec:
    """An instance's KV geometry beyond the pool: bytes per token on this instance (with tensor
    parallelism, as stored), and the host memory and bandwidth that swapping uses."""

    bytes_per_token: float
    swap_bandwidth_bytes_per_s: float = 25e9
    host_memory_bytes: float = 64e9


class InstanceState:
    """One serving instance's state, its policy's view of it and its outside world (see the
    module docstring); the step loop that applies plans is `sim.core.engine.Instance`."""

    def __init__(
        self,
        env: simpy.Environment,
        index: int,
        policy: Policy,
        queue: Any,
        pool: KVPool,
        cost: StepPricer,
        log: RequestLog,
        *,
        kv: KVSpec,
        coalesce: bool = True,
        hands_off: bool = False,
        receives: bool = False,
        start: bool = True,
        steps: StepLog | None = None,
        itl: ItlLog | None = None,
        acceptance: AcceptanceSampler | None = None,
        proposer: ProposalPricer | None = None,
        serves_from_s: float = 0.0,
        prefill: PrefillCurve | None = None,
    ) -> None:
        self.env = env
        self.serves_from_s = serves_from_s  # a cold start: nothing is scheduled before this
        self.index = index
        self.policy = policy
        self.cost = cost
        self.pool = pool
        self.kv_spec = kv
        self.log = log
        self.coalesce = coalesce
        self.hands_off = hands_off  # P/D prefill instance: finished prompts leave for the link
        self.receives = receives  # P/D decode instance: requests land with their KV
        self.waiting = queue
        self.running: list[Request] = []  # admission order
        self.prefilling: list[Request] = []  # running, prompt (or recompute) not done
        self.ready: list[Request] = []  # running, decode next, not yet in the batch
        self.swapped: deque[Request] = deque()
        self.held: list[Request] = []  # finished, KV kept until the batch ends (static)
        self.handoff: list[Request] = []  # P/D prefill: prompt done, KV waiting for the link
        self._new_handoffs: list[Request] = []  # handed off, not yet taken by the link
        self.arrived: deque[Request] = deque()  # P/D decode: KV landed, waiting for a seat
        self.batch = DecodeBatch(pool.block_size, paged=policy.paged_kv)
        self.usage = KVUsage(pool.block_size)
        # speculative decoding: applies the steps of plans that name `speculate`
        self.speculator: Speculator | None = None
        if acceptance is not None:
            if proposer is None:
                raise ValueError("speculative decoding needs a proposal pricer")
            self.speculator = Speculator(acceptance, proposer, pool, self.usage, policy.paged_kv)
        self.steps = steps if steps is not None else StepLog(index)
        self.itl = itl if itl is not None else ItlLog()
        self._streamed = self.steps.on_full is not None or self.itl.on_full is not None
        self.host = HostMemory(kv.host_memory_bytes)  # swapped-out KV: its one account
        self.reserved_blocks = 0  # P/D decode: set aside for transfers in flight
        self._waiting_work = 0  # remaining work of the waiting requests
        # pricing: steps priced outside the profile's tables, host seconds of CPU overhead
        self.num_extrapolated_steps = 0
        self.cpu_overhead_s = 0.0
        self._carried = NO_CARRY  # preemptions (and swap seconds) of a plan with no step
        self._load_s = 0.0  # seconds the step being started waits on loads from KV tiers
        self._run: Run | None = None
        # what prefilling n tokens costs here (its group's instances share one)
        self._prefill = prefill if prefill is not None else PrefillCurve(cost)
        self._busy = False
        self._clock = 0.0  # the instance's own time: SimPy's, or ahead of it (running ahead)
        self._idle: Event | None = None
        self._cut_to: int | None = None
        self._aborts: list[Request] = []  # running requests to drop at the next boundary
        self.on_change: Callable[[Any], None] | None = None  # cluster hooks (P/D)
        self.on_finish: Callable[[Request], None] | None = None  # closed-loop sessions
        # a gateway's load index (`sim.topology.load_index`): told when a run starts or ends
        # and when a request is queued or lands, the only moments `load_floor` can change
        self.on_load: Callable[[Any], None] | None = None
        # a request with no full prompt block whose known content fills one came here: its
        # decode steps can cache a first block (`may_cache_prefix`)
        self._late_first = False
        # observers (tests, tools): called with the run once its start is applied (False) and
        # again after each piece of it is applied (True). An attribute, not a method to wrap:
        # the compiled build calls its own methods directly, past any wrapper
        self.on_step: Callable[[Any, Run, bool], None] | None = None
        # a lone instance's arrivals, pulled by its loop rather than pushed by SimPy events
        self.feed: ArrivalFeed | None = None
        # start=False: no SimPy process; the instance is stepped by hand (`step_by_hand`)
        self.process = env.process(self._loop()) if start else None

    # -- the view a policy reads (sim.core.plan.InstanceView) ----------------------------------

    @property
    def now(self) -> float:
        return self._clock

    @property
    def kv(self) -> KVPool:
        return self.pool

    @property
    def num_decoding(self) -> int:
        return self.batch.size + len(self.ready)

    @property
    def host_bytes_free(self) -> float:
        return self.host.free_bytes

    @property
    def receives_transfers(self) -> bool:
        return self.receives

    def decode_block_demand(self) -> int:
        demand = self.batch.demand_at(self.batch.clock)
        bs = self.pool.block_size
        for req in self.ready:
            if req.kv_blocks * bs <= req.num_computed_tokens:
                demand += 1
        return demand

    def needs_block(self, req: Request) -> bool:
        return req.kv_blocks * self.pool.block_size <= req.num_computed_tokens

    def swap_bytes(self, req: Request) -> int:
        tokens = self.pool.blocks_for(req.num_computed_tokens) * self.pool.block_size
        return int(tokens * self.kv_spec.bytes_per_token)

    @property
    def num_waiting(self) -> int:
        return len(self.waiting) + len(self.swapped) + len(self.arrived)

    @property
    def num_running(self) -> int:
        return len(self.running) + len(self.held)

    # -- arrivals and the outside world --------------------------------------------------------

    def submit(self, req: Request) -> bool:
        """Queue an arriving request; False (and recorded) when it can never be served here."""
        req.arrive(self.index)
        reason = self.policy.rejection(req, self.pool)
        if reason:
            req.reject(reason)
            self.log.record(req)
            return False
        self.waiting.push(req)
        self._waiting_work += req.remaining_work
        if not self._late_first and self.pool.caching:  # see `may_cache_prefix`
            bs = self.pool.block_size
            self._late_first = req.num_prompt_tokens < bs and bool(req.block_hashes(bs))
        if self.on_load is not None:
            self.on_load(self)
        self.wake()
        return True

    def wake(self) -> None:
        """New work arrived: start if idle, or cut a run that the newcomer could join."""
        if self._idle is not None:
            if not self._idle.triggered:
                self._idle.succeed()
        elif self._run is not None and self._run.interruptible:
            self._cut()

    def _cut(self) -> None:
        """End the run in flight at the first step boundary at or after now."""
        run = self._run
        if run is not None and run.cut_at(self.env.now):
            self._cut_to = run.num_steps
            if self.process is not None:
                self.process.interrupt()

    def settle(self) -> None:
        """Apply the steps of the run in flight that ended before now and start the one under
        way, so that the state is what a step-by-step loop would show now."""
        run = self._run
        if run is None:
            return
        done = run.settled_by(self.env.now)
        if done > 0:
            self._apply(run, done)
            run.advance(done)
            self._continue(run)

    def load(self) -> Load:
        """What routers see now."""
        self.settle()
        return Load(
            self.num_waiting,
            self.num_running,
            self.outstanding_tokens(),
            self.pool.num_used,
            self.pool.num_total,
        )

    def work_load(self) -> WorkLoad:
        """`load()`'s queues and outstanding tokens now, without settling the run in flight.

        Inside a run nothing joins, leaves or finishes before its last step, so the steps that
        ended by now changed only the work left: each took one token from every decoding member
        and a repeated prompt chunk's tokens from its request. Settling would apply them (a
        record per outside look); a router that reads no KV needs only their count, and the run
        then stays one record, as with a lone instance. A speculative step, whose accepted
        tokens are drawn when it is applied, is settled."""
        left = self.work_left()  # first: it may settle a speculative run
        return WorkLoad(self.num_waiting, self.num_running, left)

    def work_left(self) -> int:
        """`work_load().outstanding_tokens` alone (what token-balancing routers rank by)."""
        run = self._run
        if run is not None and run.num_steps > 1:
            done = run.settled_by(self.env.now)
            if done > 0:
                if run.spec is not None:
                    self.settle()
                    return self.outstanding_tokens()
                plan = run.plan
                per_step = self.batch.size if plan.decode else 0
                for chunk in plan.prefill.values():
                    per_step += chunk
                return self.outstanding_tokens() - done * per_step
        return self.outstanding_tokens()

    def num_outstanding(self) -> int:
        """`num_waiting + num_running` of `work_load()` (what request-balancing routers rank
        by), read without building the whole load."""
        return (
            len(self.waiting) + len(self.swapped) + len(self.arrived) + len(self.running)
            + len(self.held)
        )  # fmt: skip

    def load_floor(self, tokens: bool, horizon_steps: int) -> tuple[int, float, bool]:
        """The least `work_left()` (tokens) or `num_outstanding()` (requests) can show before
        this instance next starts or ends a run or takes a request, and before the time
        returned (infinity: no such limit); and whether it is that number itself until then.
        Requests leave, and tokens are computed, only as a run's steps are applied: the number
        of requests is exact, and so are the tokens of an instance with no run in flight. For
        tokens during a run: the work left once `horizon_steps` more of its steps have ended
        (then the time is the end of the last of them), each step taking at most one token
        from every decoding member and its prompt chunks and a first token from each prompt;
        no bound inside a speculative run (whose tokens are drawn)."""
        if not tokens:
            return self.num_outstanding(), FOREVER_S, True
        run = self._run
        if run is None:
            return self.outstanding_tokens(), FOREVER_S, True
        if run.spec is not None:
            return 0, FOREVER_S, False
        plan = run.plan
        per_step = self.batch.size if plan.decode else 0
        for chunk in plan.prefill.values():
            per_step += chunk + 1
        steps = run.settled_by(self.env.now) + 1 + horizon_steps
        until = FOREVER_S
        if steps < run.num_steps:
            until = run.times.end(steps)
        else:
            steps = run.num_steps
        return self.outstanding_tokens() - steps * per_step, until, False

    def kv_fraction(self) -> float:
        """`load()`'s fraction of KV blocks in use (what `least_kv` ranks by): the run in flight
        settled, as `load()` does."""
        self.settle()
        pool = self.pool
        return pool.num_used / max(1, pool.num_total)

    def kv_floor(self) -> tuple[float, bool]:
        """The least `kv_fraction()` can show before this instance next starts or ends a run,
        takes a request or frees a handed-off prompt's blocks, and whether it is that number
        itself until then: the blocks in use as applied, without settling. A run's steps only
        take blocks (requests finish, and are preempted, where runs end and start); a
        speculative run may give back the blocks of rejected drafts, so it has no bound."""
        run = self._run
        if run is not None and run.spec is not None:
            return 0.0, False
        pool = self.pool
        return pool.num_used / max(1, pool.num_total), run is None

    def holds_requests(self) -> bool:
        """Whether any request is here now: queued, running, swapped, finished but holding its
        KV, waiting to hand off or to land (an instance that holds none can retire)."""
        self.settle()
        return bool(
            len(self.waiting) or self.running or self.swapped or self.held or self.handoff
            or self.arrived or self.reserved_blocks or self._run is not None
        )  # fmt: skip

    def cached_prefix_tokens(self, req: Request) -> int:
        """Tokens of `req`'s prompt this instance's prefix cache holds now, on the GPU or in a
        KV tier below it (0 without caching), as settling the run in flight would show them.
        It settles only a run whose steps could change them: one that computes prompt chunks
        (they cache their blocks), or whose decode batch may grow into cached free blocks
        (evicting them); a decode run that fits in never-cached blocks changes no cached block
        before its last step, which is applied when the run ends."""
        pool = self.pool
        if self._settles_for_prefix():
            self.settle()
        limit = (req.num_known_tokens - 1) // pool.block_size
        return pool.cached_prefix(req, limit, self.env.now) * pool.block_size

    def _settles_for_prefix(self) -> bool:
        """Whether `cached_prefix_tokens` settles the run in flight first (its docstring)."""
        run = self._run
        pool = self.pool
        if run is None or run.num_steps <= 1 or not pool.caching:
            return False
        growth = self.batch.size * (run.num_steps // pool.block_size + 1) if run.plan.decode else 0
        return bool(run.plan.prefill) or run.spec is not None or not pool.takes_uncached(growth)

    def may_cache_prefix(self, req: Request) -> bool:
        """Whether `cached_prefix_tokens(req)` could be above 0 now: False only where it is 0
        (a router need not ask). Its first block must be cached, on the GPU or in a tier below
        (readable or still being written), or be one that settling the run in flight caches:
        a prompt chunk's first block, or, where a request with no full prompt block decodes
        into known content, a decoded one; a speculative run (settled by the reads of its
        load) counts as able to cache anything."""
        pool = self.pool
        if not pool.caching:
            return False
        bs = pool.block_size
        if req.num_known_tokens - 1 < bs:
            return False
        hashes = req.block_hashes(bs)
        if not hashes:
            return False
        first = hashes[0]
        if pool.may_hold(first):
            return True
        run = self._run
        if run is None:
            return False
        if run.spec is not None:
            return True
        if not self._settles_for_prefix():
            return False
        for other in run.plan.prefill:
            own = other.block_hashes(bs)
            if own and own[0] == first:
                return True
        return self._late_first and run.plan.decode

    def shares_kv_tier(self) -> bool:
        """Whether a KV tier below the GPU is shared with other instances (the remote store):
        then settling one instance can change what another has cached."""
        return self.pool.shares_tier

    def prefill_backlog(self) -> int:
        """Prompt tokens not yet prefilled of the requests waiting or prefilling here, less
        those the step under way computes (what a new arrival's first token waits behind
        once that step ends). Only a run of prompt chunks is settled: a decode run computes
        none."""
        run = self._run
        if run is not None and (run.plan.prefill or run.spec is not None):
            self.settle()
        total = 0
        for req in self.waiting:
            total += max(0, req.num_prompt_tokens - req.num_computed_tokens)
        for req in self.prefilling:
            total += max(0, req.num_prompt_tokens - req.num_computed_tokens)
        run = self._run
        if run is not None:
            total -= run.features.num_prefill_tokens
        return max(0, total)

    def step_end_s(self) -> float:
        """When the step under way ends (now when none is), as settling would show it: the
        end of the first step not yet ended of the run in flight."""
        run = self._run
        now = self.env.now
        if run is None:
            return max(now, self._clock)
        if run.spec is not None:
            self.settle()
            return max(now, run.times.end(1))
        done = run.settled_by(now)
        times = run.times.after(done) if done > 0 else run.times
        return max(now, times.end(1))

    def step_grid(self) -> tuple[float, float, float, int]:
        """The run in flight's step times as `step_end_s` reads them (its start, its first
        step's seconds, the growth of each next step's) and its number of steps; with no run,
        (its clock, 0, 0, 0). Valid until it next starts or ends a run or takes a request
        (`on_load`): settling only re-bases the same times (`sim.topology.ttft_index`)."""
        run = self._run
        if run is None:
            return (self._clock, 0.0, 0.0, 0)
        times = run.times
        return (times.start_s, times.first_duration_s, times.increment_s, run.num_steps)

    def caches_prefixes(self) -> bool:
        """Whether its KV pool keeps a prefix cache (else no request has a prefix cached)."""
        return self.pool.caching

    def prefill_seconds(self, num_tokens: int) -> float:
        """Seconds this instance's cost model gives to prefill `num_tokens` prompt tokens with
        no cached prefix (`sim.core.prefill_curve`). Priced between steps, never inside one."""
        return self._prefill.seconds(num_tokens)

    def prefill_curve(self) -> PrefillCurve:
        """Its prefill pricing, shared by the instances of its group (a router's bounds)."""
        return self._prefill

    def outstanding_tokens(self) -> int:
        """Tokens still to compute for every request here (what token-aware routers balance)."""
        total = self._waiting_work + self.batch.outstanding_tokens
        for queue in (self.prefilling, self.ready, self.swapped, self.arrived):
            if queue:  # mostly empty but the prompts in flight: no generator for those
                for req in queue:
                    total += req.remaining_work
        return total

    def transfer_blocks(self, req: Request) -> int:
        """P/D decode side: blocks this instance would reserve for `req`'s KV (its policy's
        answer for its pool)."""
        return self.policy.transfer_blocks(req, self.pool)

    def can_ever_take(self, req: Request) -> bool:
        """Whether this instance's pool could ever hold `req`'s whole sequence."""
        return self.policy.can_ever_take(req, self.pool)

    def reserve(self, num_blocks: int) -> None:
        """P/D decode side: set blocks aside for a KV transfer that starts now."""
        self._touch()
        self.pool.take(num_blocks)
        self.reserved_blocks += num_blocks
        run = self._run
        if run is not None and run.num_steps > 1:  # its horizon counted these blocks as free
            self._cut()

    def receive(self, req: Request, num_blocks: int) -> None:
        """P/D decode side: a transferred request lands, holding `num_blocks` reserved blocks."""
        self._touch()
        self.reserved_blocks -= num_blocks
        req.land(self.env.now, num_blocks)
        self.usage.stored_tokens += req.num_computed_tokens
        self.usage.fragment_tokens += self.usage.over(req, num_blocks)
        self.arrived.append(req)
        if self.on_load is not None:
            self.on_load(self)
        self.wake()

    def release(self, req: Request) -> None:
        """P/D prefill side: a handed-off request's KV has left; free its blocks here."""
        self._touch()
        self.handoff.remove(req)
        self._free(req)
        if self.on_load is not None:  # its KV blocks fell
            self.on_load(self)
        self.wake()

    def take_handoffs(self) -> list[Request]:
        """P/D prefill side: the prompts handed off since the last call, in order."""
        new, self._new_handoffs = self._new_handoffs, []
        return new

    def _touch(self) -> None:
        """Before an outside change at now: settle, and integrate KV use up to now."""
        self.settle()
        self.pool.at(self.env.now)
        if self._busy:
            self.usage.accrue_to(self.env.now, self.pool.num_used)

    # -- a request's KV: its pool blocks and the usage tallies -----------------------------------

    def _grow(self, req: Request, num_tokens: int) -> None:
        """Grow a (non-member) request's holding; the blocks past its sequence are fragment."""
        added = self.pool.grow(req, num_tokens)
        if added:
            bs = self.pool.block_size
            final = req.num_prompt_tokens + req.max_output_tokens
            held = req._kv_blocks
            was = (held - added) * bs - final
            now = held * bs - final
            if now > 0:
                self.usage.fragment_tokens += now - (was if was > 0 else 0)

    def _free(self, req: Request) -> None:
        """Return a (non-member) request's KV to the pool and take it out of the tallies."""
        usage = self.usage
        usage.stored_tokens -= req.num_computed_tokens
        usage.fragment_tokens -= usage.over(req, req.kv_blocks)
        pool = self.pool
        # its full blocks stay cached; those others still hold stay stored, once
        pool.register(req, req.num_computed_tokens)
        usage.stored_tokens += pool.release(req)

    # -- what the step loop (`sim.core.engine.Instance`) defines --------------------------------

    def _loop(self) -> Generator[Event, Any, None]:
        raise NotImplementedError

    def _apply(self, run: Run, num_steps: int) -> float:
        raise NotImplementedError

    def _continue(self, run: Run) -> None:
        raise NotImplementedError

