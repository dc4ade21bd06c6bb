"""Make the golden values in tests/golden/ from llama.cpp, through llama-cpp-python.

Run by hand, never in CI (it needs llama-cpp-python, a ~20 minute compile, and the real models):

    pip install llama-cpp-python==0.3.36      # CMAKE_BUILD_PARALLEL_LEVEL=2 helps
    python build_scripts/fetch_models.py      # fills models/
    python tests/golden/make_golden.py        # rewrites tests/golden/*.json and *.npy (~1 min)

The committed data was made with llama-cpp-python 0.3.36 (its vendored llama.cpp:
libllama.so.0.5.0, libggml 0.25.3), CPU only, 2 threads. ``meta.json`` records the settings.

What llama.cpp is asked, and how (see README.md for the file schemas):
- tokenize: ``llama_tokenize(add_special, parse_special)``. llama-cpp-python's ``Llama.tokenize(text,
  add_bos, special)`` passes ``add_bos`` as llama.cpp's ``add_special`` (BOS only if the vocab's
  ``add_bos_token`` says so, EOS if ``add_eos_token``) and ``special`` as ``parse_special``.
- detokenize: the low-level ``llama_detokenize`` (llama-cpp-python's ``Llama.detokenize`` pastes
  ``llama_token_to_piece`` results into a 32-byte buffer and strips a leading space after BOS itself).
- logits: the context keeps only the last position's logits (``logits_all=False``); they are read
  with ``llama_get_logits_ith(ctx, -1)`` after each ``Llama.eval``. Greedy = argmax over those raw
  logits (first index on ties, as llama.cpp's greedy sampler), no penalties; cross-checked against
  ``Llama.generate(top_k=1, temp=0, repeat_penalty=1)``.
- llama.cpp's default F16 KV cache, flash attention off. Each greedy run is repeated with an F32 KV
  cache (``ids_f32_kv``; nearer pyengine's float32 math): where the two paths part, a near-tie
  (see ``margins``) was decided by rounding, and either path is a fair answer.
- chat: ``llama_chat_apply_template`` (llama.cpp's built-in templates, detected from the GGUF's
  template text, or named: "gemma") and, for a GGUF with a template, its Jinja rendering by
  llama-cpp-python's ``Jinja2ChatFormatter`` (``prompt_jinja``).
"""

from __future__ import annotations

import ctypes
import json
import sys
from pathlib import Path

import llama_cpp
import numpy as np
from llama_cpp import Llama
from llama_cpp.llama_chat_format import Jinja2ChatFormatter

HERE = Path(__file__).resolve().parent
MODELS = HERE.parent.parent / "models"
GEMMA3 = "gemma-3-270m-q4_k_m.gguf"
SMOLLM2 = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_FILES = (GEMMA3, SMOLLM2)

N_CTX = 512           # tokens; every prompt + reply here stays below Gemma's 512-token sliding window
N_THREADS = 2
N_GEN = 32            # greedy tokens per raw-completion prompt
N_CHAT_MAX = 64       # greedy tokens per chat reply at most
N_TOP = 40            # (id, logit) pairs kept at the last prompt position
GGML_TYPE_F32 = 0

# ---------------------------------------------------------------------------------------------
# The corpora
# ---------------------------------------------------------------------------------------------

LONG_PARAGRAPH = (
    "The GGUF file format stores a model's hyperparameters, its tokenizer and its tensors in one "
    "file. A reader parses the header, then the key-value metadata, then one record per tensor "
    "giving its name, shape, type and offset. Quantized tensors are stored in blocks: Q4_K packs "
    "256 weights into 144 bytes, with 6-bit scales and minimums for each group of 32. At run time "
    "the weights are dequantized, multiplied with the activations, and the logits come out at the "
    "end - 262,144 of them for Gemma 3, one per token in its vocabulary."
)

