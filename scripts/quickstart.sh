#!/usr/bin/env bash
# Set up (first time) and run the quickstart scenario on the simulator into quickstart.duckdb.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/setup-env.sh"
workbench run scenarios/quickstart.yaml --db quickstart.duckdb "$@"
