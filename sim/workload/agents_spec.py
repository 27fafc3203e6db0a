"""`workload.agents`: tasks made of many LLM calls (coding agents, tool-using assistants); and
`workload.rollouts`: RL rollouts, groups of trajectories in waves.

A task is a graph of calls over contexts. Its main context starts with the agent type's system
prompt and tool definitions (`system_tokens`, the same tokens for every task of that type) and
the task's own message (`task_tokens`). Each turn is one call whose prompt is the whole
context so far; its answer joins the context. After a turn that is not the last, the agent
either calls a tool (the next turn arrives `tool_time` after the answer ended, its prompt
longer by the tool's result, `tool_result_tokens`) or, with probability
`subagents.probability`, forks `subagents.count` subagents: each starts at once from the
parent's context with an instruction of its own (`subagents.task_tokens`) and runs its own
turns and tool calls; the parent's next turn (the join) arrives when the slowest subagent's
last answer ended, its prompt longer by each subagent's result (`subagents.result_tokens`).
Subagents do not fork again.

Tasks arrive by `arrival` (open loop, until `num_tasks` or the workload's `duration_s`), or
`concurrency` agents each run tasks back to back (a closed loop: an agent's next task starts
when its previous task's last answer ended) until `num_tasks` in all.

Rollouts: each of `num_waves` waves (a training step's generation) holds `groups_per_wave`
groups of `group_size` trajectories that share their group's prompt (and every trajectory
the global `system_tokens`). A trajectory's turns each send the whole context so far; between
turns the environment takes `env_time` and adds `observation_tokens`. A wave starts when the
previous wave's last answer ended and the training step (`train_time`) is done: the wave
waits for its slowest trajectory.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from sim.workload.dists import (
    MAX_TOKENS,
    ArrivalSpec,
    DelayDist,
    FixedDelay,
    LengthDist,
    _Strict,
)

MAX_TASKS = 100_000_000
MAX_SUBAGENTS = 1_000  # subagents one fork may start: beyond any agent framework's fan-out


class SubagentSpec(_Strict):
    """Subagents a turn of the main context may fork (see the module)."""

    probability: float = Field(ge=0, le=1)  # chance that a turn other than the last forks
    count: LengthDist  # subagents per fork (at most MAX_SUBAGENTS)
    turns: LengthDist
    task_tokens: LengthDist  # the subagent's instruction, after the parent's context
    tool_result_tokens: LengthDist
    output_tokens: LengthDist
    tool_time: DelayDist
    result_tokens: LengthDist  # what each subagent's result adds to the parent's context

    @model_validator(mode="after")
    def _few_enough(self) -> SubagentSpec:
        c = self.count
        most = {"fixed": getattr(c, "value", None), "uniform": getattr(c, "high", None),
                "lognormal": getattr(c, "max", None)}.get(c.dist)  # fmt: skip
        if most is not None and most > MAX_SUBAGENTS:
            raise ValueError(f"count: a fork starts at most {MAX_SUBAGENTS} subagents (got {most})")
        return self


class AgentType(_Strict):
    """One kind of agent: its shared system prompt and tools, and the shape of its tasks."""

    name: str = Field(min_length=1)
    weight: float = Field(default=1.0, gt=0, le=1e9)  # relative share of the tasks
    # system prompt and tool definitions: the same tokens in every task of this type
    system_tokens: int = Field(ge=0, le=MAX_TOKENS)
    task_tokens: LengthDist  # the task's own first message
    turns: LengthDist  # calls of the main context
    tool_result_tokens: LengthDist  # what a tool call adds to the context
    output_tokens: LengthDist
    tool_time: DelayDist  # a tool call's wait between an answer and the next turn
    subagents: SubagentSpec | None = None


class AgentsSpec(_Strict):
    """The `workload.agents:` section (see the module)."""

    arrival: ArrivalSpec | None = None
    concurrency: int | None = Field(default=None, ge=1, le=1_000_000)
    num_tasks: int | None = Field(default=None, ge=1, le=MAX_TASKS)
    types: list[AgentType] = Field(min_length=1, max_length=10_000)

    @model_validator(mode="after")
    def _consistent(self) -> AgentsSpec:
        if (self.arrival is None) == (self.concurrency is None):
            raise ValueError("give either 'arrival' (tasks arrive) or 'concurrency' (agents)")
        if self.concurrency is not None and self.num_tasks is None:
            raise ValueError("'concurrency' agents stop after 'num_tasks' tasks: give it")
        names = [t.name for t in self.types]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"agent type names must be unique: {', '.join(duplicates)}")
        return self


def _no_wait() -> FixedDelay:
    return FixedDelay(dist="fixed", value_s=0.0)


class RolloutsSpec(_Strict):
    """The `workload.rollouts:` section (see the module)."""

    num_waves: int = Field(ge=1, le=1_000_000)
    groups_per_wave: int = Field(ge=1, le=1_000_000)
    group_size: int = Field(ge=1, le=100_000)  # trajectories that share one prompt
    system_tokens: int = Field(default=0, ge=0, le=MAX_TOKENS)  # every trajectory's prefix
    prompt_tokens: LengthDist  # a group's prompt
    turns: LengthDist  # calls of one trajectory
    output_tokens: LengthDist
    observation_tokens: LengthDist  # what the environment adds between turns
    env_time: DelayDist = Field(default_factory=_no_wait)  # the environment's step
    train_time: DelayDist = Field(default_factory=_no_wait)  # between waves