CORPUS = [
    "",
    " ",
    "  ",
    "   ",
    "\t",
    "\n",
    "\n\n",
    "\r\n",
    "Hello world",
    " Hello world",
    "Hello world ",
    "  Hello   world  ",
    "Hello\nworld",
    "Hello\n\nworld\n",
    "line one\r\nline two\r\n",
    "\tindented\twith\ttabs",
    "1234567890",
    "3.14159",
    "In 2024, 1,234,567 people paid $99.99 each (~15%).",
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n",
    '{"name": "pyengine", "version": [0, 1], "ok": true, "pi": 3.14}',
    '<div class="main"><p>Hello &amp; welcome!</p></div>',
    "for (int i = 0; i < n; ++i) { x[i] *= 2; }",
    "!!! ??? ... --- *** ### @@@ ;;; ::",
    "Wait... what?! No -- really?!?",
    "don't can't won't it's I'm you're they've we'd",
    "I'M DON'T WE'LL SHE'S",
    "café naïve résumé Ærøskøbing façade",
    "Größenwahn und Straße: Übermäßig schön.",
    "Où est la bibliothèque ? À demain, ça va !",
    "Привет, как дела? Всё хорошо.",
    "Καλημέρα κόσμε",
    "مرحبا بالعالم",
    "नमस्ते दुनिया",
    "中文测试：你好，世界！",
    "日本語のテキスト、カタカナとひらがな。",
    "한국어 문장입니다.",
    "emoji 😀🎉👍🏽",
    "family 👨‍👩‍👧‍👦 and flags 🇫🇷🇯🇵🇺🇸",
    "e\u0301 a\u0300 n\u0303 (combining marks) \u00e9 (precomposed)",
    "<|im_start|>user\nHi<|im_end|>",
    "<bos>Hello<eos>",
    "<start_of_turn>user\nHello<end_of_turn>\n<start_of_turn>model\n",
    "<|endoftext|>",
    "text with <unk> and <pad> inside",
    "\u00a0non-breaking\u2009thin\u3000ideographic spaces",
    "zero\u200bwidth\u200djoiner",
    LONG_PARAGRAPH,
]

# Strings whose special-token text is parsed (parse_special=True), as in a rendered chat prompt.
CORPUS_SPECIAL = [
    "<|im_start|>",
    "<|im_end|>",
    "<|endoftext|>",
    "<bos>",
    "<eos>",
    "<start_of_turn>",
    "<end_of_turn>",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n",
    "<start_of_turn>user\nHello<end_of_turn>\n<start_of_turn>model\n",
    "<bos><start_of_turn>user\nWhat is 2+2?<end_of_turn>\n",
    "text <|im_end|> text <end_of_turn> text",
    "<|im_start|><|im_start|>",
    " <|im_start|> spaced ",
    "<bos>Hello<eos>",
    "Plain text without specials.",
    "<start_of_turnx> not a token, <|im_start without closing",
]

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "Once upon a time",
    "1, 2, 3, 4, 5,",
    (
        "The river rose all night, and by morning the lower town was under water. Boats moved "
        "between the rooftops, carrying bread, blankets and the old, who had refused to leave until "
        "the last moment. The mayor stood on the steps of the town hall and counted the boats as "
        "they came back. By noon the rain had stopped, but the water kept rising, slowly and "
        "quietly, as if it had all the time in the world. Then, at a quarter past one,"
    ),
]
FULL_LOGITS_PROMPT = PROMPTS[0]   # its whole last-position logits go to logits_<model>.npy

SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
ASK = {"role": "user", "content": "What is the capital of France?"}
CONVERSATIONS = [
    [SYSTEM, ASK],
    [ASK],
    [
        {"role": "user", "content": "Hi! Who are you?"},
        {"role": "assistant", "content": "I am a small language model."},
        {"role": "user", "content": "Name three colors."},
    ],
]
BUILTIN_TEMPLATE = {GEMMA3: "gemma"}   # models without tokenizer.chat_template: llama.cpp's name

# ---------------------------------------------------------------------------------------------
# llama.cpp calls
# ---------------------------------------------------------------------------------------------


def load(name: str, **kw) -> Llama:
    """A llama.cpp model from models/; vocab_only=True for tokenizer work."""
    return Llama(str(MODELS / name), n_ctx=N_CTX, n_threads=N_THREADS, n_threads_batch=N_THREADS,
                 flash_attn=False, verbose=False, **kw)


