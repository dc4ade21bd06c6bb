"""The command line: ``python -m pyengine inspect|generate|chat|tokenize|trace``.

Bad input (any :class:`~pyengine.errors.PyEngineError`) prints one line
``error: ...`` on stderr and exits with status 1, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time

from pyengine.errors import PyEngineError, TemplateError, UnsupportedArchitectureError
from pyengine.generation.lookup import LOOKUP_DEFAULT
from pyengine.weights import kernel
from pyengine.weights.budget import CHOICES

MAX_OPTION_FILE = 1 << 20          # characters of a --grammar, --json-schema, --tools or template file


def _add_sampling(p: argparse.ArgumentParser) -> None:
    p.add_argument("-n", "--n-predict", type=int, default=128, help="most tokens to generate (default 128)")
    p.add_argument("--temp", type=float, default=0.0, help="temperature; 0 = greedy (default 0)")
    p.add_argument("--top-k", type=int, default=40)
    p.add_argument("--top-p", type=float, default=0.95)
    p.add_argument("--min-p", type=float, default=0.05)
    p.add_argument("--repeat-penalty", type=float, default=1.0)
    p.add_argument("--repeat-last-n", type=int, default=64)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--lookup", type=int, default=LOOKUP_DEFAULT, metavar="N",
                   help="prompt lookup: draft up to N tokens per step from n-grams already in the conversation and "
                        f"check them in one forward pass; 0 = off (default {LOOKUP_DEFAULT})")
    p.add_argument("-c", "--ctx-size", type=int, default=0, help="context length in tokens (0 = the model's)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of streaming text")
    p.add_argument("--probs", type=int, default=0, metavar="N",
                   help="with --json: for each reply token, its probability and the N likeliest tokens of the "
                        "distribution it was drawn from (after the penalties and temperature, before top-k, top-p "
                        "and min-p; at temperature 0 the softmax of the penalized logits); 0 = off (default)")
    shape = p.add_mutually_exclusive_group()
    shape.add_argument("--grammar", metavar="FILE", help="hold the reply to a GBNF grammar (llama.cpp's format)")
    shape.add_argument("--json-schema", metavar="FILE|JSON",
                       help="hold the reply to a JSON Schema: a file, or the schema itself")
    shape.add_argument("--json-mode", action="store_true", help="hold the reply to a JSON object")
    p.add_argument("--weights", choices=CHOICES, default="auto",
                   help="weight form: blocks the file's own blocks, multiplied in the C kernel; numpy auto's "
                        "numpy forms, without the kernel; f32 float32, the fastest numpy form here with BLAS, "
                        "the most memory; quantized the file's own codes, a code in each lane of an int64; "
                        "compact the file's codes packed tight; auto: blocks where the C kernel loads, else "
                        "f32 when it fits this machine's memory, else the file's codes (default)")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m pyengine", description="Inspect and run GGUF models.")
    sub = ap.add_subparsers(dest="command", required=True)

    p = sub.add_parser("inspect", help="show a GGUF file's layout, metadata and tensors")
    p.add_argument("files", nargs="+", help="a .gguf file, or every part of a split model")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_inspect)

    p = sub.add_parser("generate", help="complete a raw prompt")
    p.add_argument("model", nargs="+", help="a .gguf file, or every part of a split model")
    p.add_argument("-p", "--prompt", required=True)
    _add_sampling(p)
    p.set_defaults(func=cmd_generate)

    p = sub.add_parser("chat", help="chat with the model through its chat template")
    p.add_argument("model", nargs="+")
    p.add_argument("--system", default=None, help="system prompt")
    p.add_argument("--messages", default=None, help="JSON file: a list of {role, content}; answer once and exit")
    p.add_argument("--tools", metavar="FILE", default=None,
                   help="JSON file: tool definitions as OpenAI's (a list of {type: function, function: {name, "
                        "description, parameters}}), given to the chat template; a reply's calls are listed in "
                        "--json's tool_calls, and each next stdin line answers the next call")
    p.add_argument("--tool-choice", choices=("auto", "required"), default="auto",
                   help="required: each reply is one call, its arguments held to the tool's schema (default auto)")
    p.add_argument("--chat-template-file", metavar="FILE", default=None,
                   help="a Jinja chat template to use instead of the model's")
    _add_sampling(p)
    p.set_defaults(func=cmd_chat)

    p = sub.add_parser("trace", help="look inside one step: the logit lens, the attention weights, the cost")
    p.add_argument("model", nargs="+", help="a .gguf file, or every part of a split model")
    p.add_argument("-p", "--prompt", required=True, help="raw text (BOS and special-token text as for generate)")
    p.add_argument("--chat", action="store_true", help="the prompt is a user message, rendered by the chat template "
                   "with the assistant's turn opened (as the page sends it)")
    p.add_argument("--position", type=int, default=None, metavar="N",
                   help="trace the step that reads the token at position N (default: the prompt's last, the step "
                        "that gives the first token after it)")
    p.add_argument("--heads", type=int, default=None, metavar="K", help="keep the attention of the first K heads")
    p.add_argument("--weights", choices=CHOICES, default="auto", help="weight form, as for generate")
    p.add_argument("--json", action="store_true", help="print one JSON object (else a table per layer)")
    p.set_defaults(func=cmd_trace)

    p = sub.add_parser("tokenize", help="read one JSON string per line on stdin, print its token ids")
    p.add_argument("model", nargs="+")
    p.add_argument("--parse-special", action="store_true", help="parse special-token text")
    p.set_defaults(func=cmd_tokenize)
    return ap


def cmd_inspect(args: argparse.Namespace) -> int:
    from pyengine.inspect import run_inspect
    return run_inspect(args.files, as_json=args.json)


def cmd_generate(args: argparse.Namespace) -> int:
    """Raw completion of ``-p``: the prompt is tokenized as llama-cli does (BOS if the vocab's
    ``add_bos_token`` says so, special-token text parsed), the reply streamed to stdout."""
    from pyengine.generation import generate
    request, n_ctx = _request(args), _n_ctx(args)      # bad options fail before the slow load
    engine = _load(args.model, args.weights)
    prompt_ids = engine.tokenizer.encode(args.prompt, add_special=True, parse_special=True)
    gen = generate(engine, prompt_ids, request, _fit_ctx(n_ctx, engine))
    _reply(gen, args.json, engine.model.weights)
    return 0


def cmd_chat(args: argparse.Namespace) -> int:
    """A chat through the model's template: ``--messages FILE`` answers that conversation once;
    otherwise each line of stdin is a user message and each reply streams to stdout (with
    ``--json``, one JSON object per reply). Ctrl-C stops a reply; the chat goes on."""
    from pyengine.generation import ChatSession
    request, n_ctx = _request(args), _n_ctx(args)      # bad options fail before the slow load
    messages = _read_messages(args.messages) if args.messages is not None else None
    tools = _read_tools(args.tools) if args.tools is not None else None
    template = _template_file(args.chat_template_file) if args.chat_template_file else None
    engine = _with_template(_load(args.model, args.weights), template)
    session = ChatSession(engine, system=args.system, n_ctx=_fit_ctx(n_ctx, engine), tools=tools,
                          tool_choice=args.tool_choice)
    weights = session.engine.model.weights
    if messages is not None:
        _reply(session.respond(request, messages), args.json, weights, session)
        return 0
    interactive = sys.stdin.isatty()
    while True:
        if interactive:
            print("> ", end="", file=sys.stderr, flush=True)
        line = sys.stdin.readline()
        if not line:
            return 0
        waiting = _waiting_calls(session)
        if waiting:                                  # the line is the result of the next call
            session.add_tool_result(waiting[0]["id"], line.rstrip("\n"))
            if len(waiting) > 1:
                continue
            turn = session.respond(request)
        elif line.strip():
            turn = session.send(line.rstrip("\n"), request)
        else:
            continue
        try:
            _reply(turn, args.json, weights, session)
        except KeyboardInterrupt:
            turn.close()
            print(file=sys.stdout, flush=True)


def cmd_trace(args: argparse.Namespace) -> int:
    """The trace of one step (:func:`pyengine.generation.trace.trace`), as JSON or a table: per layer the
    logit lens's top tokens, the attention's most-read position, and the seconds."""
    from pyengine.generation.trace import trace
    if args.heads is not None and args.heads < 1:
        raise PyEngineError(f"--heads must be a number of heads >= 1, got {args.heads}")
    engine = _load(args.model, args.weights)
    if args.chat:
        from pyengine.generation.chat import chat_prompt
        if engine.template is None:
            raise PyEngineError(f"--chat: the model's chat template cannot be used ({engine.template_error})")
        ids = chat_prompt(engine.template, engine.tokenizer, [{"role": "user", "content": args.prompt}])[1]
    else:
        ids = engine.tokenizer.encode(args.prompt, add_special=True, parse_special=True)
    rec = trace(engine.model, engine.tokenizer, ids, args.position, args.heads)
    if args.json:
        print(json.dumps(rec, ensure_ascii=False), flush=True)
        return 0
    print(f"step at position {rec['position']} reads {rec['token']!r}, gives {rec['next'][1]!r} "
          f"({rec['total_seconds'] * 1000:.1f} ms, {sum(rec['bytes'].values()) / 2**20:.1f} MiB of weights read)")
    for layer in rec["layers"]:
        top = ", ".join(f"{p!r} {q:.2f}" for _, p, q in layer["top"][:3])
        print(f"layer {layer['layer']:3d}  {layer['seconds'] * 1000:7.2f} ms  {top}{_most_read(rec, layer)}")
    return 0


def _most_read(rec: dict, layer: dict) -> str:
    """A traced layer's most-read position (the mean over its kept heads) as ``  | reads N 'piece' w``; else ''."""
    if not layer.get("attention"):
        return ""
    mean = [sum(col) / len(col) for col in zip(*layer["attention"])]
    i = max(range(len(mean)), key=mean.__getitem__)
    return f"  | reads {layer['first'] + i} {rec['tokens'][layer['first'] + i]!r} {mean[i]:.2f}"


