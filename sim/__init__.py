"""batchsim: a discrete-event simulator of LLM-serving batching policies.

`simulate(scenario) -> Results` runs a scenario (every variant on the same requests);
`sweep(scenario, grid)`, `capacity_search(scenario, slos)` and `search(scenario, space, slos)`
(the cheapest fleet meeting the SLOs) ask what-if questions over many runs;
`load_scenario(path, overrides)` validates one without running it. A scenario is a YAML path, a
mapping or a loaded `ScenarioSet`.

The names are loaded on first use (module `__getattr__`), so `import sim`, and the `batchsim`
command's start-up, do not pay for pandas, matplotlib or pyarrow until something needs them.
`sim.simulate` is the function, even after the submodule of the same name has been imported
(the import system would otherwise bind the module over it).
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

from sim.version import __version__ as __version__

# public name -> the module that defines it
_EXPORTS = {
    "Results": "sim.metrics.results",
    "VariantResult": "sim.metrics.results",
    "ScenarioError": "sim.errors",
    "ScenarioSet": "sim.scenario.load",
    "load_scenario": "sim.scenario.load",
    "load_scenario_dict": "sim.scenario.load",
    "simulate": "sim.simulate",
    "sweep": "sim.whatif.sweep",
    "capacity_search": "sim.whatif.capacity",
    "search": "sim.whatif.search",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from sim.errors import ScenarioError as ScenarioError
    from sim.metrics.results import Results as Results
    from sim.metrics.results import VariantResult as VariantResult
    from sim.scenario.load import ScenarioSet as ScenarioSet
    from sim.scenario.load import load_scenario as load_scenario
    from sim.scenario.load import load_scenario_dict as load_scenario_dict
    from sim.simulate import simulate as simulate
    from sim.whatif.capacity import capacity_search as capacity_search
    from sim.whatif.search import search as search
    from sim.whatif.sweep import sweep as sweep


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'sim' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


class _Package(types.ModuleType):
    def __setattr__(self, name: str, value: Any) -> None:
        # importing the submodule `sim.simulate` sets `sim.simulate = <module>`: keep the function
        if name in _EXPORTS and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
