#!/usr/bin/env bash
# What `make build` needs beyond Python on a fresh Debian machine (run as root): npm, to fetch the Pyodide
# core (`npm pack`), and pip, which fetches the pinned wheels and builds ours.
set -euo pipefail
PYTHON=${PYTHON:-python3}

need_apt=()
command -v npm >/dev/null 2>&1 || need_apt+=(npm)
$PYTHON -m pip --version >/dev/null 2>&1 || need_apt+=(python3-pip)
if [ ${#need_apt[@]} -gt 0 ]; then
    echo "installing ${need_apt[*]} (apt)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
