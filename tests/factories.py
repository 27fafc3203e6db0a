"""Small factories for driving a policy on an instance by hand, step by step, without SimPy.

`make_continuous(...)` / `make_chunked(...)` / `make_static(...)` return a `Bench`: one instance
(`sim.core.instance.Instance`, not started) whose steps each last `duration` seconds (no growth),
so that schedules can be asserted token by token.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sim.core.clock import Clock
from sim.core.instance import Instance, KVSpec
from sim.core.kv.pool import KVPool
from sim.core.plan import InstanceView, StepFeatures, StepPlan
from sim.core.recorder import RequestLog
from sim.core.request import Request
from sim.core.run import Run
from sim.policies import ChunkedPolicy, ContinuousPolicy, Limits, StaticPolicy
from sim.policies.preemption import Preemptor
from sim.policies.queues import FCFSQueue, WaitingQueue
from sim.policies.reservation import make_reservation


def make_requests(*specs: tuple[int, int], arrival_s: float = 0.0) -> list[Request]:
    """Requests from (prompt tokens, output tokens) pairs, ids in order."""
    return [Request(i, arrival_s, p, o) for i, (p, o) in enumerate(specs)]


class FixedCost:
    """Every step lasts `duration` seconds; repeated steps do not grow."""

    def __init__(self, duration: float = 1.0) -> None:
        self.duration = duration

    def run_times(self, features: StepFeatures) -> tuple[float, float]:
        return self.duration, 0.0

    def linear_steps(self, features: StepFeatures) -> int:
        return 1 << 62

    def cpu_overhead_s(self, features: StepFeatures) -> float:
        return 0.0

    last_extrapolated = False


@dataclass
class Stepped:
    """What one hand-driven step (or run) did."""

    plan: StepPlan
    tokens: dict[int, int]  # request id -> tokens in each step (decodes: 1)
    preempted: tuple[Request, ...]
    num_steps: int
    features: StepFeatures
    swap_s: float
    interruptible: bool  # an arrival during the run would cut it
    emitted: dict[int, int]  # request id -> output tokens the step (or run) emitted
    lookahead: dict[int, int]  # speculative decoding: request id -> tokens it proposed

    def __getattr__(self, name: str) -> Any:
        return getattr(self.features, name)  # num_prefill_tokens, sum_context_tokens, ...


class Bench:
    """One instance and its policy, stepped by hand."""

    def __init__(
        self,
        policy: Any,
        pool: KVPool,
        *,
        queue: WaitingQueue | None = None,
        kv: KVSpec | None = None,
        duration: float = 1.0,
        capacity: int = 1000,
        acceptance: Any = None,
        proposer: Any = None,
    ) -> None:
        self.policy = policy
        self.instance = Instance(
            Clock(),
            0,
            policy,
            queue if queue is not None else FCFSQueue(),
            pool,
            FixedCost(duration),
            RequestLog(capacity),
            kv=kv or KVSpec(1.0),
            start=False,
            acceptance=acceptance,
            proposer=proposer,
        )

    @property
    def kv(self) -> KVPool:
        return self.instance.pool

    @property
    def waiting(self) -> WaitingQueue:
        return self.instance.engine.waiting

    @property
    def running(self) -> list[Request]:
        return self.instance.engine.running

    @property
    def swapped(self) -> Any:
        return self.instance.engine.swapped

    def add_request(self, req: Request, now: float = 0.0) -> bool:
        """Queue `req`, arriving at `now` (the queue is the same whatever the clock)."""
        return self.instance.submit(req)

    def plan(self, now: float) -> StepPlan | None:
        """The policy's decision at `now`, without applying it."""
        return self.policy.schedule(At(self.instance.engine, now))

    def next_wakeup_s(self, now: float) -> float | None:
        return self.policy.next_wakeup_s(At(self.instance.engine, now))

    def step(self, now: float, num_steps: int | None = None) -> Stepped | None:
        """Plan and apply one step (or run, at most `num_steps` steps) at `now`, watching it
        through the engine's step observer: what it gave whom is read at its start."""
        inst = self.instance
        watcher = inst.on_step
        started: list[Stepped] = []
        before: dict[int, tuple[Request, int]] = {}

        def at_start(instance: Instance, run: Run, ended: bool) -> None:
            if watcher is not None:
                watcher(instance, run, ended)
            if ended or started:
                return
            plan = run.plan
            if run.spec is not None:
                decoders = run.spec.decoders
            else:  # every decoding request joined the decode batch
                decoders = [r for r in inst.engine.running if r.is_decoding] if plan.decode else []
            given = {r.id: n for r, n in plan.prefill.items()}
            given.update({r.id: 1 + plan.speculate.get(r, 0) for r in decoders})
            before.update({r.id: (r, r.num_output_tokens) for r in inst.engine.running})
            started.append(
                Stepped(
                    plan,
                    given,
                    tuple(p.request for p in plan.preempt),
                    run.num_steps,
                    run.features,
                    run.swap_s,
                    run.interruptible,
                    {},
                    {r.id: k for r, k in plan.speculate.items()},
                )
            )

        inst.on_step = at_start
        try:
            ran = inst.step_by_hand(now, num_steps) is not None
        finally:
            inst.on_step = watcher
        if not ran:
            return None
        (stepped,) = started
        if stepped.plan.has_work and num_steps is not None:
            stepped.num_steps = min(stepped.num_steps, num_steps)
        for rid, (r, n) in before.items():
            if r.num_output_tokens > n:
                stepped.emitted[rid] = r.num_output_tokens - n
        return stepped


