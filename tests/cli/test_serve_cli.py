"""`batchsim serve` as a command: its startup line names the variant it serves, and the report
it writes at the stop says it is a serve session of that variant, not a run of the scenario."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def serve(out: Path, *args: str, stop: int = signal.SIGTERM) -> tuple[str, Path]:
    """Serve the quickstart on a free port, send one completion, stop it with `stop` (SIGTERM:
    no plots, a prompt exit); return the startup line and the results folder."""
    cmd = [sys.executable, "-m", "sim", "serve", "scenarios/quickstart.yaml", "--port", "0",
           "--speed", "100", "--drain-s", "5", "--out", str(out), *args]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        found = re.search(r"http://127\.0\.0\.1:(\d+)/v1", line)
        assert found, (line, proc.stderr.read() if proc.stderr else "")
        body = json.dumps({"prompt": "hello", "max_tokens": 2}).encode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{found.group(1)}/v1/completions", body,
            {"Content-Type": "application/json"})  # fmt: skip
        with urllib.request.urlopen(request, timeout=30) as reply:
            assert json.load(reply)["usage"]["completion_tokens"] == 2
    finally:
        proc.send_signal(stop)
        proc.communicate(timeout=60)
    assert proc.returncode == 0
    return line, out / "quickstart--serve"


def test_the_startup_line_and_the_report_name_the_variant_served(tmp_path: Path) -> None:
    line, folder = serve(tmp_path / "a", stop=signal.SIGINT)  # Ctrl-C: the plots too
    assert list(folder.glob("*.png"))
    assert line.startswith(
        "serving quickstart variant static (the first of static, "
        "continuous; --variant picks another) (model llama-2-7b) at "
    )
    html = (folder / "report.html").read_text()
    assert "<h1>batchsim report: serve session of quickstart variant static</h1>" in html
    assert "static vs continuous batching" not in html.split("</h1>")[1].split("<section")[0]
    session = json.loads((folder / "session.json").read_text())
    assert session["variant"] == "static" and session["scenario"] == "quickstart"
    line, folder = serve(tmp_path / "b", "--variant", "continuous")
    assert line.startswith("serving quickstart variant continuous (model llama-2-7b) at ")
    assert "serve session of quickstart variant continuous</h1>" in (
        folder / "report.html").read_text()  # fmt: skip