def cmd_tokenize(args: argparse.Namespace) -> int:
    """One JSON string per stdin line -> one JSON list of ids per stdout line, like llama-tokenize
    (BOS/EOS as for a raw prompt; special-token text parsed only with ``--parse-special``)."""
    from pyengine.generation import load_tokenizer
    tokenizer = load_tokenizer(args.model)
    for n, line in enumerate(sys.stdin, 1):
        if not line.strip():
            continue
        try:
            text = json.loads(line)
        except json.JSONDecodeError as e:
            raise PyEngineError(f"stdin line {n}: not JSON ({e})") from None
        if not isinstance(text, str):
            raise PyEngineError(f"stdin line {n}: expected a JSON string, got {type(text).__name__}")
        ids = tokenizer.encode(text, add_special=True, parse_special=args.parse_special)
        print(json.dumps(ids), flush=True)
    return 0


# --- what generate and chat share

def _load(paths: list[str], weights: str = "auto"):
    """Load the model in weight policy ``weights`` (one of :data:`pyengine.weights.budget.CHOICES`), telling
    stderr how it goes."""
    from pyengine.generation import load
    name = os.path.basename(paths[0])
    tty = sys.stderr.isatty()
    t0 = time.perf_counter()

    def progress(done: int, total: int, *_bytes: int) -> None:
        if tty:
            print(f"\rloading {name}: {done}/{total} tensors", end="", file=sys.stderr, flush=True)

    engine = load(paths, progress=progress, weights=weights)
    template = engine.template.name if engine.template else f"none ({engine.template_error})"
    print(f"{chr(13) if tty else ''}loaded {name}: {engine.model.config.arch}, {len(engine.gguf.tensors)} tensors, "
          f"{engine.model.weights} weights, chat template {template}, in {time.perf_counter() - t0:.1f} s; "
          f"quantized products: {kernel.products_line(engine.model.weights, f'--weights {weights}')}", file=sys.stderr)
    return engine


