"""A tokenizer's vocab from GGUF metadata: its keys, token attributes, special ids, merges.

Every value is checked as it is read (a list of the wrong item type or length,
a special id outside the vocab), and a bad one is a :class:`TokenizerError`
naming the key. Names follow gguf-py's ``Keys.Tokenizer`` and llama.cpp's
``llama_vocab::impl::load``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from pyengine.errors import TokenizerError
from pyengine.text.bpe import PRE_TOKENIZERS, PreTokenizer

# GGUF keys of the tokenizer (gguf-py's ``Keys.Tokenizer``).
KEY_MODEL = "tokenizer.ggml.model"
KEY_PRE = "tokenizer.ggml.pre"
KEY_TOKENS = "tokenizer.ggml.tokens"
KEY_SCORES = "tokenizer.ggml.scores"
KEY_TOKEN_TYPE = "tokenizer.ggml.token_type"
KEY_MERGES = "tokenizer.ggml.merges"
# the vocabulary's lists, which only a tokenizer reads (a helper worker opens its file without them)
VOCAB_ARRAYS = frozenset({KEY_TOKENS, KEY_SCORES, KEY_TOKEN_TYPE, KEY_MERGES})
KEY_ADD_BOS = "tokenizer.ggml.add_bos_token"
KEY_ADD_EOS = "tokenizer.ggml.add_eos_token"
KEY_ADD_SPACE_PREFIX = "tokenizer.ggml.add_space_prefix"
KEY_GENERAL_NAME = "general.name"

# Special-token ids: attribute -> GGUF key (llama.cpp's ``special_token_types``).
SPECIAL_ID_KEYS = {
    "bos": "tokenizer.ggml.bos_token_id",
    "eos": "tokenizer.ggml.eos_token_id",
    "eot": "tokenizer.ggml.eot_token_id",
    "eom": "tokenizer.ggml.eom_token_id",
    "unk": "tokenizer.ggml.unknown_token_id",
    "sep": "tokenizer.ggml.seperator_token_id",   # sic, as in gguf-py
    "pad": "tokenizer.ggml.padding_token_id",
    "mask": "tokenizer.ggml.mask_token_id",
    "fim_pre": "tokenizer.ggml.fim_pre_token_id",
    "fim_suf": "tokenizer.ggml.fim_suf_token_id",
    "fim_mid": "tokenizer.ggml.fim_mid_token_id",
    "fim_pad": "tokenizer.ggml.fim_pad_token_id",
    "fim_rep": "tokenizer.ggml.fim_rep_token_id",
    "fim_sep": "tokenizer.ggml.fim_sep_token_id",
}



class TokenizerModel(NamedTuple):
    """A ``tokenizer.ggml.model`` as llama.cpp's ``load`` sets it up."""

    kind: str                    # "spm" (SentencePiece by score), "bpe" (by merge rank), "rwkv", "plamo2"
    default_ids: dict[str, int]  # special ids when no key names them
    add_bos: bool                # default add_bos_token
    add_space_prefix: bool       # default add_space_prefix
    pre: str | None = None       # the pre-tokenizer it always uses, whatever tokenizer.ggml.pre says
    adds_special: bool = True    # encode(add_special=True) adds BOS/EOS (llama.cpp's rwkv, plamo2: never)


MODELS = {
    "llama": TokenizerModel("spm", {"bos": 1, "eos": 2, "unk": 0}, True, True),
    "gpt2": TokenizerModel("bpe", {"bos": 11, "eos": 11}, False, False),
    "gemma4": TokenizerModel("bpe", {}, False, False, pre="gemma4"),   # SentencePiece-style BPE
    "rwkv": TokenizerModel("rwkv", {}, False, False, adds_special=False),   # greedy longest match on bytes
    "plamo2": TokenizerModel("plamo2", {"bos": 1, "eos": 2, "unk": 0, "pad": 3}, False, False,
                             adds_special=False),                      # the tokens of the best total score
}

