"""Fetch llama.cpp's vocab-only test GGUFs into ``.cache/vocab/``, sha256-checked, for the tokenizer tests.

    python build_scripts/fetch_vocabs.py [--dest .cache/vocab]

llama.cpp tests its tokenizers on vocab-only GGUFs of real models, each with an ``.inp`` file of
texts and an ``.out`` file of the ids the model's own tokenizer gave. They ship in the
llama-cpp-python 0.3.36 sdist (``vendor/llama.cpp/models/``), the reference this project's golden
values come from. The sdist (77 MB) is downloaded once with ``pip download --no-binary :all:``
into ``.cache/downloads/`` (pinned sha256); the files below are taken out of it and each checked
against its own sha256. Re-running is a no-op once they are present and verified. Nothing of
llama.cpp is committed: the tests read these files and compare with the golden ids in
``tests/golden/tokenize_vocabs.json`` (made by ``tests/golden/make_vocab_golden.py``).

llama.cpp has no test vocab for two chat tokenizers, so two are built here (:data:`BUILT`), each
checked against its sha256 once written: ``rwkv-world``, the RWKV World vocab (65,529 tokens of
``rwkv_vocab_v20230424.txt`` in the PyPI wheel ``rwkv==0.8.32``) converted as llama.cpp's
``_set_vocab_rwkv_world`` converts it; ``plamo2-synthetic``, a ``plamo2`` vocab of PLaMo 2's four
special tokens, the 256 byte tokens and the llama-spm vocab's normal tokens with their scores
(``▁`` made a space), as no PLaMo 2 vocab is on PyPI. The chat templates of the sdist's
``models/templates/`` go to ``templates/`` beside them, and its example GBNF grammars
(``grammars/*.gbnf``, each sha256-checked) to ``grammars/``.
"""

from __future__ import annotations

import argparse
import ast
import sys
import tarfile
import zipfile
from pathlib import Path

from buildlib import CACHE, ROOT, pip_download
from fetch_models import sha256_of

SDIST = "llama_cpp_python-0.3.36.tar.gz"
SDIST_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
MEMBER_DIR = "llama_cpp_python-0.3.36/vendor/llama.cpp/models/"
DEST = CACHE / "vocab"
INP = "be0a11f7071f0c67d3053a2d377d8f35f0dbcb77ff11a60300fb57d36b477cf0"   # the .inp most of them share

