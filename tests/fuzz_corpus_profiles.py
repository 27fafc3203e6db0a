"""The fuzz corpus: arrival-rate profiles (`workload.arrival: {process: profile, rate: ...}`).

Every key of each shape (diurnal, ramp, spikes, piecewise) and the arrival's `scale` with
values of the wrong type, negative, NaN, infinite and past its bound; piecewise points that go
back in time, a negative rate, one point or none; a csv profile with a missing column, a bad
number, a negative rate, too many rows; overlapping spikes, a peak-to-trough ratio below 1, a
profile that ends at 0 without a duration, and workloads whose integrated rate no machine holds.
Each case names the file at fault and the key or line, with the gist of the reason.
"""

from __future__ import annotations

import copy
from typing import Any

from fuzz_corpus import ALL, BAD, BASE, RUN, Case, dump, edited, scenario_case

DIURNAL = {"shape": "diurnal", "mean_rate": 5.0, "peak_to_trough": 3.0, "period_s": 60.0,
           "peak_at_s": 15.0}  # fmt: skip
RAMP = {"shape": "ramp", "from_rate": 1.0, "to_rate": 10.0, "over_s": 5.0}
SPIKES = {"shape": "spikes", "base_rate": 2.0,
          "spikes": [{"at_s": 1.0, "rate": 20.0, "for_s": 2.0}]}  # fmt: skip
POINTS = {"shape": "piecewise", "points": [[0, 1.0], [2, 8.0], [4, 3.0]]}
CSV = {"shape": "piecewise", "csv": "rate.csv"}
GOOD_CSV = b"time_s,rate\n0,1\n2,8\n4,3\n"


def _profile(rate: dict[str, Any], **arrival: Any) -> dict[str, Any]:
    return edited("workload.arrival", {"process": "profile", "rate": rate, **arrival})


# key under workload.arrival -> (base profile, the BAD labels it refuses, a value past its bound)
FIELDS: dict[str, tuple[dict[str, Any], tuple[str, ...], Any]] = {
    "rate.mean_rate": (DIURNAL, ALL, 2e9),
    "rate.peak_to_trough": (DIURNAL, ALL, 1e7),
    "rate.period_s": (DIURNAL, ALL, 2e9),
    "rate.peak_at_s": (DIURNAL, ALL, 2e9),
    "rate.from_rate": (RAMP, ALL, 2e9),
    "rate.to_rate": (RAMP, ALL, 2e9),
    "rate.over_s": (RAMP, ALL, 2e9),
    "rate.base_rate": (SPIKES, ALL, 2e9),
    "rate.spikes": (SPIKES, ALL, [{"at_s": i, "rate": 1, "for_s": 1} for i in range(10_001)]),
    "rate.spikes.0.at_s": (SPIKES, ALL, 2e9),
    "rate.spikes.0.rate": (SPIKES, ALL, 2e9),
    "rate.spikes.0.for_s": (SPIKES, ALL, 2e9),
    "rate.points": (POINTS, ALL, None),
    "rate.points.1.0": (POINTS, ("str", "bool", "list", "map", "inf", "nan"), None),
    "rate.points.1.1": (POINTS, ("str", "bool", "list", "map", "inf", "nan"), None),
    "rate.csv": (CSV, ("neg", "bool", "list", "map", "inf", "nan"), ""),
    "scale": (DIURNAL, ALL, 2e6),
}


def _set(raw: dict[str, Any], path: str, value: Any) -> None:
    node: Any = raw
    *parents, last = path.split(".")
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value


def _field_cases() -> list[Case]:
    cases = []
    for path, (rate, labels, past) in FIELDS.items():
        values = {label: BAD[label] for label in labels}
        if past is not None:
            values["past-bound"] = past
        for label, value in values.items():
            raw = _profile(copy.deepcopy(rate))
            _set(raw["workload"]["arrival"], path, value)
            files = {"rate.csv": GOOD_CSV} if rate is CSV else {}
            cases.append(
                scenario_case(f"rate-profile-{path}-{label}", dump(raw),
                              f"workload.arrival.{path}", **files)
            )  # fmt: skip
    return cases


