"""`python -m workbench`: the `workbench` command where its entry point is not installed."""

import sys

from workbench.cli import main

sys.exit(main())
