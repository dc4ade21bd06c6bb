"""Playwright fixtures: Debian's Chromium, the app served from static/ by build_scripts/serve.py, a network guard.

- Chromium is ``/usr/bin/chromium`` (``apt-get install chromium``), never a browser from ``playwright install``.
- ``server`` runs serve.py on a free port for the whole session; the app must be built (``make build``)
  and static/ must hold the current web/ (checked, so a stale build fails with a clear message).
- Every request to a host other than 127.0.0.1 is aborted and recorded (``NetworkGuard``); the tests assert
  none was made. Chromium also resolves no host name at all (``--host-resolver-rules``).
- ``app`` is one page with Python started (status past ``starting``), shared by the tests of a module,
  since Pyodide takes ~8 s to start in a worker.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from static_build import same_as_web

from browser.pages import BOOT_MS, wait_status

ROOT = Path(__file__).resolve().parent.parent.parent
STATIC = ROOT / "static"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 # Belt and braces under the route guard, which cannot see a service worker's own fetches:
                 # no host name resolves, so nothing but 127.0.0.1 can be reached from any part of the browser.
                 "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"]


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install -y chromium (make test-deps)")
    return {**browser_type_launch_args, "executable_path": CHROMIUM, "args": CHROMIUM_ARGS}


def check_static() -> None:
    """static/ must exist and hold the page and the pyengine package as web/ and pyengine/ are now."""
    if not (STATIC / "index.html").is_file():
        pytest.fail("static/ is not built: run `make build`")
    page = [p.relative_to(ROOT / "web") for p in (ROOT / "web").rglob("*") if p.is_file()]
    stale = [f"web/{p}" for p in page if not same_as_web(p)]
    wheels = list((STATIC / "wheels").glob("pyengine-*.whl"))
    if len(wheels) != 1:
        pytest.fail("static/wheels/ has no pyengine wheel: run `make build`")
    sources = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "pyengine").rglob("*.py"))
    with zipfile.ZipFile(wheels[0]) as z:
        if "pyengine/__init__.py" in z.namelist():  # a source wheel: compare the bytes
            stale += [p for p in sources if p not in z.namelist() or z.read(p) != (ROOT / p).read_bytes()]
        else:                                        # compiled (.pyc only): compare the times
            stale += [p for p in sources if (ROOT / p).stat().st_mtime > wheels[0].stat().st_mtime]
    if stale:
        pytest.fail(f"static/ is older than {', '.join(stale)}: run `make build`")


def start_server(root: Path = STATIC) -> tuple[subprocess.Popen, str]:
    """serve.py on a free port for ``root``: (process, base URL). Its stderr goes to a file, never to a
    pipe nobody reads (a browser dropping connections makes the server log, and a full pipe would block it)."""
    log = tempfile.TemporaryFile(mode="w+")
    proc = subprocess.Popen([sys.executable, str(ROOT / "build_scripts" / "serve.py"), "--port", "0",
                             "--root", str(root)],
                            env={**os.environ, "SERVE_QUIET": "1"},
                            stdout=subprocess.PIPE, stderr=log, text=True)
    line = proc.stdout.readline()
    m = re.search(r"(http://127\.0\.0\.1:\d+/)", line)
    if not m:
        proc.kill()
        log.seek(0)
        pytest.fail(f"serve.py printed no URL: {line!r} {log.read()!r}")
    return proc, m.group(1)


def stop_server(proc: subprocess.Popen) -> None:
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture(scope="session")
def built():
    """static/ is built from the current sources (checked once a session)."""
    check_static()


@pytest.fixture(scope="session")
def server(built):
    proc, url = start_server()
    yield url
    stop_server(proc)


class NetworkGuard:
    """Aborts every request to a host other than 127.0.0.1 (data: and blob: URLs stay local) and keeps them."""

    def __init__(self, context):
        self.outside: list[str] = []
        context.route("**/*", self.route)
        context.on("request", self.seen)

    @staticmethod
    def is_outside(url: str) -> bool:
        parts = urlsplit(url)
        return parts.scheme not in ("data", "blob") and parts.hostname != "127.0.0.1"

    def seen(self, request) -> None:
        if self.is_outside(request.url) and request.url not in self.outside:
            self.outside.append(request.url)

    def route(self, route) -> None:
        if self.is_outside(route.request.url):
            self.seen(route.request)
            route.abort()
        else:
            route.continue_()


def strip_isolation_headers(route) -> None:
    """A route that takes COOP and COEP off the responses: the page is not cross-origin isolated."""
    response = route.fetch()
    headers = {k: v for k, v in response.headers.items()
               if k.lower() not in ("cross-origin-opener-policy", "cross-origin-embedder-policy")}
    route.fulfill(response=response, headers=headers)


@contextmanager
def fresh_page(browser, url: str, isolated: bool = True) -> Iterator:
    """A page of its own on the app at ``url`` with Python started, in a new context with the guard on and
    service workers blocked (their cached responses would bring the headers back); isolated=False takes
    COOP/COEP off every response. The context is closed after, and no request may have left 127.0.0.1."""
    context = browser.new_context(service_workers="block")
    guard = NetworkGuard(context)
    if not isolated:
        context.route(f"{url}**", strip_isolation_headers)
    page = context.new_page()
    try:
        page.goto(url)
        wait_status(page, ("no model",), BOOT_MS)
        assert page.evaluate("crossOriginIsolated") is isolated
        yield page
    finally:
        context.close()
    assert guard.outside == []


def open_app(browser, url: str):
    """A new context and page on the app, with the guard on, after Python has started. (context, page, guard)"""
    context = browser.new_context(viewport={"width": 1280, "height": 860})
    guard = NetworkGuard(context)
    page = context.new_page()
    page.goto(url)
    wait_status(page, ("no model", "ready"), BOOT_MS)
    return context, page, guard


@pytest.fixture(scope="module")
def app(browser, server):
    """One page on the app for a module's tests (Python started); asserts no request left 127.0.0.1."""
    context, page, guard = open_app(browser, server)
    page.guard = guard
    yield page
    context.close()
    assert guard.outside == [], f"requests left 127.0.0.1: {guard.outside}"
