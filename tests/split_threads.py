"""A model split over workers in one CPython process: the helpers as threads, on a ThreadBlock.

The same code as in the browser (``pyengine.parallel``), so a split model's replies here are the
page's with as many workers (up to Pyodide's numpy against CPython's).
"""

from __future__ import annotations

import threading

from pyengine.gguf import open_gguf
from pyengine.model import load_model
from pyengine.model.config import ModelConfig
from pyengine.model.shard import Placement
from pyengine.parallel import channel, driver, server
from pyengine.weights.budget import browser_budget


def start(path, n_workers: int, weights: str = "f32"):
    """The model over ``n_workers`` workers in this process, in the forms the page would give it: the main
    worker's SplitModel (the whole model when it cannot be cut), the helpers, and their threads
    (running until the model is closed)."""
    g = open_gguf(path)
    config = ModelConfig.from_metadata(g.metadata, g.tensors)
    plan = driver.plan_load(g, config, weights, n_workers, browser_budget)
    if len(plan.shards) == 1:
        return load_model(g, weights=plan.weights, placement=Placement(forms=plan.forms)), [], []
    lay = driver.channel_layout(config, plan.shards)
    block = channel.ThreadBlock(lay["n_floats"])
    msg = server.plan_message(plan.shards, plan.forms, plan.weights, lay)
    helpers = [server.load_helper(open_gguf(path), msg, i, block) for i in range(1, len(plan.shards))]
    threads = [threading.Thread(target=h.serve, daemon=True) for h in helpers]
    for t in threads:
        t.start()
    chan = channel.Channel(block, 0, lay, [s.vocab[1] - s.vocab[0] for s in plan.shards])
    main = load_model(g, weights=plan.weights, placement=Placement(plan.shards[0], plan.forms, chan))
    return driver.SplitModel(main, chan), helpers, threads


def stop(model, threads) -> None:
    if threads:
        model.close()
    for t in threads:
        t.join(5)
    assert not any(t.is_alive() for t in threads)                          # EXIT ends every loop
