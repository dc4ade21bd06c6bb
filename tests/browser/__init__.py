"""Browser tests: the app in Debian's Chromium through Playwright, and the worker glue in CPython."""
