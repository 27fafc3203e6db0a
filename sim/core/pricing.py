"""What a step costs on one instance, and how many times it repeats.

`Pricing` owns an instance's cost model (`StepPricer`, `sim.costs.cost_model.CostModel`), its
prefill curve (`sim.core.prefill_curve`, shared by its group), whether it coalesces repeated steps
into runs, the seconds the next step waits on loads from KV tiers below the GPU, and the tallies
of its pricing (steps priced outside the profile's tables, host seconds of CPU overhead). The
engine hands it a started step's shape; it returns the `Run`: the features, the times, and how
many identical steps may run before a request finishes or the KV pool runs dry.
"""

from __future__ import annotations

from typing import Protocol

from sim.core.decode_batch import DecodeBatch, GrowthIntegrals
from sim.core.kv.pool import KVPool
from sim.core.plan import StepFeatures, StepPlan
from sim.core.prefill_curve import PrefillCurve
from sim.core.request import Request
from sim.core.run import Run
from sim.core.speculative_step import Prompts, SpecStart, Speculator
from sim.core.step_times import StepTimes


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


class Pricing:
    """One instance's step pricing (see the module docstring)."""

    def __init__(
        self,
        cost: StepPricer,
        pool: KVPool,
        batch: DecodeBatch,
        speculator: Speculator | None,
        coalesce: bool = True,
        prefill: PrefillCurve | None = None,
    ) -> None:
        self.cost = cost
        self._pool = pool
        self._batch = batch
        self._speculator = speculator
        self._coalesce = coalesce
        # what prefilling n tokens costs here (its group's instances share one)
        self._prefill = prefill if prefill is not None else PrefillCurve(cost)
        self._load_s = 0.0  # seconds the step being started waits on loads from KV tiers
        self.num_extrapolated_steps = 0  # steps priced outside the profile's tables
        self.cpu_overhead_s = 0.0  # host seconds of CPU overhead

    def prefill_curve(self) -> PrefillCurve:
        return self._prefill

    def wait_on_load(self, seconds: float) -> None:
        """An admission's blocks come from a tier below: the next step waits on them."""
        self._load_s += seconds

    def tally(self, run: Run, num_steps: int) -> None:
        """`num_steps` steps of `run` were applied."""
        if run.extrapolated:
            self.num_extrapolated_steps += num_steps
        if run.cpu_s:
            self.cpu_overhead_s += run.cpu_s * num_steps

    def price(
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
            plan.repeat > 1 and self._coalesce and not swap_s and not load_s and num_prefills <= 1
        )
        draft_s = 0.0
        speculator = self._speculator
        if spec is None and prefill_tokens and speculator is not None:
            # a draft model computes the prompt chunks too: a single step, that much longer
            drafted = speculator.draft_prefill_s(prompts)
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
        pool, batch = self._pool, self._batch
        first_s, increment_s = cost.run_times(features)
        extrapolated = cost.last_extrapolated
        if load_s:  # loads from KV tiers: before the step, or hidden behind its compute
            load_s = max(0.0, load_s - first_s) if pool.loads_overlap else load_s
            pool.load_wait_s += load_s
        extra_s = swap_s + load_s + (spec.proposal_s if spec is not None else draft_s)
        num_steps = 1
        if repeats and not plan.preempt and not plan.swap_in:
            num_steps = min(plan.repeat, batch.steps_to_finish())
            num_steps = min(num_steps, cost.linear_steps(features))
            if prefill_tokens:
                num_steps = self._chunk_run_steps(plan, num_steps)
            else:
                num_steps = batch.steps_until_dry(pool.num_free, num_steps)
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

    def _chunk_run_steps(self, plan: StepPlan, limit: int) -> int:
        """How many steps of a repeated prompt chunk (with the decodes) find their blocks."""
        ((req, chunk),) = plan.prefill.items()
        pool, batch = self._pool, self._batch
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


def chunk_growth(
    req: Request, chunk: int, num_steps: int, times: StepTimes, block_size: int
) -> GrowthIntegrals:
    """What a prompt chunk repeated for steps 2..k allocates and adds to the KV integrals
    (like `DecodeBatch.growth` for the decodes); the blocks are not taken here."""
    bs = block_size
    final = req.sequence_tokens
    total = times.elapsed(num_steps)
    computed = req.num_computed_tokens + chunk
    held = req.kv_blocks
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
