"""Closed-loop multi-turn sessions (chat, agents): the next turn follows the previous answer.

Sessions arrive by their own arrival process. Session s has `turns` turns. Its first prompt has
`first_prompt` tokens (a shared system prompt in front, if the workload has `shared_prefix`);
turn t + 1's prompt is turn t's prompt, turn t's answer and `user_tokens` new tokens, so it
extends the KV a cache may still hold. It arrives `think_time` after turn t finished: a closed
loop, so a slow server also slows the arrivals, as with real users.

Everything but those later arrival times is drawn up front, each quantity from its own child
stream: request ids are the first turns in session arrival order, then the later turns;
`Sessions.next_turn` links each turn to the next and `think_s` holds the think time before it.
Content: the session's history (system prompt, prompts and answers in order) is one token
sequence whose units are shared by every turn that contains them, and a turn's content covers
its answer too, so the next turn finds the answer's blocks cached.
"""

from __future__ import annotations

import numpy as np

from sim.errors import ScenarioError
from sim.workload.arrays import Content, RequestArrays, Sessions
from sim.workload.arrivals import sample_arrivals
from sim.workload.budget import requests_problem
from sim.workload.content import UNIT_TOKENS, content_ids, draw_prefixes
from sim.workload.lengths import TraceCache, sample_lengths
from sim.workload.spec import DelayDist, SharedPrefixSpec, WorkloadSpec


def sample_delays(delay: DelayDist, n: int, rng: np.random.Generator) -> np.ndarray:
    """n delays (think times, client round trips) drawn from `delay`."""
    if delay.dist == "fixed":
        return np.full(n, delay.value_s)
    if delay.dist == "exponential":
        return rng.exponential(delay.mean_s, size=n)
    return rng.uniform(delay.low_s, delay.high_s, size=n)


def generate_sessions(
    spec: WorkloadSpec, rng: np.random.Generator, traces: TraceCache
) -> RequestArrays:
    assert spec.sessions is not None
    s = spec.sessions
    arrival_rng, turns_rng, first_rng, user_rng, output_rng, think_rng, prefix_rng = rng.spawn(7)
    keys = ("workload.sessions.arrival", "workload.sessions.num_sessions")
    starts = sample_arrivals(
        s.arrival, arrival_rng, s.num_sessions, spec.duration_s, base_dir=traces.base_dir, keys=keys
    )
    num = len(starts)
    turns = sample_lengths(s.turns, num, turns_rng, traces)
    first = sample_lengths(s.first_prompt, num, first_rng, traces)
    total = int(turns.sum())
    # the spec's estimate used the mean of `turns`; the draws (an empirical column) may be more
    too_many = requests_problem(total)
    if too_many is not None:
        raise ScenarioError(too_many, path="workload.sessions.turns")
    user = sample_lengths(s.user_tokens, total, user_rng, traces)
    output = sample_lengths(s.output_tokens, total, output_rng, traces)
    think = sample_delays(s.think_time, total, think_rng)
    prefix, prefix_tokens = _prefixes(spec.shared_prefix, num, prefix_rng, traces)

    # turn k of session i: request id i for k = 0, then num + (running count of later turns)
    prompt = np.zeros(total, dtype=np.int64)
    out = np.zeros(total, dtype=np.int64)
    session = np.zeros(total, dtype=np.int64)
    next_turn = np.full(total, -1, dtype=np.int64)
    think_s = np.full(total, np.nan)
    arrival = np.full(total, np.nan)
    owner = np.zeros(total, dtype=np.int64)  # the session whose history a turn's content is
    owner_prefix = np.full(total, -1, dtype=np.int64)
    owner_prefix_tokens = np.zeros(total, dtype=np.int64)
    later = num
    draw = 0  # index into the per-turn draws
    for i in range(num):
        history = int(first[i] + prefix_tokens[i])
        previous = -1
        for k in range(int(turns[i])):
            rid = i if k == 0 else later
            if k:
                later += 1
                history += int(user[draw])
                next_turn[previous] = rid
                think_s[rid] = think[draw]
            else:
                arrival[rid] = starts[i]
            prompt[rid] = history
            out[rid] = output[draw]
            session[rid] = i
            # its content covers its answer too (the next turn's prompt holds it)
            owner[rid], owner_prefix[rid], owner_prefix_tokens[rid] = i, prefix[i], prefix_tokens[i]
            history += int(out[rid])
            previous = rid
            draw += 1
    ids, offsets = content_ids(owner_prefix, owner_prefix_tokens, owner, prompt + out)
    content = Content(ids=ids, offsets=offsets, unit=UNIT_TOKENS, tokens=prompt + out)
    return RequestArrays(
        arrival_s=arrival,
        prompt_tokens=prompt,
        output_tokens=out,
        class_index=np.zeros(total, dtype=np.int64),
        class_names=("session",),
        tier_names=(spec.tier,),
        content=content,
        sessions=Sessions(session=session, next_turn=next_turn, think_s=think_s),
    )


def _prefixes(
    spec: SharedPrefixSpec | None, n: int, rng: np.random.Generator, traces: TraceCache
) -> tuple[np.ndarray, np.ndarray]:
    if spec is None:
        return np.full(n, -1, dtype=np.int64), np.zeros(n, dtype=np.int64)
    return draw_prefixes(spec, n, rng, traces)
