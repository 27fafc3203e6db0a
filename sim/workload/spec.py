"""Workload specification: the `workload:` section of a scenario file as pydantic models.

A workload is either synthetic (an arrival process plus prompt/output length distributions, or a
weighted `mix` of request classes each with its own lengths) or a replayed `trace` file. Every
model forbids unknown keys, and the tagged unions are discriminated by a literal field
(`process` for arrivals, `dist` for lengths, `shape` for rate profiles) so that pydantic reports
errors against the one variant the user meant instead of listing every alternative.

Arrival processes: `poisson`, `gamma` and `constant` at a fixed `rate`, and `profile`, a
Poisson process whose `rate` changes with time (`diurnal`, `ramp`, `spikes` or `piecewise`: the
profiles' models are in `sim.workload.rate_spec`, and importers find them here too); `scale`
multiplies any of them. Every profile stays flat at its last rate afterwards, so one that ends
at 0 needs the workload's `duration_s`.

Cross-field rules (exclusivity of trace/synthetic fields, a stop condition for synthetic
arrivals, ordered bounds) live in `model_validator`s and raise `ValueError`; pydantic attaches
the key path and the scenario loader turns it into a `ScenarioError`. Paths stay strings here:
they resolve against the scenario file's folder only at generation time, so a spec can be built
and validated without touching the file system.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import Field, model_validator

from sim.workload.agents_spec import AgentsSpec, AgentType, RolloutsSpec, SubagentSpec
from sim.workload.dists import (
    MAX_TOKENS,
    MEASURED_FORMATS,
    ArrivalSpec,
    ConstantArrival,
    DelayDist,
    EmpiricalLength,
    ExponentialDelay,
    FixedDelay,
    FixedLength,
    GammaArrival,
    LengthDist,
    LognormalLength,
    MeasuredFormat,
    PoissonArrival,
    ProfileArrival,
    TraceFormat,
    UniformDelay,
    UniformLength,
    _Strict,
)
from sim.workload.rate_spec import (
    MAX_PROFILE_POINTS,
    MAX_PROFILE_RATE,
    MAX_PROFILE_SPIKES,
    MAX_PROFILE_TIME_S,
    DiurnalRate,
    PiecewiseRate,
    ProfileRate,
    ProfileTime,
    RampRate,
    RateProfile,
    Spike,
    SpikesRate,
    _KeyedError,
    point_problem,
    points_problem,
)

# the building blocks live in sim.workload.dists, sim.workload.agents_spec and
# sim.workload.rate_spec; importers find them here too
__all__ = [
    "MAX_PROFILE_POINTS",
    "MAX_PROFILE_RATE",
    "MAX_PROFILE_SPIKES",
    "MAX_PROFILE_TIME_S",
    "MAX_TOKENS",
    "MEASURED_FORMATS",
    "AgentType",
    "AgentsSpec",
    "ArrivalSpec",
    "ConstantArrival",
    "DelayDist",
    "DiurnalRate",
    "EmpiricalLength",
    "ExponentialDelay",
    "FixedDelay",
    "FixedLength",
    "GammaArrival",
    "LengthDist",
    "LognormalLength",
    "MeasuredFormat",
    "PiecewiseRate",
    "PoissonArrival",
    "ProfileArrival",
    "ProfileRate",
    "ProfileTime",
    "RampRate",
    "RateProfile",
    "RolloutsSpec",
    "Spike",
    "SpikesRate",
    "SubagentSpec",
    "TraceFormat",
    "UniformDelay",
    "UniformLength",
    "point_problem",
    "points_problem",
]


# --- content: shared prefixes and multi-turn sessions (prefix caching) ----------------------


class SharedPrefixSpec(_Strict):
    """A pool of `num_prefixes` system prompts, drawn with Zipf popularity (rank k has weight
    1 / k**zipf) and put in front of a `fraction` of the prompts (each of which gets longer by
    its prefix)."""

    num_prefixes: int = Field(ge=1, le=1_000_000)
    zipf: float = Field(default=1.0, ge=0, le=10)
    length: LengthDist
    fraction: float = Field(default=1.0, ge=0, le=1)


class SessionSpec(_Strict):
    """Closed-loop multi-turn sessions: sessions arrive by `arrival` (until `num_sessions`, or
    the workload's `duration_s`); each has `turns` turns; a turn's prompt is the previous
    prompt, the previous answer and `user_tokens` new tokens, and it arrives `think_time` after
    the previous turn finished."""

    arrival: ArrivalSpec
    num_sessions: int | None = Field(default=None, gt=0, le=100_000_000)
    turns: LengthDist
    first_prompt: LengthDist
    user_tokens: LengthDist
    output_tokens: LengthDist
    think_time: DelayDist


class ClientsSpec(_Strict):
    """Closed-loop benchmark clients (`vllm bench serve --max-concurrency`, GuideLLM's
    concurrent mode, AIPerf): `num_clients` clients each send their next request `delay` after
    the previous response ended; client i sends its first at `i * ramp_up_s / num_clients`. The
    requests are independent (unique tokens, plus a `shared_prefix` when the workload has one);
    the workload's `num_requests` is dealt to the clients in turn (client i gets request i,
    i + N, ...), each client stopping at `requests_per_client`."""

    num_clients: int = Field(ge=1, le=100_000)
    requests_per_client: int | None = Field(default=None, ge=1, le=100_000_000)
    prompt_tokens: LengthDist
    output_tokens: LengthDist
    # the client's round trip between a response's end and its next request
    delay: DelayDist = Field(default_factory=lambda: FixedDelay(dist="fixed", value_s=0.0))
    ramp_up_s: float = Field(default=0.0, ge=0, le=1e9)

    def num_requests(self, cap: int | None) -> int:
        """Requests the clients send, all told, under the workload's `num_requests` (`cap`)."""
        total = cap if cap is not None else self.num_clients * (self.requests_per_client or 0)
        if self.requests_per_client is not None:
            total = min(total, self.num_clients * self.requests_per_client)
        return total


