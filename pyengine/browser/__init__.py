"""The browser: the glue between the page's Web Worker and the engine.

:mod:`~pyengine.browser.worker` takes the page's commands and posts messages
back; :mod:`~pyengine.browser.file_source` reads a dropped ``File``;
:mod:`~pyengine.browser.settings` holds the page's settings and their rules;
:mod:`~pyengine.browser.page` what the page shows of a model;
:mod:`~pyengine.browser.shared_memory` the split over workers on a
SharedArrayBuffer. Only this stage imports ``js``.
"""
