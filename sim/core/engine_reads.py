"""What is read of an engine without changing it: the view its policy reads (`InstanceView`,
`sim.core.plan`) and what its instance asks (queue lengths, outstanding requests and tokens,
the prompt backlog, whether a run could change the prefix cache, whether it holds any request).

`EngineReads` is `sim.core.engine.Engine`'s base; `Engine` sets the state below and is the one
thing that changes it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from sim.core.decode_batch import DecodeBatch
from sim.core.handoff import HandOff
from sim.core.kv.host import HostMemory
from sim.core.kv.pool import KVPool
from sim.core.plan import QueueView, StepPlan
from sim.core.request import Request
from sim.core.run import Run
from sim.core.waiting import Waiting


class EngineReads:
    """The reads of an engine (see the module docstring)."""

    pool: KVPool
    batch: DecodeBatch
    host: HostMemory
    pd: HandOff
    _waiting: Waiting  # the policy's queue, typed, with its tokens left
    waiting: QueueView  # the same queue, as the policy reads it
    running: list[Request]  # admission order
    prefilling: list[Request]  # running, prompt (or recompute) not done
    ready: list[Request]  # running, decode next, not yet in the batch
    swapped: deque[Request]
    held: list[Request]  # finished, KV kept until the batch ends (static)
    arrived: Sequence[Request]  # P/D: its landed requests, read only
    _clock: float  # the instance's own time: the clock's, or ahead of it (running ahead)

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
        return self.pd.receives

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
        return self.host.bytes_for(tokens)

    # -- what the instance asks ------------------------------------------------------------------

    @property
    def num_waiting(self) -> int:
        return len(self.waiting) + len(self.swapped) + len(self.arrived)

    @property
    def num_running(self) -> int:
        return len(self.running) + len(self.held)

    def num_outstanding(self) -> int:
        """Requests queued, swapped, landed, running or holding their KV."""
        return (
            len(self.waiting) + len(self.swapped) + len(self.arrived) + len(self.running)
            + len(self.held)
        )  # fmt: skip

    def outstanding_tokens(self) -> int:
        """Tokens still to compute for every request here (what token-aware routers balance)."""
        total = self._waiting.work() + self.batch.outstanding_tokens
        for queue in (self.prefilling, self.ready, self.swapped, self.arrived):
            if queue:  # mostly empty but the prompts in flight: no generator for those
                for req in queue:
                    total += req.remaining_work
        return total

    def tokens_per_step(self, plan: StepPlan, first_tokens: bool) -> int:
        """Tokens a step of `plan` computes at most (with `first_tokens`, a prompt chunk's
        token too): one from every decoding member, and its prompt chunks."""
        per_step = self.batch.size if plan.decode else 0
        extra = 1 if first_tokens else 0
        for chunk in plan.prefill.values():
            per_step += chunk + extra
        return per_step

    def caching_during(self, run: Run) -> bool:
        """Whether applying steps of `run` could change what the prefix cache holds before its
        last step: prompt chunks cache their blocks, a speculative step's may, and a decode
        batch that grows into cached free blocks evicts them."""
        if run.num_steps <= 1 or not self.pool.caching:
            return False
        pool = self.pool
        growth = self.batch.size * (run.num_steps // pool.block_size + 1) if run.plan.decode else 0
        return bool(run.plan.prefill) or run.spec is not None or not pool.takes_uncached(growth)

    def late_first(self) -> bool:
        """Whether a request with no full prompt block whose known content fills one came."""
        return self._waiting.late_first()

    def prompt_backlog(self) -> int:
        """Prompt tokens not yet prefilled of the requests waiting or prefilling here."""
        total = self._waiting.prompt_backlog()
        for req in self.prefilling:
            total += max(0, req.num_prompt_tokens - req.num_computed_tokens)
        return total

    def holds_requests(self) -> bool:
        """Whether any request is queued, running, swapped, holding KV or in P/D hand-off."""
        return bool(
            len(self.waiting) or self.running or self.swapped or self.held
            or self.pd.holds_requests()
        )  # fmt: skip

    def is_running(self, req: Request) -> bool:
        return req in self.running
