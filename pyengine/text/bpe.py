"""Byte-level BPE's tables: the pre-tokenizers ``tokenizer.ggml.pre`` names, and GPT-2's byte map.

The pre-tokenizer regexes are llama.cpp's, each written as its ``llm_tokenizer_bpe`` constructor
writes it (the ``(?i:'s|...)`` of the tokenizer.json files already spelled out with both cases, as
llama.cpp rewrites them): llama.cpp picks how to run a regex by its exact text, and
:mod:`pyengine.text.pretokenize` does the same. The flags beside them are those
``llama_vocab::impl::load`` sets for each name.
"""

from __future__ import annotations

from dataclasses import dataclass

CONTRACTIONS = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
GPT2_REGEX = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_TAIL = r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
_SLASH_TAIL = r"| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
_WORD = r"|[^\r\n\p{L}\p{N}]?\p{L}+"
LLAMA3_REGEX = CONTRACTIONS + _WORD + r"|\p{N}{1,3}" + _TAIL
QWEN2_REGEX = CONTRACTIONS + _WORD + r"|\p{N}" + _TAIL
QWEN35_REGEX = (CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
JAIS2_REGEX = (CONTRACTIONS + _WORD + r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
               + "".join(rf"|\s{{{n}}}(?!\S)" for n in (512, 256, 128, 64, 32, 16, 8, 4)) + r"|\s{1,2}(?!\S)|\s{1}")
# A cased word: capitals then small letters, or capitals alone (Tiny Aya's, Youtu's tokenizer.json)...
_CASED = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+" + CONTRACTIONS
          + r"?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*" + CONTRACTIONS + "?")


def _lookahead_cased(letter: str, contraction: str) -> str:
    """...and as llama.cpp rewrites it with lookaheads for tekken and gpt-4o: a "capital" is a
    letter that is not a-z, a "small letter" one that is not A-Z."""
    upper, lower = rf"((?=[{letter}])([^a-z]))", rf"((?=[{letter}])([^A-Z]))"
    lead = r"[^\r\n\p{L}\p{N}]?"
    return f"{lead}{upper}*{lower}+{contraction}|{lead}{upper}+{lower}*{contraction}"


TEKKEN_REGEX = _lookahead_cased(r"\p{L}", "") + r"|\p{N}" + _SLASH_TAIL
GPT4O_REGEX = _lookahead_cased(r"\p{L}", CONTRACTIONS + "?") + r"|\p{N}{1,3}" + _SLASH_TAIL
GRANITE_EMB_REGEX = _lookahead_cased(r"\p{L}\p{M}", CONTRACTIONS + "?") + r"|\p{N}{1,3}" + _SLASH_TAIL
# DeepSeek's hand-made classes: its Latin/Greek/Cyrillic/... letters, ASCII and full-width
# punctuation, CJK and Hangul.
DEEPSEEK_LETTERS = (
    "A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af\u0370"
    "-\u0373\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5\u03f7-"
    "\u0481\u048a-\u052f\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba\u1cbd-"
    "\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45\u1f48-"
    "\u1f4d\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4"
    "\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc\u2102\u2107\u210a"
    "-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139\u213c-\u213f\u2145-"
    "\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3\ua640-\ua66d\ua680-"
    "\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf\ufb00-\ufb06\ufb13-\ufb17\uff21-"
    "\uff3a\uff41-\uff5a\U00010400-\U0001044f\U000104b0-\U000104d3\U000104d8-\U000104fb\U00010c80-"
    "\U00010cb2\U00010cc0-\U00010cf2\U000118a0-\U000118df\U0001e900-\U0001e943")
DEEPSEEK_PUNCT = "!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002"
DEEPSEEK_CJK = "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+"
DEEPSEEK3_CJK = "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"
# (written as llama.cpp's C strings give them: real CR and LF characters, a plain '"')
_ASCII_PUNCT_WORD = "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+"
DEEPSEEK3_REGEX = (_ASCII_PUNCT_WORD + "|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*"
                   "|\\s*[\r\n]+|\\s+(?!\\S)|\\s+")
SPARK_REGEX = (_ASCII_PUNCT_WORD + "|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+|[\r\n]"
               "|\\s+(?!\\S)|\\s+")
AFMOE_REGEX = (_ASCII_PUNCT_WORD + r"|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+"
               r"|\s+(?!\S)|\s+")