# llama.cpp's token attribute bits (``llama_token_attr``), and the attribute of each token type
# (``tokenizer.ggml.token_type``: 0 undefined, 1 normal, 2 unknown, 3 control, 4 user-defined,
# 5 unused, 6 byte).
ATTR_UNKNOWN = 1 << 0
ATTR_UNUSED = 1 << 1
ATTR_NORMAL = 1 << 2
ATTR_CONTROL = 1 << 3
ATTR_USER_DEFINED = 1 << 4
ATTR_BYTE = 1 << 5
ATTR_LSTRIP = 1 << 7
ATTR_RSTRIP = 1 << 8
TYPE_ATTRS = (0, ATTR_NORMAL, ATTR_UNKNOWN, ATTR_CONTROL, ATTR_USER_DEFINED, ATTR_UNUSED, ATTR_BYTE)
ATTR_SPECIAL = ATTR_CONTROL | ATTR_USER_DEFINED | ATTR_UNKNOWN   # cut out before tokenizing
ATTR_HIDDEN = ATTR_CONTROL | ATTR_UNKNOWN                        # rendered only with special=True

# Tokens found by their text when no key names them (llama.cpp's ``load``, "auto-detect special
# tokens by text"); a found token also becomes a control token.
EOT_TEXTS = ("<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
             "<EOT>", "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>", "<end_of_utterance>")
EOM_TEXTS = ("<|eom_id|>",)
FIM_TEXTS = {
    "fim_pre": ("<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>",
                "<|code_prefix|>", "<|prefix|>"),
    "fim_suf": ("<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>",
                "<|code_suffix|>", "<|suffix|>"),
    "fim_mid": ("<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>",
                "<|code_middle|>", "<|middle|>"),
    "fim_pad": ("<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"),
    "fim_rep": ("<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"),
    "fim_sep": ("<|file_sep|>",),
}
# Every token with one of these texts ends generation (llama.cpp's ``special_eog_ids``).
EOG_TEXTS = ("<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
             "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
             "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
             "<｜end▁of▁sentence｜>", "[e~[")
# Tokens llama.cpp always renders as text, whatever their type (its gpt-oss hack: user-defined).
ALWAYS_RENDERED = ("<|channel|>", "<|message|>", "<|start|>", "<|constrain|>")


