"""The model split over several workers: who holds which rows, the shared-buffer protocol, both sides.

When the page is cross-origin isolated, the main worker can start helper
workers ("shards"). Each holds some rows of the split matrices and computes
them when the main worker asks through a shared buffer, with no message per
token. :mod:`~pyengine.parallel.plan` decides who holds which rows,
:mod:`~pyengine.parallel.channel` is the protocol over the shared buffer,
:mod:`~pyengine.parallel.sharded` the main worker's side (a
:class:`~pyengine.parallel.sharded.ShardedLinear` in place of each split
matrix) and :mod:`~pyengine.parallel.server` a helper's side. All of it runs
and is tested in CPython on numpy arrays; the SharedArrayBuffer itself is
:mod:`pyengine.browser.shared_memory`.
"""