BLOOM_REGEX = " ?[^(\\s|.,!?\u2026\u3002\uff0c\u3001\u0964\u06d4\u060c)]+"
AFMOE_SCRIPTS = (
    "[\u4e00-\u9fff\u3400-\u4dbf\u8c48-\ufaff\u3040-\u309f\u30a0-\u30ff\uff65-\uff9f\u2f00-\u2fdf"
    "\u0e40-\u0e7f\u0e80-\u0eff\u1780-\u17ff\u1000-\u109f\uaa60-\uaa7f\ua9e0-\ua9ff\uac00-\ud7af"
    "\u1100-\u11ff]+")
YOUTU_SCRIPTS = (
    "[\uac00-\ud7a3\u3131-\u318e]+|[\uff01\u2026\u201c\u201d\u2018\u2019\u2014\uff1a\uff1b\uff0c"
    "\u3001-\u303f\ufe30-\ufe4f]+|[\u3105-\u312f]+|[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+")
NEWLINE_RUNS = r"[^\n]+|[\n]+"


@dataclass(frozen=True)
class PreTokenizer:
    """One ``LLAMA_VOCAB_PRE_TYPE_*`` of llama.cpp and the flags its names set in ``load``."""

    regexes: tuple[str, ...]     # applied in turn (each splits the pieces of the last)
    ignore_merges: bool = False  # a word that is a whole vocab token is taken as it is
    add_bos: bool = False        # default of add_bos_token when the GGUF has no such key
    byte_encode: bool = True     # words are byte-mapped (GPT-2); False: raw UTF-8, <0xNN> byte tokens
    escape_spaces: bool = False  # spaces become "▁" before splitting (SPM-style BPE: Gemma 4)
    always_bos: bool = False     # add_bos_token false is overridden (llama.cpp's Gemma 4 workaround)
    default_bos: bool = True     # False: no BOS id unless the GGUF names one (ChatGLM)
    needs_merges: bool = True    # False: tokenizer.ggml.merges may be absent (Kimi K2)
    newline_words: bool = False  # a word of newlines that is a token is taken whole (Gemma 4)


NO_PRE = PreTokenizer(())        # what an SPM vocab holds in place of a pre-tokenizer


_DEFAULT = PreTokenizer((r"[\p{P}\$\+<=>\^~\|]+", GPT2_REGEX, r"\p{N}+", r"[0-9][0-9][0-9]"))
_LLAMA3 = PreTokenizer((LLAMA3_REGEX,), ignore_merges=True, add_bos=True)
_LLAMA3_PLAIN = PreTokenizer((LLAMA3_REGEX,))
_QWEN2 = PreTokenizer((QWEN2_REGEX,))
_SMOLLM = PreTokenizer((r"\p{N}", GPT2_REGEX))
_GPT2 = PreTokenizer((GPT2_REGEX,))
_DEEPSEEK3 = PreTokenizer((r"\p{N}{1,3}", DEEPSEEK3_CJK, DEEPSEEK3_REGEX))
_GEMMA4 = PreTokenizer((NEWLINE_RUNS,), byte_encode=False, escape_spaces=True, always_bos=True, newline_words=True)
_GLM = PreTokenizer((LLAMA3_REGEX,), default_bos=False)
_BLOOM = PreTokenizer((BLOOM_REGEX,))
_TINY_AYA = PreTokenizer((r"\d{1,3}(?=(?:\d{3})*\b)", _CASED + r"|\p{N}{1,3}" + _SLASH_TAIL))
_BAILING = PreTokenizer((r"'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                         r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+",))