# --- workload --------------------------------------------------------------------------------


class MixClass(_Strict):
    """One request class of a mix; `weight`s are relative and need not sum to 1."""

    name: str = Field(min_length=1)
    weight: float = Field(gt=0)
    prompt_tokens: LengthDist
    output_tokens: LengthDist
    tier: str = Field(default="default", min_length=1)  # service tier of this class's requests


class TraceSpec(_Strict):
    """Replay a trace file. Window bounds are in trace seconds, before `rate_scale` applies."""

    path: str = Field(min_length=1)
    # a trace format, or a measured run's (`measured`: detected from the file's content)
    format: TraceFormat | MeasuredFormat = "csv"
    rate_scale: float = Field(default=1.0, gt=0)
    start_s: float = Field(default=0.0, ge=0)
    end_s: float | None = Field(default=None, gt=0)
    max_rows: int | None = Field(default=None, gt=0)
    # an extra column holding each request's service tier (absent: every request "default")
    tier_column: str | None = Field(default=None, min_length=1)
    # extra columns carried into the requests table: the trace's own request id (column
    # `source_id`), and a session id (column `session`; session_sticky routing keeps a session
    # on one instance)
    id_column: str | None = Field(default=None, min_length=1)
    session_column: str | None = Field(default=None, min_length=1)
    # arrivals on the trace's own clock (seconds since its first row) instead of since the
    # window's first request: a replayed window lines up with the source
    keep_origin: bool = False
    # requests longer than the model's context (prompt + output > max_model_len): kept (and
    # rejected by the policy, counted), dropped from the workload, or their prompt clipped;
    # dropped and clipped requests are counted in the summary
    long_prompts: Literal["keep", "drop", "clip"] = "keep"
    # measured runs: which benchmark of a file holding several (a GuideLLM sweep; a batchsim
    # results folder's variant), 0-based (None: all, in time order)
    benchmark: int | None = Field(default=None, ge=0, le=100_000)
    # a prompt prefix the requests share (a benchmark client's `prefix_tokens`,
    # `--random-prefix-len`): every prompt starts with the same `prefix_tokens` tokens, or with
    # one of `prefix_groups` such prefixes (request i has prefix i mod prefix_groups)
    prefix_tokens: int = Field(default=0, ge=0, le=10_000_000)
    prefix_groups: int = Field(default=1, ge=1, le=1_000_000)
    # measured runs: a request id that appears twice is an error, or with this its first row
    # is kept (the same spans exported twice)
    drop_duplicates: bool = False
    # closed loop: the trace's requests, in arrival order, sent by this many clients (client i
    # sends rows i, i + N, ...), each sending its next when its previous one ends; a client's
    # first request arrives at its row's time (a closed-loop benchmark replayed as it ran)
    num_clients: int | None = Field(default=None, ge=1, le=100_000)

    @model_validator(mode="after")
    def _window(self) -> TraceSpec:
        if self.end_s is not None and self.end_s <= self.start_s:
            raise ValueError(f"end_s ({self.end_s}) must be > start_s ({self.start_s})")
        named = [c for c in (self.tier_column, self.id_column, self.session_column) if c]
        if len(set(named)) < len(named):
            raise ValueError(
                "tier_column, id_column and session_column must name different columns"
            )
        if self.format not in MEASURED_FORMATS:  # what only a measured run's file carries
            for key, unset in (("benchmark", None), ("drop_duplicates", False)):
                if getattr(self, key) is not unset:
                    raise _KeyedError(key, f"applies to a measured run's file (format "
                                      f"{', '.join(MEASURED_FORMATS)}), not to a {self.format} "
                                      "trace")  # fmt: skip
        if self.num_clients is not None and self.session_column is not None:
            raise ValueError("num_clients (closed-loop clients) and session_column exclude "
                             "each other: a request belongs to one client")  # fmt: skip
        return self


