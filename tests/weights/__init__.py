"""Tests of pyengine.weights: the quantized forms and the C kernel in CPython."""
