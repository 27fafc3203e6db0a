"""From the flat per-request, per-step and inter-token tables of a run to summary metrics, and
the `Results` object `simulate()` returns."""
