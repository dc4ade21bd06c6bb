"""The CPython engine's replies, to compare with the page's."""

def cpython_reply(path, turns, max_tokens):
    raise NotImplementedError
