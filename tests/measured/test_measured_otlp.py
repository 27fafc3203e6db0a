"""The common form of a measured run (`sim.measured.run`) and the reader of vLLM's OTLP spans,
on small files written here in the exporter's real layout."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers_measured import T0, export, span

from sim.errors import ScenarioError
from sim.measured import FORMATS, detect_format, read_measured
from sim.measured.run import assemble


def write(tmp_path: Path, *lines: str, name: str = "traces.json") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


def three_requests(tmp_path: Path) -> Path:
    # line 1 holds two spans, out of arrival order; line 2 a third and a span of another name
    return write(
        tmp_path,
        export(
            span(T0 + 2_000_000_000, ttft=0.5, e2e=2.5, prompt="10", output="5", rid="b"),
            span(T0, ttft=0.25, e2e=1.25, prompt="20", output="3", rid="a"),
        ),
        export(
            span(T0 + 1_000_000_000, ttft=0.125, e2e=0.125, prompt="7", output="1", rid="c"),
            span(T0, name="other"),
        ),
    )


def test_spans_become_rows_sorted_by_arrival_with_exact_values(tmp_path: Path) -> None:
    run = read_measured(three_requests(tmp_path))
    assert run.format == "vllm_otlp" and len(run) == 3
    assert list(run.request_id) == ["a", "c", "b"]
    np.testing.assert_allclose(run.arrival_s, [0.0, 1.0, 2.0])
    assert run.prompt_tokens.tolist() == [20, 7, 10]
    assert run.output_tokens.tolist() == [3, 1, 5]
    np.testing.assert_allclose(run.ttft_s, [0.25, 0.125, 0.5])
    np.testing.assert_allclose(run.e2e_s, [1.25, 0.125, 2.5])
    # (e2e - ttft) / (output - 1); NaN for a single output token (no own TPOT in spans)
    np.testing.assert_allclose(run.tpot_s, [0.5, math.nan, 0.5])
    assert run.queue_s is not None
    np.testing.assert_allclose(run.queue_s, [2e-5] * 3)
    assert run.origin_unix_s == pytest.approx(T0 / 1e9)
    assert run.meta["other_spans_skipped"] == 1 and run.meta["service_name"] == ["vllm-exp1"]
    assert run.itl_s is None and run.num_failed == 0
    for array in (run.arrival_s, run.prompt_tokens, run.ttft_s, run.request_id, run.queue_s):
        assert not array.flags.writeable
    assert run.prompt_tokens.dtype == np.int64 and run.arrival_s.dtype == np.float64


def test_window_keeps_arrivals_in_the_half_open_interval_and_rebases(tmp_path: Path) -> None:
    run = read_measured(three_requests(tmp_path))
    part = run.window(1.0, 2.0)
    assert list(part.request_id) == ["c"]
    assert part.arrival_s.tolist() == [0.0]
    assert part.origin_unix_s == pytest.approx(T0 / 1e9 + 1.0)
    assert not part.arrival_s.flags.writeable
    assert len(run.window(0.5, 10.0)) == 2
    with pytest.raises(ScenarioError, match="no request arrives"):
        run.window(5.0, 6.0)


def test_error_spans_are_counted_and_left_out(tmp_path: Path) -> None:
    path = write(tmp_path, export(span(T0, rid="a"), span(T0 + 5, rid="b", status={"code": 2})))
    run = read_measured(path, "vllm_otlp")
    assert len(run) == 1 and run.num_failed == 1


def test_rows_with_equal_arrivals_keep_file_order() -> None:
    run = assemble(
        source="f",
        fmt="vllm_otlp",
        arrival=[5.0, 5.0, 4.0],
        prompt_tokens=[1, 2, 3],
        output_tokens=[2, 2, 2],
        ttft_s=[0.1, 0.1, 0.1],
        e2e_s=[0.3, 0.3, 0.3],
        request_id=["x", "y", "z"],
        records=["r1", "r2", "r3"],
        unix_clock=False,
        meta={},
        file_tpot_s=[9.0, 9.0, 9.0],
    )
    assert list(run.request_id) == ["z", "x", "y"]
    assert run.origin_unix_s is None
    np.testing.assert_allclose(run.tpot_s, [0.2, 0.2, 0.2])  # derived wins over the file's own


@pytest.mark.parametrize(
    ("spans", "expect"),
    [
        ((span(T0, ttft=-0.1),), ["span scmpl-a-0", "negative"]),
        ((span(T0, drop="gen_ai.latency.e2e"),), ["no gen_ai.latency.e2e"]),
        ((span(T0, ttft=3.0, e2e=2.0),), ["exceeds the end-to-end"]),
        ((span(T0, e2e="NaN"),), ["not a finite number"]),
        ((span(T0, prompt="0"),), ["prompt_tokens is 0"]),
        ((span(T0, output="12.5"),), ["not an integer"]),
        ((span(T0, prompt="99999999999"),), ["above 10,000,000"]),
        ((span(T0), span(1769021450, rid="b")), ["span sb", "another clock or unit"]),
        ((span(T0), span(T0 + 40 * 86400 * 10**9, rid="b")), ["different clocks"]),
        ((span(T0, name="other"),), ["no completed request"]),
    ],
)
def test_bad_spans_are_one_located_error(
    tmp_path: Path, spans: tuple[dict[str, Any], ...], expect: list[str]
) -> None:
    path = write(tmp_path, export(*spans))
    with pytest.raises(ScenarioError) as info:
        read_measured(path, "vllm_otlp")
    message = info.value.message()
    assert str(path) in message and "\n" not in message
    for part in expect:
        assert part in message


def test_ttft_may_exceed_e2e_by_a_millisecond_of_clock_slack(tmp_path: Path) -> None:
    run = read_measured(write(tmp_path, export(span(T0, ttft=1.0005, e2e=1.0))), "vllm_otlp")
    assert run.tpot_s[0] == 0.0  # clipped: the two clocks, not a negative decode time


def test_truncated_line_and_wrong_tool_are_named(tmp_path: Path) -> None:
    good = export(span(T0))
    path = write(tmp_path, good, good[:-7])
    with pytest.raises(ScenarioError, match=r"line 2: truncated line"):
        read_measured(path, "vllm_otlp")
    other = write(tmp_path, json.dumps({"benchmarks": []}), name="g.json")
    with pytest.raises(ScenarioError, match="looks like a GuideLLM benchmarks report"):
        read_measured(other, "vllm_otlp")


def test_detection_names_the_known_formats_when_it_cannot_tell(tmp_path: Path) -> None:
    assert detect_format(three_requests(tmp_path)) == "vllm_otlp"
    path = write(tmp_path, json.dumps({"hello": 1}), name="x.json")
    with pytest.raises(ScenarioError) as info:
        read_measured(path)
    for fmt in FORMATS:
        assert fmt in info.value.message()


# -- reading a line at a time -----------------------------------------------------------------


def test_a_span_file_is_read_a_line_at_a_time_never_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "spans.jsonl"
    lines = [export(span(T0 + i * 10**8, rid=f"r{i}")) for i in range(50)]
    path.write_text("\ufeff" + "\n".join(lines) + "\n\n")  # a BOM, a blank line at the end
    whole = read_measured(path, "vllm_otlp")

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the whole file was read")

    monkeypatch.setattr(Path, "read_bytes", refuse)
    monkeypatch.setattr(Path, "read_text", refuse)
    again = read_measured(path, "vllm_otlp")
    assert len(again) == len(whole) == 50
    for column in ("arrival_s", "prompt_tokens", "output_tokens", "ttft_s", "e2e_s"):
        assert np.array_equal(getattr(again, column), getattr(whole, column))
    assert list(again.request_id) == [f"r{i}" for i in range(50)]


def test_a_large_span_file_shows_its_progress_in_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tqdm

    from sim.measured import values

    path = tmp_path / "spans.jsonl"
    path.write_text("\n".join(export(span(T0 + i * 10**8, rid=f"r{i}")) for i in range(20)))
    bars: list[Any] = []
    real = tqdm.tqdm

    def watched(*args: Any, **kwargs: Any) -> Any:
        bars.append(real(*args, **{**kwargs, "disable": False}))
        bars.append(kwargs)
        return bars[-2]

    monkeypatch.setattr(tqdm, "tqdm", watched)
    monkeypatch.setattr(values, "PROGRESS_BYTES", 1 << 30)
    read_measured(path, "vllm_otlp")
    assert bars[1]["disable"] is True  # a small file: no bar
    monkeypatch.setattr(values, "PROGRESS_BYTES", 1)
    read_measured(path, "vllm_otlp")
    bar, kwargs = bars[2], bars[3]
    assert kwargs["disable"] is None  # shown on a terminal
    assert kwargs["total"] == path.stat().st_size == bar.n  # every byte counted


def test_a_bad_byte_is_located_by_line_column_and_offset(tmp_path: Path) -> None:
    path = tmp_path / "spans.jsonl"
    first = export(span(T0)).encode()
    path.write_bytes(first + b"\n" + b'{"resourceSpans": "\xff"}\n')
    with pytest.raises(ScenarioError) as err:
        read_measured(path, "vllm_otlp")
    assert err.value.path == "line 2"
    assert f"byte 0xff at column 20 (byte offset {len(first) + 1 + 19})" in str(err.value)
