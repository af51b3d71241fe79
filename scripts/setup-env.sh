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

# Headless Chromium for the report's browser test (tests/test_report_browser.py), from the
# system's packages where the machine allows it (root or password-less sudo, apt-get);
# elsewhere the test skips, and this says why.
install_chromium() {
  local browser
  for browser in chromium chromium-browser google-chrome; do
    command -v "$browser" >/dev/null 2>&1 && return 0
  done
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "note: no Chromium and no apt-get: the report browser test will skip" >&2
    return 0
  fi
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    if ! sudo -n true 2>/dev/null; then
      echo "note: no Chromium and no root to install it: the report browser test will skip" >&2
      return 0
    fi
    sudo="sudo -n"
  fi
  if ! $sudo apt-get install -y -qq --no-install-recommends chromium >/dev/null 2>&1; then
    $sudo apt-get update -qq >/dev/null 2>&1 || true
    $sudo apt-get install -y -qq --no-install-recommends chromium >/dev/null 2>&1 \
      || echo "note: could not install Chromium: the report browser test will skip" >&2
  fi
}