# name -> sha256 of the GGUF, of its .inp and of its .out (None: llama.cpp has no test texts for it).
# Left out: bert-bge (WordPiece) and nomic-bert-moe (Unigram), embedding models' tokenizers.
VOCABS: dict[str, tuple[str, str | None, str | None]] = {
    "aquila": ("7c53c3c516ac67c7ca12977b9690fdea3d2ef13bbaed6378f98191a13ef5ca00", None, None),
    "baichuan": ("4f5b955697f3bd3108070b1d5936c7eb9fc542b81c6932e59abddec75bca1963", None, None),
    "command-r": ("a2f8cfea952ef7c391a6d92a1c309d0bd32e36384d9b9230569a7425732f27d9", INP,
                  "d2a601336e422b60a264858c01b14c5d37575fe1f9adfcafc2f3b3707903903f"),
    "deepseek-coder": ("91cb1379f2e33af1c4866b194622b7a0e12e8f0c9dba7ba2f10d55978730bec1", INP,
                       "c2cea4584b0487e67fbd81f491bb44f89238722062126120d2c412edb3dbd853"),
    "deepseek-llm": ("867f77537b54565f0d81d508c04edc41aa1d4ffc1a92745f225b4c1b02755f76", INP,
                     "87cfc1a8a9a7ef25d04d28c26a67b6a620af7be938c9bd0feeb4d319b9302832"),
    "falcon": ("9f0bf8b0733680398b72e652e90f260f43782f326e75545fc0e49611a5ba35ad", INP,
               "f8c80a0483582ef195c2129b69bb2e4e421b0f31ed7b35d84b63511d7ebae7cd"),
    "gemma-4": ("58b1ba0b57f3b4d7c468ba4ffd91ad85190346a3d7ad7e71d1cabaae8a14bb65",
                "0528aa007b06965f980181d252b5dff7bb170a77af6157bd48bba56885374448",
                "ba8c596bcd05e97e62566fa994b42eeaeffd6a4e4b4a4abe7b5b689aa6b43bf3"),
    "gpt-2": ("cedc56ca6e2e89f63e781696d1fd76b4b1d49e6720dee86463e915f6e90016ac", INP,
              "48e8c4cb3ad5c37915b225f872222567c1c4dd4d66951aa53460c8d152ff6d60"),
    "gpt-neox": ("ae593a7f9b8bb174ed4f5019e41530463e4dac7aa06e42dee8aa650d2bdac53d", None, None),
    "llama-bpe": ("97272e430d53bc7688f52d5e0ad8ea8f163ede9f1bbd1694feaa504797d5d96e", INP,
                  "118abf2034a197fc5c9dec5204dfdeee7004c7c70952ae577f66b99e212fab9b"),
    "llama-spm": ("16c3724582d59aa8bf84711894e833f916ee46a31d80e21312759c48bf8d0e69", INP,
                  "ad6905c925c49c022974fe67e030382e8a4f56eb4489a0b9481dcedb1ec73b29"),
    "mpt": ("59dc382612866d1fc6c11ea531318d327598f3412d9c8f8600607cdf3030898f", INP,
            "9d0982a7e7950b81bc2e325fb61bb7e295d2238934ab889737494de2dc4d906b"),
    "phi-3": ("967d7190d11c4842eab697079d98d56c2116e10eb617be355a2733bfc132e326", INP,
              "ad6905c925c49c022974fe67e030382e8a4f56eb4489a0b9481dcedb1ec73b29"),
    "qwen2": ("44c2f46b715f585c6ab513970e8a006bfa5badd6108560054921cf598d154d8c", INP,
              "de785bb305cc6fa9d43908ed5da337f853c0b79e971348fcfb9f0915a39c5363"),
    "qwen35": ("63ed952ff338996cf0bdf24a7b10015124273f75c6dc9bb427356aa3f67ec62c",
               "0fc6547e7876cd5b2ef64a9d319c6e39040eb53986660bd4227ed7ddef017a94",
               "5efe225820325303857d0a087a8d59216f0d1e9a9e31133e7a5b44c3c4e1e9ca"),
    "refact": ("ac3ceda902fed91ccf74312b305d9b86c37e4f8e35fa9cc6ef3ce34fca7d4678", INP,
               "c7e5c1c5dc1dfd3e0d56576bf699d2aca0b760b80779523ea9d323aad6cd1b88"),
    "starcoder": ("fedb892b4e1bd3c1f2fcdae356440b14fb458f4264d586e5c987ed93df4e174d", INP,
                  "3ef12183c57ad076f9defd8e5eb454f509f5f0865cad35646abb4c4b2d2c5764"),
}

# llama.cpp's example grammars (the sdist's grammars/: all of them), name -> sha256
GRAMMARS_DIR = "llama_cpp_python-0.3.36/vendor/llama.cpp/grammars/"
GRAMMARS_DEST = DEST / "grammars"
GRAMMARS = {
    "arithmetic.gbnf": "dd91e1ef7bb0178e398036c6f5251c694b79c43cb2d223784f4dcf3020994776",
    "c.gbnf": "556cdbde93b832c9283896d68837fd3025e772677b36dc18f066b194fb99698c",
    "chess.gbnf": "de1a656bb4cf0fda3991f0d3f1bcde338c0d82a60f7e0e8cabb2ba0c73002e5f",
    "english.gbnf": "96a248f563c5780af621b63d59c64e8d4823cb3b9b3e7f487eb8f8b3d11b0dcf",
    "japanese.gbnf": "69fc177180f2b15d085d811aa41e360bb85c962d424d7c17dc936c04ca668e00",
    "json.gbnf": "1a3e3469892957861029adcd24ad0c886b778a942dd4a18cc146238ad56474dd",
    "json_arr.gbnf": "f817496d5ee08aaa7dac4fdee59cbecfcf99367088b63e4b1c02d6f632c39206",
    "list.gbnf": "7e8b142784f991511650e5f0e82d18a123558f09e9d19a056d10718a6986a150",
}


RWKV_WHEEL = ("rwkv==0.8.32", "rwkv-0.8.32-py3-none-any.whl",
              "d3f0594810a4a7e91569f177003ec22294c3eabc91c5f8d0ff3511702d4b67c1")
LLAMA_KEYS = {"block_count": 32, "context_length": 4096, "embedding_length": 4096, "feed_forward_length": 11008,
              "attention.head_count": 32, "attention.head_count_kv": 32}


