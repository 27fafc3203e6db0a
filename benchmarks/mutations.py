"""A mutation check you can rerun: plant known bugs in the core and see which tests catch them.

Each `Mutation` is one textual replacement in one source file (the old text must occur exactly
once, so the list fails loudly when the code it targets moves), with the fast test files that
ought to catch it. The bugs are the ones that matter for the simulator's answers: the per-step
token budget, the prefix cache's LRU order, the preemption victim and its tie-breaks, how
accepted speculative tokens are drawn and counted, the streaming sketch's accuracy, and where
coalesced runs of decode steps are cut.

    python benchmarks/mutations.py              # every mutation: a table of who kills it
    python benchmarks/mutations.py --list       # the mutations and their tests
    python benchmarks/mutations.py --only lru-evicts-most-recent --only victim-most-kv-tie
    python benchmarks/mutations.py --ref HEAD   # the last commit, not the working tree

The working tree is never touched: its tracked and unignored files are copied to a temporary
folder, the tests run there (on the plain Python sources, whatever build is installed), and each
mutation is applied to and removed from that copy. Tests that already fail on the unmutated copy
are reported and not counted as kills. A mutation survives when no test of its list fails; the
exit code is 1 if any survives (or a baseline test fails), 0 otherwise. A full run takes a few
minutes on two cores; it is not part of CI.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT_S = 600  # a mutation that makes a test loop forever counts as killed (by the timeout)


@dataclass(frozen=True)
class Mutation:
    name: str
    file: str
    old: str
    new: str
    tests: tuple[str, ...]
    why: str


BUDGET = (
    "tests/policies/test_chunked.py",
    "tests/policies/test_continuous.py",
    "tests/core/test_engine.py",
)
CACHE = (
    "tests/core/test_prefix_cache.py",
    "tests/core/test_prefix_runs.py",
    "tests/core/test_kv_tiers.py",
)
VICTIM = ("tests/policies/test_preemption.py",)
SPEC = ("tests/policies/test_speculative.py", "tests/core/test_speculative_runs.py")
SKETCH = ("tests/metrics/test_streaming.py",)
RUNS = (
    "tests/core/test_decode_batch.py",
    "tests/core/test_engine.py",
    "tests/core/test_arrival_feed.py",
)

MUTATIONS: list[Mutation] = [
    Mutation(
        "scale-in-cancels-oldest",
        "sim/topology/scaling.py",
        "        for member in reversed(pending[-n:] if n <= len(pending) else pending):\n",
        "        for member in pending[:n]:\n",
        ("tests/topology/test_fleet_scaling.py",),
        "scale-in cancels the oldest provisioning instances instead of the newest",
    ),
    Mutation(
        "gateway-releases-newest",
        "sim/topology/gateway.py",
        "            self._route(self.held.popleft(), candidates)\n",
        "            self._route(self.held.pop(), candidates)\n",
        ("tests/topology/test_scale_from_zero.py",),
        "requests held at the gateway are released newest first instead of in arrival order",
    ),
    Mutation(
        "scale-in-drains-busiest",
        "sim/topology/scaling.py",
        "        serving.sort(key=lambda m: (work[m.index], -m.index))\n",
        "        serving.sort(key=lambda m: (-work[m.index], -m.index))\n",
        ("tests/topology/test_fleet_scaling.py",),
        "scale-in drains the instance with the most outstanding work instead of the least",
    ),
    Mutation(
        "recompute-victim-to-back",
        "sim/core/engine.py",
        "                self._waiting.push_front(req)\n",
        "                self._waiting.push(req)\n",
        VICTIM,
        "a recomputed victim waits at the back of the queue instead of the front",
    ),
    Mutation(
        "budget-chunk-over-by-one",
        "sim/policies/iteration.py",
        "                tokens = min(tokens, budget, self.max_chunk_tokens)\n",
        "                tokens = min(tokens, budget + 1, self.max_chunk_tokens)\n",
        BUDGET,
        "a newly admitted prompt chunk may exceed the step's token budget by one",
    ),
    Mutation(
        "budget-continued-chunk-uncharged",
        "sim/policies/iteration.py",
        "            d.prefill[req] = n\n            budget -= n\n",
        "            d.prefill[req] = n\n            budget -= n // 2\n",
        BUDGET,
        "a continued prompt chunk charges half its tokens to the budget",
    ),
    Mutation(
        "lru-evicts-most-recent",
        "sim/core/kv/pool.py",
        "            gone = [pop(False)[0] for _ in range(evict)]\n",
        "            gone = [pop(True)[0] for _ in range(evict)]\n",
        CACHE,
        "cached free blocks are evicted most recently freed first (MRU instead of LRU)",
    ),
    Mutation(
        "lru-release-head-first",
        "sim/core/kv/pool.py",
        "            for block_hash in reversed(cached):\n",
        "            for block_hash in cached:\n",
        CACHE,
        "a released prefix's first blocks are queued for eviction before its last ones",
    ),
    Mutation(
        "tier-evicts-most-recent",
        "sim/core/kv/tiers.py",
        "        evicted = [pop(False)[0] for _ in range(over)]  # least recently used first\n",
        "        evicted = [pop(True)[0] for _ in range(over)]  # least recently used first\n",
        ("tests/core/test_kv_tiers.py",),
        "a full KV tier evicts its most recently used block instead of its least",
    ),
    Mutation(
        "tier-load-free-of-latency",
        "sim/core/kv/tiers.py",
        "        return self.latency_s + len(hashes) * self.block_bytes / self.read_bytes_per_s\n",
        "        return len(hashes) * self.block_bytes / self.read_bytes_per_s\n",
        ("tests/core/test_kv_tiers.py",),
        "a load from a KV tier skips the tier's latency",
    ),
    Mutation(
        "tier-hit-before-written",
        "sim/core/kv/tiers.py",
        "        return ready is not None and ready <= now\n",
        "        return ready is not None\n",
        ("tests/core/test_kv_tiers.py",),
        "a block counts as a tier hit before its write has finished",
    ),
    Mutation(
        "tier-prefix-before-written",
        "sim/core/kv/tiers.py",
        "                if ready is None or ready > now:\n",
        "                if ready is None:\n",
        ("tests/core/test_kv_tiers.py",),
        "a prefix lookup in one KV tier counts blocks whose write has not finished",
    ),
    Mutation(
        "tiers-prefix-before-written",
        "sim/core/kv/tiers.py",
        "                if ready is not None and ready <= now:\n",
        "                if ready is not None:\n",
        ("tests/core/test_kv_tiers.py",),
        "a prefix lookup over several KV tiers counts blocks whose write has not finished",
    ),
    Mutation(
        "victim-last-admitted-is-first",
        "sim/policies/preemption.py",
        "            return last\n",
        "            return 0\n",
        VICTIM,
        "last_admitted evicts the earliest admitted request",
    ),
    Mutation(
        "victim-lowest-priority-tie",
        "sim/policies/preemption.py",
        "key=lambda i: (ranks.get(running[i].tier, 0), i))",
        "key=lambda i: (ranks.get(running[i].tier, 0), -i))",
        VICTIM,
        "lowest_priority breaks rank ties toward the earliest admitted",
    ),
    Mutation(
        "victim-lowest-priority-ignores-tiers",
        "sim/policies/preemption.py",
        "key=lambda i: (ranks.get(running[i].tier, 0), i))",
        "key=lambda i: (0, i))",
        VICTIM,
        "lowest_priority behaves as last_admitted",
    ),
    Mutation(
        "victim-most-kv-tie",
        "sim/policies/preemption.py",
        "key=lambda i: (held(running[i]), i))",
        "key=lambda i: (held(running[i]), -i))",
        VICTIM,
        "most_kv breaks ties toward the earliest admitted",
    ),
    Mutation(
        "acceptance-counts-the-bonus-token",
        "sim/core/request.py",
        "            spec.accepted += accepted\n",
        "            spec.accepted += accepted + 1\n",
        SPEC,
        "the target's own token is counted as an accepted proposal",
    ),
    Mutation(
        "acceptance-per-request-not-chained",
        "sim/core/acceptance.py",
        "            n += 1\n            p *= a\n",
        "            n += 1\n",
        SPEC,
        "a per-request rate accepts position j with probability a, not a**j",
    ),
    Mutation(
        "acceptance-rejected-lookahead-kept",
        "sim/core/speculative_step.py",
        "                rejected_total += k - accepted\n",
        "                rejected_total += k - accepted - 1\n",
        SPEC,
        "one rejected lookahead slot per step stays counted as stored KV",
    ),
    Mutation(
        "sketch-ten-times-coarser",
        "sim/metrics/streaming.py",
        "RELATIVE_ACCURACY = 0.005 ",
        "RELATIVE_ACCURACY = 0.05 ",
        SKETCH,
        "the percentile sketch's bins are 10x wider than the documented 0.5 %",
    ),
    Mutation(
        "sketch-bin-upper-edge",
        "sim/metrics/streaming.py",
        "        self.scale = 2.0 / (1.0 + gamma)\n",
        "        self.scale = 1.0\n",
        SKETCH,
        "a bin stands for its upper edge, not the value within alpha of all its values",
    ),
    Mutation(
        "runs-cut-one-step-late",
        "sim/core/step_times.py",
        "    while j < max_steps and times.end(j) < at_s:\n        j += 1\n    return j\n",
        "    while j < max_steps and times.end(j) < at_s:\n        j += 1\n"
        "    return min(j + 1, max_steps)\n",
        RUNS,
        "a run an arrival could join ends one step after the boundary at or after it",
    ),
    Mutation(
        "runs-past-first-finish",
        "sim/core/decode_batch.py",
        "                return top[0] - self.clock\n",
        "                return top[0] - self.clock + 1\n",
        RUNS,
        "a coalesced run goes one step past its first finish",
    ),
    Mutation(
        "runs-past-dry-pool",
        "sim/core/decode_batch.py",
        "        return min(limit, 1 + cycles * bs + i)\n",
        "        return min(limit, 2 + cycles * bs + i)\n",
        RUNS,
        "a coalesced run goes one step past the last one whose blocks are free",
    ),
]


def copy_tree(dest: Path, ref: str | None = None) -> None:
    """The working tree's tracked and unignored files (uncommitted edits included), or the
    tree of commit `ref`."""
    if ref is not None:
        dest.mkdir(parents=True)
        archive = subprocess.run(
            ["git", "archive", "--format=tar", ref], cwd=ROOT, check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
        return
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        src = ROOT / name
        if not src.is_file():  # deleted but still in the index
            continue
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target)


def occurrences(mutation: Mutation, root: Path = ROOT) -> int:
    return (root / mutation.file).read_text(encoding="utf-8").count(mutation.old)


def run_tests(root: Path, tests: tuple[str, ...], report: Path) -> tuple[set[str], set[str], bool]:
    """(failed test ids, passed test ids, timed out) of one pytest run in the copy."""
    shutil.rmtree(root / ".hypothesis", ignore_errors=True)  # no examples carried across runs
    env = {
        **os.environ,
        "PYTHONPATH": str(root),  # the copy's sources, ahead of the editable install's finder
        "PYTHONDONTWRITEBYTECODE": "1",  # a mutation of equal size and mtime second: no stale pyc
        "MPLBACKEND": "Agg",
    }
    env.pop("BATCHSIM_EXPECT_BUILD", None)
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        f"--junitxml={report}",
        *[t for t in tests if (root / t).is_file()],
    ]
    try:
        subprocess.run(
            command, cwd=root, env=env, timeout=TIMEOUT_S, capture_output=True, check=False
        )
    except subprocess.TimeoutExpired:
        return set(), set(), True
    failed: set[str] = set()
    passed: set[str] = set()
    if not report.is_file():  # collection broke before any report: everything failed
        return {"(collection)"}, set(), False
    for case in ET.parse(report).getroot().iter("testcase"):
        test_id = f"{case.get('classname')}::{case.get('name')}"
        if case.find("failure") is not None or case.find("error") is not None:
            failed.add(test_id)
        elif case.find("skipped") is None:
            passed.add(test_id)
    report.unlink()
    return failed, passed, False


def check_imports_copy(root: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-c", "import sim; print(sim.__file__)"],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    if not Path(out).resolve().is_relative_to(root.resolve()):
        raise SystemExit(f"the copy imports sim from {out}, not from {root}")


def short(test_id: str) -> str:
    return test_id.removeprefix("tests.")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", default=[], help="a mutation's name")
    parser.add_argument("--list", action="store_true", help="list the mutations and exit")
    parser.add_argument("--ref", help="test a commit's tree instead of the working tree")
    args = parser.parse_args(argv)
    chosen = [m for m in MUTATIONS if not args.only or m.name in args.only]
    unknown = set(args.only) - {m.name for m in MUTATIONS}
    if unknown:
        parser.error(f"unknown mutation {', '.join(sorted(unknown))}")
    if args.list:
        for m in chosen:
            print(f"{m.name}: {m.file}: {m.why}\n    tests: {' '.join(m.tests)}")
        return 0
    moved = [m.name for m in chosen if args.ref is None and occurrences(m) != 1]
    if moved:
        print(f"the code moved under: {', '.join(moved)} (old text not found exactly once)")
        return 1
    with tempfile.TemporaryDirectory(prefix="batchsim-mutations-") as tmp:
        root = Path(tmp) / "tree"
        copy_tree(root, args.ref)
        check_imports_copy(root)
        moved = [m.name for m in chosen if occurrences(m, root) != 1]
        if moved:
            print(f"the code moved under: {', '.join(moved)} (old text not found exactly once)")
            return 1
        report = Path(tmp) / "report.xml"
        files = tuple(dict.fromkeys(t for m in chosen for t in m.tests))
        started = time.perf_counter()
        broken, _, timed_out = run_tests(root, files, report)
        if timed_out:
            print("the unmutated tests timed out")
            return 1
        for test_id in sorted(broken):
            print(f"fails before any mutation (not counted): {short(test_id)}")
        print(f"unmutated run: {time.perf_counter() - started:.0f} s\n")
        rows = []
        for m in chosen:
            path = root / m.file
            original = path.read_text(encoding="utf-8")
            path.write_text(original.replace(m.old, m.new, 1), encoding="utf-8")
            started = time.perf_counter()
            try:
                failed, _, timed_out = run_tests(root, m.tests, report)
            finally:
                path.write_text(original, encoding="utf-8")
            seconds = time.perf_counter() - started
            kills = sorted(failed - broken)
            rows.append((m, kills, timed_out, seconds))
            status = "timeout" if timed_out else f"{len(kills)} kills" if kills else "SURVIVED"
            print(f"{m.name}: {status} ({seconds:.0f} s)", flush=True)
    print("\n| mutation | file | killed by |\n|---|---|---|")
    for m, kills, timed_out, _ in rows:
        if timed_out:
            by = "timeout"
        elif not kills:
            by = "**survived**"
        else:
            shown = ", ".join(short(k) for k in kills[:3])
            by = f"{len(kills)}: {shown}" + (", ..." if len(kills) > 3 else "")
        print(f"| {m.name} | {m.file} | {by} |")
    survived = [m.name for m, kills, timed_out, _ in rows if not kills and not timed_out]
    print(f"\n{len(rows) - len(survived)} of {len(rows)} mutations killed")
    return 1 if survived or broken else 0


if __name__ == "__main__":
    sys.exit(main())
