"""The service worker caches exactly the build's files, under the build's version; a new build replaces it
and its cache; another app's cache and responses on the same origin are left alone.

The tests serve a copy of static/ (without the models) from a server of their own, so they can "rebuild"
it (a new version in sw.js's BUILD line, a changed file) and stop it.
"""

from __future__ import annotations

import json
import re
import shutil
import time

import pytest

from browser.conftest import STATIC, NetworkGuard, start_server, stop_server
from browser.pages import BOOT_MS, wait_status

pytestmark = pytest.mark.browser

CACHED = """async () => {
  const out = {};
  for (const name of await caches.keys()) {
    const keys = await (await caches.open(name)).keys();
    out[name] = keys.map((r) => new URL(r.url).pathname).sort();
  }
  return out;
}"""


def build_line(root) -> dict:
    line = next(ln for ln in (root / "sw.js").read_text().splitlines() if ln.startswith("const BUILD = "))
    return json.loads(line.removeprefix("const BUILD = ").split("; //")[0])


def rebuild(root, version: str) -> None:
    """What a new build does to the served folder: another version in sw.js, a file changed."""
    build = {**build_line(root), "version": version}
    sw = root / "sw.js"
    sw.write_text(re.sub(r"^const BUILD = .*$", f"const BUILD = {json.dumps(build)}; // test build",
                         sw.read_text(), count=1, flags=re.M))
    (root / "styles.css").write_text((root / "styles.css").read_text() + f"\n/* build {version} */\n")


@pytest.fixture
def site(tmp_path, built):
    root = tmp_path / "static"
    shutil.copytree(STATIC, root, ignore=shutil.ignore_patterns("models"))
    return root


def visit(browser, url: str):
    context = browser.new_context()
    guard = NetworkGuard(context)
    page = context.new_page()
    page.goto(url)
    wait_status(page, ("no model",), BOOT_MS)
    page.evaluate("navigator.serviceWorker.ready")
    page.wait_for_function("() => navigator.serviceWorker.controller !== null")
    return context, page, guard


def caches_become(page, names: list[str], timeout_s: float = 120) -> None:
    """Poll until the origin's caches are ``names`` (wait_for_function does not wait on a promise)."""
    deadline = time.monotonic() + timeout_s
    while sorted(page.evaluate("caches.keys()")) != names:
        assert time.monotonic() < deadline, page.evaluate("caches.keys()")
        time.sleep(0.25)


def test_it_caches_exactly_the_build_s_files_and_nothing_else(browser, site):
    proc, url = start_server(site)
    context, page, guard = visit(browser, url)
    try:
        page.evaluate("""async () => {
            const other = await caches.open("another-app-v1");             // an app beside pyengine
            await other.put("/another-app/data.json", new Response("{}"));
            await fetch("/another-app/missing.js").catch(() => null);      // unlisted: a 404 from the server
            await fetch("files.json", {headers: {range: "bytes=0-9"}});    // a range request
        }""")
        cached = page.evaluate(CACHED)
        build = build_line(site)
        assert cached == {f"pyengine-build-{build['version']}": sorted(["/", *(f"/{p}" for p in build["files"])]),
                          "another-app-v1": ["/another-app/data.json"]}
        assert "/another-app/missing.js" not in str(cached) and len(build["files"]) > 20
    finally:
        context.close()
        stop_server(proc)
    assert guard.outside == []


def test_a_new_build_replaces_the_worker_and_its_cache(browser, site):
    proc, url = start_server(site)
    context, page, guard = visit(browser, url)
    try:
        first = build_line(site)["version"]
        page.evaluate("caches.open('another-app-v1').then((c) => c.put('/another-app/x', new Response('x')))")
        assert sorted(page.evaluate("caches.keys()")) == ["another-app-v1", f"pyengine-build-{first}"]
        rebuild(site, "0000testbuild02")
        page.evaluate("navigator.serviceWorker.getRegistration().then((r) => r.update())")
        caches_become(page, ["another-app-v1", "pyengine-build-0000testbuild02"])
    finally:
        stop_server(proc)
    page.reload()                                   # the server is gone: the new build comes from its cache
    wait_status(page, ("no model",), BOOT_MS)
    css = page.evaluate("fetch('styles.css').then((r) => r.text())")
    assert css.endswith("/* build 0000testbuild02 */\n")
    assert page.evaluate("crossOriginIsolated")
    context.close()
    assert guard.outside == []
