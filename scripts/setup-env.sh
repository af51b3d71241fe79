# Sourced by the other scripts: create .venv if needed and install the workbench into it.
# Usage: . scripts/setup-env.sh [EXTRAS]   (e.g. "dev")
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
python="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$python" -m venv .venv
fi
. .venv/bin/activate
python -m pip install --quiet --upgrade pip >/dev/null
spec="."
[ -n "${1:-}" ] && spec=".[$1]"
# constraints.txt pins torch to the CPU build for any extra that pulls it in.
python -m pip install --quiet --disable-pip-version-check -c constraints.txt -e "$spec"
