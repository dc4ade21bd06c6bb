#!/usr/bin/env bash
# Install everything the test suite needs on a fresh Debian machine (run as root): the package with its test
# extras (pytest, gguf, playwright + pytest-playwright from PyPI), Debian's Chromium, Node for the Pyodide
# tests, and TypeScript for `make lint` (build_scripts/lint/package.json, pinned with its hash in its lock file). Never `playwright install`: the browser tests drive /usr/bin/chromium.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}

PYTHON=$PYTHON bash build_scripts/install_build_deps.sh   # pip and npm first
# Debian's own python3 refuses pip installs (PEP 668); a test machine installs into it all the same.
if $PYTHON -c "import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_path('stdlib'), 'EXTERNALLY-MANAGED')))"; then
    export PIP_BREAK_SYSTEM_PACKAGES=1
fi
# (the filter drops pip's notes about this machine's configured local index folders that do not exist)
$PYTHON -m pip install --quiet --disable-pip-version-check -e '.[test]' 2>&1 \
    | { grep -v "is ignored: it is neither a file nor a directory" || true; }

need_apt=()
[ -x /usr/bin/chromium ] || need_apt+=(chromium)
command -v node >/dev/null 2>&1 || need_apt+=(nodejs)
command -v npm >/dev/null 2>&1 || need_apt+=(npm)
if [ ${#need_apt[@]} -gt 0 ]; then
    echo "installing ${need_apt[*]} (apt)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
# TypeScript, which checks the page's JavaScript (make lint): exactly the version and bytes package-lock.json names,
# into build_scripts/lint/node_modules/ (git-ignored); nothing else is installed, and no install script runs
npm ci --prefix build_scripts/lint --ignore-scripts --no-audit --no-fund --silent
# axe-core, the browser tests' accessibility rules: npm pack, sha256-checked, into .cache/ (never static/)
$PYTHON build_scripts/fetch_vendor.py --tests
echo "test dependencies ready: $(/usr/bin/chromium --version 2>/dev/null | head -1), node $(node --version)," \
     "playwright $($PYTHON -c 'import importlib.metadata as m; print(m.version("playwright"))'), TypeScript" \
     "$(build_scripts/lint/node_modules/.bin/tsc --version)"