def _shape_cases() -> list[Case]:
    points = {
        "unsorted": ([[0, 1], [5, 2], [3, 2]], "points.2", "must not decrease"),
        "negative-rate": ([[0, 1], [5, -2]], "points.1", "rate -2 must be in [0"),
        "negative-time": ([[0, 1], [-5, 2]], "points.1", "time -5 must be in [0"),
        "one-point": ([[0, 1]], "points", "at least 2"),
        "empty": ([], "points", "at least 2"),
        "late-start": ([[1, 1], [5, 2]], "points.0", "at time 0"),
        "all-zero": ([[0, 0], [5, 0]], "points.1", "0 throughout"),
        "triple": ([[0, 1, 2], [5, 2]], "points.0", "[time_s, rate] (got 3 numbers)"),
        "scalar-point": ([[0, 1], 5], "points.1", "must be a list"),
        "huge-time": ([[0, 1], [2e9, 2]], "points.1", "time 2e+09 must be in [0, 1e+09]"),
        "huge-rate": ([[0, 1], [5, 2e9]], "points.1", "rate 2e+09 must be in [0, 1e+09]"),
    }
    cases = [
        scenario_case(f"rate-profile-points-{label}",
                      dump(_profile({"shape": "piecewise", "points": value})),
                      f"workload.arrival.rate.{key}", gist)
        for label, (value, key, gist) in points.items()
    ]  # fmt: skip
    overlapping = copy.deepcopy(SPIKES)
    overlapping["spikes"] = [
        {"at_s": 10, "rate": 5, "for_s": 4},
        {"at_s": 1, "rate": 9, "for_s": 10},
    ]
    no_duration = copy.deepcopy(RAMP)
    no_duration["to_rate"] = 0.0
    explicit: dict[str, tuple[dict[str, Any], tuple[str, ...]]] = {
        "spikes-overlap": (_profile(overlapping),
                           ("workload.arrival.rate.spikes.0", "overlaps spikes.1")),
        "spikes-empty": (_profile({**SPIKES, "spikes": []}),
                         ("workload.arrival.rate.spikes", "at least 1")),
        "spikes-all-zero": (_profile({**SPIKES, "base_rate": 0, "spikes": [
            {"at_s": 0, "rate": 0, "for_s": 1}]}), ("workload.arrival.rate.base_rate", "0")),
        "diurnal-ratio-below-1": (_profile({**DIURNAL, "peak_to_trough": 0.5}),
                                  ("workload.arrival.rate.peak_to_trough", ">= 1")),
        "diurnal-peak-outside-period": (_profile({**DIURNAL, "peak_at_s": 60.0}),
                                        ("workload.arrival.rate.peak_at_s", "within the period")),
        "diurnal-zero-mean": (_profile({**DIURNAL, "mean_rate": 0}),
                              ("workload.arrival.rate.mean_rate", ">= 1e-09")),
        "ramp-all-zero": (_profile({**RAMP, "from_rate": 0, "to_rate": 0}),
                          ("workload.arrival.rate.to_rate", "0 throughout")),
        "ramp-ends-no-duration": (_profile(no_duration),
                                  ("workload.duration_s", "falls to 0 for good")),
        "piecewise-both": (_profile({**POINTS, "csv": "rate.csv"}),
                           ("workload.arrival.rate", "'points' or 'csv'")),
        "piecewise-neither": (_profile({"shape": "piecewise"}),
                              ("workload.arrival.rate", "'points' or 'csv'")),
        "shape-unknown": (_profile({**DIURNAL, "shape": "weekly"}),
                          ("workload.arrival.rate", "unknown shape 'weekly'")),
        "shape-missing": (_profile({k: v for k, v in DIURNAL.items() if k != "shape"}),
                          ("workload.arrival.rate", "missing `shape`")),
        "unknown-key": (_profile({**RAMP, "over": 3}),
                        ("workload.arrival.rate.over", "unknown key")),
        "scalar-rate": (_profile(5.0), ("workload.arrival.rate", "mapping")),  # type: ignore[arg-type]
        "scale-zero": (_profile(DIURNAL, scale=0), ("workload.arrival.scale", "> 0")),
    }  # fmt: skip
    sessions = copy.deepcopy(BASE)
    sessions["workload"] = {
        "sessions": {
            "arrival": {"process": "profile", "rate": {**RAMP, "from_rate": -1}},
            "num_sessions": 4,
            "turns": {"dist": "fixed", "value": 2},
            "first_prompt": {"dist": "fixed", "value": 10},
            "user_tokens": {"dist": "fixed", "value": 10},
            "output_tokens": {"dist": "fixed", "value": 5},
            "think_time": {"dist": "fixed", "value_s": 1.0},
        }
    }
    explicit["sessions-negative"] = (sessions, ("workload.sessions.arrival.rate.from_rate", ">= 0"))
    ending = copy.deepcopy(sessions)
    ending["workload"]["sessions"]["arrival"]["rate"] = no_duration
    explicit["sessions-ends-no-duration"] = (ending, ("workload.duration_s", "sessions.arrival"))
    cases += [
        scenario_case(f"rate-profile-{label}", dump(raw), *expect)
        for label, (raw, expect) in explicit.items()
    ]
    return cases