class At:
    """An instance as its policy would see it at `now` (`sim.core.plan.InstanceView`): for
    asking the policy what it would do then without stepping the instance."""

    def __init__(self, view: InstanceView, now: float) -> None:
        self.instance = view
        self.now = now

    def __getattr__(self, name: str) -> Any:
        return getattr(self.instance, name)


def step(bench: Bench, now: float, num_steps: int | None = None) -> Stepped | None:
    """Plan one step (or the plan's whole run) at `now` and apply it."""
    return bench.step(now, num_steps)


def tokens(stepped: Stepped | None) -> dict[int, int]:
    """The step as {request id: tokens}."""
    assert stepped is not None
    return stepped.tokens


def _iteration_args(num_blocks: int, block_size: int, kw: dict[str, Any]) -> dict[str, Any]:
    args: dict[str, Any] = dict(
        max_num_seqs=8,
        max_num_batched_tokens=64,
        max_model_len=10_000,
        watermark=0.0,
        kv_reservation="paged",
        preemption=None,
    )
    args.update(kw)
    watermark = args.pop("watermark")
    reservation = args.pop("kv_reservation")
    preemptor = args.pop("preemption") or Preemptor()
    args["watermark_blocks"] = int(watermark * num_blocks)
    args["reservation"] = make_reservation(reservation, args["max_model_len"])
    args["preemptor"] = preemptor
    return args


def make_continuous(
    num_blocks: int = 1000,
    block_size: int = 16,
    *,
    kv: KVSpec | None = None,
    prefix_caching: bool = False,
    acceptance: Any = None,
    proposer: Any = None,
    **kw: Any,
) -> Bench:
    """A continuous (or `mode="chunked"`) policy on a paged pool; with `speculation` (a
    `SpeculationRule`), `acceptance` (an `AcceptanceSampler`) and `proposer` it speculates."""
    mode = kw.pop("mode", "prefill_first")
    queue = kw.pop("queue", None)
    args = _iteration_args(num_blocks, block_size, kw)
    if mode == "chunked":
        policy: Any = ChunkedPolicy(Limits(**args))
    else:
        args.pop("max_prefill_seqs", None)
        policy = ContinuousPolicy(Limits(**args), mode)
    return Bench(
        policy,
        KVPool(num_blocks, block_size, caching=prefix_caching),
        queue=queue,
        kv=kv,
        acceptance=acceptance,
        proposer=proposer,
    )


def make_static(capacity_tokens: int = 10_000, **kw: Any) -> Bench:
    args: dict[str, Any] = dict(max_batch_size=2, max_wait_s=0.0, max_model_len=10_000)
    queue = kw.pop("queue", None)
    args.update(kw)
    return Bench(StaticPolicy(**args), KVPool(capacity_tokens, 1), queue=queue)
