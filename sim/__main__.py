"""`python -m sim ...` is the same as the `batchsim` command."""

import sys

from sim.cli import entry

sys.exit(entry())