def _request(args: argparse.Namespace):
    """The options as a :class:`pyengine.generation.Request`, each checked (the sampling, ``-n``,
    ``--lookup``, ``--probs``, and the grammar of ``--grammar``, ``--json-schema`` or ``--json-mode``)."""
    from pyengine.generation.request import Request
    from pyengine.generation.sampling import SamplerParams
    sampling = SamplerParams(temperature=args.temp, top_k=args.top_k, top_p=args.top_p, min_p=args.min_p,
                             repeat_penalty=args.repeat_penalty, repeat_last_n=args.repeat_last_n,
                             seed=args.seed).check()
    _check_limits(args)
    return Request(sampling, args.n_predict, lookup=args.lookup, probs=args.probs, grammar=_grammar(args))


def _check_limits(args: argparse.Namespace) -> None:
    """Check ``-n``, ``--lookup`` and ``--probs``."""
    if args.n_predict < 1:
        raise PyEngineError(f"-n/--n-predict must be at least 1 token, got {args.n_predict}")
    if args.lookup < 0:
        raise PyEngineError(f"--lookup must be a number of tokens >= 0 (0 = off), got {args.lookup}")
    if args.probs < 0 or (args.probs and not args.json):
        raise PyEngineError(f"--probs must be a number of tokens >= 0 and goes with --json, got {args.probs}"
                            + ("" if args.json else " without --json"))


