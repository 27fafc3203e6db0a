"""`python -m sim ...` is the same as the `batchsim` command."""

import sys

from sim.cli.main import main

sys.exit(main())