def _csv_case(label: str, body: bytes, *expect: str) -> Case:
    files = {"s.yaml": dump(_profile(CSV)), "rate.csv": body}
    return Case(f"rate-profile-csv-{label}", RUN, ("rate.csv", *expect), files)


def _csv_cases() -> list[Case]:
    many = b"time_s,rate\n" + b"0,1\n" * 200_001
    return [
        _csv_case("missing-column", b"time_s\n0\n5\n", "line 1", "missing column(s) rate"),
        _csv_case("extra-column", b"time_s,rate,x\n0,1,2\n", "line 1", "unexpected column(s)"),
        _csv_case("renamed-column", b"t,rate\n0,1\n", "line 1", "missing column(s) time_s"),
        _csv_case("bad-number", b"time_s,rate\n0,1\n2,abc\n4,3\n", "line 3", "rate 'abc'"),
        _csv_case("bad-time", b"time_s,rate\n0,1\n2x,3\n", "line 3", "time_s '2x'"),
        _csv_case("negative-rate", b"time_s,rate\n0,1\n2,8\n4,-3\n", "line 4", "rate -3"),
        _csv_case("nan-rate", b"time_s,rate\n0,1\n2,nan\n", "line 3", "not finite"),
        _csv_case("inf-time", b"time_s,rate\n0,1\ninf,2\n", "line 3", "not finite"),
        _csv_case("huge-rate", b"time_s,rate\n0,1\n2,1e10\n", "line 3", "outside"),
        _csv_case("underscore", b"time_s,rate\n0,1\n2,1_000\n", "line 3", "not a number"),
        _csv_case("unsorted", b"time_s,rate\n0,1\n5,1\n\n3,1\n", "line 5", "must not decrease"),
        _csv_case("late-start", b"rate,time_s\n1,2\n1,5\n", "line 2", "at time 0"),
        _csv_case("three-fields", b"time_s,rate\n0,1\n2,8,9\n", "line 3", "3 fields"),
        _csv_case("one-row", b"time_s,rate\n0,1\n", "line 1", "at least 2"),
        _csv_case("header-only", b"time_s,rate\n", "line 1", "at least 2"),
        _csv_case("empty", b"", "empty"),
        _csv_case("all-zero", b"time_s,rate\n0,0\n9,0\n", "line 3", "0 throughout"),
        _csv_case("too-many-rows", many, "line 200002", "at most"),
        _csv_case("not-utf8", b"time_s,rate\n0,1\n\xff,2\n", "line 3"),
        Case("rate-profile-csv-missing-file", RUN, ("rate.csv", "not found"),
             {"s.yaml": dump(_profile(CSV))}),
        Case("rate-profile-csv-ends-no-duration", RUN,
             ("s.yaml", "workload.duration_s", "falls to 0 for good at 4 s"),
             {"s.yaml": dump(_profile(CSV)), "rate.csv": b"time_s,rate\n0,1\n4,0\n"}),
    ]  # fmt: skip


def _by_duration(rate: dict[str, Any], duration_s: float) -> bytes:
    raw = _profile(rate)
    del raw["workload"]["num_requests"]
    raw["workload"]["duration_s"] = duration_s
    return dump(raw)


def _memory_cases() -> list[Case]:
    # a day at a mean of 10^7 requests/s: 8.6e11 requests, refused before anything is drawn
    day = _by_duration({**DIURNAL, "mean_rate": 1e7, "period_s": 86_400.0}, 86_400.0)
    spikes = _by_duration({**SPIKES, "spikes": [{"at_s": 10, "rate": 1e9, "for_s": 1e6}]}, 1e6)
    by_file = _by_duration(CSV, 1e6)  # 10^15 requests, known once the file is read
    return [
        scenario_case("rate-profile-memory-diurnal", day, "workload.duration_s", "memory"),
        scenario_case("rate-profile-memory-spikes", spikes, "workload.duration_s", "memory"),
        Case("rate-profile-memory-csv", RUN, ("s.yaml", "workload.duration_s", "memory"),
             {"s.yaml": by_file, "rate.csv": b"time_s,rate\n0,1e9\n10,1e9\n"}),
    ]  # fmt: skip


def rate_profile_cases() -> list[Case]:
    return [*_field_cases(), *_shape_cases(), *_csv_cases(), *_memory_cases()]