def _n_ctx(args: argparse.Namespace) -> int | None:
    """The context size from ``-c`` (None: the model's)."""
    if args.ctx_size < 0:
        raise PyEngineError(f"-c/--ctx-size must be >= 0 (0 = the model's), got {args.ctx_size}")
    return args.ctx_size or None


def _fit_ctx(n_ctx: int | None, engine) -> int | None:
    """``-c`` within the model's trained context (``n_ctx_train``, from ``{arch}.context_length``):
    a larger one is cut to it, with a note on stderr (positions past it were never trained)."""
    n_train = engine.model.config.n_ctx_train
    if n_ctx is not None and n_ctx > n_train:
        print(f"note: -c/--ctx-size {n_ctx} is more than the model's trained context of {n_train} tokens: "
              f"using {n_train}", file=sys.stderr)
        return n_train
    return n_ctx


def _option_file(path: str, option: str) -> str:
    """The text of an option's file, at most :data:`MAX_OPTION_FILE` characters of UTF-8."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read(MAX_OPTION_FILE + 1)
    except UnicodeDecodeError as e:
        raise PyEngineError(f"{path} ({option}): not UTF-8 text ({e})") from None
    if len(text) > MAX_OPTION_FILE:
        raise PyEngineError(f"{path} ({option}): more than {MAX_OPTION_FILE} characters")
    return text


def _template_file(path: str) -> str:
    """The text of ``--chat-template-file``, compiled once before the model loads: a template that does not
    parse is an error naming the file."""
    from pyengine.text.chat_template import check_template
    source = _option_file(path, "--chat-template-file")
    try:
        check_template(source)
    except TemplateError as e:
        raise TemplateError(f"{path} (--chat-template-file): {e}") from None
    return source


def _grammar(args: argparse.Namespace):
    """The grammar of ``--grammar``, ``--json-schema`` or ``--json-mode`` (None without them), parsed
    before the model loads: a bad one is an error naming its line and column."""
    from pyengine.generation.grammar import Grammar
    from pyengine.generation.json_schema import json_mode_gbnf, parse_schema, schema_to_gbnf
    if args.grammar is not None:
        return Grammar.from_gbnf(_option_file(args.grammar, "--grammar"), args.grammar)
    if args.json_schema is not None:
        value = args.json_schema
        inline = value.lstrip().startswith(("{", "true"))
        source = "--json-schema" if inline else value
        schema = parse_schema(value if inline else _option_file(value, "--json-schema"), source)
        return Grammar.from_gbnf(schema_to_gbnf(schema), source)
    if args.json_mode:
        return Grammar.from_gbnf(json_mode_gbnf(), "--json-mode")
    return None


def _read_tools(path: str) -> list:
    from pyengine.generation.tools import check_tools
    try:
        tools = json.loads(_option_file(path, "--tools"))
    except json.JSONDecodeError as e:
        raise PyEngineError(f"{path}: line {e.lineno}, column {e.colno}: {e.msg}") from None
    return check_tools(tools, path)


def _with_template(engine, source: str | None):
    """``engine`` with the chat template ``source`` (``--chat-template-file``) instead of its own."""
    if source is None:
        return engine
    from dataclasses import replace

    from pyengine.text.chat_template import ChatTemplate
    old = engine.template or ChatTemplate(None, None)
    return replace(engine, template=ChatTemplate(source, None, old.bos_token, old.eos_token, old.add_bos, old.add_eos),
                   template_error="")


def _waiting_calls(session) -> list[dict]:
    """The last reply's calls still waiting for a result, in order."""
    msgs = session.messages
    last = len(msgs)
    while last > 0 and msgs[last - 1]["role"] == "tool":
        last -= 1
    done = {m.get("tool_call_id") for m in msgs[last:]}
    calls = msgs[last - 1].get("tool_calls", []) if last > 0 else []
    return [c for c in calls if c["id"] not in done]


