"""batchsim: a discrete-event simulator of LLM-serving batching policies.

`simulate(path_or_scenario) -> Results` runs a scenario (every variant on the same requests);
`load_scenario(path, overrides)` validates one without running it.
"""

from sim.errors import ScenarioError
from sim.metrics.results import Results, VariantResult
from sim.scenario.load import ScenarioSet, load_scenario, load_scenario_dict
from sim.simulate import simulate
from sim.whatif.capacity import capacity_search
from sim.whatif.sweep import sweep

__all__ = [
    "Results",
    "ScenarioError",
    "ScenarioSet",
    "VariantResult",
    "capacity_search",
    "load_scenario",
    "load_scenario_dict",
    "simulate",
    "sweep",
]
__version__ = "0.1.0"