# tokenizer.ggml.pre -> its pre-tokenizer: every name of llama.cpp's ``load`` for a byte-level BPE
# vocab (``tokenizer.ggml.model`` gpt2), but "whitespace" (an embedding model's own tokenizer).
PRE_TOKENIZERS: dict[str, PreTokenizer] = {
    "default": _DEFAULT,
    **dict.fromkeys(("llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0",
                     "lfm2", "jina-v5-nano"), _LLAMA3),
    **dict.fromkeys(("dbrx", "smaug-bpe"), _LLAMA3_PLAIN),
    **dict.fromkeys(("qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "megrez", "stablelm2", "hunyuan",
                     "solar-open", "grok-2"), _QWEN2),
    **dict.fromkeys(("smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b",
                     "mellum2"), _SMOLLM),
    **dict.fromkeys(("gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de",
                     "a.x-4.0", "mellum", "modern-bert", "jina-v1-en", "jina-v2-code", "roberta-bpe", "mpt",
                     "olmo", "jais", "exaone4", "trillion", "granite-docling"), _GPT2),
    "minicpm5": PreTokenizer((r"\p{N}{1,3}", CONTRACTIONS + _WORD + r"|\p{N}+" + _TAIL),
                             ignore_merges=True),
    "deepseek-llm": PreTokenizer(("[\r\n]", f"\\s?[{DEEPSEEK_LETTERS}]+", f"\\s?[{DEEPSEEK_PUNCT}]+",
                                  r"\s+$", DEEPSEEK_CJK, r"\p{N}+")),
    "deepseek-coder": PreTokenizer(("[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", DEEPSEEK_CJK, r"\p{N}")),
    **dict.fromkeys(("deepseek-v3", "hunyuan-dense", "joyai-llm", "hy_v4"), _DEEPSEEK3),
    "spark2_5": PreTokenizer((r"\p{N}{1,3}", DEEPSEEK3_CJK, SPARK_REGEX, r"\p{N}")),
    "youtu": PreTokenizer((YOUTU_SCRIPTS, _CASED + r"|\p{N}" + _SLASH_TAIL), ignore_merges=True),
    "falcon": PreTokenizer((r"[\p{P}\$\+<=>\^~\|`]+", GPT2_REGEX, r"[0-9][0-9][0-9]")),
    "jais-2": PreTokenizer((JAIS2_REGEX,)),
    **dict.fromkeys(("gemma4", "granite-embed-multi-311m"), _GEMMA4),
    "sarvam-moe": PreTokenizer((NEWLINE_RUNS,), byte_encode=False, escape_spaces=True),
    "qwen35": PreTokenizer((QWEN35_REGEX,)),
    **dict.fromkeys(("poro-chat", "bloom", "gpt3-finnish"), _BLOOM),
    "chatglm-bpe": _GLM,
    **dict.fromkeys(("glm4", "glm5"), PreTokenizer((LLAMA3_REGEX,), ignore_merges=True, default_bos=False)),
    "viking": PreTokenizer((BLOOM_REGEX, r"\p{N}")),
    "tekken": PreTokenizer((TEKKEN_REGEX,), ignore_merges=True, add_bos=True),
    "exaone-moe": PreTokenizer((CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}"
                                r"| ?[^\s\p{L}\p{N}]+[\r\n/]?|\s*[\r\n]|\s+(?!\S)|\s+",)),
    "chameleon": PreTokenizer((r"<sentinel:[0-9]+>", r"(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", r"([\t\n]|    |  )",
                               r"\p{N}", r"[\p{P}!-/:-@\[-`{-~]", GPT2_REGEX), add_bos=True),
    **dict.fromkeys(("gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"), PreTokenizer((GPT4O_REGEX,))),
    "granite-embed-multi-97m": PreTokenizer((GRANITE_EMB_REGEX,), ignore_merges=True),
    **dict.fromkeys(("tiny_aya", "cohere2moe"), _TINY_AYA),
    "superbpe": PreTokenizer((r"\p{N}+", r"(?=(\d{3})+(?!\d))")),
    **dict.fromkeys(("bailingmoe", "bailingmoe2", "llada-moe"), _BAILING),
    "seed-coder": PreTokenizer((CONTRACTIONS + _WORD + r"|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+"
                                r"|\s*[\r\n]+|\s+(?!\S)|\s+",)),
    "kimi-k2": PreTokenizer((r"\p{Han}+",), needs_merges=False),
    "ufakzeka": PreTokenizer((_WORD[1:] + r"|\p{N}" + _TAIL,)),
    "afmoe": PreTokenizer((r"\p{AFMoE_digits}", AFMOE_SCRIPTS, AFMOE_REGEX)),
    "laguna": PreTokenizer((NEWLINE_RUNS, QWEN2_REGEX)),
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
LATIN1_TO_MAPPED = dict(enumerate(BYTE_TO_CHAR))           # str.translate table over latin-1


def unmap_bytes(text: str) -> bytes:
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
