"""The tokens: SentencePiece (``llama``), byte-level BPE (``gpt2``, ``gemma4``), RWKV's and PLaMo 2's
tokenizers from GGUF metadata.

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
     single-byte tokens. Gemma 4's ``gemma4`` model is SentencePiece-style BPE:
     spaces become ``"▁"``, words are cut only at newlines and merged as raw
     UTF-8 characters, and the byte tokens are ``<0xNN>``.
   - RWKV and PLaMo 2 (``rwkv``, ``plamo2``): the longest token at each byte, or the tokens of
     the highest total score (:mod:`pyengine.text.greedy`).
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
  takes the first in its ``unordered_map``'s order: SmolLM2's
  ``<|endoftext|>`` too, but ``<|im_end|>`` on Qwen2's vocab, where this takes
  ``<|endoftext|>``). The set ``eog_ids`` holds all of them either way;
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
from collections.abc import Callable
from itertools import compress

from pyengine.errors import TokenizerError
from pyengine.gguf import text_value
from pyengine.text.bpe import LATIN1_TO_MAPPED, NO_PRE, unmap_bytes
from pyengine.text.greedy import Plamo2, Rwkv
from pyengine.text.pretokenize import split_words
from pyengine.text.vocab import (
    ALWAYS_RENDERED,
    ATTR_BYTE,
    ATTR_CONTROL,
    ATTR_HIDDEN,
    ATTR_LSTRIP,
    ATTR_NORMAL,
    ATTR_RSTRIP,
    ATTR_SPECIAL,
    ATTR_USER_DEFINED,
    EOG_TEXTS,
    EOM_TEXTS,
    EOT_TEXTS,
    FIM_TEXTS,
    KEY_ADD_BOS,
    KEY_ADD_EOS,
    KEY_ADD_SPACE_PREFIX,
    KEY_GENERAL_NAME,
    KEY_MODEL,
    KEY_PRE,
    KEY_SCORES,
    KEY_TOKENS,
    MODELS,
    SPECIAL_ID_KEYS,
    get,
    get_list,
    hex_prefix,
    pre_tokenizer,
    raw_byte,
    read_attrs,
    read_merges,
    read_special_ids,
    read_tokens,
)

C_SPACES = " \t\n\v\f\r"                                    # C isspace(): the lstrip/rstrip set
BIG_BUCKET = 64   # special tokens sharing their first 3 characters, beyond which a text is scanned


class Tokenizer:
    """A vocab from GGUF metadata and the llama.cpp algorithm its ``tokenizer.ggml.model`` names.

    Attributes: ``model`` ("llama" | "gpt2"), ``pre`` (``tokenizer.ggml.pre``; used by BPE only),
    ``n_vocab``, ``tokens`` (list[str], index = id), ``bos_id``, ``eos_id``, ``eot_id``
    (int or None), ``eog_ids`` (frozenset: every id that ends generation), ``add_bos``,
    ``add_eos``, ``add_space_prefix``.

    Built from GGUF metadata (``GGUFFile.metadata``: Python values and numpy arrays); raises
    :class:`TokenizerError` naming the key for an unsupported or inconsistent vocab.
    """

    def __init__(self, meta: dict):
        model = get(meta, KEY_MODEL, str)
        if model not in MODELS:
            raise TokenizerError(f"{KEY_MODEL} = {model!r} is not supported; supported: {', '.join(MODELS)}")
        spec = MODELS[model]
        self.model, self.kind, self.adds_special = model, spec.kind, spec.adds_special
        self.tokens = read_tokens(meta)
        self.n_vocab = n = len(self.tokens)
        self.token_to_id: dict[str, int] = dict(zip(self.tokens, range(n)))   # the last of duplicates wins
        self.attrs = read_attrs(meta, n)
        self.pre, self.merges, self.pre_spec = get(meta, KEY_PRE, str, ""), {}, NO_PRE
        default_ids, add_bos = dict(spec.default_ids), spec.add_bos
        if spec.kind in ("spm", "plamo2"):
            self.scores = get_list(meta, KEY_SCORES, (float, int), n) or [0.0] * n
        if spec.kind == "spm":
            self._byte_ids = [self.token_to_id.get(f"<0x{b:02X}>", self.token_to_id.get(raw_byte(b)))
                              for b in range(256)]
        if spec.kind == "bpe":
            self.pre, self.pre_spec = pre_tokenizer(meta, spec.pre)
            self.merges = read_merges(meta, self.pre_spec.needs_merges)
            add_bos = self.pre_spec.add_bos
            if not self.pre_spec.default_bos:
                default_ids.pop("bos", None)
        self._word_cache: dict[str, tuple[int, ...]] = {}
        self.add_space_prefix = get(meta, KEY_ADD_SPACE_PREFIX, bool, spec.add_space_prefix)
        self.add_bos = get(meta, KEY_ADD_BOS, bool, add_bos) or self.pre_spec.always_bos
        self.add_eos = get(meta, KEY_ADD_EOS, bool, False)
        ids = read_special_ids(meta, n, default_ids)
        if spec.kind in ("rwkv", "plamo2"):                               # the search over the vocab
            self.search = Rwkv(self.tokens, ids["unk"]) if spec.kind == "rwkv" else \
                Plamo2(self.tokens, self.scores, [bool(a & ATTR_BYTE) for a in self.attrs])
        self._find_by_text(ids)
        self.special_ids = ids
        self.bos_id, self.eos_id, self.eot_id = ids["bos"], ids["eos"], ids["eot"]
        self.eog_ids = self._collect_eog(ids)
        for flag, key, name in ((self.add_bos, KEY_ADD_BOS, "bos"), (self.add_eos, KEY_ADD_EOS, "eos")):
            if flag and ids[name] is None:
                raise TokenizerError(f"{key} is true, but {SPECIAL_ID_KEYS[name]} is not set")
        name = (text_value(meta.get(KEY_GENERAL_NAME)) or "").lower()
        if "phi-3" in name or "phi3" in name:
            self._phi3_rstrip()
        self._build_special_index()
        self._pieces: dict[int, bytes] = {}

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
        for text in ALWAYS_RENDERED:      # llama.cpp's gpt-oss hack: these render as text
            tid = self.token_to_id.get(text)
            if tid is not None:
                self.attrs[tid] = ATTR_USER_DEFINED
        self._eog_exceptions(eog)
        return frozenset(eog)

    def _eog_exceptions(self, eog: set[int]) -> None:
        """llama.cpp's two exceptions to end-of-generation by text: ``<|end|>`` is none where
        ``<|return|>`` and ``<|call|>`` (gpt-oss) or ``<|calls|>`` and ``<|flush|>`` (Solar Open)
        are (it becomes user-defined), and ``</s>`` is a normal token where ``<|tool_response>``
        (Gemma 4) or ``<|plamo:eos|>`` (PLaMo) ends generation."""
        by_text = {self.tokens[tid]: tid for tid in eog}
        call = "<|call|>" in by_text or "<|calls|>" in by_text
        if "<|end|>" in by_text and call and ("<|return|>" in by_text or "<|flush|>" in by_text):
            eog.discard(by_text["<|end|>"])
            self.attrs[by_text["<|end|>"]] = ATTR_USER_DEFINED
        if "</s>" in by_text and ("<|tool_response>" in by_text or "<|plamo:eos|>" in by_text):
            eog.discard(by_text["</s>"])
            self.attrs[by_text["</s>"]] = ATTR_NORMAL

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

        ``add_special`` adds BOS/EOS as ``add_bos_token``/``add_eos_token`` say (never for
        ``rwkv`` and ``plamo2``, whose llama.cpp tokenizers add none);
        ``parse_special`` turns control-token text (``"<start_of_turn>"``) into
        those tokens (user-defined tokens are always matched). Lone surrogates
        in ``text`` are read as U+FFFD.
        """
        text = _clean(text)
        out: list[int] = []
        add_special = add_special and self.adds_special
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
            elif self.kind == "bpe":
                self._encode_bpe(frag, out)
            else:
                out.extend(self.search.encode(frag))
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
        """Byte-level BPE (``llm_tokenizer_bpe_session::tokenize``): pre-tokenize, map bytes, merge.
        An SPM-style BPE vocab (Gemma 4) has its spaces escaped first and merges raw UTF-8 words."""
        spec, cache = self.pre_spec, self._word_cache
        if spec.escape_spaces:
            text = text.replace(" ", "\u2581")
        for word in split_words(text, spec.regexes):
            if spec.byte_encode:
                word = word.encode("utf-8").decode("latin-1").translate(LATIN1_TO_MAPPED)
            ids = cache.get(word)
            if ids is None:
                ids = self._bpe_word(word)
                if len(word) <= 64:               # cache words, not whole pasted blobs
                    if len(cache) >= 100_000:
                        cache.clear()
                    cache[word] = ids
            out.extend(ids)

    def _bpe_word(self, word: str) -> tuple[int, ...]:
        """Merge one (byte-mapped) word, lowest merge rank first; a final piece that is no token
        falls back to the tokens of its single bytes (those absent are dropped, as in llama.cpp)."""
        vocab, ranks, spec = self.token_to_id, self.merges, self.pre_spec
        whole = spec.ignore_merges or (spec.newline_words and not word.strip("\n"))
        if whole and word in vocab:
            return (vocab[word],)

        def priority(pair: str, left_len: int) -> int | None:
            return ranks.get(pair[:left_len] + " " + pair[left_len:])

        byte_text = raw_byte if spec.byte_encode else "<0x{:02X}>".format
        ids: list[int] = []
        for piece in merge_pairs(word, priority):
            tid = vocab.get(piece)
            if tid is not None:
                ids.append(tid)
            else:   # llama.cpp looks up each byte of the piece's UTF-8 text
                ids.extend(vocab[t] for t in map(byte_text, piece.encode("utf-8")) if t in vocab)
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
        if self.kind == "rwkv":                                            # every token: its bytes
            return self.search.pieces[tid]
        if self.kind == "plamo2" and not attr & ATTR_BYTE:                  # every token but bytes: its text
            return text.encode("utf-8", "surrogateescape")
        if attr & (ATTR_HIDDEN | ATTR_USER_DEFINED):
            return text.encode("utf-8", "surrogateescape")
        if attr & ATTR_NORMAL:
            if self.kind == "spm" or self.pre_spec.escape_spaces:
                return text.replace("\u2581", " ").encode("utf-8", "surrogateescape")
            return unmap_bytes(text)
        if attr & ATTR_BYTE:
            return bytes([hex_prefix(text[3:5])])
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


def _clean(text: str) -> str:
    """``text`` with lone surrogates (not encodable as UTF-8) replaced by U+FFFD."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return "".join("\ufffd" if 0xD800 <= ord(c) < 0xE000 else c for c in text)

