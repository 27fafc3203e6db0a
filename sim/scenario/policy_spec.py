"""The `policy:` section of a scenario (and of an instance group): the batching policies' specs.

`static`, `continuous` and `chunked` are tagged by `name` (`PolicySpec`, the one list of policies:
`sim.policies.BUILDERS` has one builder for each), with the waiting queue's order (`queue`) and,
for the iteration-level two, what preemption does (`preemption`). Every spec answers the same
questions about its KV and seats by attribute, so no code outside the policy builders checks a
spec's kind. `sim.scenario.schema` holds the rest of the scenario and re-exports these names.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from sim.inputs.strict_model import StrictModel
from sim.scenario.speculative import SpeculativeSpec


class _Strict(StrictModel):
    model_config = ConfigDict(frozen=True)


class QueueTierSpec(_Strict):
    rank: int = Field(default=0, ge=0)  # strict priority: lower rank first
    weight: float = Field(default=1.0, gt=0)  # weighted shares: admissions in this proportion


class QueueSpec(_Strict):
    """`policy.queue`: the waiting-queue order (sim/policies/queues.py)."""

    order: Literal["fcfs", "sjf", "priority", "edf"] = "fcfs"
    # sjf: sort on the true output length or on the workload's predicted one
    length: Literal["known", "predicted"] = "known"
    # sjf: tokens, priority: ranks, taken off a request's key per second it has waited
    aging_per_s: float = Field(default=0.0, ge=0)
    priority_mode: Literal["strict", "weighted"] = "strict"
    # rank and weight of each tier (every workload tier must be listed for `priority`)
    tiers: dict[str, QueueTierSpec] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _tiers_for_priority(self) -> QueueSpec:
        if self.order == "priority" and not self.tiers:
            raise ValueError("order 'priority' needs policy.queue.tiers (rank/weight per tier)")
        return self


class PreemptionSpec(_Strict):
    """`policy.preemption` (continuous and chunked); the string form names just the mode."""

    mode: Literal["recompute", "swap"] = "recompute"
    victim: Literal["last_admitted", "lowest_priority", "most_kv"] = "last_admitted"
    swap_bandwidth_gb_per_s: float = Field(default=25.0, gt=0)  # GPU <-> host, 1e9 bytes/s
    host_memory_gb: float = Field(default=64.0, gt=0)  # swap space; full: fall back to recompute


def _preemption_from_str(value: object) -> object:
    return {"mode": value} if isinstance(value, str) else value


class StaticPolicySpec(_Strict):
    name: Literal["static"]
    max_batch_size: int = Field(default=16, gt=0)
    # start a partial batch once the oldest request has waited this long (0: whenever idle)
    max_wait_s: float = Field(default=0.0, ge=0)
    # contiguous reservation per request: prompt + true output, or the model's context limit
    kv_reservation: Literal["output", "max_model_len"] = "output"
    # pad every prompt of a batch to the longest one (HF-style padded prefill)
    pad_prompts: bool = False
    queue: QueueSpec = QueueSpec()

    # what every policy spec answers about its KV (the iteration-level specs' fields of these
    # names): static batching reserves contiguous KV per request, as one-token blocks, sized
    # from the GPU's memory, without swapping, caching or speculation
    block_size: ClassVar[int] = 1
    num_gpu_blocks: ClassVar[None] = None
    prefix_caching: ClassVar[bool] = False
    preemption: ClassVar[None] = None
    speculative: ClassVar[None] = None
    SEATS_KEY: ClassVar[str] = "max_batch_size"

    @property
    def seats(self) -> int:
        """The most requests it runs at once (`max_batch_size`)."""
        return self.max_batch_size


class _IterationLevelSpec(_Strict):
    """Limits shared by the iteration-level policies (continuous and chunked)."""

    max_num_seqs: int = Field(default=256, gt=0)
    # tokens per KV block (vLLM: 16; its attention kernels take up to a few hundred)
    block_size: int = Field(default=16, gt=0, le=8192)
    # fraction of KV blocks kept free when admitting (vLLM's default is 0.01)
    watermark: float = Field(default=0.01, ge=0, lt=1)
    preemption: PreemptionSpec = PreemptionSpec()
    # paged: blocks on demand; max_length: max_model_len tokens reserved at admission;
    # exact: prompt + true output reserved at admission (an oracle)
    kv_reservation: Literal["paged", "max_length", "exact"] = "paged"
    queue: QueueSpec = QueueSpec()
    # automatic prefix caching (vLLM): full blocks of known content are shared and kept cached
    prefix_caching: bool = False
    # KV capacity stated directly, blocks per instance (vLLM's num_gpu_blocks_override);
    # None: what the GPU memory left after weights and activations holds
    num_gpu_blocks: int | None = Field(default=None, gt=0, le=1_000_000_000)
    # speculative decoding (sim/scenario/speculative.py); absent: none
    speculative: SpeculativeSpec | None = None

    SEATS_KEY: ClassVar[str] = "max_num_seqs"

    _preemption_str = field_validator("preemption", mode="before")(_preemption_from_str)

    @property
    def seats(self) -> int:
        """The most requests it runs at once (`max_num_seqs`)."""
        return self.max_num_seqs

    @model_validator(mode="after")
    def _caching_needs_paged_blocks(self) -> _IterationLevelSpec:
        if self.prefix_caching and self.kv_reservation != "paged":
            raise ValueError(
                "prefix_caching shares paged KV blocks: it needs kv_reservation: paged "
                f"(got {self.kv_reservation})"
            )
        return self

    def _check_budget(self, budget: int, why: str) -> None:
        if budget < self.max_num_seqs:
            raise ValueError(
                f"max_num_batched_tokens ({budget}) must be at least max_num_seqs "
                f"({self.max_num_seqs}){why}: every running request decodes each step"
            )


class ContinuousPolicySpec(_IterationLevelSpec):
    name: Literal["continuous"]
    # tokens per step; null: no budget (Orca-style mixed batching: whole prompts join a step
    # whatever their length, bounded only by seats and KV memory)
    max_num_batched_tokens: int | None = Field(default=8192, gt=0, le=1_000_000_000)
    mode: Literal["prefill_first", "mixed"] = "prefill_first"

    @model_validator(mode="after")
    def _budget_holds_every_decode(self) -> ContinuousPolicySpec:
        if self.mode == "mixed" and self.max_num_batched_tokens is not None:
            self._check_budget(self.max_num_batched_tokens, " in mixed mode")
        return self


class ChunkedPolicySpec(_IterationLevelSpec):
    """Sarathi-Serve: decodes first, then prompt chunks fill the rest of the token budget."""

    name: Literal["chunked"]
    # the per-step token budget that decodes and prompt chunks share
    max_num_batched_tokens: int = Field(default=2048, gt=0)
    # prompts that may get a chunk in one step (None: as many as the budget allows)
    max_prefill_seqs: int | None = Field(default=None, gt=0)
    # a prompt's tokens in one step at most (vLLM's long_prefill_token_threshold; None: the
    # budget). With data-parallel attention each rank chunks its own prompts: the default step
    # model sets it to a rank's chunk (sim/scenario/engine_limits.py)
    long_prefill_token_threshold: int | None = Field(default=None, gt=0, le=1_000_000_000)

    @model_validator(mode="after")
    def _budget_holds_every_decode(self) -> ChunkedPolicySpec:
        self._check_budget(self.max_num_batched_tokens, "")
        return self


# every policy's spec class, listed once: `sim.policies.BUILDERS` has one builder for each
PolicySpec = Annotated[
    StaticPolicySpec | ContinuousPolicySpec | ChunkedPolicySpec, Field(discriminator="name")
]
