"""The page's JavaScript libraries for ``static/vendor/``: taken from their npm packages at build time, pinned.

Replies are Markdown: markdown-it parses them (raw HTML in them stays text), DOMPurify cleans what it
renders, highlight.js colours the fenced code. Each package is fetched with ``npm pack`` (the tarball only,
checked against its sha256), and the few files the page loads are copied out of it with their licence.
Nothing is fetched by the page from anywhere but static/.

The tests have one package of their own, axe-core (the accessibility rules the browser tests run on every
state of the page, tests/browser/axe.py). It is fetched and checked the same way, kept in the download cache
and read from there by the tests; it is never copied into static/, so the page never serves it.
``python build_scripts/fetch_vendor.py --tests`` fetches it (``make test-deps`` does).
"""

from __future__ import annotations

import sys
import tarfile
from pathlib import Path

from buildlib import install_bytes, npm_pack

# One row a package: (npm spec, tarball, sha256 of the tarball, {file in the tarball: name in static/vendor/}).
VENDOR: tuple[tuple[str, str, str, dict[str, str]], ...] = (
    ("markdown-it@15.0.3", "markdown-it-15.0.3.tgz",
     "98a7453983ab0e268c17dbd5260bf7190ba46b4cca912327fc1c1a2578e4b56d",
     {"dist/browser/markdown-it.esm.min.mjs": "markdown-it.mjs", "LICENSE": "markdown-it.LICENSE"}),
    ("dompurify@3.4.18", "dompurify-3.4.18.tgz",
     "8b86f79c6481fec23dd81d4de32179422668912ed033c0c47e786a6e70cb3379",
     {"dist/purify.es.mjs": "purify.mjs", "LICENSE": "dompurify.LICENSE"}),
    # highlight.js's own npm package ships CommonJS; its prebuilt ES module (the common languages) is this one.
    ("@highlightjs/cdn-assets@11.12.0", "highlightjs-cdn-assets-11.12.0.tgz",
     "b8a006d30f45afe783072569f3d69c5b60c0e7b9ca28cd474e12f2584e2a3bd9",
     # (its colours are styles.css's own, a pair a class for the light and the dark theme)
     {"es/highlight.min.js": "highlight.mjs", "LICENSE": "highlight.js.LICENSE"}),
)


def build_vendor(dest: Path) -> dict[Path, str]:
    """Copy the files of every VENDOR package into ``dest``; return {path: "new"|"updated"|"ok"}."""
    done = {}
    for spec, tarball, sha256, files in VENDOR:
        with tarfile.open(npm_pack(spec, tarball, sha256), "r:gz") as tar:
            for member, name in files.items():
                data = tar.extractfile(f"package/{member}")
                if data is None:
                    raise SystemExit(f"error: {tarball} has no package/{member}")
                done[dest / name] = install_bytes(data.read(), dest / name)
    return done


# The tests' own packages (never served): (npm spec, tarball, sha256 of the tarball, the file the tests read).
TEST_VENDOR: dict[str, tuple[str, str, str, str]] = {
    "axe-core": ("axe-core@4.10.3", "axe-core-4.10.3.tgz",
                 "0f2b4d7dcdf7d1219df8d1959ad68e565f51d14c3f0d88bb71cd59abeb956292", "axe.min.js"),
}


def tests_package_source(name: str) -> str:
    """The text of a test package's file (``TEST_VENDOR[name]``), fetched into the cache the first time."""
    spec, tarball, sha256, member = TEST_VENDOR[name]
    with tarfile.open(npm_pack(spec, tarball, sha256), "r:gz") as tar:
        data = tar.extractfile(f"package/{member}")
        if data is None:
            raise SystemExit(f"error: {tarball} has no package/{member}")
        return data.read().decode()


if __name__ == "__main__":
    if sys.argv[1:] != ["--tests"]:
        raise SystemExit("usage: fetch_vendor.py --tests   (the page's packages are fetched by build_static.py)")
    for name in TEST_VENDOR:
        print(f"{name}: {len(tests_package_source(name)):,} chars, sha256-checked")
