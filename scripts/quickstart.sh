#!/usr/bin/env bash
# Set up (first time) and run the quickstart scenario on the simulator into quickstart.duckdb.
# Extra arguments go to `workbench run` (e.g. --json).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/setup-env.sh"
setup_env
workbench run scenarios/quickstart.yaml --db quickstart.duckdb "$@"
