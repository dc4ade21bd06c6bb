#!/usr/bin/env bash
# What `make build` needs beyond Python on a fresh Debian machine (run as root): npm, to fetch the Pyodide
# core (`npm pack`), pip, which fetches the pinned wheels and builds ours, and the Zig toolchain from PyPI,
# whose clang compiles pyengine's C kernel (build_kernel.py; pinned: LLVM's defaults move between versions).
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

ZIG=0.17.1
if ! $PYTHON -c "import importlib.metadata as m, sys; sys.exit(m.version('ziglang') != '$ZIG')" 2>/dev/null; then
    echo "installing ziglang $ZIG (pip, about 400 MB)"
    # Debian's own python3 refuses pip installs (PEP 668); a build machine installs into it all the same
    PIP_BREAK_SYSTEM_PACKAGES=1 $PYTHON -m pip install --quiet --disable-pip-version-check "ziglang==$ZIG" 2>&1 \
        | { grep -v "is ignored: it is neither a file nor a directory\|Running pip as the 'root' user" || true; }
fi
