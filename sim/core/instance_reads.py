"""What the outside world reads of an instance: the loads and bounds routers and the gateway's
indexes rank by, its prefix cache's hits, its prompt backlog and step times (the TTFT
predictions), and whether it holds any request (a draining instance's retirement).

`InstanceReads` is `sim.core.instance.Instance`'s base: the reads, and `settle`, which every
read that must see the state at now calls first (it applies the steps of the run in flight that
ended). Most reads need no settling: they read the run in flight in closed form (its steps'
times, tokens per step) and settle only where a step could change the answer
(docs/architecture.md, "Runs and the decode batch").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sim.core.arrivals import FOREVER_S
from sim.core.clock import Clock
from sim.core.engine import Engine
from sim.core.kv.pool import KVPool
from sim.core.load import Load, WorkLoad
from sim.core.lookahead import Lookahead
from sim.core.prefill_curve import PrefillCurve
from sim.core.request import Request
from sim.core.run import Run


class InstanceReads:
    """The reads of an instance (see the module docstring); `Instance` sets the state below."""

    env: Clock
    engine: Engine
    pool: KVPool
    _run: Run | None  # the run in flight: started, not yet applied to its end
    _ahead: Lookahead  # an asynchronous scheduler's held requests
    on_step: Callable[[Any, Run, bool], None] | None
    _left: int  # `_tokens_left()` as last worked out; -1: to work out again

    @property
    def num_waiting(self) -> int:
        return self.engine.num_waiting + len(self._ahead)  # held ones are queued to a router

    def _tokens_left(self) -> int:
        """The tokens left of every request here as applied (held requests' included), worked
        out once after each change (`_changed`)."""
        left = self._left
        if left < 0:
            left = self._left = self.engine.outstanding_tokens() + self._ahead.work
        return left

    def _changed(self) -> None:
        """Its requests or their tokens changed: `_tokens_left` is worked out again."""
        self._left = -1

    @property
    def num_running(self) -> int:
        return self.engine.num_running

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
            self.engine.continue_run(run)

    def load(self) -> Load:
        """What routers see now."""
        self.settle()
        engine = self.engine
        return Load(
            engine.num_waiting + len(self._ahead),
            engine.num_running,
            self._tokens_left(),
            self.pool.num_used,
            self.pool.num_total,
        )

    def work_load(self) -> WorkLoad:
        """`load()`'s queues and outstanding tokens now, without settling the run in flight:
        inside a run the steps that ended changed only the work left (one token from every
        decoding member, a repeated chunk's tokens), so the run stays one record. A speculative
        step, whose accepted tokens are drawn when it is applied, is settled."""
        left = self.work_left()  # first: it may settle a speculative run
        return WorkLoad(self.engine.num_waiting + len(self._ahead), self.engine.num_running, left)

    def work_left(self) -> int:
        """`work_load().outstanding_tokens` alone (what token-balancing routers rank by)."""
        run = self._run
        engine = self.engine
        if run is not None and run.num_steps > 1:
            done = run.settled_by(self.env.now)
            if done > 0:
                if run.spec is not None:
                    self.settle()
                    return self._tokens_left()
                per_step = engine.tokens_per_step(run.plan, False)
                return self._tokens_left() - done * per_step
        return self._tokens_left()

    def num_outstanding(self) -> int:
        """`num_waiting + num_running` of `work_load()` (what request-balancing routers rank
        by), read without building the whole load."""
        return self.engine.num_outstanding() + len(self._ahead)

    def load_floor(self, tokens: bool) -> tuple[int, float, bool, int]:
        """What a load index keeps of this instance: `work_left()` (tokens) or
        `num_outstanding()` (requests), or a lower bound of it, and the time until which that
        holds (infinity: until this instance next starts or ends a run or takes a request, when
        it tells); whether it is the number itself; and the least the number can show before
        this instance next tells. Requests are exact, and so are tokens with no run in flight.
        During a run the tokens left now hold until the run's next step ends; the least is the
        tokens left less what every step of the run still to be applied before its end could
        take (each at most a token per decoding member, its chunks and a first token per
        prompt). A run's last step is never applied before the run ends (`Run.settled_by`), and
        its end tells: from its last step on, the number holds until then. No bound inside a
        speculative run (whose tokens are drawn)."""
        if not tokens:
            n = self.num_outstanding()
            return n, FOREVER_S, True, n
        run = self._run
        if run is None:
            left = self._tokens_left()
            return left, FOREVER_S, True, left
        if run.spec is not None:
            return 0, FOREVER_S, False, 0
        engine = self.engine
        last = run.num_steps - 1  # the most steps applied before the run's end
        done = run.settled_by(self.env.now) if last > 0 else 0
        now = self._tokens_left()
        if done:
            now -= done * engine.tokens_per_step(run.plan, False)  # `work_left()`
        if done >= last:  # nothing more is applied before the run ends
            return now, FOREVER_S, True, now
        least = now - (last - done) * engine.tokens_per_step(run.plan, True)
        return now, run.times.end(done + 1), True, least

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
        return self.engine.holds_requests() or self._run is not None or len(self._ahead) > 0

    def cached_prefix_tokens(self, req: Request) -> int:
        """Tokens of `req`'s prompt this instance's prefix cache holds now, on the GPU or in a
        KV tier below it (0 without caching), as settling the run in flight would show them.
        It settles only a run whose steps could change them: one that computes prompt chunks
        (they cache their blocks), or whose decode batch may grow into cached free blocks
        (evicting them); a decode run that fits in never-cached blocks changes no cached block
        before its last step, which is applied when the run ends."""
        pool = self.pool
        run = self._run
        if run is not None and self.engine.caching_during(run):
            self.settle()
        limit = (req.num_known_tokens - 1) // pool.block_size
        return pool.cached_prefix(req, limit, self.env.now) * pool.block_size

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
        if not self.engine.caching_during(run):
            return False
        for other in run.plan.prefill:
            own = other.block_hashes(bs)
            if own and own[0] == first:
                return True
        return self.engine.late_first() and run.plan.decode

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
        total = self.engine.prompt_backlog()
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
            return max(now, self.engine.now)
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
            return (self.engine.now, 0.0, 0.0, 0)
        times = run.times
        return (times.start_s, times.first_duration_s, times.increment_s, run.num_steps)

    def caches_prefixes(self) -> bool:
        """Whether its KV pool keeps a prefix cache (else no request has a prefix cached)."""
        return self.pool.caching

    def prefill_seconds(self, num_tokens: int) -> float:
        """Seconds this instance's cost model gives to prefill `num_tokens` prompt tokens with
        no cached prefix (`sim.core.prefill_curve`). Priced between steps, never inside one."""
        return self.engine.pricing.prefill_curve().seconds(num_tokens)

    def prefill_curve(self) -> PrefillCurve:
        """Its prefill pricing, shared by the instances of its group (a router's bounds)."""
        return self.engine.pricing.prefill_curve()

    def outstanding_tokens(self) -> int:
        """Tokens still to compute for every request here (what token-aware routers balance)."""
        return self._tokens_left()

    def _apply(self, run: Run, num_steps: int) -> float:
        end = self.engine.apply(run, num_steps)
        self._left = -1
        if self.on_step is not None:
            self.on_step(self, run, True)
        return end

