# Sourced by bin/concord and bin/test: makes sure uv and the locked environment are there.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export UV_PYTHON_DOWNLOADS=never
# pyenv picks Python 3.12 from .python-version; uv is installed into it when missing. Inside a virtual
# environment (e.g. .venv's bin first on PATH) the interpreter it was made from is meant, not the venv's.
PYTHON=$(python3 -c 'import sys; print(getattr(sys, "_base_executable", "") or sys.executable)')
# Without pyenv's shims on PATH, python3 may be the system's: take pyenv's 3.12 directly.
if [[ "$($PYTHON -c 'import sys; print("%d.%d" % sys.version_info[:2])')" != 3.12 ]]; then
  for candidate in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python3; do
    [[ -x "$candidate" ]] && PYTHON="$candidate"
  done
fi
case "$($PYTHON -c 'import sys; print("%d.%d" % sys.version_info[:2])')" in
  3.12) ;;
  *) echo "Concord needs Python 3.12 (found $($PYTHON --version)); install it with pyenv." >&2; exit 1 ;;
esac
if ! "$PYTHON" -m uv --version >/dev/null 2>&1; then
  echo "Installing uv into $PYTHON ..."
  "$PYTHON" -m pip install --quiet --disable-pip-version-check uv
fi
uv() { "$PYTHON" -m uv "$@"; }
export UV_PYTHON="$PYTHON"
uv sync --frozen --quiet
