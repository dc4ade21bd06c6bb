"""Tests of pyengine.generation: sampling, the loop, chat, grammars, JSON schemas, tools, prompt lookup."""
