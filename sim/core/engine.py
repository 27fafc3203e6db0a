"""The engine: what an instance holds, and how a plan changes it.

`Engine` owns an instance's requests by where they are (the waiting queue, `sim.core.waiting`;
running, prefilling, ready to join the decode batch, swapped out, finished but holding their KV;
the P/D hand-off state, `sim.core.handoff`), its KV (the pool `sim.core.kv`, the decode batch,
the usage integrals, host memory for swaps), its pricing (`sim.core.pricing`) and its records.
It is what the instance's policy sees (`sim.core.plan.InstanceView`): each step the instance
(`sim.core.instance.Instance`, the step loop and the outside world) asks it for the policy's
`StepPlan` (`plan`), and it applies the plan: evictions, admissions and allocations at the step's
start (`start`, which prices the step as a `sim.core.run.Run`), and at the step's end the token
rule, finishes and the step's record (`apply`). Nothing else changes an instance's requests.

Speculative steps. A plan that names `speculate` (speculative decoding) runs as one step whose
decoding requests are handled one by one outside the decode batch: each emits its own number of
tokens (`sim.core.speculative_step`). Its duration is the proposals' seconds plus the target's
verification step. Plans without it never touch that path, so a run with speculation off is
exactly the plain run, coalesced runs and all.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence

from sim.core.acceptance import AcceptanceSampler
from sim.core.decode_batch import NO_GROWTH, DecodeBatch, GrowthIntegrals
from sim.core.engine_reads import EngineReads
from sim.core.handoff import HandOff
from sim.core.kv.host import HostMemory
from sim.core.kv.pool import KVPool
from sim.core.kv_usage import KVUsage
from sim.core.plan import Policy, QueueView, StepPlan
from sim.core.prefill_curve import PrefillCurve
from sim.core.pricing import Pricing, StepPricer, chunk_growth
from sim.core.recorder import ItlLog, RequestLog, StepLog
from sim.core.request import RUNNING, Request
from sim.core.run import NO_FEATURES, Run
from sim.core.speculative_step import Prompts, ProposalPricer, Speculator
from sim.core.step_times import StepTimes
from sim.core.waiting import Waiting, WaitQueue

NO_CARRY = (0, 0.0)
NO_PROMPTS: Prompts = (0, 0, 0, 0, ())


class Engine(EngineReads):
    """An instance's requests, KV and records, and how its policy's plans change them (see the
    module docstring)."""

    def __init__(
        self,
        policy: Policy,
        queue: WaitQueue,
        pool: KVPool,
        cost: StepPricer,
        log: RequestLog,
        steps: StepLog,
        itl: ItlLog,
        *,
        bytes_per_token: float,
        swap_bandwidth_bytes_per_s: float,
        host_memory_bytes: float,
        coalesce: bool = True,
        hands_off: bool = False,
        receives: bool = False,
        acceptance: AcceptanceSampler | None = None,
        proposer: ProposalPricer | None = None,
        prefill: PrefillCurve | None = None,
    ) -> None:
        self.policy = policy
        self.pool = pool
        self.log = log
        self.steps = steps
        self.itl = itl
        self._streamed = steps.on_full is not None or itl.on_full is not None
        self._waiting = Waiting(queue, pool.block_size if pool.caching else 0)
        self.waiting: QueueView = queue  # the same queue, as the policy reads it
        self.running: list[Request] = []  # admission order
        self.prefilling: list[Request] = []  # running, prompt (or recompute) not done
        self.ready: list[Request] = []  # running, decode next, not yet in the batch
        self.swapped: deque[Request] = deque()
        self.held: list[Request] = []  # finished, KV kept until the batch ends (static)
        self.pd = HandOff(hands_off, receives)
        self.arrived: Sequence[Request] = self.pd.arrived()  # its landed requests, read only
        self.batch = DecodeBatch(pool.block_size, paged=policy.paged_kv)
        self.usage = KVUsage(pool.block_size)
        # swapped-out KV: its one account
        self.host = HostMemory(host_memory_bytes, bytes_per_token, swap_bandwidth_bytes_per_s)
        # speculative decoding: applies the steps of plans that name `speculate`
        self.speculator: Speculator | None = None
        if acceptance is not None:
            if proposer is None:
                raise ValueError("speculative decoding needs a proposal pricer")
            self.speculator = Speculator(acceptance, proposer, pool, self.usage, policy.paged_kv)
        self.pricing = Pricing(cost, pool, self.batch, self.speculator, coalesce, prefill)
        self._clock = 0.0  # the instance's own time: SimPy's, or ahead of it (running ahead)
        self._busy = False  # a step has started and its run is not finished
        self._carried = NO_CARRY  # preemptions (and swap seconds) of a plan with no step
        # told when planning freed blocks (the P/D link), and of each finished request
        self.on_change: Callable[[], None] | None = None
        self.on_finish: Callable[[Request], None] | None = None

    def at(self, now: float) -> None:
        """The instance's clock moves to `now` (no step is under way)."""
        self._clock = now

    def plan(self) -> StepPlan | None:
        """The policy's plan for the step starting at the instance's clock."""
        self.pool.at(self._clock)  # tier blocks are hits once written: as of now
        return self.policy.schedule(self)

    def next_wakeup_s(self) -> float | None:
        return self.policy.next_wakeup_s(self)

    # -- arrivals and the outside world --------------------------------------------------------

    def queue(self, req: Request) -> bool:
        """Queue an arrived request; False (and recorded) when it can never be served here."""
        if not self.accepts(req):
            return False
        self._waiting.push(req)
        return True

    def accepts(self, req: Request) -> bool:
        """Whether an arrived request can ever be served here (else it is rejected, recorded)."""
        reason = self.policy.rejection(req, self.pool)
        if reason:
            req.reject(reason)
            self.log.record(req)
            return False
        return True

    def enqueue(self, req: Request) -> None:
        """Queue a request `accepts` took (an asynchronous scheduler held it a step)."""
        self._waiting.push(req)

    def enqueue_all(self, reqs: list[Request]) -> None:
        for req in reqs:
            self._waiting.push(req)

    def abort_waiting(self, req: Request, now: float) -> None:
        """A queued request's client gave up: it leaves now."""
        self._waiting.remove(req)
        req.abort(now)
        self.log.record(req)

    def drop_aborted(self, aborts: list[Request]) -> None:
        """The running requests in `aborts` leave at a step boundary, as a finished request
        does (the token rule's outputs so far are what they got)."""
        for req in aborts:
            if req.state == RUNNING:  # not finished in the meantime
                self._leave_running(req)
                req.abort(self._clock)
                self.log.record(req)
                if self.policy.releases_kv_on_finish:
                    self._free(req)
                else:
                    self.held.append(req)

    def touch(self, now: float) -> None:
        """Before an outside change at `now` (the run in flight settled): integrate KV use up
        to now."""
        self.pool.at(now)
        if self._busy:
            self.usage.accrue_to(now, self.pool.num_used)

    def reserve(self, num_blocks: int) -> None:
        """P/D decode side: set blocks aside for a KV transfer that starts now."""
        self.pool.take(num_blocks)
        self.pd.reserve(num_blocks)

    def land(self, req: Request, num_blocks: int, now: float) -> None:
        """P/D decode side: a transferred request lands, holding `num_blocks` reserved blocks."""
        self.pd.land(req, num_blocks, now)
        self.usage.stored_tokens += req.num_computed_tokens
        self.usage.fragment_tokens += self.usage.over(req, num_blocks)

    def release(self, req: Request) -> None:
        """P/D prefill side: a handed-off request's KV has left; free its blocks here."""
        self.pd.release(req)
        self._free(req)

    def take_handoffs(self) -> list[Request]:
        """P/D prefill side: the prompts handed off since the last call, in order."""
        return self.pd.take_new()

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

    # -- the start of a step: evictions, admissions, allocations, price ------------------------

    def start(self, plan: StepPlan) -> Run:
        """A step's start at the instance's clock: the plan's moves, its requests' blocks,
        then its price."""
        now = self._clock  # the pool is at it already (set before the plan was made)
        self.usage.step_started(now)
        num_preempted, swap_s = self._carried
        freed = False
        if plan.seat or plan.preempt or plan.swap_in or plan.admit:
            num_preempted, swap_s, freed = self._move(plan, now, num_preempted, swap_s)
        if not plan.has_work:
            self._carried = (num_preempted, swap_s)
            if freed and self.on_change is not None:
                self.on_change()
            return Run(plan, NO_FEATURES, StepTimes(now, 0.0), 0, False, 0, 0.0)
        if num_preempted or swap_s:
            self._carried = NO_CARRY
        prompts = self._start_prefills(plan) if plan.prefill else NO_PROMPTS
        spec = None
        if plan.speculate:  # decodes with lookahead, one by one (`sim.core.speculative_step`)
            assert self.speculator is not None and plan.decode
            spec = self.speculator.begin(
                plan.speculate, self.ready, self.running, self.batch, self._grow,
                prompts if prompts[1] else None,
            )  # fmt: skip
            decodes = (len(spec.decoders), spec.num_tokens, spec.sum_context)
        else:
            decodes = self._start_decodes() if plan.decode else (0, 0, 0)
        if freed and self.on_change is not None:
            # planning freed blocks (preemption): tell the cluster now, as a step-by-step loop
            # would, not at the end of a run
            self.on_change()
        run = self.pricing.price(plan, now, prompts, decodes, spec, swap_s)
        run.num_preempted = num_preempted
        self._busy = True
        return run

    def _start_prefills(self, plan: StepPlan) -> Prompts:
        """Blocks for the step's prompt chunks; their shape (count, tokens, context after the
        step, attention work, each chunk's tokens and context before it)."""
        tokens = context = attention = 0
        shapes = []
        hold = plan.hold
        for req, n in plan.prefill.items():
            before = req.num_computed_tokens
            target = before + n
            reserve = hold.get(req, 0) if hold else 0
            self._grow(req, reserve if reserve > target else target)
            tokens += n
            context += target
            attention += n * target  # a chunk attends to everything computed before it
            shapes.append((n, before))
        self.usage.stored_tokens += tokens
        return len(shapes), tokens, context, attention, tuple(shapes)

    def _start_decodes(self) -> tuple[int, int, int]:
        """The decode batch's next token: blocks crossing a boundary, newcomers join; the
        decodes, their tokens and their context after the step."""
        batch, usage = self.batch, self.usage
        if batch.paged:
            blocks, tails = batch.start_step()
            self.pool.take(blocks)
            usage.fragment_tokens += tails
        if self.ready:
            for req in self.ready:
                self._grow(req, req.num_computed_tokens + 1)
                batch.join(req)
            self.ready.clear()
        num = batch.size
        usage.stored_tokens += num
        return num, num, batch.sum_computed + num

    def _move(
        self, plan: StepPlan, now: float, num_preempted: int, swap_s: float
    ) -> tuple[int, float, bool]:
        """A plan's seats, evictions, swap-ins and admissions, in that order (sim.core.plan);
        the swapped-in requests' blocks are taken last."""
        usage, host = self.usage, self.host
        freed = False
        if plan.preempt:  # the victims' tier writes wait for the admissions' tier loads
            self.pool.hold_tier_writes()
        for req in plan.seat:
            self.pd.seat(req)
            self.running.append(req)
            self.ready.append(req)
        for p in plan.preempt:
            req = p.request
            self._leave_running(req)
            if p.swap:
                nbytes = self.swap_bytes(req)
                self._free(req)
                req.swap_out(nbytes)
                host.swap_out(nbytes)
                swap_s += host.seconds(nbytes)
                self.swapped.append(req)
            else:
                self._free(req)
                req.preempt_recompute()
                self._waiting.push_front(req)
            num_preempted += 1
            freed = True
        for req in plan.swap_in:
            if not self.swapped or self.swapped[0] is not req:
                raise AssertionError(f"swap-in of request {req.id} out of order")
            self.swapped.popleft()
            host.swap_in(req.host_bytes)
            swap_s += host.seconds(req.host_bytes)
            req.swap_in()
            self.running.append(req)
            usage.stored_tokens += req.num_computed_tokens
            (self.ready if req.is_decoding else self.prefilling).append(req)
        cached, loaded, pool, waiting = plan.cached, plan.loaded, self.pool, self._waiting
        for req in plan.admit:
            waiting.pop(now, req)
            hits = cached.get(req, 0) if cached else 0
            pool.lookup(req, hits)
            shared = pool.acquire(req, hits) if hits else 0
            lower = loaded.get(req, 0) if loaded else 0
            if lower:  # the blocks after them come from a tier below: their blocks with growth
                self.pricing.wait_on_load(pool.load(req, hits, lower))
            if hits or lower:  # it starts from its cached prefix; shared blocks stored once
                bs = pool.block_size
                usage.stored_tokens += (hits + lower - shared) * bs
                req.admit(now, (hits + lower) * bs)
            else:
                req.admit(now)
            self.running.append(req)
            self.prefilling.append(req)
        if plan.preempt:
            pool.release_tier_writes()
        # swapped-in requests take their blocks once the admissions hold their cached ones:
        # taking blocks may evict cached free blocks, and the plan counted those hits
        for req in plan.swap_in:
            self._grow(req, plan.hold.get(req, req.num_computed_tokens))
        return num_preempted, swap_s, freed

    def _leave_running(self, req: Request) -> None:
        self.running.remove(req)
        if req._batch is not None:
            self.batch.leave(req)
        elif req in self.ready:
            self.ready.remove(req)
        else:
            self.prefilling.remove(req)

    # -- the end of a step: the token rule, finishes, records ----------------------------------

    def apply(self, run: Run, num_steps: int) -> float:
        """Apply the first `num_steps` unapplied steps of `run` (all of it, or those that ended
        before an outside look); returns when they ended."""
        plan, times, batch, pool = run.plan, run.times, self.batch, self.pool
        if run.extrapolated or run.cpu_s:
            self.pricing.tally(run, num_steps)
        growth = batch.growth(num_steps, times) if plan.decode else NO_GROWTH
        stored_growth = batch.size if plan.decode else 0
        chunk_run = num_steps > 1 and plan.prefill
        if chunk_run:  # a repeated prompt chunk grows its holding too
            ((grower, chunk),) = plan.prefill.items()
            own = chunk_growth(grower, chunk, num_steps, times, pool.block_size)
            growth = GrowthIntegrals(
                growth.blocks + own.blocks,
                growth.block_seconds + own.block_seconds,
                growth.fragment_tokens + own.fragment_tokens,
                growth.fragment_token_seconds + own.fragment_token_seconds,
            )
            stored_growth += chunk
        used = pool.num_used
        pool.take(growth.blocks)
        # the cached free blocks while the step ran (kv_blocks_used's moment, before any finish)
        cached = pool.num_cached_free
        piece = self.usage.integrate(times, num_steps, used, stored_growth, growth)
        end = times.end(num_steps)
        pool.at(end)  # blocks computed by now are cached (and written down) from now
        spec = run.spec
        accepted = 0
        if spec is not None:
            assert self.speculator is not None
            self.ready, finished, accepted = self.speculator.end(spec, times.start_s, end, self.itl)
        else:
            finished = batch.advance(num_steps, times, self.itl) if plan.decode else []
            if not finished:
                finished = []  # the batch's shared empty result is never appended to
        if plan.prefill:
            grown = own.blocks if chunk_run else 0
            start = end - times.duration(num_steps)
            self._end_prefills(plan, num_steps, start, end, grown, finished)
        for req in finished:
            self._finished(req, end)
        if self.held and not self.running:  # a static batch has drained: release it whole
            for req in self.held:
                self._free(req)
            self.held.clear()
        run.record(
            self.steps, num_steps, end, piece, cached, accepted,
            self.num_waiting, self.num_running, pool.occupancy(),
        )  # fmt: skip
        if self._streamed:  # hand full chunks of records over: a streamed run keeps no tables
            self.steps.hand_over()
            self.itl.hand_over()
        return end

    def finish_run(self, end: float) -> None:
        """The run in flight was applied to its end at `end`: the instance is idle there."""
        self._clock = end
        self._busy = False

    def _end_prefills(
        self,
        plan: StepPlan,
        num_steps: int,
        start: float,
        end: float,
        grown: int,
        finished: list[Request],
    ) -> None:
        """The token rule for the step's prompt chunks: each computes its tokens (`grown` more
        blocks for a repeated chunk), caches its full blocks, and emits a token once its
        prompt is done; then it decodes, leaves for the KV link, or (finished) joins
        `finished`."""
        pool, itl, pd = self.pool, self.itl, self.pd
        for req in plan.prefill:
            if req.state != RUNNING:  # a chunk's request cannot have left mid-step
                raise AssertionError(f"request {req.id} left during its own step")
            if grown:
                req.set_kv_blocks(req.kv_blocks + grown)
            gap = req.compute(plan.prefill[req] * num_steps, start, end)
            pool.register(req, req.num_computed_tokens)  # the blocks it filled are cached now
            if gap is None:  # a prefill chunk: no token yet
                if req.is_decoding:  # a recompute with one token left: that is a decode
                    self.prefilling.remove(req)
                    self.ready.append(req)
                continue
            if gap == gap:  # not NaN: a recomputed request's next token
                itl.gap(gap, 1)
            self.prefilling.remove(req)
            if req.is_finished:
                finished.append(req)
            elif pd.hands_off and req.num_output_tokens == 1:
                self.running.remove(req)
                pd.hand_off(req, end)
            else:
                self.ready.append(req)

    def _finished(self, req: Request, end: float) -> None:
        """A request emitted its last token: it leaves, is recorded, and frees its KV (static
        batching keeps it until the batch drains)."""
        if req._batch is not None:
            self.batch.leave(req)
        self.running.remove(req)
        req.finish(end)
        self.log.record(req)
        if self.on_finish is not None:
            self.on_finish(req)
        if self.policy.releases_kv_on_finish:
            self._free(req)
        else:
            self.held.append(req)

    def continue_run(self, run: Run) -> None:
        """After applying some steps of a run mid-flight: start the next one, under way now."""
        if run.plan.decode:
            blocks, tails = self.batch.start_step()
            self.pool.take(blocks)
            self.usage.fragment_tokens += tails
            self.usage.stored_tokens += self.batch.size
        for req, chunk in run.plan.prefill.items():  # a repeated chunk's next step
            self._grow(req, req.num_computed_tokens + chunk)
            self.usage.stored_tokens += chunk
