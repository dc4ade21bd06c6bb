"""The service worker: after one visit, a reload with the server stopped still brings the app up.

This test runs its own server (it stops it), so the rest of the session keeps theirs.
"""

from __future__ import annotations

import pytest

from browser.conftest import NetworkGuard, start_server, stop_server
from browser.pages import BOOT_MS, wait_status

pytestmark = pytest.mark.browser


def test_reload_with_the_server_stopped(browser, built):
    proc, url = start_server()
    context = browser.new_context()
    guard = NetworkGuard(context)
    try:
        page = context.new_page()
        page.goto(url)
        wait_status(page, ("no model",), BOOT_MS)
        # The service worker has cached the app and the runtime once it is active.
        page.wait_for_function("() => navigator.serviceWorker.ready.then(() => true)")
        page.wait_for_function("() => navigator.serviceWorker.controller !== null")
    finally:
        stop_server(proc)

    page.reload()
    assert page.title() == "pyengine — offline LLM chat"
    assert page.get_by_test_id("dropzone").is_visible()
    wait_status(page, ("no model",), BOOT_MS)      # Python, numpy and the wheels came from the cache
    assert page.evaluate("crossOriginIsolated")     # the cached responses kept COOP/COEP
    assert page.get_by_test_id("error").is_hidden()
    context.close()
    assert guard.outside == []
