"""The `batchsim` command line (also `python -m sim`): one module per group of subcommands."""