def _read_messages(path: str) -> list[dict]:
    from pyengine.text.chat_template import check_messages
    with open(path, encoding="utf-8") as f:
        try:
            messages = check_messages(json.load(f))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise PyEngineError(f"{path}: not a JSON file ({e})") from None
    if not messages:
        raise PyEngineError(f"{path}: no messages to answer")
    return messages


def _reply(gen, as_json: bool, weights: str, session=None) -> None:
    """Stream a reply's pieces to stdout (its statistics to stderr), or print it as one JSON object:
    ``{"prompt_ids", "ids", "text", "stats", "weights"}`` (``weights``: the model's weight form),
    with the rendered ``prompt`` first for a chat, and ``probs`` (a record per id: ``{id, token,
    text, p, top: [{id, token, p}]}``) with ``--probs``; with tools, ``content`` (the text outside the
    calls) and ``tool_calls`` (OpenAI's ``{"id", "type": "function", "function": {"name", "arguments"}}``)."""
    if as_json:
        for _ in gen:
            pass
        out = {"prompt": session.prompt} if session is not None else {}
        out.update(prompt_ids=gen.prompt_ids, ids=gen.ids, text=gen.text, stats=gen.stats.as_dict(), weights=weights)
        if session is not None and session.tool_format is not None:
            from pyengine.generation.tools import openai_calls
            reply = session.messages[-1]
            out.update(content=reply["content"], tool_calls=openai_calls(reply.get("tool_calls", [])))
        if gen.token_probs:
            out["probs"] = gen.token_probs
        print(json.dumps(out, ensure_ascii=False), flush=True)
        return
    for piece in gen:
        sys.stdout.write(piece)
        sys.stdout.flush()
    print(flush=True)
    print(gen.stats.summary(), file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except UnsupportedArchitectureError as e:   # the file is still a GGUF: say how to look inside it
        files = shlex.join(getattr(args, "model", None) or ["FILE"])
        print(f"error: {e}; `python -m pyengine inspect {files}` shows its metadata and tensors", file=sys.stderr)
        return 1
    except PyEngineError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except OSError as e:  # a missing or unreadable file
        print(f"error: {e.filename or ''}: {e.strerror or e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
