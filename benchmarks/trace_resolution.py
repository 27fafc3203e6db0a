"""How a scenario's path through the code enters modules and climbs back up: a call trace.

Loads and simulates each scenario given (default: scenarios/quickstart.yaml) with `simulate()`
under `sys.setprofile`, records every Python call into a `sim` module, and prints two counts.

- Entries into a module: the distinct caller functions (qualified names, in another module) from
  which control passes into that module. A function that calls in once per variant, per group or
  per instance counts once: the count is how many places on the path ask the module, not how
  many times they loop. `outside` counts those of them in another package (for the catalog:
  not a module of `sim.costs` deriving from it), and `calls` the raw call events behind them.
- Climbs back up: the distinct (caller function, callee module) pairs where the caller's package
  sits in a layer above `sim.costs` and `sim.workload` (the layers of the import contract in
  pyproject.toml) and the callee is a module of those two packages. Each is a place where a
  later stage goes down to the catalog, a profile, a fit check or the workload, takes an answer
  and climbs back up to carry on; a scenario resolved in one direction goes down once (to
  resolve) and later stages read what was resolved. `scenario down-calls` counts, separately,
  the raw call events from `sim.scenario` into those two packages (the validation passes).
  `of which resolution` leaves out the climbs into the workload's requests themselves
  (`sim.workload` modules other than `spec`, `budget` and `forecast`: generating the requests
  and reading them as the run replays them), which are the run's data, not its resolution.

The caller of a call is the nearest frame on the stack that belongs to `sim`, so a call made
through a library (pydantic running a validator of a type defined in `sim.costs`) belongs to
the `sim` function that asked the library. What runs inside SimPy's `Environment.run` (the
steps of the run itself) is not traced: the counts are the path around it (loading, resolving,
building the cluster, reading the records back), the same whatever the number of requests. Only
plain Python is seen: run it on a source checkout, not on the compiled build.

    python benchmarks/trace_resolution.py                         # quickstart
    python benchmarks/trace_resolution.py scenarios/kv_tiers.yaml scenarios/moe_single_node.yaml
    python benchmarks/trace_resolution.py --set workload.num_requests=200 --all-modules

It traces the `sim` package of the working folder (the folder it is run from comes first on
`sys.path`), so running it from another checkout measures that checkout.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

# the import contract's layers, highest first (pyproject.toml, [tool.importlinter])
LAYERS = (
    ("sim.cli",),
    ("sim.serve",),
    ("sim.whatif",),
    ("sim.io",),
    ("sim.simulate",),
    ("sim.topology", "sim.metrics"),
    ("sim.policies",),
    ("sim.core",),
    ("sim.scenario",),
    ("sim.workload", "sim.costs"),
    ("sim.measured",),
    ("sim.inputs",),
    ("sim.errors",),
)
LOWER = ("sim.workload", "sim.costs")  # the lower stages a scenario resolves through
# the workload modules a scenario resolves through (the others generate and hold requests)
WORKLOAD_SPEC = ("sim.workload.spec", "sim.workload.budget", "sim.workload.forecast")
WATCHED = ("sim.costs.catalog", "sim.costs.profile")


def layer(module: str) -> int:
    """The layer's index (0 highest); modules outside the contract sort below everything."""
    for index, packages in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in packages):
            return index
    return len(LAYERS)


def package(module: str) -> str:
    return ".".join(module.split(".")[:2])


@dataclass
class Trace:
    """Call events into `sim` modules: (caller module, caller function, callee module)."""

    calls: list[tuple[str, str, str]] = field(default_factory=list)

    def entries(self) -> dict[str, tuple[int, int, int]]:
        """Module -> (distinct caller functions from other modules, those from other packages,
        raw calls from them)."""
        callers: dict[str, set[tuple[str, str]]] = collections.defaultdict(set)
        raw: collections.Counter[str] = collections.Counter()
        for caller_module, caller, callee in self.calls:
            if caller_module != callee:
                callers[callee].add((caller_module, caller))
                raw[callee] += 1
        return {
            m: (len(c), sum(package(cm) != package(m) for cm, _ in c), raw[m])
            for m, c in callers.items()
        }

    def climbs(self) -> list[tuple[str, str, int]]:
        """(caller, callee module, raw calls) of every climb back up (see the module doc)."""
        found: collections.Counter[tuple[str, str]] = collections.Counter()
        for caller_module, caller, callee in self.calls:
            if package(callee) in LOWER and layer(caller_module) < layer(callee):
                found[(f"{caller_module}.{caller}", callee)] += 1
        return [(c, m, n) for (c, m), n in sorted(found.items())]

    def resolution_climbs(self) -> int:
        return sum(
            1
            for _, callee, _ in self.climbs()
            if package(callee) == "sim.costs" or callee in WORKLOAD_SPEC
        )

    def scenario_down_calls(self) -> int:
        return sum(
            1
            for caller_module, _, callee in self.calls
            if caller_module.startswith("sim.scenario") and package(callee) in LOWER
        )


