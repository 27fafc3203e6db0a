"""RL rollouts as requests: each trajectory a task, each wave a barrier (see
`sim.workload.agents_spec` for the shape).

Ids: the first wave's first turns come first (known up front: the wave starts at 0), group by
group, trajectory by trajectory; every other call follows in the order it is drawn. A later
turn arrives `env_time` after the previous answer ended; a later wave's first turns arrive
when the previous wave's gate opens: its last answer ended and `train_time` passed.

Content: a group's trajectories share the global prefix and their group's prompt (a context
of the group, branched off at the prompt's whole units); each then grows its own context.
"""

from __future__ import annotations

import numpy as np

from sim.errors import ScenarioError
from sim.workload.agents import Draws
from sim.workload.arrays import RequestArrays
from sim.workload.budget import requests_problem
from sim.workload.content import UNIT_TOKENS
from sim.workload.lengths import TraceCache
from sim.workload.spec import WorkloadSpec
from sim.workload.task_graph import Calls, context_content, graph_sessions


def generate_rollouts(
    spec: WorkloadSpec, rng: np.random.Generator, traces: TraceCache
) -> RequestArrays:
    r = spec.rollouts
    assert r is not None
    streams = rng.spawn(6)
    prompt, turns, output, observation = (
        Draws(dist, s, traces)
        for dist, s in zip(
            (r.prompt_tokens, r.turns, r.output_tokens, r.observation_tokens),
            streams[:4],
            strict=True,
        )
    )
    env_time = Draws(r.env_time, streams[4], traces)
    train_time = Draws(r.train_time, streams[5], traces)
    per_wave = r.groups_per_wave * r.group_size
    total = per_wave * r.num_waves
    problem = requests_problem(total)  # at least a call per trajectory
    if problem is not None:
        raise ScenarioError(problem, path="workload.rollouts.num_waves")
    calls = Calls("workload.rollouts.turns")
    for i in range(per_wave):  # the first wave's first turns, known up front
        calls.reserve(i, 0)
    system_units = r.system_tokens // UNIT_TOKENS
    prefix = 0 if system_units else -1
    gate = 0  # the gate the wave's first turns wait for (none for the first wave)
    task = 0
    for wave in range(r.num_waves):
        ends: list[int] = []
        for _ in range(r.groups_per_wave):
            group_prompt = r.system_tokens + prompt.tokens()
            root = calls.new_context(prefix, system_units, -1, 0)  # the group's: no call views it
            for _ in range(r.group_size):
                ctx = calls.new_context(prefix, system_units, root, group_prompt // UNIT_TOKENS)
                tokens, wait, call = group_prompt, 0.0, -1
                for turn in range(max(turns.tokens(), 1)):
                    out = output.tokens()
                    if turn == 0 and wave == 0:
                        call = task
                        calls.fill(call, tokens, out, ctx, wave)
                    else:
                        previous = call
                        call = calls.add(tokens, out, task, 0, wait, ctx, wave)
                        calls.edges.append((previous if turn else gate, call))
                    tokens += out + observation.tokens()
                    wait = env_time.next()
                ends.append(call)
                task += 1
        if wave < r.num_waves - 1:
            gate = calls.gate(train_time.next())
            calls.edges.extend((end, gate) for end in ends)
    n = len(calls)
    arrival = np.full(n, np.nan)
    arrival[:per_wave] = 0.0
    return RequestArrays(
        arrival_s=arrival,
        prompt_tokens=np.asarray(calls.prompt, dtype=np.int64),
        output_tokens=np.asarray(calls.output, dtype=np.int64),
        class_index=np.zeros(n, dtype=np.int64),
        class_names=("rollout",),
        tier_names=(spec.tier,),
        content=context_content(calls),
        sessions=graph_sessions(calls),
    )