def vocab(llm: Llama):
    return llama_cpp.llama_model_get_vocab(llm.model)


def detokenize(llm: Llama, ids: list[int], unparse_special: bool = False) -> str:
    """llama_detokenize(remove_special=False, unparse_special) decoded as UTF-8 (strict)."""
    arr = (llama_cpp.llama_token * max(1, len(ids)))(*ids)
    size = 64 + 64 * len(ids)
    buf = ctypes.create_string_buffer(size)
    n = llama_cpp.llama_detokenize(vocab(llm), arr, len(ids), buf, size, False, unparse_special)
    assert 0 <= n <= size, (ids, n)
    return buf.raw[:n].decode("utf-8")


def tokenizer_facts(llm: Llama) -> dict:
    v = vocab(llm)
    n_vocab = llama_cpp.llama_vocab_n_tokens(v)
    md = llm.metadata
    eog = [i for i in range(n_vocab) if llama_cpp.llama_vocab_is_eog(v, i)]
    return {
        "model": md["tokenizer.ggml.model"],
        "pre": md.get("tokenizer.ggml.pre"),
        "n_vocab": n_vocab,
        "bos_id": llama_cpp.llama_vocab_bos(v),
        "eos_id": llama_cpp.llama_vocab_eos(v),
        "eot_id": llama_cpp.llama_vocab_eot(v),
        "eog_ids": eog,
        "eog_texts": [llama_cpp.llama_vocab_get_text(v, i).decode() for i in eog],
        "add_bos": bool(llama_cpp.llama_vocab_get_add_bos(v)),
        "add_eos": bool(llama_cpp.llama_vocab_get_add_eos(v)),
    }


def make_tokenize(llm: Llama) -> dict:
    """One model's entry of tokenize.json."""
    facts = tokenizer_facts(llm)
    cases = [{"text": t, "ids": llm.tokenize(t.encode(), add_bos=True, special=False)} for t in CORPUS]
    special = [{"text": t, "ids": llm.tokenize(t.encode(), add_bos=True, special=True)} for t in CORPUS_SPECIAL]
    bos = [facts["bos_id"]] if facts["add_bos"] else []
    detok = []
    for case in cases:
        body = case["ids"][len(bos):]            # the text's own ids, without the added BOS
        detok.append({"ids": body, "text": detokenize(llm, body)})
    hello = llm.tokenize(b"Hello world", add_bos=False, special=False)
    for ids in ([facts["bos_id"]] + hello, hello + [facts["eos_id"]]):   # specials render as ""
        detok.append({"ids": ids, "text": detokenize(llm, ids)})
    detok_special = [{"ids": c["ids"], "text": detokenize(llm, c["ids"], unparse_special=True)} for c in special]
    return {"add_special": True, "parse_special": False, **facts, "cases": cases,
            "cases_special": special, "detok": detok,
            "detok_flags": {"remove_special": False, "unparse_special": False},
            "detok_special": detok_special}


def last_logits(llm: Llama) -> np.ndarray:
    """(n_vocab,) float32 copy of the logits at the last evaluated position."""
    ptr = llama_cpp.llama_get_logits_ith(llm.ctx, -1)
    return np.ctypeslib.as_array(ptr, shape=(llm.n_vocab(),)).copy()


def greedy(llm: Llama, prompt_ids: list[int], n_max: int,
           stop_ids: set[int]) -> tuple[list[int], list[float], np.ndarray, int | None]:
    """Argmax decoding: (ids, top1-top2 margin per step, logits at the last prompt position, stop id)."""
    llm.reset()
    llm.eval(prompt_ids)
    logits = first = last_logits(llm)
    ids, margins = [], []
    for _ in range(n_max):
        tok = int(np.argmax(logits))
        top2 = np.partition(logits, -2)[-2:]
        margins.append(round(float(top2[1] - top2[0]), 5))
        if tok in stop_ids:
            return ids, margins, first, tok
        ids.append(tok)
        llm.eval([tok])
        logits = last_logits(llm)
    return ids, margins, first, None


