#!/usr/bin/env bash
# Set up (first time) and run the linter and the test suite. Extra arguments go to pytest.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/setup-env.sh"
setup_env dev,real,kernels,plan  # kernels: Triton, tested through its interpreter; plan: Ray
install_chromium  # the report's browser test; skipped where it cannot be installed
ruff check .
ruff format --check .
python -m pytest "$@"
