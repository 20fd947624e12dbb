#!/bin/sh
# Builds {{name}}.wasm (a WebAssembly component for wasmprov) from app.py.
# The first run makes a virtual environment, .venv, with what
# requirements.txt lists (componentize-py and the wasmprov SDK); later runs
# reuse it, and install again only when requirements.txt changed.
set -eu
cd "$(dirname "$0")"
python=${PYTHON:-python3}
if ! command -v "$python" >/dev/null 2>&1; then
    echo "$python not found: install Python 3.10 or later with venv (e.g. apt-get install python3 python3-venv)" >&2
    exit 1
fi
if [ ! -x .venv/bin/python ]; then
    if ! "$python" -m venv .venv; then
        rm -rf .venv
        echo "$python -m venv failed: install the venv module (e.g. apt-get install python3-venv)" >&2
        exit 1
    fi
fi
if ! cmp -s requirements.txt .venv/requirements.installed; then
    .venv/bin/pip install --quiet --disable-pip-version-check -r requirements.txt
    cp requirements.txt .venv/requirements.installed
fi
wit=$(.venv/bin/python -c 'import wasmprov_plugin; print(wasmprov_plugin.WIT)')
world=$(.venv/bin/python -c 'import wasmprov_plugin; print(wasmprov_plugin.WORLD)')
# componentize-py finds the SDK in the environment VIRTUAL_ENV names.
VIRTUAL_ENV="$PWD/.venv" .venv/bin/componentize-py -d "$wit" -w "$world" \
    componentize app -o {{name}}.wasm.tmp >/dev/null
mv {{name}}.wasm.tmp {{name}}.wasm
echo "built {{name}}.wasm ($(wc -c < {{name}}.wasm) bytes)"