def trace(run: Callable[[], Any]) -> Trace:
    """Call `run()` with every Python call into `sim` recorded, except inside SimPy's run."""
    import simpy

    out = Trace()

    def sim_frame(frame: FrameType | None) -> FrameType | None:
        while frame is not None:
            name = frame.f_globals.get("__name__", "")
            if name == "sim" or name.startswith("sim."):
                return frame
            frame = frame.f_back
        return None

    def profile(frame: FrameType, event: str, arg: object) -> None:
        if event != "call":
            return
        callee = frame.f_globals.get("__name__", "")
        if not callee.startswith("sim"):
            return
        caller = sim_frame(frame.f_back)
        if caller is None:
            out.calls.append(("<top>", "<top>", callee))
        else:
            out.calls.append((caller.f_globals["__name__"], caller.f_code.co_qualname, callee))

    original = simpy.Environment.run

    def untraced_run(self: simpy.Environment, until: Any = None) -> Any:
        sys.setprofile(None)
        try:
            return original(self, until)
        finally:
            sys.setprofile(profile)

    simpy.Environment.run = untraced_run  # type: ignore[method-assign]
    try:
        sys.setprofile(profile)
        try:
            run()
        finally:
            sys.setprofile(None)
    finally:
        simpy.Environment.run = original  # type: ignore[method-assign]
    return out


def report(name: str, t: Trace, all_modules: bool, verbose: bool) -> None:
    entries = t.entries()
    climbs = t.climbs()
    print(f"\n== {name}")
    print(f"{'module':<36} {'entries':>8} {'outside':>8} {'calls':>7}")
    shown = [m for m in WATCHED] + sorted(
        (m for m in entries if m not in WATCHED),
        key=lambda m: (-entries[m][0], m),
    )
    for module in shown:
        if module not in WATCHED and not all_modules and package(module) not in LOWER:
            continue
        n, outside, raw = entries.get(module, (0, 0, 0))
        print(f"{module:<36} {n:>8} {outside:>8} {raw:>7}")
    print(
        f"climbs back up: {len(climbs)}, of which resolution: {t.resolution_climbs()}   "
        f"scenario down-calls: {t.scenario_down_calls()}"
    )
    if verbose:
        callers: dict[str, list[str]] = collections.defaultdict(list)
        for caller_module, caller, callee in t.calls:
            if callee in WATCHED and caller_module != callee:
                entry = f"{caller_module}.{caller}"
                if entry not in callers[callee]:
                    callers[callee].append(entry)
        for module in WATCHED:
            print(f"  into {module}: {', '.join(callers[module]) or '-'}")
        for caller, callee, n in climbs:
            print(f"  climb {caller} -> {callee} ({n} calls)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("scenarios", nargs="*", default=["scenarios/quickstart.yaml"])
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[],
        help="a scenario override, as batchsim run's --set",
    )  # fmt: skip
    parser.add_argument(
        "--all-modules", action="store_true",
        help="list every module entered, not only sim.costs and sim.workload",
    )  # fmt: skip
    parser.add_argument(
        "-v", "--verbose", action="store_true",
        help="name the callers into the catalog and profile, and every climb",
    )  # fmt: skip
    args = parser.parse_args(argv)
    sys.path.insert(0, os.getcwd())
    import sim
    from sim.simulate import simulate

    print(f"tracing {os.path.dirname(os.path.abspath(sim.__file__))}")
    for path in args.scenarios:
        start = time.perf_counter()
        t = trace(lambda path=path: simulate(path, overrides=args.overrides))
        report(f"{path} ({time.perf_counter() - start:.1f} s)", t, args.all_modules, args.verbose)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
