# Sourced by scripts/demo and scripts/test: make .venv with the project installed.
# Reinstalls only when pyproject.toml changes, so repeated runs start at once.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
EXTRAS="${1:-plot}"
PY="${PYTHON:-python3}"
if [ ! -x "$VENV/bin/python" ]; then
    echo "loadgen: creating $VENV" >&2
    "$PY" -m venv "$VENV"
fi
stamp="$VENV/.installed-$EXTRAS"
want="$(sha256sum "$ROOT/pyproject.toml" | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    echo "loadgen: installing the project into $VENV (extras: $EXTRAS)" >&2
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e "$ROOT[$EXTRAS]"
    echo "$want" > "$stamp"
fi
export PATH="$VENV/bin:$PATH"
