#!/usr/bin/env bash
# What `make build` needs beyond Python on a fresh Debian machine (run as root): npm, to fetch the Pyodide
# core (`npm pack`), and Python's venv module, for the small venv that builds the wheels.
set -euo pipefail
PYTHON=${PYTHON:-python3}

need_apt=()
command -v npm >/dev/null 2>&1 || need_apt+=(npm)
$PYTHON -c "import ensurepip, venv" >/dev/null 2>&1 || need_apt+=(python3-venv)
if [ ${#need_apt[@]} -gt 0 ]; then
    echo "installing ${need_apt[*]} (apt)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
