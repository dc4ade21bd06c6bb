#!/usr/bin/env bash
# Install everything the test suite needs on a fresh Debian machine (run as root):
# the package with its test extras, Debian's Chromium for Playwright, and Node for the Pyodide tests.
# Never `playwright install`: the tests drive /usr/bin/chromium.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}

$PYTHON -m pip install --quiet --disable-pip-version-check -e '.[test]'

need_apt=()
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
command -v node >/dev/null 2>&1 || need_apt+=(nodejs npm)
if [ ${#need_apt[@]} -gt 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
echo "test dependencies ready: $(chromium --version 2>/dev/null | head -1), node $(node --version)"
