"""Tests of pyengine.parallel in CPython: the cut into shards, helpers as threads, a helper lost."""
