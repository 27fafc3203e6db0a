"""A run in flight: the steps of one plan that the engine has started and not yet applied.

A decode-only plan may repeat as one run of identical steps (`sim.core.engine`). What a run
knows of itself lives here: how many of its steps ended before an instant (`settled_by`), where
an arrival cuts it (`cut_at`), and how its features and times move on once some of its steps
are applied (`advance`). The instance applies the steps' effects on its state.
"""

from __future__ import annotations

from sim.core.kv_usage import PieceUsage
from sim.core.plan import StepFeatures, StepPlan
from sim.core.recorder import StepLog
from sim.core.speculative_step import SpecStart
from sim.core.step_times import StepTimes, steps_before

NO_FEATURES = StepFeatures(0, 0, 0, 0, 0, 0)
NO_TIERS = (0, 0, 0)
# written only when nonzero (`Run.record`): they must stay sparse
SKIPPED_WHEN_ZERO = (
    "num_preempted", "swap_s", "kv_blocks_cached", "num_spec_seqs", "num_spec_proposed",
    "num_spec_accepted", "spec_proposal_s", "spec_verify_s", "kv_load_s", "kv_dram_blocks",
    "kv_nvme_blocks", "kv_remote_blocks",
)  # fmt: skip


class Run:
    """The plan in flight: the steps of it not yet applied."""

    __slots__ = (
        "cpu_s",
        "extrapolated",
        "features",
        "interruptible",
        "load_s",
        "num_preempted",
        "num_steps",
        "plan",
        "proposal_s",
        "spec",
        "swap_s",
        "times",
        "verify_s",
    )

    def __init__(
        self,
        plan: StepPlan,
        features: StepFeatures,
        times: StepTimes,  # of its first unapplied step onwards
        num_steps: int,  # steps left (the first is under way)
        interruptible: bool,
        num_preempted: int,  # recorded with its first piece
        swap_s: float,
        cpu_s: float = 0.0,  # host seconds per step (the pricing's CPU overhead)
        extrapolated: bool = False,  # priced outside the profile's tables
    ) -> None:
        self.plan = plan
        self.features = features
        self.times = times
        self.num_steps = num_steps
        self.interruptible = interruptible
        self.num_preempted = num_preempted
        self.swap_s = swap_s
        self.cpu_s = cpu_s
        self.extrapolated = extrapolated
        self.spec: SpecStart | None = None  # a speculative step's start
        self.verify_s = 0.0  # its target's seconds
        self.proposal_s = 0.0  # a single step's proposer seconds (proposals, draft prefill)
        self.load_s = 0.0  # its first step's wait on loads from KV tiers below the GPU

    def settled_by(self, now_s: float) -> int:
        """Steps of it that ended at or before `now_s` (its last is never counted: the instance
        finishes a run itself)."""
        return steps_before(self.times, self.num_steps, now_s) - 1

    def cut_at(self, now_s: float) -> bool:
        """End it at the first step boundary at or after `now_s`; whether that shortened it."""
        if self.num_steps <= 1:
            return False
        cut = steps_before(self.times, self.num_steps, now_s)
        if cut >= self.num_steps:
            return False
        self.num_steps = cut
        return True

    def advance(self, done: int) -> None:
        """`done` of its steps have been applied: the rest starts with the next one."""
        f = self.features
        self.features = f._replace(
            sum_context_tokens=f.sum_context_tokens + f.context_growth_per_step * done,
            prefill_attention_term=f.prefill_attention_term + f.attention_growth_per_step * done,
            chunks=tuple((n, before + n * done) for n, before in f.chunks),
        )
        self.times = self.times.after(done)
        self.num_steps -= done
        self.num_preempted = 0
        self.swap_s = 0.0
        self.load_s = 0.0

    def record(
        self,
        steps: StepLog,
        num_steps: int,
        end: float,
        piece: PieceUsage,
        cached: int,
        accepted: int,
        num_waiting: int,
        num_running: int,
        tiers: tuple[int, int, int],
    ) -> None:
        """The row of its first `num_steps` steps, just applied (`sim.core.recorder.STEP_SCHEMA`):
        their KV integrals `piece`, the cached free blocks, the accepted speculative tokens,
        the queues after them and the blocks in the DRAM, NVMe and remote tiers."""
        f, times, spec = self.features, self.times, self.spec
        s, x = steps.row, steps.sparse
        s.start_s(times.start_s)
        s.end_s(end)
        s.num_steps(num_steps)
        s.duration_s(times.first_duration_s)
        s.duration_increment_s(times.increment_s)
        s.num_seqs(f.num_seqs)
        s.num_active_seqs(f.num_active_seqs)
        s.num_tokens(f.num_tokens)
        s.num_prefill_tokens(f.num_prefill_tokens)
        s.num_decode_tokens(f.num_decode_tokens)
        s.sum_context_tokens(f.sum_context_tokens)
        s.context_growth_per_step(f.context_growth_per_step)
        s.kv_blocks_used(piece.blocks_held)
        s.kv_block_seconds(piece.block_seconds)
        s.num_waiting(num_waiting)
        s.num_running(num_running)
        # sparse columns (`sim.core.recorder.SPARSE_COLUMNS`) keep only their nonzero rows, so
        # a zero is not written (tests/core/test_recorder.py checks these are sparse)
        if self.num_preempted:
            x.num_preempted(self.num_preempted)
        s.kv_stored_token_seconds(piece.stored_token_seconds)
        s.kv_fragment_token_seconds(piece.fragment_token_seconds)
        if self.swap_s:
            x.swap_s(self.swap_s)
        if cached:
            x.kv_blocks_cached(cached)
        if spec is not None:
            x.num_spec_seqs(spec.num_spec_seqs)
            x.num_spec_proposed(spec.num_proposed)
            x.num_spec_accepted(accepted)
        if self.proposal_s:
            x.spec_proposal_s(self.proposal_s)
        if self.verify_s:
            x.spec_verify_s(self.verify_s)
        if self.load_s:
            x.kv_load_s(self.load_s)
        if tiers != NO_TIERS:
            x.kv_dram_blocks(tiers[0])
            x.kv_nvme_blocks(tiers[1])
            x.kv_remote_blocks(tiers[2])
