"""The tokens: SentencePiece (``llama``) and byte-level BPE (``gpt2``) tokenizers from GGUF metadata.

Id for id with llama.cpp's ``llama_tokenize`` (``src/llama-vocab.cpp``); every
rule below is llama.cpp's, named after its function.

Encoding a text (``llama_vocab::impl::tokenize``):

1. **Special tokens first** (``tokenizer_st_partition``). The vocab's control,
   user-defined and unknown tokens, longest text first, each cut out of the
   raw text wherever it occurs (leftmost first, no overlaps). User-defined
   tokens are always cut out (Gemma 3's ``"\\n"``, ``"  "``, ``"<table>"``...);
   control and unknown tokens only with ``parse_special`` (a rendered chat
   template), so ``"<end_of_turn>"`` typed by a user stays plain text.
2. **Each remaining text fragment** is tokenized on its own:
   - SPM (``llm_tokenizer_spm``): a ``" "`` is put in front when
     ``add_space_prefix`` and the fragment starts the text or follows a special
     token; spaces become ``"▁"``; the fragment is cut into characters and the
     adjacent pair whose concatenation is the vocab token of highest *score*
     is merged, again and again (leftmost pair on ties); a final piece that is
     no token is spelled as its UTF-8 bytes, ``<0xNN>`` tokens.
   - BPE (``llm_tokenizer_bpe``): the pre-tokenizer that ``tokenizer.ggml.pre``
     names splits the fragment into words (:data:`PRE_TOKENIZERS`); each word's
     UTF-8 bytes are mapped to printable characters (GPT-2's ``bytes_to_unicode``);
     the adjacent pair with the lowest *merge rank* is merged, again and again
     (leftmost on ties); a final piece that is no token falls back to its
     single-byte tokens.
3. **BOS/EOS**: with ``add_special``, BOS in front if ``add_bos``, EOS at the end
   if ``add_eos`` (``tokenizer.ggml.add_bos_token`` / ``add_eos_token``).

Decoding: :meth:`Tokenizer.token_bytes` is llama.cpp's ``token_to_piece``:
normal tokens as text (``"▁"`` → ``" "`` for SPM; un-byte-mapped for BPE), byte
tokens as their byte, user-defined tokens as their text, control and unknown
tokens as ``b""`` unless ``special=True`` (then their text, e.g.
``b"<end_of_turn>"``), unused/undefined tokens as ``b""``. :meth:`decode`
joins the pieces (no ``clean_spaces`` pass: the text a streaming chat shows).

Errors: a vocab that cannot work (unknown ``tokenizer.ggml.model`` or ``pre``,
arrays of the wrong type or length, special ids out of range, BOS required
but absent) is a :class:`TokenizerError` naming the key.

Where this differs from llama.cpp, on purpose:
- a special-token id key outside the vocab is an error (llama.cpp warns and
  keeps its default id);
- when no key names the EOT token and several texts qualify (SmolLM2:
  ``<|endoftext|>`` and ``<|im_end|>``), the lowest id is taken (llama.cpp
  takes the first in hash-map order; on the models tested they agree). The
  set ``eog_ids`` holds all of them either way;
- special tokens of equal length are cut out in id order (llama.cpp's sort
  leaves their order unspecified; it matters only for overlapping texts);
- of llama.cpp's per-model attribute patches only phi-3's (special tokens eat
  the spaces after them) is kept; those for gpt-oss, gemma4, plamo, jina and
  modern-bert are not;
- :meth:`Tokenizer.decode` joins the pieces without llama.cpp's
  ``clean_spaces`` pass (as llama.cpp's own streaming output does).
"""

from __future__ import annotations

import heapq
from itertools import compress
from dataclasses import dataclass
from typing import Any, Callable

from pyengine.errors import TokenizerError
from pyengine.unicode_classes import compile_pattern, regex_split