class WorkloadSpec(_Strict):
    """The `workload:` section. `num_requests` and `duration_s` cap synthetic and trace alike."""

    num_requests: int | None = Field(default=None, gt=0)
    duration_s: float | None = Field(default=None, gt=0)
    arrival: ArrivalSpec | None = None
    prompt_tokens: LengthDist | None = None
    output_tokens: LengthDist | None = None
    mix: list[MixClass] | None = Field(default=None, min_length=1)
    trace: TraceSpec | None = None
    # service tier of every request of a synthetic workload without a mix
    tier: str = Field(default="default", min_length=1)
    # predicted output length = true length * exp(N(0, sigma)), rounded, at least 1 (for SJF
    # on predicted lengths); drawn from its own child stream, so other columns do not move
    output_prediction_sigma: float = Field(default=0.0, ge=0)
    # system prompts shared by many requests (their KV can be cached: prefix caching)
    shared_prefix: SharedPrefixSpec | None = None
    # closed-loop multi-turn sessions instead of independent requests
    sessions: SessionSpec | None = None
    # closed-loop benchmark clients (N concurrent clients) instead of an arrival process
    clients: ClientsSpec | None = None
    # agents' tasks: graphs of calls with tool waits and subagents (sim.workload.agents_spec)
    agents: AgentsSpec | None = None
    # RL rollouts: groups of trajectories in waves (sim.workload.agents_spec)
    rollouts: RolloutsSpec | None = None

    def tier_names(self) -> list[str] | None:
        """The tiers requests can carry, in first-use order; None for a trace tier column."""
        if self.trace is not None:
            return None if self.trace.tier_column else ["default"]
        if self.mix is not None:
            return list(dict.fromkeys(cls.tier for cls in self.mix))
        return [self.tier]

    @model_validator(mode="after")
    def _consistent(self) -> WorkloadSpec:
        synthetic = {
            "arrival": self.arrival,
            "prompt_tokens": self.prompt_tokens,
            "output_tokens": self.output_tokens,
            "mix": self.mix,
        }
        if self.trace is not None:
            given = [key for key, value in synthetic.items() if value is not None]
            if self.tier != "default":
                given.append("tier (use trace.tier_column)")
            for key in ("sessions", "shared_prefix", "clients", "agents", "rollouts"):
                if getattr(self, key) is not None:
                    given.append(key)
            if given:
                raise ValueError(f"'trace' cannot be combined with {', '.join(given)}")
            return self
        if self.rollouts is not None:
            return self._rollouts_consistent(synthetic)
        if self.agents is not None:
            return self._agents_consistent(synthetic)
        if self.clients is not None:
            return self._clients_consistent(synthetic)
        if self.sessions is not None:
            given = [key for key, value in synthetic.items() if value is not None]
            if given:
                raise ValueError(f"'sessions' cannot be combined with {', '.join(given)}")
            if self.sessions.num_sessions is None and self.duration_s is None:
                raise ValueError("sessions need 'sessions.num_sessions' and/or 'duration_s'")
            self._profile_end(self.sessions.arrival, "sessions.arrival", "sessions.num_sessions")
            return self
        if self.arrival is None:
            raise ValueError("a synthetic workload needs 'arrival' (or give 'trace')")
        if self.num_requests is None and self.duration_s is None:
            raise ValueError("a synthetic workload needs 'num_requests' and/or 'duration_s'")
        self._profile_end(self.arrival, "arrival", "num_requests")
        if self.mix is not None:
            if self.prompt_tokens is not None or self.output_tokens is not None:
                raise ValueError("'mix' cannot be combined with top-level prompt/output_tokens")
            if self.tier != "default":
                raise ValueError("with a 'mix', give each class its 'tier'")
            names = [cls.name for cls in self.mix]
            duplicates = sorted({name for name in names if names.count(name) > 1})
            if duplicates:
                raise ValueError(f"mix class names must be unique: {', '.join(duplicates)}")
        elif self.prompt_tokens is None or self.output_tokens is None:
            raise ValueError("give both 'prompt_tokens' and 'output_tokens', or a 'mix'")
        return self

    def _profile_end(self, arrival: ArrivalSpec, key: str, count: str) -> None:
        """A rate profile that falls to 0 for good may never reach the count: the duration
        must end the arrivals."""
        if isinstance(arrival, ProfileArrival) and arrival.ends() and self.duration_s is None:
            raise _KeyedError(
                "duration_s",
                f"required: the rate of workload.{key} falls to 0 for good, so {count} may never "
                "be "
                "reached (the arrivals stop at duration_s)",
            )

    def _rollouts_consistent(self, synthetic: Mapping[str, object]) -> WorkloadSpec:
        given = [key for key, value in synthetic.items() if value is not None]
        for key in ("sessions", "clients", "shared_prefix", "agents"):
            if getattr(self, key) is not None:
                given.append(key)
        if self.num_requests is not None:
            given.append("num_requests")
        if self.duration_s is not None:
            given.append("duration_s")
        if given:
            raise ValueError(
                f"'rollouts' cannot be combined with {', '.join(given)} (its waves, groups and "
                "lengths say what it sends)"
            )
        return self

    def _agents_consistent(self, synthetic: Mapping[str, object]) -> WorkloadSpec:
        assert self.agents is not None
        given = [key for key, value in synthetic.items() if value is not None]
        for key in ("sessions", "clients", "shared_prefix"):
            if getattr(self, key) is not None:
                given.append(key)
        if given:
            raise ValueError(
                f"'agents' cannot be combined with {', '.join(given)} (each agent type has its "
                "own lengths and system prompt)"
            )
        if self.num_requests is not None:
            raise ValueError("agents stop after 'agents.num_tasks' tasks, not a request count")
        a = self.agents
        if a.arrival is not None:
            if a.num_tasks is None and self.duration_s is None:
                raise ValueError("agents' tasks need 'agents.num_tasks' and/or 'duration_s'")
            self._profile_end(a.arrival, "agents.arrival", "agents.num_tasks")
        elif self.duration_s is not None:
            raise ValueError(
                "'agents.concurrency' agents stop after 'agents.num_tasks' tasks, not a "
                "duration: leave out 'duration_s'"
            )
        return self

    def _clients_consistent(self, synthetic: Mapping[str, object]) -> WorkloadSpec:
        assert self.clients is not None
        given = [key for key, value in synthetic.items() if value is not None]
        if self.sessions is not None:
            given.append("sessions")
        if given:
            raise ValueError(
                f"'clients' cannot be combined with {', '.join(given)} (the clients' lengths "
                "are clients.prompt_tokens and clients.output_tokens)"
            )
        if self.duration_s is not None:
            # the closed loop's arrivals are known only as the run goes, and a run finishes
            # every request it was given: the count must be known before it starts
            raise ValueError(
                "'clients' stop after a number of requests, not a duration: give "
                "'num_requests' and/or 'clients.requests_per_client' instead of 'duration_s'"
            )
        if self.num_requests is None and self.clients.requests_per_client is None:
            raise ValueError("clients need 'num_requests' and/or 'clients.requests_per_client'")
        return self