def get(meta: dict, key: str, kind: type | tuple, default: Any = None) -> Any:
    """``meta[key]`` checked to be a ``kind`` (bool is no int); ``default`` when absent."""
    if key not in meta:
        return default
    value = meta[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise TokenizerError(f"{key}: expected {_names(kind)}, got {type(value).__name__}")
    return value


def get_list(meta: dict, key: str, item: type | tuple, n: int | None) -> list | None:
    """``meta[key]`` checked to be a list of ``item`` (bool is no int) of length ``n`` (any if None).

    A 1-D numpy array (the reader's arrays of numbers) of a matching dtype is
    checked by its dtype and comes back as a list of Python numbers.
    """
    value = get(meta, key, (list, np.ndarray))
    if value is None:
        return None
    if n is not None and len(value) != n:
        raise TokenizerError(f"{key}: {len(value)} entries, but {KEY_TOKENS} has {n} tokens")
    if isinstance(value, np.ndarray):
        return _array_list(key, value, item)
    for kind in set(map(type, value)):   # one pass in C; the loop sees each distinct type once
        if not issubclass(kind, item) or issubclass(kind, bool):
            i = next(i for i, x in enumerate(value) if type(x) is kind)
            raise TokenizerError(f"{key}: entry {i} is a {kind.__name__}")
    return value


def _array_list(key: str, value: np.ndarray, item: type | tuple) -> list:
    """A 1-D numpy array of ints or floats, as ``item`` allows, as a list (bool is no int, str never)."""
    items = item if isinstance(item, tuple) else (item,)
    kinds = ("iu" if int in items else "") + ("f" if float in items else "")  # numpy's dtype.kind
    if value.ndim != 1 or value.dtype.kind not in kinds:
        raise TokenizerError(f"{key}: expected a list of {_names(item)}, got an array of {value.dtype}")
    return value.tolist()


def _names(item: type | tuple) -> str:
    return " or ".join(t.__name__ for t in (item if isinstance(item, tuple) else (item,)))


def read_tokens(meta: dict) -> list[str]:
    tokens = get_list(meta, KEY_TOKENS, str, None)
    if not tokens:
        raise TokenizerError(f"{KEY_TOKENS}: missing or empty")
    if "" in tokens:   # llama.cpp renames empty tokens so that every text is unique and non-empty
        tokens = [t or f"[EMPTY_{i}]" for i, t in enumerate(tokens)]
    return tokens


def read_attrs(meta: dict, n: int) -> list[int]:
    """Attribute bits per token from ``tokenizer.ggml.token_type`` (all normal if absent;
    an unknown type is undefined, as in llama.cpp)."""
    types = get_list(meta, KEY_TOKEN_TYPE, int, n)
    if types is None:
        return [ATTR_NORMAL] * n
    if min(types) < 0 or max(types) >= len(TYPE_ATTRS):
        return [TYPE_ATTRS[t] if 0 <= t < len(TYPE_ATTRS) else 0 for t in types]
    return list(map(TYPE_ATTRS.__getitem__, types))


def read_special_ids(meta: dict, n: int, defaults: dict[str, int]) -> dict[str, int | None]:
    ids: dict[str, int | None] = {}
    for name, key in SPECIAL_ID_KEYS.items():
        default = defaults.get(name)
        value = get(meta, key, int, default if default is not None and default < n else None)
        if value is not None and not 0 <= value < n:
            raise TokenizerError(f"{key} = {value} is outside the vocab (0..{n - 1})")
        ids[name] = value
    return ids


def read_merges(meta: dict, required: bool = True) -> dict[str, int]:
    """``tokenizer.ggml.merges`` as ``{"left right": rank}`` (the first of duplicates wins).

    llama.cpp splits each merge at its first space after the first character and
    looks up (left, right); byte-mapped token texts hold no spaces, so looking up
    ``left + " " + right`` finds the same rank."""
    merges = get_list(meta, KEY_MERGES, str, None)
    if merges is None and not required:
        return {}
    if merges is None:
        raise TokenizerError(f"{KEY_MERGES}: missing (a gpt2 tokenizer needs its merges)")
    return dict(zip(reversed(merges), range(len(merges) - 1, -1, -1)))


def pre_tokenizer(meta: dict, forced: str | None = None) -> tuple[str, PreTokenizer]:
    """The pre-tokenizer ``tokenizer.ggml.pre`` names (``forced``, if given, whatever the key says)."""
    name = forced or get(meta, KEY_PRE, str, "") or "default"    # llama.cpp: missing -> default
    if name not in PRE_TOKENIZERS:
        raise TokenizerError(f"{KEY_PRE} = {name!r} is not supported; supported: {', '.join(sorted(PRE_TOKENIZERS))}")
    return name, PRE_TOKENIZERS[name]


def raw_byte(b: int) -> str:
    """The text of a token made of the single byte ``b``, as the GGUF reader decodes it
    (UTF-8 with surrogateescape: bytes >= 0x80 alone become U+DC80..U+DCFF)."""
    return chr(b) if b < 0x80 else chr(0xDC00 + b)



def hex_prefix(s: str) -> int:
    """C ``strtol(s, NULL, 16)`` of a byte token's two hex digits: the leading hex digits' value."""
    value = 0
    for c in s:
        if c not in "0123456789abcdefABCDEF":
            break
        value = value * 16 + int(c, 16)
    return value & 0xFF