def _header(name: str) -> list[tuple[str, str, object]]:
    """The keys a vocab-only file needs for llama.cpp to load it (a llama architecture's)."""
    return [("general.architecture", "STRING", "llama"), ("general.name", "STRING", name)] + \
        [(f"llama.{k}", "UINT32", v) for k, v in LLAMA_KEYS.items()] + \
        [("llama.attention.layer_norm_rms_epsilon", "FLOAT32", 1e-5)]


def rwkv_world() -> list[tuple[str, str, object]]:
    """The RWKV World vocab as llama.cpp's converter writes it (``_set_vocab_rwkv_world``): ``<s>``, each
    line's bytes as ``repr`` escapes them, ``[PADn]`` up to 65,536; BOS = EOS = 0, EOT 261 (``"\\n\\n"``)."""
    wheel = pip_download(*RWKV_WHEEL)
    with zipfile.ZipFile(wheel) as z:
        lines = z.read("rwkv/rwkv_vocab_v20230424.txt").decode("utf-8").splitlines()
    tokens, types = ["<s>"], [3]
    for line in lines:
        parts = line.split(" ")
        token = ast.literal_eval(" ".join(parts[1:-1]))
        token = token.encode("utf-8") if isinstance(token, str) else token
        tokens.append(repr(token)[2:-1])
        types.append(1)
    tokens += [f"[PAD{i}]" for i in range(len(tokens), 65536)]
    types += [5] * (65536 - len(types))
    return _header("rwkv-world") + [
        ("tokenizer.ggml.model", "STRING", "rwkv"), ("tokenizer.ggml.tokens", "ARRAY[STRING]", tokens),
        ("tokenizer.ggml.token_type", "ARRAY[INT32]", types), ("tokenizer.ggml.bos_token_id", "UINT32", 0),
        ("tokenizer.ggml.eos_token_id", "UINT32", 0), ("tokenizer.ggml.eot_token_id", "UINT32", 261)]


def plamo2_synthetic(dest: Path) -> list[tuple[str, str, object]]:
    """A ``plamo2`` vocab: PLaMo 2's special tokens (unknown, BOS, EOS, pad), the 256 ``<0xNN>`` byte
    tokens, then the normal tokens of ``ggml-vocab-llama-spm.gguf`` with ``▁`` made a space, each with
    its score."""
    from pyengine.gguf import open_gguf
    with open_gguf(dest / "ggml-vocab-llama-spm.gguf") as g:
        spm = [(t.replace("\u2581", " "), float(s)) for t, s, k in zip(
            g.metadata["tokenizer.ggml.tokens"], g.metadata["tokenizer.ggml.scores"],
            g.metadata["tokenizer.ggml.token_type"]) if k == 1]
    special = ["<|plamo:unk|>", "<|plamo:bos|>", "<|plamo:eos|>", "<|plamo:pad|>"]
    tokens = special + [f"<0x{b:02X}>" for b in range(256)] + [t for t, _ in spm]
    scores = [0.0] * 4 + [0.0] * 256 + [s for _, s in spm]
    types = [2, 3, 3, 3] + [6] * 256 + [1] * len(spm)
    return _header("plamo2-synthetic") + [
        ("tokenizer.ggml.model", "STRING", "plamo2"), ("tokenizer.ggml.tokens", "ARRAY[STRING]", tokens),
        ("tokenizer.ggml.scores", "ARRAY[FLOAT32]", scores), ("tokenizer.ggml.token_type", "ARRAY[INT32]", types),
        ("tokenizer.ggml.bos_token_id", "UINT32", 1), ("tokenizer.ggml.eos_token_id", "UINT32", 2),
        ("tokenizer.ggml.unknown_token_id", "UINT32", 0), ("tokenizer.ggml.padding_token_id", "UINT32", 3),
        ("tokenizer.ggml.add_bos_token", "BOOL", True)]


# name -> (sha256 of the file written, its metadata from the destination folder)
BUILT = {
    "rwkv-world": ("51df52da3f5fec5d0897f2c4bab83bed05ee7193dc905a141db4ff12f9c29e78", lambda dest: rwkv_world()),
    "plamo2-synthetic": ("3f6a5601fefc03bc3639528eef43d892e943b8cff4451e9338ae43aa4e44b56f", plamo2_synthetic),
}


