"""The Content-Security-Policy is in force: the app starts under it (Python in its worker, wasm, the helper
workers' script) with no violation, and what an attacker would inject (an inline script, an inline event
handler, an inline style) is refused, both with serve.py's header and, on a server that sends no header at
all, with index.html's meta tag alone. (eval cannot be tried from here: DevTools' own code may eval; the
policy's text, which has no 'unsafe-eval', is tests/app/test_serve.py's.)"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from browser.conftest import STATIC, NetworkGuard, open_app

pytestmark = pytest.mark.browser

INJECT = """() => {
  const seen = [];
  document.addEventListener("securitypolicyviolation", (e) => seen.push(e.effectiveDirective));
  const script = document.createElement("script");
  script.textContent = "window.injected = 'script'";
  document.head.append(script);
  const img = document.createElement("img");
  img.setAttribute("onerror", "window.injected = 'handler'");
  img.src = "missing.png";
  document.body.append(img);
  const div = document.createElement("div");
  div.setAttribute("style", "width: 123px");
  document.body.append(div);
  return new Promise((done) => setTimeout(() => done({
    injected: window.injected ?? null, width: div.getBoundingClientRect().width === 123,
    seen: [...new Set(seen)].sort(),
  }), 1500));
}"""
REFUSED = {"injected": None, "width": False, "seen": ["script-src-attr", "script-src-elem", "style-src-attr"]}


def test_the_app_runs_under_the_policy_and_injected_code_is_refused(browser, server):
    violations = []
    context, page, guard = open_app(browser, server)   # Python started in its worker: wasm allowed
    try:
        page.on("console", lambda m: violations.append(m.text) if "Content Security Policy" in m.text else None)
        assert "frame-ancestors 'none'" in page.evaluate("fetch('index.html').then(r => r.headers.get("
                                                         "'content-security-policy'))")
        result = page.evaluate(INJECT)
        assert result == REFUSED
    finally:
        context.close()
    assert guard.outside == [] and all("missing.png" in v or "inline" in v or "eval" in v for v in violations)


def test_the_meta_tag_holds_the_policy_on_a_server_without_headers(browser, built):
    proc = subprocess.Popen([sys.executable, "-m", "http.server", "--bind", "127.0.0.1", "0"], cwd=STATIC,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        port = re.search(r"port (\d+)", proc.stdout.readline()).group(1)
        context = browser.new_context()
        guard = NetworkGuard(context)
        page = context.new_page()
        page.goto(f"http://127.0.0.1:{port}/")
        assert page.evaluate("fetch('index.html').then(r => r.headers.get('content-security-policy'))") is None
        result = page.evaluate(INJECT)
        assert result == REFUSED
        context.close()
        assert guard.outside == []
    finally:
        proc.terminate()
        proc.wait(timeout=10)
