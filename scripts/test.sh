#!/usr/bin/env bash
# Set up (first time) and run the linter and the test suite. Extra args go to pytest.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/setup-env.sh" dev,real
ruff check .
ruff format --check .
python -m pytest "$@"