def build(dest: Path) -> None:
    """Write each vocab of :data:`BUILT` missing from ``dest`` (after the llama-spm vocab it reads)."""
    sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
    from gguf_write import gguf_bytes
    for name, (digest, metadata) in BUILT.items():
        path = dest / f"ggml-vocab-{name}.gguf"
        if path.is_file() and sha256_of(path) == digest:
            continue
        partial = dest / f"ggml-vocab-{name}.gguf.partial"
        partial.write_bytes(gguf_bytes(metadata(dest), []))
        if sha256_of(partial) != digest:
            raise SystemExit(f"error: {path.name} as built: sha256 {sha256_of(partial)} != expected {digest}")
        partial.rename(path)
        print(f"built   {path}")


TEMPLATES_DIR = "llama_cpp_python-0.3.36/vendor/llama.cpp/models/templates/"


def fetch_templates(dest: Path) -> Path:
    """The chat templates llama.cpp tests with (``models/templates/*.jinja`` of the pinned sdist, whose
    sha256 pins them) in ``dest / "templates"``, for tests/text/test_chat_template.py; return that folder."""
    out = dest / "templates"
    done = out / "COMPLETE"
    if done.is_file():
        return out
    sdist = pip_download("llama-cpp-python==0.3.36", SDIST, SDIST_SHA256, "--no-binary", ":all:")
    out.mkdir(parents=True, exist_ok=True)
    names = []
    with tarfile.open(sdist) as tar:
        for member in tar:
            name = member.name.removeprefix(TEMPLATES_DIR)
            ours = member.name.startswith(TEMPLATES_DIR) and "/" not in name
            if ours and name.endswith(".jinja") and member.isfile():
                with tar.extractfile(member) as src:
                    (out / name).write_bytes(src.read())
                names.append(name)
    done.write_text("\n".join(sorted(names)) + "\n")
    print(f"fetched {len(names)} chat templates into {out}")
    return out


def wanted() -> dict[str, str]:
    """File name -> sha256 of every file to take out of the sdist."""
    files = {}
    for name, hashes in VOCABS.items():
        for suffix, digest in zip(("", ".inp", ".out"), hashes):
            if digest:
                files[f"ggml-vocab-{name}.gguf{suffix}"] = digest
    return files


def fetch(dest: Path = DEST) -> Path:
    """Make sure every file of :data:`VOCABS` is in ``dest`` with its sha256; return ``dest``."""
    return extract_checked(MEMBER_DIR, wanted(), dest)


def fetch_grammars(dest: Path = GRAMMARS_DEST) -> Path:
    """llama.cpp's GBNF grammars (:data:`GRAMMARS`, the sdist's ``grammars/``) in ``dest``, each
    sha256-checked, for tests/generation/test_grammar_files.py; return ``dest``."""
    return extract_checked(GRAMMARS_DIR, GRAMMARS, dest)


def extract_checked(member_dir: str, files: dict[str, str], dest: Path) -> Path:
    """Take the files ``files`` (name -> sha256) of the sdist's folder ``member_dir`` into ``dest``,
    each checked; those already there and right are left alone. Return ``dest``."""
    missing = {f: h for f, h in files.items() if not (dest / f).is_file() or sha256_of(dest / f) != h}
    if not missing:
        print(f"ok      {dest} ({len(files)} files already present)")
        return dest
    sdist = pip_download("llama-cpp-python==0.3.36", SDIST, SDIST_SHA256, "--no-binary", ":all:")
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(sdist) as tar:
        for member in tar:
            name = member.name.removeprefix(member_dir)
            if name in missing and member.isfile():
                partial = dest / (name + ".partial")
                with tar.extractfile(member) as src, open(partial, "wb") as out:
                    out.write(src.read())
                digest = sha256_of(partial)
                if digest != missing[name]:
                    partial.unlink()
                    raise SystemExit(f"error: {name}: sha256 {digest} != expected {missing[name]}")
                partial.rename(dest / name)
                del missing[name]
    if missing:
        raise SystemExit(f"error: not in {SDIST}: {', '.join(sorted(missing))}")
    print(f"fetched {len(files)} files into {dest} (sha256 ok)")
    return dest


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dest", type=Path, default=DEST)
    dest = fetch(ap.parse_args().dest)
    build(dest)
    fetch_templates(dest)
    fetch_grammars(dest / "grammars")


if __name__ == "__main__":
    main()
