"""axe-core on the page: the rules of WCAG 2.0-2.2 A and AA, axe's best practices and its label-in-name rule.

axe-core is a test dependency only (build_scripts/fetch_vendor.py ``TEST_VENDOR``: npm pack, sha256-checked,
kept in .cache/ and never copied to static/). The page's Content-Security-Policy allows scripts from 'self'
only, so a ``<script>`` with axe's text (``page.add_script_tag(content=...)``) would be refused; the source
goes through ``page.evaluate`` instead (DevTools' own evaluation, which the page's CSP does not govern), once
per document. axe itself uses no eval.

``violations(page)`` returns what axe finds as ``[(rule, impact, [target, ...])]``; ``check(page, state)``
runs it at 1280 and 390 px wide, in the light and the dark theme, and returns every violation with the
width and the theme it was found at.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent / "build_scripts"))
from fetch_vendor import tests_package_source  # noqa: E402

# What axe checks: every WCAG 2.x A and AA rule, the best practices, and two rules axe tags experimental and
# leaves off unless asked: label-in-name (WCAG 2.5.3) and focus-order-semantics (a focusable element has a role).
RUN_OPTIONS = {
    "runOnly": {"type": "tag", "values": ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa", "best-practice"]},
    "rules": {"label-content-name-mismatch": {"enabled": True}, "focus-order-semantics": {"enabled": True}},
    "resultTypes": ["violations"],
}

RUN = """async (options) => {
  const result = await axe.run(document, options);
  // each node as its selector and why it fails (for color-contrast: the colours and their ratio)
  return result.violations.map((v) => [v.id, v.impact, v.nodes.map((n) => `${n.target.join(' ')}: ${
    [...n.any, ...n.all, ...n.none].map((c) => c.message).join('; ')}`)]);
}"""

WIDTHS = {"wide": (1280, 860), "phone": (390, 844)}
THEMES = ("light", "dark")


@functools.cache
def axe_source() -> str:
    return tests_package_source("axe-core")


def violations(page) -> list[tuple[str, str, list[str]]]:
    """axe's violations on the page as it is now: [(rule, impact, ["selector: why", ...])]."""
    if not page.evaluate("() => typeof window.axe === 'object'"):
        page.evaluate(axe_source())   # an expression: defines window.axe in the page
    return [tuple(v) for v in page.evaluate(RUN, RUN_OPTIONS)]


def use_theme(page, theme: str) -> None:
    """The system's colour scheme emulated as ``theme``, the page's switch on "system" (it follows)."""
    page.emulate_media(color_scheme=theme)
    page.evaluate("""() => {
      const s = document.querySelector('[data-testid=theme]');
      if (s && s.value !== 'system') { s.value = 'system'; s.dispatchEvent(new Event('change')); }
    }""")
    # colours that change with a transition (a hovered drop zone's background) are measured once they end
    page.evaluate("""() => Promise.all(document.getAnimations().filter((a) => a instanceof CSSTransition)
      .map((a) => a.finished.catch(() => null)))""")


def check(page, state: str, prepare=None) -> list[str]:
    """axe at both widths and in both themes; ``prepare(page)``, if given, runs after each change of size
    (a state that the resize undoes, such as a focused token, is made again). Returns the violations as
    lines "state width theme: rule (impact) targets"; the page is left wide and light."""
    found = []
    for width_name, (w, h) in WIDTHS.items():
        page.set_viewport_size({"width": w, "height": h})
        for theme in THEMES:
            use_theme(page, theme)
            if prepare:
                prepare(page)
            for rule, impact, targets in violations(page):
                found.append(f"{state} {width_name} {theme}: {rule} ({impact}) {len(targets)} x {targets[:4]}")
    page.set_viewport_size({"width": WIDTHS["wide"][0], "height": WIDTHS["wide"][1]})
    use_theme(page, "light")
    return found
