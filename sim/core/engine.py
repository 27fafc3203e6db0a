"""The engine: the step loop that applies an instance's policy's plans.

`Instance` is an instance's state (`sim.core.instance.InstanceState`: queues, KV pool, decode
batch, records, and the methods routers and the KV link call) with its step loop. Each step it
asks the policy for a `StepPlan` (`sim.core.plan`: the contract), applies the plan's evictions,
admissions and allocations at the step's start, prices the step with the cost model, lets SimPy
advance time, and at the step's end applies the token rule, finishes requests and records the
step (`sim.core.run.Run` writes the row). Nothing else changes an instance.

Runs. A decode-only plan may repeat: the engine runs as many identical steps as the policy
allows, stopping before the first finish and before the KV pool would run dry (the decode batch
knows both in O(1)), as one SimPy timeout. Anything outside that reads or changes the instance
mid-run first calls `settle()`, which applies the steps that have ended and starts the one under
way, so the instance looks exactly as it would have stepped one step at a time; an arrival that
could join cuts the run at the first step boundary at or after it. So coalescing steps never
changes a schedule (the tests run every policy both ways).

Speculative steps. A plan that names `speculate` (speculative decoding) runs as one step whose
decoding requests are handled one by one outside the decode batch: each emits its own number of
tokens (`sim.core.speculative_step`). Its duration is the proposals' seconds plus the target's
verification step. Plans without it never touch that path, so a run with speculation off is
exactly the plain run, coalesced runs and all.

Running ahead. When an instance's next step ends before any other scheduled event (the next
arrival, another instance's step), nothing can observe or interrupt it, so the loop applies it at
once and plans the next on its own clock, without a SimPy event; it catches SimPy up before it
waits. Instances whose steps notify a KV link do not run ahead. A lone instance pulls its
arrivals (`ArrivalFeed`) instead of having them pushed: then it never waits on SimPy while busy.

Same-time order (tested): arrivals carry SimPy's URGENT priority and step ends NORMAL, so requests
arriving at time t are queued before any instance plans the step that starts at t: an arrival at
t is visible to a schedule at t. Arrivals with equal timestamps are queued in id order.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import simpy
from simpy.events import Event

from sim.core.arrivals import FOREVER_S
from sim.core.decode_batch import NO_GROWTH, GrowthIntegrals
from sim.core.instance import NO_CARRY, InstanceState, KVSpec, Load, StepPricer
from sim.core.plan import StepFeatures, StepPlan
from sim.core.request import RUNNING, WAITING, Request
from sim.core.run import NO_FEATURES, Run
from sim.core.speculative_step import Prompts, SpecStart
from sim.core.step_times import StepTimes, steps_before

__all__ = ["Instance", "KVSpec", "Load", "StepPricer"]

NO_PROMPTS: Prompts = (0, 0, 0, 0, ())


class Instance(InstanceState):
    """One serving instance: its state (`InstanceState`) and the step loop (see the module
    docstring)."""

    # -- the step loop ---------------------------------------------------------------------------

    def _loop(self) -> Generator[Event, Any, None]:
        env = self.env
        run_ahead = self.on_change is None
        feed = self.feed
        if self.serves_from_s > env.now:  # a cold start: arrivals queue until it is over
            yield env.timeout(self.serves_from_s - env.now)
            self._clock = env.now
        while True:
            if feed is not None:  # arrivals up to now are queued before the schedule at now
                feed.pull(self._clock, self.submit)
            if self._aborts:  # requests their clients gave up on leave before the schedule
                self._drop_aborted()
            self.pool.at(self._clock)  # tier blocks are hits once written: as of now
            plan = self.policy.schedule(self)
            if plan is not None and (plan.preempt or plan.swap_in) and not plan.has_work:
                # evictions with nothing to run: they happened; the next step records them
                self._begin(plan)
                plan = None
            if plan is None:
                if self._clock > env.now:  # catch SimPy up before waiting for anything
                    queued = self.num_waiting
                    yield env.timeout(self._clock - env.now)
                    if self.num_waiting != queued:
                        # sent at the very end of the run (a closed loop's next request with
                        # no delay) while SimPy caught up: plan for it instead of idling
                        continue
                self._idle = env.event()
                wake = self.policy.next_wakeup_s(self)
                if feed is not None and feed.next_s < FOREVER_S:  # or the next arrival
                    wake = feed.next_s if wake is None else min(wake, feed.next_s)
                if wake is None:
                    yield self._idle
                else:
                    yield self._idle | env.timeout(max(0.0, wake - env.now))
                self._idle = None
                self._clock = env.now
                continue
            run = self._begin(plan)
            if feed is not None and run.interruptible and feed.next_s < FOREVER_S:
                # the next arrival could join: the run ends at the step boundary at or after it,
                # where an arrival pushed by SimPy would have cut it
                run.num_steps = steps_before(run.times, run.num_steps, feed.next_s)
            end = run.times.end(run.num_steps)
            if run_ahead and self.on_change is None and end < env.peek():
                if feed is not None:  # what arrived while it ran is queued when it ends
                    feed.pull(end, self.submit)
                self._finish(run)  # nothing can happen before it ends: no event needed
                continue
            self._run = run
            wait: Event = env.timeout(end - env.now)
            while True:
                try:
                    yield wait
                    break
                except simpy.Interrupt:
                    if self._cut_to is not None:
                        self._cut_to = None
                    end = run.times.end(run.num_steps)
                    wait = env.timeout(max(0.0, end - env.now))
            self._run = None
            if feed is not None:
                feed.pull(env.now, self.submit)
            self._finish(run)

    def step_by_hand(self, now: float, max_steps: int | None = None) -> Run | None:
        """Plan and apply one step (or run of up to `max_steps` steps) starting at `now`, with
        no SimPy: for tests and tools that drive an instance directly. Returns what ran (None
        when the policy had nothing to run)."""
        self._clock = now
        self.pool.at(now)
        plan = self.policy.schedule(self)
        if plan is None:
            return None
        run = self._begin(plan)
        if not plan.has_work:
            return run
        if max_steps is not None:
            run.num_steps = min(run.num_steps, max_steps)
        self._finish(run)
        return run

    def _finish(self, run: Run) -> None:
        # the end of the run as applied (settled pieces may move it by a rounding error)
        self._clock = self._apply(run, run.num_steps)
        self._busy = False
        if self.on_load is not None:
            self.on_load(self)
        if self.on_change is not None:
            self.on_change(self)

    # -- the start of a step: evictions, admissions, allocations, price ------------------------

    def _begin(self, plan: StepPlan) -> Run:
        run = self._start(plan)
        if self.on_load is not None:
            self.on_load(self)
        if self.on_step is not None:
            self.on_step(self, run, False)
        return run

    def _start(self, plan: StepPlan) -> Run:
        """A step's start: the plan's moves, its requests' blocks, then its price."""
        now = self._clock  # the pool is at it already (set before the plan was made)
        self.usage.step_started(now)
        num_preempted, swap_s = self._carried
        freed = False
        if plan.seat or plan.preempt or plan.swap_in or plan.admit:
            num_preempted, swap_s, freed = self._move(plan, now, num_preempted, swap_s)
        if not plan.has_work:
            self._carried = (num_preempted, swap_s)
            if freed and self.on_change is not None:
                self.on_change(self)
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
            self.on_change(self)
        run = self._price(plan, now, prompts, decodes, spec, swap_s)
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

    def _price(
        self,
        plan: StepPlan,
        now: float,
        prompts: Prompts,
        decodes: tuple[int, int, int],
        spec: SpecStart | None,
        swap_s: float,
    ) -> Run:
        """The step's features and seconds (with swaps, tier loads and a draft's prefill), and
        how many times it repeats."""
        num_prefills, prefill_tokens, prefill_context, attention, chunks = prompts
        num_decodes, decode_tokens, decode_context = decodes
        load_s, self._load_s = self._load_s, 0.0
        repeats = (
            plan.repeat > 1 and self.coalesce and not swap_s and not load_s and num_prefills <= 1
        )
        draft_s = 0.0
        if spec is None and prefill_tokens and self.speculator is not None:
            # a draft model computes the prompt chunks too: a single step, that much longer
            drafted = self.speculator.draft_prefill_s(prompts)
            if drafted is not None:
                draft_s, repeats = drafted, False
        pad = plan.padding
        features = StepFeatures(
            num_prefills + num_decodes + pad.num_seqs,
            prefill_tokens + decode_tokens + pad.num_seqs + pad.prefill_tokens,
            prefill_tokens + pad.prefill_tokens,
            decode_tokens,
            prefill_context + decode_context + pad.context_tokens,
            attention + pad.attention_term,
            num_decodes + pad.num_seqs + (prefill_tokens if repeats else 0),
            num_prefills + num_decodes,
            prefill_tokens * prefill_tokens if repeats else 0,
            chunks,
        )
        cost = self.cost
        first_s, increment_s = cost.run_times(features)
        extrapolated = cost.last_extrapolated
        if load_s:  # loads from KV tiers: before the step, or hidden behind its compute
            load_s = max(0.0, load_s - first_s) if self.pool.loads_overlap else load_s
            self.pool.load_wait_s += load_s
        extra_s = swap_s + load_s + (spec.proposal_s if spec is not None else draft_s)
        num_steps = 1
        if repeats and not plan.preempt and not plan.swap_in:
            num_steps = min(plan.repeat, self.batch.steps_to_finish())
            num_steps = min(num_steps, cost.linear_steps(features))
            if prefill_tokens:
                num_steps = self._chunk_run_steps(plan, num_steps)
            else:
                num_steps = self.batch.steps_until_dry(self.pool.num_free, num_steps)
        run = Run(
            plan,
            features,
            StepTimes(now, first_s + extra_s, increment_s if spec is None else 0.0),
            num_steps,
            plan.interruptible and num_steps > 1,
            0,
            swap_s,
            cost.cpu_overhead_s(features),
            extrapolated,
        )
        run.load_s = load_s
        if spec is not None:  # one step: the target verifies after the proposals
            run.spec = spec
            run.verify_s = first_s
            run.proposal_s = spec.proposal_s
        else:
            run.proposal_s = draft_s
        return run

    def _move(
        self, plan: StepPlan, now: float, num_preempted: int, swap_s: float
    ) -> tuple[int, float, bool]:
        """A plan's seats, evictions, swap-ins and admissions, in that order (sim.core.plan);
        the swapped-in requests' blocks are taken last."""
        usage = self.usage
        bandwidth = self.kv_spec.swap_bandwidth_bytes_per_s
        freed = False
        if plan.preempt:  # the victims' tier writes wait for the admissions' tier loads
            self.pool.hold_tier_writes()
        for req in plan.seat:
            if not self.arrived or self.arrived[0] is not req:
                raise AssertionError(f"seat for request {req.id} out of order")
            self.arrived.popleft()
            req.seat()
            self.running.append(req)
            self.ready.append(req)
        for p in plan.preempt:
            req = p.request
            self._leave_running(req)
            if p.swap:
                nbytes = self.swap_bytes(req)
                self._free(req)
                req.swap_out(nbytes)
                self.host.swap_out(nbytes)
                swap_s += nbytes / bandwidth
                self.swapped.append(req)
            else:
                self._free(req)
                req.preempt_recompute()
                self.waiting.push_front(req)
                self._waiting_work += req.remaining_work
            num_preempted += 1
            freed = True
        for req in plan.swap_in:
            if not self.swapped or self.swapped[0] is not req:
                raise AssertionError(f"swap-in of request {req.id} out of order")
            self.swapped.popleft()
            self.host.swap_in(req.host_bytes)
            swap_s += req.host_bytes / bandwidth
            req.swap_in()
            self.running.append(req)
            usage.stored_tokens += req.num_computed_tokens
            (self.ready if req.is_decoding else self.prefilling).append(req)
        cached, loaded, pool = plan.cached, plan.loaded, self.pool
        for req in plan.admit:
            if self.waiting.pop(now) is not req:
                raise AssertionError(f"admission of request {req.id} out of queue order")
            self._waiting_work -= req.remaining_work
            hits = cached.get(req, 0) if cached else 0
            pool.lookup(req, hits)
            shared = pool.acquire(req, hits) if hits else 0
            lower = loaded.get(req, 0) if loaded else 0
            if lower:  # the blocks after them come from a tier below: their blocks with growth
                self._load_s += pool.load(req, hits, lower)
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

    def _chunk_run_steps(self, plan: StepPlan, limit: int) -> int:
        """How many steps of a repeated prompt chunk (with the decodes) find their blocks."""
        ((req, chunk),) = plan.prefill.items()
        pool, batch = self.pool, self.batch
        free = pool.num_free
        computed = req.num_computed_tokens + chunk  # after the first step
        for j in range(2, limit + 1):
            grown = computed + chunk
            need = (
                pool.blocks_for(grown)
                - pool.blocks_for(computed)
                + batch.demand_at(batch.clock + j - 1)
            )
            if need > free:
                return j - 1
            free -= need
            computed = grown
        return limit

    def _chunk_growth(self, req: Request, chunk: int, num_steps: int, times: StepTimes) -> Any:
        """What a prompt chunk repeated for steps 2..k allocates and adds to the KV integrals
        (like `DecodeBatch.growth` for the decodes); the blocks are not taken here."""
        bs = self.pool.block_size
        final = req.sequence_tokens
        total = times.elapsed(num_steps)
        computed = req.num_computed_tokens + chunk
        held = req._kv_blocks
        blocks = 0
        block_seconds = fragment_seconds = 0.0
        fragment = 0
        for a in range(2, num_steps + 1):
            computed += chunk
            need = -(-computed // bs) - held
            if need > 0:
                held += need
                blocks += need
                rest = total - times.elapsed(a - 1)
                block_seconds += need * rest
                over = held * bs - final
                if over > 0:  # the block past its sequence's end (only its last)
                    added = over - max(0, (held - need) * bs - final)
                    fragment += added
                    fragment_seconds += added * rest
        return GrowthIntegrals(blocks, block_seconds, fragment, fragment_seconds)

    def abort(self, req: Request) -> bool:
        """Its client gave up on `req`: queued here, it leaves now; running here, it leaves at
        the next step boundary (a run it is in is cut there, as an arrival cuts one), after the
        step under way. False when it is in neither state (swapped, or in P/D hand-off)."""
        self._touch()
        if req.state == WAITING and req.instance == self.index:
            self.waiting.remove(req)
            self._waiting_work -= req.remaining_work
            req.abort(self.env.now)
            self.log.record(req)
        elif req.state == RUNNING and req in self.running:
            if req not in self._aborts:
                self._aborts.append(req)
            if self._idle is not None:
                self.wake()
            elif self._run is not None and self._run.interruptible:
                self._cut()
            return True
        else:
            return False
        if self.on_load is not None:
            self.on_load(self)
        return True

    def _drop_aborted(self) -> None:
        """The running requests `abort` was asked for leave, at a step boundary, as a finished
        request does (the token rule's outputs so far are what they got)."""
        for req in self._aborts:
            if req.state == RUNNING:  # not finished in the meantime
                self._leave_running(req)
                req.abort(self._clock)
                self.log.record(req)
                if self.policy.releases_kv_on_finish:
                    self._free(req)
                else:
                    self.held.append(req)
        self._aborts.clear()
        if self.on_load is not None:
            self.on_load(self)

    def _leave_running(self, req: Request) -> None:
        self.running.remove(req)
        if req._batch is not None:
            self.batch.leave(req)
        elif req in self.ready:
            self.ready.remove(req)
        else:
            self.prefilling.remove(req)

    # -- the end of a step: the token rule, finishes, records ----------------------------------

    def _apply(self, run: Run, num_steps: int) -> float:
        """Apply the first `num_steps` unapplied steps of `run` (all of it, or those that ended
        before an outside look); returns when they ended."""
        plan, times, batch, pool = run.plan, run.times, self.batch, self.pool
        if run.extrapolated:
            self.num_extrapolated_steps += num_steps
        if run.cpu_s:
            self.cpu_overhead_s += run.cpu_s * num_steps
        growth = batch.growth(num_steps, times) if plan.decode else NO_GROWTH
        stored_growth = batch.size if plan.decode else 0
        chunk_run = num_steps > 1 and plan.prefill
        if chunk_run:  # a repeated prompt chunk grows its holding too
            ((grower, chunk),) = plan.prefill.items()
            own = self._chunk_growth(grower, chunk, num_steps, times)
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
        self.pool.at(end)  # blocks computed by now are cached (and written down) from now
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
            self.num_waiting, self.num_running, self.pool.occupancy(),
        )  # fmt: skip
        if self._streamed:  # hand full chunks of records over: a streamed run keeps no tables
            self.steps.hand_over()
            self.itl.hand_over()
        if self.on_step is not None:
            self.on_step(self, run, True)
        return end

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
        pool, itl = self.pool, self.itl
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
            elif self.hands_off and req.num_output_tokens == 1:
                self.running.remove(req)
                req.hand_off(end)
                self.handoff.append(req)
                self._new_handoffs.append(req)
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

    def _continue(self, run: Run) -> None:
        """After applying some steps of a run mid-flight: start the next one, under way now."""
        if run.plan.decode:
            blocks, tails = self.batch.start_step()
            self.pool.take(blocks)
            self.usage.fragment_tokens += tails
            self.usage.stored_tokens += self.batch.size
        for req, chunk in run.plan.prefill.items():  # a repeated chunk's next step
            self._grow(req, req.num_computed_tokens + chunk)
            self.usage.stored_tokens += chunk


