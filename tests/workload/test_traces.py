"""Trace reading and trace replay: parsing, bad-row errors with line numbers, windowing, caps."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scenario_factory import run, scenario

from sim.errors import ScenarioError
from sim.workload import WorkloadSpec, generate_requests, read_trace

AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
CSV_HEADER = "arrival_s,prompt_tokens,output_tokens\n"


def write(tmp_path: Path, text: str, name: str = "trace.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def error_of(path: Path, fmt: str = "csv") -> ScenarioError:
    with pytest.raises(ScenarioError) as info:
        read_trace(path, fmt)  # type: ignore[arg-type]
    assert info.value.file == str(path)
    return info.value


def test_azure_seven_fractional_digits_and_zero_output(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        AZURE_HEADER
        + "2023-11-16 18:15:46.6805900,374,44\n"
        + "2023-11-16 18:15:47.1805900,396,0\n"
        + "2023-11-16 18:15:47.9305901,879,55\n"
        + "2023-11-16 18:16:00,91,16\n",
    )
    trace = read_trace(path, "azure")
    np.testing.assert_allclose(trace.arrival_s, [0.0, 0.5, 1.2500001, 13.31941], atol=1e-9)
    assert trace.arrival_s.dtype == np.float64
    np.testing.assert_array_equal(trace.prompt_tokens, [374, 396, 879, 91])
    np.testing.assert_array_equal(trace.output_tokens, [44, 1, 55, 16])
    assert trace.num_zero_output == 1


def test_csv_format_relative_to_first_row_and_integral_floats(tmp_path: Path) -> None:
    path = write(tmp_path, CSV_HEADER + "10.5,8,2\n10.5,9,3.0\n12,10,4\n")
    trace = read_trace(path, "csv")
    np.testing.assert_array_equal(trace.arrival_s, [0.0, 0.0, 1.5])
    np.testing.assert_array_equal(trace.output_tokens, [2, 3, 4])
    assert trace.prompt_tokens.dtype == np.int64
    assert trace.num_zero_output == 0


def test_columns_in_any_order(tmp_path: Path) -> None:
    path = write(tmp_path, "prompt_tokens,output_tokens,arrival_s\n5,6,0\n7,8,1\n")
    trace = read_trace(path, "csv")
    np.testing.assert_array_equal(trace.prompt_tokens, [5, 7])
    np.testing.assert_array_equal(trace.arrival_s, [0.0, 1.0])


def test_missing_file(tmp_path: Path) -> None:
    err = error_of(tmp_path / "nope.csv")
    assert "not found" in err.reason


def test_empty_file_and_header_only(tmp_path: Path) -> None:
    assert "empty" in error_of(write(tmp_path, "", "empty.csv")).reason
    err = error_of(write(tmp_path, CSV_HEADER, "header.csv"))
    assert err.path == "line 1" and "no rows" in err.reason


def test_missing_and_extra_columns_are_named(tmp_path: Path) -> None:
    err = error_of(write(tmp_path, "arrival_s,prompt_tokens,tokens_out\n0,1,1\n"))
    assert err.path == "line 1"
    assert "missing column(s) output_tokens" in err.reason
    assert "unexpected column(s) tokens_out" in err.reason


def test_azure_file_read_as_csv_names_the_missing_columns(tmp_path: Path) -> None:
    path = write(tmp_path, AZURE_HEADER + "2023-11-16 18:15:46.6805900,374,44\n")
    err = error_of(path, "csv")
    assert "arrival_s" in err.reason and "TIMESTAMP" in err.reason


@pytest.mark.parametrize(
    ("rows", "line", "fragment"),
    [
        ("0,5,5\n1,abc,5\n", "line 3", "prompt_tokens 'abc'"),
        ("0,5,5\n1,5,5\n2,5,-3\n", "line 4", "output_tokens '-3'"),
        ("0,5,5\n1,0,5\n", "line 3", "prompt_tokens is 0"),
        ("0,5,5\n1,5,2.5\n", "line 3", "output_tokens '2.5'"),
        ("0,5,5\nsoon,5,5\n", "line 3", "unparsable arrival_s 'soon'"),
        ("0,5,5\n2,5,5\n1,5,5\n", "line 4", "out of order"),
        ("0,5,5\n1,5\n", "line 3", "output_tokens ''"),
        ("0,5,5\n1,5,inf\n", "line 3", "output_tokens 'inf'"),
    ],
)
def test_bad_rows_report_file_line(tmp_path: Path, rows: str, line: str, fragment: str) -> None:
    err = error_of(write(tmp_path, CSV_HEADER + rows))
    assert err.path == line
    assert fragment in err.reason
    assert line in str(err)


def test_first_bad_row_wins_and_total_is_counted(tmp_path: Path) -> None:
    err = error_of(write(tmp_path, CSV_HEADER + "0,5,5\n1,5,x\n2,y,5\n3,5,5\n4,0,5\n"))
    assert err.path == "line 3"
    assert "3 bad rows" in err.reason


def test_blank_lines_do_not_shift_line_numbers(tmp_path: Path) -> None:
    path = write(tmp_path, CSV_HEADER + "0,5,5\n\n1,5,5\n2,-1,5\n\n")
    err = error_of(path)
    assert err.path == "line 5"
    trace = read_trace(write(tmp_path, CSV_HEADER + "0,5,5\n\n1,6,7\n\n", "ok.csv"), "csv")
    np.testing.assert_array_equal(trace.prompt_tokens, [5, 6])


def test_azure_bad_timestamp_and_backwards(tmp_path: Path) -> None:
    bad_stamp = AZURE_HEADER + "2023-11-16 18:15:46.68,1,1\n2023-13-45 99:00:00,1,1\n"
    err = error_of(write(tmp_path, bad_stamp, "a.csv"), "azure")
    assert err.path == "line 3" and "unparsable TIMESTAMP" in err.reason
    backwards = AZURE_HEADER + "2023-11-16 18:15:46.6805900,1,1\n2023-11-16 18:15:46.6805899,1,1\n"
    err = error_of(write(tmp_path, backwards, "b.csv"), "azure")
    assert err.path == "line 3" and "out of order" in err.reason


def test_too_many_fields_is_a_scenario_error(tmp_path: Path) -> None:
    err = error_of(write(tmp_path, CSV_HEADER + "0,5,5\n1,5,5,9\n"))
    assert err.path == "line 3" and err.reason == "4 fields where the header has 3"


def test_azure_utc_offsets_are_compared_in_utc(tmp_path: Path) -> None:
    # a daylight-saving change: the wall clock goes back an hour, UTC keeps going
    rows = "2023-10-29 02:59:59+02:00,1,1\n2023-10-29 02:00:01+01:00,1,1\n"
    trace = read_trace(write(tmp_path, AZURE_HEADER + rows), "azure")
    assert trace.arrival_s.tolist() == [0.0, 2.0]


@pytest.mark.parametrize(
    ("rows", "fragment"),
    [
        ("2023-11-16 18:15:46,1,1\n2023-11-16 18:15:47+00:00,1,1\n", "mixed timezones"),
        ("2023-11-16 18:15:46Z,1,1\n2023-11-16 18:15:47,1,1\n", "has no UTC offset"),
        ("2023-11-16 18:15:46,1,1\n1601-01-01 00:00:00,1,1\n", "outside the supported years"),
        ("2023-11-16 18:15:46,1,1\n2500-01-01 00:00:00,1,1\n", "outside the supported years"),
    ],
)
def test_azure_timestamps_that_cannot_be_ordered_say_why(
    tmp_path: Path, rows: str, fragment: str
) -> None:
    err = error_of(write(tmp_path, AZURE_HEADER + rows), "azure")
    assert err.path == "line 3" and fragment in err.reason and "out of order" not in err.reason


def test_a_trace_that_is_not_utf8_names_the_line_and_byte(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_bytes(CSV_HEADER.encode() + b"0,5,5\n1,5,5\xff\n")
    err = error_of(path)
    assert err.path == "line 3" and "byte 0xff" in err.reason


# --- replaying a trace ------------------------------------------------------------------------


def replay(tmp_path: Path, trace: dict[str, object], **caps: object) -> np.ndarray:
    path = write(
        tmp_path, CSV_HEADER + "".join(f"{t},{i + 1},{i + 2}\n" for i, t in enumerate(TIMES))
    )
    spec = WorkloadSpec.model_validate({"trace": {"path": path.name, **trace}, **caps})
    arrays = generate_requests(spec, np.random.default_rng(0), base_dir=tmp_path)
    assert arrays.class_names == ("trace",)
    np.testing.assert_array_equal(arrays.class_index, np.zeros(len(arrays)))
    # prompt = row index + 1 identifies which rows were kept
    np.testing.assert_array_equal(arrays.output_tokens, arrays.prompt_tokens + 1)
    return np.stack([arrays.arrival_s, arrays.prompt_tokens.astype(np.float64)])


TIMES = [100.0, 101.0, 103.0, 106.0, 110.0, 115.0]  # trace seconds 0, 1, 3, 6, 10, 15


def test_replay_whole_trace_starts_at_zero(tmp_path: Path) -> None:
    got = replay(tmp_path, {})
    np.testing.assert_array_equal(got[0], [0, 1, 3, 6, 10, 15])
    np.testing.assert_array_equal(got[1], [1, 2, 3, 4, 5, 6])


def test_replay_rate_scale_divides_gaps(tmp_path: Path) -> None:
    got = replay(tmp_path, {"rate_scale": 2.0})
    np.testing.assert_array_equal(got[0], [0, 0.5, 1.5, 3, 5, 7.5])


def test_replay_window_and_max_rows(tmp_path: Path) -> None:
    got = replay(tmp_path, {"start_s": 2.0, "end_s": 10.0})  # keeps trace seconds 3 and 6
    np.testing.assert_array_equal(got[0], [0, 3])
    np.testing.assert_array_equal(got[1], [3, 4])
    got = replay(tmp_path, {"start_s": 1.0, "max_rows": 3})
    np.testing.assert_array_equal(got[1], [2, 3, 4])
    np.testing.assert_array_equal(got[0], [0, 2, 5])


def test_replay_caps_apply_after_scaling(tmp_path: Path) -> None:
    got = replay(tmp_path, {"rate_scale": 2.0}, duration_s=5.0)  # scaled 0,.5,1.5,3,5,7.5
    np.testing.assert_array_equal(got[1], [1, 2, 3, 4])
    got = replay(tmp_path, {}, num_requests=2)
    np.testing.assert_array_equal(got[1], [1, 2])


def test_replay_empty_window_is_a_scenario_error(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError) as info:
        replay(tmp_path, {"start_s": 20.0})
    assert info.value.path == "workload.trace"
    assert "no requests" in info.value.reason


def test_replay_bad_file_error_names_the_resolved_file(tmp_path: Path) -> None:
    write(tmp_path, CSV_HEADER + "0,1,1\n1,1,x\n", "bad.csv")
    spec = WorkloadSpec.model_validate({"trace": {"path": "bad.csv"}})
    with pytest.raises(ScenarioError) as info:
        generate_requests(spec, np.random.default_rng(0), base_dir=tmp_path)
    assert info.value.file == str(tmp_path / "bad.csv")
    assert info.value.path == "line 3"


def test_a_window_keeps_the_trace_clock_and_carries_ids_and_sessions(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "arrival_s,prompt_tokens,output_tokens,req,conv\n"
        "100,8,2,a-1,x\n101,9,3,a-2,y\n103,10,4,a-3,x\n106,11,2,a-4,z\n",
    )
    trace = {"path": str(path), "start_s": 1.0, "id_column": "req", "session_column": "conv"}
    shifted = generate_requests(
        WorkloadSpec.model_validate({"trace": trace}), np.random.default_rng(0), tmp_path
    )
    kept = generate_requests(
        WorkloadSpec.model_validate({"trace": {**trace, "keep_origin": True}}),
        np.random.default_rng(0),
        tmp_path,
    )
    # the window [1 s, end) of a trace whose first row is t=100: rows 2..4
    np.testing.assert_array_equal(shifted.arrival_s, [0.0, 2.0, 5.0])  # the window's clock
    np.testing.assert_array_equal(kept.arrival_s, [1.0, 3.0, 6.0])  # the trace's own clock
    assert kept.source_id is not None and kept.source_id.tolist() == ["a-2", "a-3", "a-4"]
    raw = scenario(
        policy={"name": "continuous"}, workload={"trace": {**trace, "keep_origin": True}}
    )
    raw["cluster"] = {"router": "session_sticky", "instances": [{"count": 2}]}
    req = run(raw).requests
    assert req["source_id"].tolist() == ["a-2", "a-3", "a-4"]
    assert req["session"].tolist() == ["y", "x", "z"]
    assert req["arrival_s"].tolist() == [1.0, 3.0, 6.0]
    with pytest.raises(ValueError, match="different columns"):
        WorkloadSpec.model_validate({"trace": {**trace, "session_column": "req"}})