def sampler_greedy(llm: Llama, prompt_ids: list[int], n: int) -> list[int]:
    """llama-cpp-python's own sampling loop with top_k=1, temp=0, no penalties: the cross-check."""
    llm.reset()
    out = []
    for tok in llm.generate(prompt_ids, top_k=1, top_p=1.0, min_p=0.0, temp=0.0, repeat_penalty=1.0, reset=True):
        out.append(int(tok))
        if len(out) == n:
            break
    return out


def logits_stats(logits: np.ndarray) -> dict:
    x = logits.astype(np.float64)
    m = float(x.max())
    return {"n_vocab": int(x.size), "argmax": int(np.argmax(logits)), "max": m, "min": float(x.min()),
            "mean": float(x.mean()), "std": float(x.std()),
            "logsumexp": m + float(np.log(np.exp(x - m).sum()))}


def top_logits(logits: np.ndarray, k: int = N_TOP) -> list[list]:
    order = sorted(np.argpartition(logits, -k)[-k:].tolist(), key=lambda i: (-float(logits[i]), i))
    return [[int(i), float(logits[i])] for i in order]


def npy_name(name: str) -> str:
    return f"logits_{name.removesuffix('.gguf')}.npy"


def make_generate(name: str, llm: Llama, llm_f32kv: Llama) -> list[dict]:
    """One model's entry of generate.json; writes logits_<model>.npy for FULL_LOGITS_PROMPT."""
    eog = set(tokenizer_facts(llm)["eog_ids"])
    cases = []
    for prompt in PROMPTS:
        prompt_ids = llm.tokenize(prompt.encode(), add_bos=True, special=False)
        assert prompt_ids == llm.tokenize(prompt.encode(), add_bos=True, special=True)
        ids, margins, first, stop = greedy(llm, prompt_ids, N_GEN, eog)
        assert stop is None and len(ids) == N_GEN, f"{name}: {prompt!r} stopped at {stop}; pick another prompt"
        assert sampler_greedy(llm, prompt_ids, N_GEN) == ids, f"{name}: sampler disagrees on {prompt!r}"
        ids_f32, _, first_f32, stop_f32 = greedy(llm_f32kv, prompt_ids, N_GEN, eog)
        stats = logits_stats(first)
        diff = np.abs(first - first_f32).astype(np.float64)                    # (n_vocab,)
        stats.update({"max_abs_diff_f32_kv": float(diff.max()), "rms_diff_f32_kv": float(np.sqrt((diff ** 2).mean())),
                      "max_abs_diff_f32_kv_top40": float(diff[[i for i, _ in top_logits(first)]].max())})
        case = {"prompt": prompt, "prompt_ids": prompt_ids, "ids": ids, "text": detokenize(llm, ids),
                "top_logits": top_logits(first), "logits_stats": stats, "margins": margins,
                "ids_f32_kv": ids_f32, "stop_id_f32_kv": stop_f32, "top_logits_f32_kv": top_logits(first_f32)}
        if prompt == FULL_LOGITS_PROMPT:
            np.save(HERE / npy_name(name), first.astype(np.float32))
            case["logits_npy"] = npy_name(name)
        cases.append(case)
        print(f"  {prompt[:30]!r}: {case['text']!r}", file=sys.stderr)
    return cases


def apply_template(tmpl: str, messages: list[dict]) -> str:
    """llama.cpp's llama_chat_apply_template (built-in templates only, no Jinja), add_ass=True."""
    keep = [(m["role"].encode(), m["content"].encode()) for m in messages]
    chat = (llama_cpp.llama_chat_message * len(keep))(*[llama_cpp.llama_chat_message(r, c) for r, c in keep])
    size = 1024
    while True:
        buf = ctypes.create_string_buffer(size)
        n = llama_cpp.llama_chat_apply_template(tmpl.encode(), chat, len(keep), True, buf, size)
        if n < 0:
            raise RuntimeError(f"llama_chat_apply_template({tmpl[:40]!r}) failed: {n}")
        if n <= size:
            return buf.raw[:n].decode("utf-8")
        size = n


