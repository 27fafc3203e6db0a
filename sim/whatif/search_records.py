"""The saved results of a deployment search (`<out>/configs/<task id>.json`), checked before reuse.

A rerun reads each configuration's saved phase result back instead of simulating it again, so a
record is input like any other: a file edited by hand, written by another version or damaged on
disk must not crash the search or, worse, feed it a wrong answer. `check_record` validates a
record against the task it would stand for, and any record that does not validate is recomputed
(and counted, so the user is told):

* the record: a JSON mapping with exactly `id` (the task's), `phase` (the task's), `configuration`
  and `result`;
* a unit result: `passes` (a boolean), `completed_rps` (a finite number >= 0, or null when nothing
  was measured), `probes` and `requests` (integers >= 0);
* a fleet result: `found` and `confirmed` (booleans), `units`, `instances`, `prefill`, `decode`,
  `probes`, `requests` (integers >= 0), `summary` (null, or a mapping of metric names to finite
  numbers or null); a found fleet has between 1 and the most units the space allows, as many
  instances as that many units of the configuration hold, and a summary with every metric the
  table and the SLOs read; a fleet not found has no summary;
* over a band (`--robust`): a fleet result has `band` too (and only then), the fleet over the
  band: the same keys but `probes` and `requests`, checked the same way, and `ends` (the
  summaries of the first seed's probes at the slow and fast ends: two, each with the SLOs'
  metrics, for a found fleet; none for a fleet not found).

Types are strict: a string where a number belongs is refused, not converted.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sim.whatif.search_probe import Task, max_units, unit_counts
from sim.whatif.search_result import SUMMARY_COLUMNS

Count = Annotated[int, Field(ge=0)]


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False)


class Record(_Strict):
    id: str
    phase: Literal["unit", "fleet"]
    configuration: str
    result: dict[str, Any]


class UnitResult(_Strict):
    passes: bool
    completed_rps: Annotated[float, Field(ge=0)] | None
    probes: Count
    requests: Count


class BandResult(_Strict):
    found: bool
    units: Count
    instances: Count
    prefill: Count
    decode: Count
    confirmed: bool
    summary: dict[str, float | None] | None
    ends: list[dict[str, float | None]]


class FleetResult(_Strict):
    found: bool
    units: Count
    instances: Count
    prefill: Count
    decode: Count
    confirmed: bool
    probes: Count
    requests: Count
    summary: dict[str, float | None] | None
    band: BandResult | None = None


def _first_problem(exc: ValidationError, prefix: str) -> str:
    err = exc.errors()[0]
    where = ".".join(str(part) for part in (prefix, *err["loc"]) if part != "")
    return f"{where}: {err['msg']}" if where else str(err["msg"])


def check_record(record: Any, task: Task) -> str | None:
    """None when `record` is a valid saved result of `task`; else why not, in a few words."""
    try:
        saved = Record.model_validate(record)
    except ValidationError as exc:
        return _first_problem(exc, "")
    if saved.id != task.id:
        return f"id: {saved.id!r} is not this file's task"
    if saved.phase != task.phase:
        return f"phase: {saved.phase!r}, where this task is a {task.phase} result"
    if task.phase == "unit":
        try:
            UnitResult.model_validate(saved.result)
        except ValidationError as exc:
            return _first_problem(exc, "result")
        return None
    try:
        fleet = FleetResult.model_validate(saved.result)
    except ValidationError as exc:
        return _first_problem(exc, "result")
    return _fleet_problem(fleet, task)


def _fleet_problem(fleet: FleetResult, task: Task) -> str | None:
    problem = _answer_problem(fleet, task, "result")
    if problem is not None:
        return problem
    if task.question.band is None:
        return None if fleet.band is None else "result.band: this search has no band"
    if fleet.band is None:
        return "result.band: a search over a band has the fleet over the band"
    problem = _answer_problem(fleet.band, task, "result.band")
    if problem is not None:
        return problem
    metrics = {slo.metric for slo in task.question.slos}
    if not fleet.band.found:
        return None if not fleet.band.ends else "result.band.ends: a fleet not found has none"
    if len(fleet.band.ends) != 2:
        return "result.band.ends: a found fleet has the slow end's and the fast end's"
    for i, end in enumerate(fleet.band.ends):
        missing = sorted(metrics - set(end))
        if missing:
            return f"result.band.ends.{i}: missing {', '.join(missing)}"
    return None


def _answer_problem(fleet: FleetResult | BandResult, task: Task, where: str) -> str | None:
    if not fleet.found:
        if fleet.summary is not None or fleet.units or fleet.confirmed:
            return f"{where}: a fleet not found has no units, summary or confirmation"
        return None
    most = max_units(task.question, task.config)
    if not 1 <= fleet.units <= most:
        return f"{where}.units: {fleet.units} is not between 1 and {most}"
    counts = unit_counts(task.config, fleet.units)
    if fleet.instances != sum(counts):
        return f"{where}.instances: {fleet.instances} is not {fleet.units} units' {sum(counts)}"
    if task.config.prefill and (fleet.prefill, fleet.decode) != counts:
        return f"{where}.prefill, decode: not {fleet.units} units' {counts[0]} and {counts[1]}"
    if fleet.summary is None:
        return f"{where}.summary: a found fleet has a summary"
    needed = {*SUMMARY_COLUMNS, *(slo.metric for slo in task.question.slos)}
    missing = sorted(needed - set(fleet.summary))
    if missing:
        return f"{where}.summary: missing {', '.join(missing)}"
    return None
