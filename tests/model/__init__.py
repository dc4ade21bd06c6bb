"""Tests of pyengine.model: config, the forward pass per family against llama.cpp, ops, the trace, refusals."""