def chat_prompt_ids(llm: Llama, prompt: str) -> list[int]:
    """Tokenized as llama.cpp's chat tokenizes a first turn: add_special=True, parse_special=True."""
    ids = llm.tokenize(prompt.encode(), add_bos=True, special=True)
    assert ids[:2] != [llm.token_bos()] * 2, f"double BOS in {prompt[:40]!r}"
    return ids


def chat_reply(llm: Llama, prompt_ids: list[int]) -> dict:
    eog = set(tokenizer_facts(llm)["eog_ids"])
    ids, margins, _, stop = greedy(llm, prompt_ids, N_CHAT_MAX, eog)
    return {"ids": ids, "text": detokenize(llm, ids), "stop_id": stop, "margins": margins}


def make_chat(name: str, llm: Llama) -> list[dict]:
    """One model's entry of chat.json."""
    tmpl = llm.metadata.get("tokenizer.chat_template")
    facts = tokenizer_facts(llm)
    entries = []
    for messages in CONVERSATIONS:
        prompt = apply_template(tmpl or BUILTIN_TEMPLATE[name], messages)
        prompt_ids = chat_prompt_ids(llm, prompt)
        entry = {"messages": messages, "template": "gguf" if tmpl else BUILTIN_TEMPLATE[name],
                 "prompt": prompt, "prompt_ids": prompt_ids, **chat_reply(llm, prompt_ids)}
        if tmpl:
            bos = detokenize(llm, [facts["bos_id"]], unparse_special=True)
            eos = detokenize(llm, [facts["eos_id"]], unparse_special=True)
            jinja = Jinja2ChatFormatter(tmpl, eos_token=eos, bos_token=bos)(messages=messages).prompt
            jinja_ids = chat_prompt_ids(llm, jinja)
            reply = chat_reply(llm, jinja_ids)
            entry.update({"prompt_jinja": jinja, "prompt_jinja_ids": jinja_ids,
                          "ids_jinja": reply["ids"], "text_jinja": reply["text"],
                          "stop_id_jinja": reply["stop_id"], "margins_jinja": reply["margins"]})
        entries.append(entry)
        print(f"  chat {len(messages)} msgs: {entry['text']!r}", file=sys.stderr)
    return entries


def dumps(x, pad: str = "") -> str:
    """JSON with one key per line but each list of numbers (ids, [id, logit]) on one line."""
    if isinstance(x, dict) and x:
        body = ",\n".join(f"{pad} {json.dumps(k, ensure_ascii=False)}: {dumps(v, pad + ' ')}" for k, v in x.items())
        return "{\n" + body + "\n" + pad + "}"
    if isinstance(x, list) and any(isinstance(v, dict) for v in x):
        return "[\n" + ",\n".join(pad + " " + dumps(v, pad + " ") for v in x) + "\n" + pad + "]"
    return json.dumps(x, ensure_ascii=False)


def write_json(name: str, data) -> None:
    text = dumps(data)
    assert json.loads(text) == data
    (HERE / name).write_text(text + "\n", encoding="utf-8")
    print(f"wrote {name}: {len(text.encode())} bytes", file=sys.stderr)


def main() -> None:
    tok, gen, chat = {}, {}, {}
    for name in MODEL_FILES:
        print(name, file=sys.stderr)
        tok[name] = make_tokenize(load(name, vocab_only=True))
        llm = load(name)
        gen[name] = make_generate(name, llm, load(name, type_k=GGML_TYPE_F32, type_v=GGML_TYPE_F32))
        chat[name] = make_chat(name, llm)
    write_json("tokenize.json", tok)
    write_json("generate.json", gen)
    write_json("chat.json", chat)
    write_json("meta.json", {"llama_cpp_python": llama_cpp.__version__, "n_ctx": N_CTX, "n_threads": N_THREADS,
                             "kv_cache": "f16 (llama.cpp default); ids_f32_kv with f32", "flash_attn": False,
                             "n_gen": N_GEN, "n_chat_max": N_CHAT_MAX, "n_top": N_TOP,
                             "system_info": llama_cpp.llama_print_system_info().decode().strip()})


if __name__ == "__main__":
    main()
