"""The model: its hyperparameters, the network's operations, the transformer's forward pass, the KV cache.

:mod:`~pyengine.model.config` reads the hyperparameters through one table of
GGUF keys and one of architectures; :mod:`~pyengine.model.ops` holds RMSNorm,
rope, attention and the FFN activations; :mod:`~pyengine.model.transformer`
runs them in llama.cpp's order; :mod:`~pyengine.model.kv_cache` keeps the keys
and values; :mod:`~pyengine.model.load` checks the tensors and builds a
:class:`Model` from a GGUF.
"""

from pyengine.model.config import ModelConfig
from pyengine.model.kv_cache import KVCache
from pyengine.model.load import load_model
from pyengine.model.transformer import Model

__all__ = ["KVCache", "Model", "ModelConfig", "load_model"]
