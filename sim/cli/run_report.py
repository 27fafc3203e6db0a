"""What `batchsim run` says about a finished simulation besides the summary table.

* `simulated_line`: how many requests were simulated, counted once however many variants ran
  on them ("3000 requests x 2 variants"), and how long it took;
* `rejection_check`: a variant in which every request was rejected measured nothing, so the run
  fails like any bad input, saying why the requests were rejected (counts by cause); rejections
  in a run that otherwise worked become a note under the table. A variant with no requests at
  all (a trace whose every request `long_prompts: drop` dropped) is refused the same way.
"""

from __future__ import annotations

from sim.errors import ScenarioError
from sim.metrics.rejections import describe
from sim.metrics.results import Results, VariantResult


def simulated_line(results: Results, elapsed_s: float) -> str:
    counts = {name: v.num_requests for name, v in results.variants.items()}
    if len(set(counts.values())) == 1:
        n = next(iter(counts.values()))
        what = f"{n} requests" + (f" x {len(counts)} variants" if len(counts) > 1 else "")
    else:
        what = "requests: " + ", ".join(f"{name} {n}" for name, n in counts.items())
    return f"{what} simulated in {elapsed_s:.2f} s"


def rejection_check(results: Results, file: str | None = None) -> list[str]:
    """Notes on rejected requests; a ScenarioError when a variant served none at all."""
    notes = []
    for name, variant in results.variants.items():
        if variant.num_requests == 0:
            _nothing_simulated(name, variant, file)
        causes = variant.rejections()
        if not causes:
            continue
        total = variant.num_requests
        rejected = sum(causes.values())
        if rejected == total:
            raise ScenarioError(
                f"variant {name!r}: every one of its {total} requests was rejected "
                f"({describe(causes)}); nothing was measured, so no results were written",
                file=file,
            )
        notes.append(f"{name}: {rejected} of {total} requests rejected ({describe(causes)})")
    return notes


def _nothing_simulated(name: str, variant: VariantResult, file: str | None) -> None:
    """A variant whose workload ended up empty (a trace whose every request `long_prompts:
    drop` dropped, a window the caps cut to nothing) measured nothing either: refused, naming
    what emptied it."""
    dropped = int(variant.counters.get("workload_dropped_requests", 0))
    if dropped:
        model = variant.scenario.get("model")
        context = model.get("max_model_len") if isinstance(model, dict) else None
        limit = f" (max_model_len {context})" if context is not None else ""
        raise ScenarioError(
            f"variant {name!r}: long_prompts: drop dropped every one of its {dropped} requests "
            f"(prompt + output longer than the model's context{limit}); nothing was measured, "
            "so no results were written (use clip, or a model with a longer context)",
            file=file,
            path="workload.trace.long_prompts",
        )
    raise ScenarioError(
        f"variant {name!r}: its workload has no requests (num_requests, duration_s or the "
        "trace window left none); nothing was measured, so no results were written",
        file=file,
        path="workload",
    )