# GGUF keys of the tokenizer (gguf-py's ``Keys.Tokenizer``).
KEY_MODEL = "tokenizer.ggml.model"
KEY_PRE = "tokenizer.ggml.pre"
KEY_TOKENS = "tokenizer.ggml.tokens"
KEY_SCORES = "tokenizer.ggml.scores"
KEY_TOKEN_TYPE = "tokenizer.ggml.token_type"
KEY_MERGES = "tokenizer.ggml.merges"
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

# Tokenizer models: GGUF name -> (kind, default special ids, default add_bos, default add_space_prefix).
MODELS = {
    "llama": ("spm", {"bos": 1, "eos": 2, "unk": 0}, True, True),
    "gpt2": ("bpe", {"bos": 11, "eos": 11}, False, False),
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


# -------------------------------------------------------------------------------------------------
# The pre-tokenizers of byte-level BPE: ``tokenizer.ggml.pre`` -> regexes (llama.cpp's
# ``llm_tokenizer_bpe`` constructor, written as there; :mod:`pyengine.unicode_classes` translates).
# -------------------------------------------------------------------------------------------------

GPT2_REGEX = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
# (?i:'s|'t|...) rewritten with explicit cases, as llama.cpp does.
CONTRACTIONS = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
LLAMA3_REGEX = CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
QWEN2_REGEX = CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"


@dataclass(frozen=True)
class PreTokenizer:
    regexes: tuple[str, ...]     # applied in turn (each splits the pieces of the last)
    ignore_merges: bool = False  # a word that is a whole vocab token is taken as it is
    add_bos: bool = False        # default of add_bos_token when the GGUF has no such key


_DEFAULT = PreTokenizer((r"[\p{P}\$\+<=>\^~\|]+", GPT2_REGEX, r"\p{N}+", r"[0-9][0-9][0-9]"))
_LLAMA3 = PreTokenizer((LLAMA3_REGEX,), ignore_merges=True, add_bos=True)
_LLAMA3_PLAIN = PreTokenizer((LLAMA3_REGEX,))
_QWEN2 = PreTokenizer((QWEN2_REGEX,))
_SMOLLM = PreTokenizer((r"\p{N}", GPT2_REGEX))
_GPT2 = PreTokenizer((GPT2_REGEX,))

PRE_TOKENIZERS: dict[str, PreTokenizer] = {
    "default": _DEFAULT,
    **dict.fromkeys(("llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0",
                     "lfm2", "jina-v5-nano"), _LLAMA3),
    **dict.fromkeys(("dbrx", "smaug-bpe"), _LLAMA3_PLAIN),
    **dict.fromkeys(("qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "megrez", "stablelm2", "hunyuan",
                     "solar-open"), _QWEN2),
    **dict.fromkeys(("smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b",
                     "mellum2"), _SMOLLM),
    **dict.fromkeys(("gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de",
                     "a.x-4.0", "mellum", "modern-bert", "jina-v1-en", "jina-v2-code", "roberta-bpe", "mpt",
                     "olmo", "jais", "exaone4", "trillion", "granite-docling"), _GPT2),
}


def _bytes_to_unicode() -> list[str]:
    """GPT-2's byte -> printable character map: printable Latin-1 bytes map to themselves,
    the other 68 (controls, space, 0x7F-0xA0, 0xAD) to U+0100, U+0101, ... in byte order."""
    keep = set(range(0x21, 0x7F)) | set(range(0xA1, 0xAD)) | set(range(0xAE, 0x100))
    chars, n = [], 0
    for b in range(256):
        if b in keep:
            chars.append(chr(b))
        else:
            chars.append(chr(0x100 + n))
            n += 1
    return chars


BYTE_TO_CHAR = _bytes_to_unicode()                          # byte -> mapped character
CHAR_TO_BYTE = {c: b for b, c in enumerate(BYTE_TO_CHAR)}   # and back
_LATIN1_TO_MAPPED = dict(enumerate(BYTE_TO_CHAR))           # str.translate table over latin-1
C_SPACES = " \t\n\v\f\r"                                    # C isspace(): the lstrip/rstrip set
BIG_BUCKET = 64   # special tokens sharing their first 3 characters, beyond which a text is scanned


# -------------------------------------------------------------------------------------------------
# Reading the metadata
# -------------------------------------------------------------------------------------------------

def _get(meta: dict, key: str, kind: type, default: Any = None) -> Any:
    """``meta[key]`` checked to be a ``kind`` (bool is no int); ``default`` when absent."""
    if key not in meta:
        return default
    value = meta[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise TokenizerError(f"{key}: expected {kind.__name__}, got {type(value).__name__}")
    return value


def _get_list(meta: dict, key: str, item: type | tuple, n: int | None) -> list | None:
    """``meta[key]`` checked to be a list of ``item`` (bool is no int) of length ``n`` (any if None)."""
    value = _get(meta, key, list)
    if value is None:
        return None
    if n is not None and len(value) != n:
        raise TokenizerError(f"{key}: {len(value)} entries, but {KEY_TOKENS} has {n} tokens")
    for kind in set(map(type, value)):   # one pass in C; the loop sees each distinct type once
        if not issubclass(kind, item) or issubclass(kind, bool):
            i = next(i for i, x in enumerate(value) if type(x) is kind)
            raise TokenizerError(f"{key}: entry {i} is a {kind.__name__}")
    return value


def _read_tokens(meta: dict) -> list[str]:
    tokens = _get_list(meta, KEY_TOKENS, str, None)
    if not tokens:
        raise TokenizerError(f"{KEY_TOKENS}: missing or empty")
    if "" in tokens:   # llama.cpp renames empty tokens so that every text is unique and non-empty
        tokens = [t or f"[EMPTY_{i}]" for i, t in enumerate(tokens)]
    return tokens


def _read_attrs(meta: dict, n: int) -> list[int]:
    """Attribute bits per token from ``tokenizer.ggml.token_type`` (all normal if absent;
    an unknown type is undefined, as in llama.cpp)."""
    types = _get_list(meta, KEY_TOKEN_TYPE, int, n)
    if types is None:
        return [ATTR_NORMAL] * n
    if min(types) < 0 or max(types) >= len(TYPE_ATTRS):
        return [TYPE_ATTRS[t] if 0 <= t < len(TYPE_ATTRS) else 0 for t in types]
    return list(map(TYPE_ATTRS.__getitem__, types))


def _read_special_ids(meta: dict, n: int, defaults: dict[str, int]) -> dict[str, int | None]:
    ids: dict[str, int | None] = {}
    for name, key in SPECIAL_ID_KEYS.items():
        default = defaults.get(name)
        value = _get(meta, key, int, default if default is not None and default < n else None)
        if value is not None and not 0 <= value < n:
            raise TokenizerError(f"{key} = {value} is outside the vocab (0..{n - 1})")
        ids[name] = value
    return ids


def _read_merges(meta: dict) -> dict[str, int]:
    """``tokenizer.ggml.merges`` as ``{"left right": rank}`` (the first of duplicates wins).

    llama.cpp splits each merge at its first space after the first character and
    looks up (left, right); byte-mapped token texts hold no spaces, so looking up
    ``left + " " + right`` finds the same rank."""
    merges = _get_list(meta, KEY_MERGES, str, None)
    if merges is None:
        raise TokenizerError(f"{KEY_MERGES}: missing (a gpt2 tokenizer needs its merges)")
    return dict(zip(reversed(merges), range(len(merges) - 1, -1, -1)))


def _pre_tokenizer(meta: dict) -> tuple[str, PreTokenizer]:
    name = _get(meta, KEY_PRE, str, "") or "default"    # llama.cpp: missing -> default (with a warning)
    if name not in PRE_TOKENIZERS:
        raise TokenizerError(f"{KEY_PRE} = {name!r} is not supported; supported: {', '.join(sorted(PRE_TOKENIZERS))}")
    return name, PRE_TOKENIZERS[name]


# -------------------------------------------------------------------------------------------------
# The tokenizer
# -------------------------------------------------------------------------------------------------

class Tokenizer:
    """A vocab from GGUF metadata and the llama.cpp algorithm its ``tokenizer.ggml.model`` names.

    Attributes: ``model`` ("llama" | "gpt2"), ``pre`` (``tokenizer.ggml.pre``; used by BPE only),
    ``n_vocab``, ``tokens`` (list[str], index = id), ``bos_id``, ``eos_id``, ``eot_id``
    (int or None), ``eog_ids`` (frozenset: every id that ends generation), ``add_bos``,
    ``add_eos``, ``add_space_prefix``.
    """

    def __init__(self, meta: dict):
        model = _get(meta, KEY_MODEL, str)
        if model not in MODELS:
            raise TokenizerError(f"{KEY_MODEL} = {model!r} is not supported; supported: {', '.join(MODELS)}")
        kind, default_ids, add_bos, add_space_prefix = MODELS[model]
        self.model, self.kind = model, kind
        self.tokens = _read_tokens(meta)
        self.n_vocab = n = len(self.tokens)
        self.token_to_id: dict[str, int] = dict(zip(self.tokens, range(n)))   # the last of duplicates wins
        self.attrs = _read_attrs(meta, n)
        self.pre, self.merges, self.pre_patterns, self.ignore_merges = _get(meta, KEY_PRE, str, ""), {}, (), False
        if kind == "spm":
            self.scores = _get_list(meta, KEY_SCORES, (float, int), n) or [0.0] * n
            self._byte_ids = [self.token_to_id.get("<0x%02X>" % b, self.token_to_id.get(_raw_byte(b)))
                              for b in range(256)]
        else:
            self.pre, pre = _pre_tokenizer(meta)
            self.merges = _read_merges(meta)
            self.pre_patterns, self.ignore_merges, add_bos = pre.regexes, pre.ignore_merges, pre.add_bos
        self._compiled: list | None = None            # pre-tokenizer regexes, compiled on first use
        self._word_cache: dict[str, tuple[int, ...]] = {}
        self.add_space_prefix = _get(meta, KEY_ADD_SPACE_PREFIX, bool, add_space_prefix)
        self.add_bos = _get(meta, KEY_ADD_BOS, bool, add_bos)
        self.add_eos = _get(meta, KEY_ADD_EOS, bool, False)
        ids = _read_special_ids(meta, n, default_ids)
        self._find_by_text(ids)
        self.special_ids = ids
        self.bos_id, self.eos_id, self.eot_id = ids["bos"], ids["eos"], ids["eot"]
        self.eog_ids = self._collect_eog(ids)
        for flag, key, name in ((self.add_bos, KEY_ADD_BOS, "bos"), (self.add_eos, KEY_ADD_EOS, "eos")):
            if flag and ids[name] is None:
                raise TokenizerError(f"{key} is true, but {SPECIAL_ID_KEYS[name]} is not set")
        name = str(meta.get(KEY_GENERAL_NAME, "")).lower()
        if "phi-3" in name or "phi3" in name:
            self._phi3_rstrip()
        self._build_special_index()
        self._pieces: dict[int, bytes] = {}

    @classmethod
    def from_metadata(cls, metadata: dict) -> Tokenizer:
        """Build the tokenizer from GGUF metadata (``GGUFFile.metadata``: plain Python values).

        Raises :class:`TokenizerError` naming the key for an unsupported or inconsistent vocab.
        """
        return cls(metadata)

    # --- vocab facts, as llama.cpp's ``load`` derives them ---------------------------------------

    def _mark_control(self, tid: int) -> None:
        self.attrs[tid] |= ATTR_CONTROL

    def _first_with_text(self, texts: tuple[str, ...]) -> int | None:
        """The lowest id whose text is one of ``texts``. (llama.cpp takes the first in its hash
        map's order; the lowest id agrees with it on SmolLM2, whose EOT is <|endoftext|>.)"""
        found = [self.token_to_id[t] for t in texts if t in self.token_to_id]
        return min(found) if found else None

    def _find_by_text(self, ids: dict[str, int | None]) -> None:
        for name, texts in (("eot", EOT_TEXTS), ("eom", EOM_TEXTS), *FIM_TEXTS.items()):
            if ids[name] is None:
                ids[name] = self._first_with_text(texts)
                if ids[name] is not None:
                    self._mark_control(ids[name])

    def _collect_eog(self, ids: dict[str, int | None]) -> frozenset[int]:
        eog = {ids[name] for name in ("fim_pad", "fim_rep", "fim_sep", "eos", "eot", "eom")}
        for text in EOG_TEXTS:
            tid = self.token_to_id.get(text)
            if tid is not None:
                eog.add(tid)
                self._mark_control(tid)
        eog.discard(None)
        return frozenset(eog)

    def _phi3_rstrip(self) -> None:
        """llama.cpp: for a model named phi-3/phi3, special tokens eat the spaces after them."""
        for tid, attr in enumerate(self.attrs):
            if attr & ATTR_SPECIAL:
                self.attrs[tid] |= ATTR_RSTRIP
        for text, on in (("</s>", True), ("<unk>", False), ("<s>", False), ("<|endoftext|>", False)):
            tid = self.token_to_id.get(text)
            if tid is not None:
                self.attrs[tid] = self.attrs[tid] | ATTR_RSTRIP if on else self.attrs[tid] & ~ATTR_RSTRIP

    def _build_special_index(self) -> None:
        """The tokens cut out before tokenizing, longest text first (``cache_special_tokens``),
        bucketed by their first 3 characters so that a text is searched only for tokens that may
        occur in it."""
        special = list(compress(range(self.n_vocab), map(ATTR_SPECIAL.__and__, self.attrs)))
        special.sort(key=lambda i: -len(self.tokens[i]))
        self._special_order = {tid: rank for rank, tid in enumerate(special)}
        # (always, with parse_special): first 3 characters -> ({text: id}, the texts' lengths)
        self._buckets: tuple[dict, dict] = ({}, {})
        for tid in special:
            text = self.tokens[tid]
            always = not self.attrs[tid] & ATTR_HIDDEN
            for buckets in (self._buckets[1], self._buckets[0]) if always else (self._buckets[1],):
                by_text, lengths = buckets.setdefault(text[:3], ({}, []))
                by_text.setdefault(text, tid)     # the longest-first order decides among equal texts
                if len(text) not in lengths:
                    lengths.append(len(text))

    def _check_id(self, tid: int) -> None:
        if not 0 <= tid < self.n_vocab:
            raise TokenizerError(f"token id {tid} is outside the vocab (0..{self.n_vocab - 1})")

    def is_control(self, tid: int) -> bool:
        """True for a control token (llama.cpp's ``llama_vocab_is_control``). Raises
        TokenizerError for an id outside the vocab."""
        self._check_id(tid)
        return bool(self.attrs[tid] & ATTR_CONTROL)

    def token_id(self, text: str) -> int | None:
        """The id of the token whose text is exactly ``text``, or None."""
        return self.token_to_id.get(text)

    # --- encoding -----------------------------------------------------------------------------

    def encode(self, text: str, add_special: bool = True, parse_special: bool = False) -> list[int]:
        """Token ids of ``text``, as llama.cpp's ``llama_tokenize(text, add_special, parse_special)``.

        ``add_special`` adds BOS/EOS as ``add_bos_token``/``add_eos_token`` say;
        ``parse_special`` turns control-token text (``"<start_of_turn>"``) into
        those tokens (user-defined tokens are always matched). Lone surrogates
        in ``text`` are read as U+FFFD.
        """
        text = _clean(text)
        out: list[int] = []
        if add_special and self.add_bos:
            out.append(self.bos_id)
        prev_special = True
        for frag in self._partition(text, parse_special):
            if isinstance(frag, int):
                out.append(frag)
                prev_special = True
                continue
            if self.kind == "spm":
                if self.add_space_prefix and prev_special:
                    frag = " " + frag
                self._encode_spm(frag, out)
            else:
                self._encode_bpe(frag, out)
            prev_special = False
        if add_special and self.add_eos:
            out.append(self.eos_id)
        return out

    def _special_candidates(self, text: str, parse_special: bool) -> list[int]:
        """Special tokens that occur in ``text``, in llama.cpp's order (longest first).

        Each bucket whose 3-character key occurs in ``text`` is searched: a small one
        token by token; a big one (Gemma's 6,242 ``<unusedN>``) by looking the text
        up at each occurrence of the key, once per token length in the bucket.
        """
        found: set[int] = set()
        for key, (by_text, lengths) in self._buckets[parse_special].items():
            if key not in text:
                continue
            if len(by_text) <= BIG_BUCKET:
                found.update(tid for t, tid in by_text.items() if t in text)
                continue
            at = text.find(key)
            while at >= 0:
                found.update(by_text[t] for t in (text[at:at + n] for n in lengths) if t in by_text)
                at = text.find(key, at + 1)
        return sorted(found, key=self._special_order.__getitem__)

    def _partition(self, text: str, parse_special: bool) -> list[str | int]:
        """Cut special tokens out of ``text`` (``tokenizer_st_partition``): a list of text
        fragments (str) and token ids (int), in order."""
        frags: list[tuple[int, int] | int] = [(0, len(text))] if text else []
        for tid in self._special_candidates(text, parse_special) if text else ():
            needle, attr, out = self.tokens[tid], self.attrs[tid], []
            for frag in frags:
                if isinstance(frag, int):
                    out.append(frag)
                    continue
                start, end = frag
                while (at := text.find(needle, start, end)) >= 0:
                    left = at
                    if attr & ATTR_LSTRIP:
                        while left > start and text[left - 1] in C_SPACES:
                            left -= 1
                    if left > start:
                        out.append((start, left))
                    out.append(tid)
                    start = at + len(needle)
                    if attr & ATTR_RSTRIP:
                        while start < end and text[start] in C_SPACES:
                            start += 1
                if start < end:
                    out.append((start, end))
            frags = out
        return [f if isinstance(f, int) else text[f[0]:f[1]] for f in frags]

    def _encode_spm(self, text: str, out: list[int]) -> None:
        """SentencePiece by score (``llm_tokenizer_spm_session::tokenize``): spaces become "▁",
        the pair that forms the best-scored token merges first; a final piece that is no token
        is spelled in ``<0xNN>`` byte tokens."""
        vocab, scores = self.token_to_id, self.scores

        def priority(pair: str, left_len: int) -> float | None:
            tid = vocab.get(pair)
            return None if tid is None else -scores[tid]

        for piece in merge_pairs(text.replace(" ", "\u2581"), priority):
            tid = vocab.get(piece)
            if tid is not None:
                out.append(tid)
            else:
                out.extend(self._byte_token(b) for b in piece.encode("utf-8"))

    def _byte_token(self, b: int) -> int:
        tid = self._byte_ids[b]
        if tid is None:
            raise TokenizerError(f"{KEY_TOKENS}: no byte token <0x{b:02X}> for a character the vocab lacks")
        return tid

    def _encode_bpe(self, text: str, out: list[int]) -> None:
        """Byte-level BPE (``llm_tokenizer_bpe_session::tokenize``): pre-tokenize, map bytes, merge."""
        if self._compiled is None:
            self._compiled = [compile_pattern(p) for p in self.pre_patterns]
        cache = self._word_cache
        for word in regex_split(text, self._compiled):
            mapped = word.encode("utf-8").decode("latin-1").translate(_LATIN1_TO_MAPPED)
            ids = cache.get(mapped)
            if ids is None:
                ids = self._bpe_word(mapped)
                if len(mapped) <= 64:             # cache words, not whole pasted blobs
                    if len(cache) >= 100_000:
                        cache.clear()
                    cache[mapped] = ids
            out.extend(ids)

    def _bpe_word(self, word: str) -> tuple[int, ...]:
        """Merge one byte-mapped word, lowest merge rank first; a final piece that is no token
        falls back to the tokens of its single bytes (those absent are dropped, as in llama.cpp)."""
        vocab, ranks = self.token_to_id, self.merges
        if self.ignore_merges and word in vocab:
            return (vocab[word],)

        def priority(pair: str, left_len: int) -> int | None:
            return ranks.get(pair[:left_len] + " " + pair[left_len:])

        ids: list[int] = []
        for piece in merge_pairs(word, priority):
            tid = vocab.get(piece)
            if tid is not None:
                ids.append(tid)
            else:   # llama.cpp looks up each byte of the piece's UTF-8 text
                ids.extend(vocab[_raw_byte(b)] for b in piece.encode("utf-8") if _raw_byte(b) in vocab)
        return tuple(ids)

    # --- decoding -----------------------------------------------------------------------------

    def token_bytes(self, tid: int, special: bool = False) -> bytes:
        """The bytes token ``tid`` stands for (llama.cpp's ``token_to_piece``, no lstrip).

        Normal tokens: their text (SPM ``"▁"`` → space; BPE un-byte-mapped);
        byte tokens ``<0xNN>``: that byte; user-defined tokens: their text;
        control and unknown tokens: ``b""``, or their text when ``special``;
        unused and undefined tokens: ``b""``. Raises TokenizerError for an id
        outside the vocab.
        """
        self._check_id(tid)
        attr = self.attrs[tid]
        if attr & ATTR_HIDDEN and not special:
            return b""
        piece = self._pieces.get(tid)
        if piece is None:
            piece = self._pieces[tid] = self._piece(tid, attr)
        return piece

    def _piece(self, tid: int, attr: int) -> bytes:
        text = self.tokens[tid]
        if attr & (ATTR_HIDDEN | ATTR_USER_DEFINED):
            return text.encode("utf-8", "surrogateescape")
        if attr & ATTR_NORMAL:
            if self.kind == "spm":
                return text.replace("\u2581", " ").encode("utf-8", "surrogateescape")
            return _unmap_bytes(text)
        if attr & ATTR_BYTE:
            return bytes([_hex_prefix(text[3:5])])
        return b""

    def decode(self, ids: list[int], special: bool = False) -> str:
        """The text of ``ids``: their :meth:`token_bytes` joined, decoded as UTF-8 (bad bytes → U+FFFD).

        With ``add_space_prefix`` (SPM models like Llama 2), the space the
        encoder put before the first word is dropped: one leading space of the
        first token after an optional BOS, if that is a normal token (llama.cpp's
        ``llama_detokenize`` strips it from whatever token comes first), so
        ``decode(encode(s)) == s`` when ``s`` starts with plain text.
        """
        pieces = [self.token_bytes(t, special) for t in ids]
        first = 1 if ids and ids[0] == self.bos_id else 0
        if (self.add_space_prefix and first < len(pieces) and pieces[first][:1] == b" "
                and self.attrs[ids[first]] & ATTR_NORMAL):
            pieces[first] = pieces[first][1:]
        return b"".join(pieces).decode("utf-8", "replace")


def merge_pairs(text: str, priority: Callable[[str, int], float | None]) -> list[str]:
    """Merge adjacent symbols of ``text`` (one per character at first), best pair first.

    llama.cpp's symbol list and priority queue (``llm_tokenizer_spm_session`` and
    ``llm_tokenizer_bpe_session``): ``priority(pair_text, left_length)`` ranks the
    pair whose concatenation is ``pair_text`` (lower first; None: the pair never
    merges); ties go to the leftmost pair. Symbol i starts at character i;
    ``size[i]`` is its length, 0 once merged into its left neighbour. Returns
    the final symbols' texts, in order. O(n log n) for n characters.
    """
    n = len(text)
    if n == 0:
        return []
    size = [1] * n
    prev = list(range(-1, n - 1))
    nxt = list(range(1, n + 1))
    nxt[-1] = -1
    heap: list[tuple] = []   # (priority, left, right, merged length)

    def push(left: int, right: int) -> None:
        length = right - left + size[right]
        p = priority(text[left:left + length], right - left)
        if p is not None:
            heapq.heappush(heap, (p, left, right, length))

    for i in range(n - 1):
        push(i, i + 1)
    while heap:   # the hot loop: one merge per pop
        _, left, right, length = heapq.heappop(heap)
        if size[left] == 0 or size[right] == 0 or size[left] + size[right] != length:
            continue   # stale: one side has merged since the pair was queued
        size[left], size[right] = length, 0
        nxt[left] = after = nxt[right]
        if after >= 0:
            prev[after] = left
            push(left, after)
        if prev[left] >= 0:
            push(prev[left], left)
    pieces, i = [], 0
    while i >= 0:
        pieces.append(text[i:i + size[i]])
        i = nxt[i]
    return pieces


def _raw_byte(b: int) -> str:
    """The text of a token made of the single byte ``b``, as the GGUF reader decodes it
    (UTF-8 with surrogateescape: bytes >= 0x80 alone become U+DC80..U+DCFF)."""
    return chr(b) if b < 0x80 else chr(0xDC00 + b)


def _clean(text: str) -> str:
    """``text`` with lone surrogates (not encodable as UTF-8) replaced by U+FFFD."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return "".join("\ufffd" if 0xD800 <= ord(c) < 0xE000 else c for c in text)


def _hex_prefix(s: str) -> int:
    """C ``strtol(s, NULL, 16)`` of a byte token's two hex digits: the leading hex digits' value."""
    value = 0
    for c in s:
        if c not in "0123456789abcdefABCDEF":
            break
        value = value * 16 + int(c, 16)
    return value & 0xFF


def _unmap_bytes(text: str) -> bytes:
    """A byte-level BPE token's bytes (llama.cpp's ``llama_decode_text``): each character maps
    back to its byte; a character outside the map gives llama.cpp's ``[UNK_BYTE_0x..]`` marker."""
    try:
        return bytes([CHAR_TO_BYTE[c] for c in text])
    except KeyError:
        out = bytearray()
        for c in text:
            b = CHAR_TO_BYTE.get(c)
            if b is not None:
                out.append(b)
            else:
                utf8 = c.encode("utf-8", "surrogateescape")
                out += b"[UNK_BYTE_0x" + utf8.hex().encode() + text.encode("utf-8", "surrogateescape") + b"]"
        return bytes(out)


class StreamDecoder:
    """Text of a stream of token ids, released in whole characters.

    ``push(id)`` returns the new text that is complete: bytes that end inside a
    UTF-8 sequence are held back until the sequence completes (or proves
    invalid: then U+FFFD, as ``bytes.decode(errors="replace")``). ``flush()``
    returns what is held back. Control tokens render as in
    :meth:`Tokenizer.token_bytes` with ``special``.
    """

    def __init__(self, tokenizer: Tokenizer, special: bool = False):
        self.tokenizer, self.special = tokenizer, special
        self._held = b""

    def push(self, tid: int) -> str:
        data = self._held + self.tokenizer.token_bytes(tid, self.special)
        cut = _complete_prefix(data)
        self._held = data[cut:]
        return data[:cut].decode("utf-8", "replace")

    def flush(self) -> str:
        data, self._held = self._held, b""
        return data.decode("utf-8", "replace")


def _complete_prefix(data: bytes) -> int:
    """Length of ``data`` without a trailing, still incomplete UTF-8 sequence."""
    for back in range(1, min(4, len(data)) + 1):
        b = data[-back]
        if b < 0x80:
            return len(data)                 # ASCII: nothing pending
        if b >= 0xC0:                        # a lead byte: does its sequence fit?
            need = 2 if b < 0xE0 else 3 if b < 0xF0 else 4
            return len(data) - back if need > back and b < 0xF8 else len(data)
    return len(data)                          # only continuation bytes: invalid, release them
