"""The command line: ``python -m pyengine inspect|generate|chat|tokenize``.

Bad input (any :class:`~pyengine.errors.PyEngineError`) prints one line
``error: ...`` on stderr and exits with status 1, never a traceback.
"""

from __future__ import annotations

import argparse
import sys

from pyengine.errors import PyEngineError


def _add_sampling(p: argparse.ArgumentParser) -> None:
    p.add_argument("-n", "--n-predict", type=int, default=128, help="most tokens to generate (default 128)")
    p.add_argument("--temp", type=float, default=0.0, help="temperature; 0 = greedy (default 0)")
    p.add_argument("--top-k", type=int, default=40)
    p.add_argument("--top-p", type=float, default=0.95)
    p.add_argument("--min-p", type=float, default=0.05)
    p.add_argument("--repeat-penalty", type=float, default=1.0)
    p.add_argument("--repeat-last-n", type=int, default=64)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("-c", "--ctx-size", type=int, default=0, help="context length in tokens (0 = the model's)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of streaming text")


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
    _add_sampling(p)
    p.set_defaults(func=cmd_chat)

    p = sub.add_parser("tokenize", help="read one JSON string per line on stdin, print its token ids")
    p.add_argument("model", nargs="+")
    p.add_argument("--parse-special", action="store_true", help="parse special-token text")
    p.set_defaults(func=cmd_tokenize)
    return ap


def cmd_inspect(args: argparse.Namespace) -> int:
    from pyengine.inspect import run_inspect
    return run_inspect(args.files, as_json=args.json)


def cmd_generate(args: argparse.Namespace) -> int:
    raise PyEngineError("generate: not implemented yet")


def cmd_chat(args: argparse.Namespace) -> int:
    raise PyEngineError("chat: not implemented yet")


def cmd_tokenize(args: argparse.Namespace) -> int:
    raise PyEngineError("tokenize: not implemented yet")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except PyEngineError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except OSError as e:  # a missing or unreadable file
        print(f"error: {e.filename or ''}: {e.strerror or e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
