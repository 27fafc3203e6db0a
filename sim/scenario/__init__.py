"""Scenario files: the strict schema of every section (`schema`) and loading, variants,
`--set` overrides and resolution against the catalog (`load`)."""
