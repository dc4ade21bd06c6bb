"""Tests of pyengine.text: tokenizers and chat templates, against llama.cpp."""
