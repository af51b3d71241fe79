# Sourced by the other scripts. `setup_env [EXTRAS]` creates .venv if needed and installs
# the workbench into it (EXTRAS e.g. "dev,real"); it leaves the venv active.
set -euo pipefail

setup_env() {
  local extras="${1:-}"
  local root
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  cd "$root"
  if [ ! -x .venv/bin/python ]; then
    "${PYTHON:-python3}" -m venv .venv
  fi
  . .venv/bin/activate
  python -m pip install --quiet --upgrade pip >/dev/null
  local spec="."
  [ -n "$extras" ] && spec=".[$extras]"
  # constraints.txt pins torch to the CPU build for any extra that pulls it in.
  python -m pip install --quiet --disable-pip-version-check -c constraints.txt -e "$spec"
}
