"""Serve ``static/`` on 127.0.0.1 with the headers that make the page cross-origin isolated.

    python build_scripts/serve.py [--port 8000] [--root static]     (PORT=... works too; --port 0 picks a free one)

Every response, errors included, carries COOP ``same-origin``, COEP ``require-corp`` and CORP
``same-origin`` (so the page gets ``SharedArrayBuffer`` and Pyodide's interrupt buffer), the
Content-Security-Policy :data:`CSP` (web/index.html carries the same in a meta tag, for other servers),
and ``Cache-Control: no-cache`` (the browser revalidates with the ``ETag``, getting a bodiless 304 when
the file is unchanged; the service worker does the offline caching).

Only a request for this server by name is answered: its Host header must be 127.0.0.1, localhost or
[::1] with the server's port (a page on another site that rebinds its name to 127.0.0.1 gets a 421).
An idle connection is closed after IDLE_SECONDS. Only regular files under the root are served: a path
with ``..``, ``.``, a backslash or a NUL after percent-decoding, or one that resolves (through a
symlink) outside the root, is a 404; directories serve their ``index.html`` and are never listed.
GET and HEAD, without a body (one gets a 400 and the connection closed: it would be read as the next
request). At most MAX_CONNECTIONS connections are served at once; one more gets a 503. Ranges as
RFC 9110 has them: one satisfiable ``bytes=a-b`` / ``a-`` / ``-n`` gets a 206 (models are large), an
unsatisfiable one a 416, an invalid one (``bytes=5-3``, another unit) or several are ignored (the whole
file, 200).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

ROOT = Path(__file__).resolve().parent.parent
HOST = "127.0.0.1"

CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".mjs": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".json": "application/json",
    ".map": "application/json",
    ".wasm": "application/wasm",
    ".zip": "application/zip",
    ".whl": "application/zip",          # a wheel is a zip archive
    ".gguf": "application/octet-stream",
    ".png": "image/png",
    ".svg": "image/svg+xml",
    ".ico": "image/x-icon",
    ".txt": "text/plain; charset=utf-8",
    ".webmanifest": "application/manifest+json",
}
# What the page needs: its own scripts, wasm compiled by Pyodide, module workers, styles and fetches from
# this origin, and the data: favicon; nothing inline, no eval, no plugins, no <base>, no framing.
CSP = ("default-src 'self'; script-src 'self' 'wasm-unsafe-eval'; img-src 'self' data:; object-src 'none'; "
       "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
HEADERS = {
    "Content-Security-Policy": CSP,
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Embedder-Policy": "require-corp",
    "Cross-Origin-Resource-Policy": "same-origin",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-cache",
}
CHUNK = 1 << 20  # bytes per write when sending a file
IDLE_SECONDS = float(os.environ.get("SERVE_IDLE_SECONDS") or 20)  # an idle connection is closed after this
MAX_CONNECTIONS = int(os.environ.get("SERVE_MAX_CONNECTIONS") or 64)  # served at once; one more gets a 503
RANGE = re.compile(r"bytes=(\d*)-(\d*)$")
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")


BUSY = ("HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 24\r\n"
        "Connection: close\r\n" + "".join(f"{k}: {v}\r\n" for k, v in HEADERS.items()) +
        "\r\n503 Service Unavailable\n").encode()


def resolve(root: Path, url_path: str) -> Path | None:
    """The regular file under ``root`` (already resolved) that ``url_path`` names, or None.

    None for: any decoded segment that is ``..`` or ``.``, a backslash or NUL, a target that resolves
    outside ``root`` (symlinks included), a missing file, a directory without index.html.
    """
    path = unquote(urlsplit(url_path).path, errors="strict")
    if not path.startswith("/") or "\\" in path or "\0" in path:
        return None
    parts = [p for p in path.split("/") if p]
    if any(p in (".", "..") for p in parts):
        return None
    target = root.joinpath(*parts)
    if path.endswith("/") or target.is_dir():
        target = target / "index.html"
    try:
        real = target.resolve(strict=True)
    except (OSError, RuntimeError):
        return None
    if not real.is_relative_to(root) or not real.is_file():
        return None
    return real


def byte_range(header: str | None, size: int) -> tuple[int, int] | None:
    """(first, last) byte, inclusive, of a single ``bytes=a-b`` / ``a-`` / ``-n`` range; None for the whole file
    (no header, several ranges, or an invalid one: RFC 9110 says to ignore it).

    Raises ValueError for a range that cannot be satisfied (the caller answers 416): it starts at or
    past the end, or asks for the last 0 bytes.
    """
    m = RANGE.match(header.strip()) if header else None
    if not m or m.groups() == ("", ""):
        return None
    a, b = m.groups()
    if a and b and int(b) < int(a):
        return None  # invalid (last before first): ignored
    if a == "":
        if int(b) == 0 or size == 0:
            raise ValueError(header)
        return max(0, size - int(b)), size - 1
    if int(a) >= size:
        raise ValueError(header)
    return int(a), min(int(b), size - 1) if b else size - 1


def host_allowed(host: str | None, port: int) -> bool:
    """Whether a Host header names this server: a loopback name with its port (the port may be left out
    only when it is 80)."""
    if not host:
        return False
    host = host.strip().lower()
    return any(host == f"{name}:{port}" or (port == 80 and host == name) for name in LOOPBACK_NAMES)


class Handler(BaseHTTPRequestHandler):
    server_version = "pyengine-serve"
    protocol_version = "HTTP/1.1"  # keep-alive: the page fetches a few dozen files
    timeout = IDLE_SECONDS         # on the socket: a read or write that waits longer ends the connection
    root: Path  # set by make_server
    policy = HEADERS               # sent on every reply

    def do_GET(self) -> None:
        self.send_file(body=True)

    def do_HEAD(self) -> None:
        self.send_file(body=False)

    def send_file(self, body: bool) -> None:
        if self.headers.get("Content-Length", "0").strip() != "0" or "Transfer-Encoding" in self.headers:
            self.close_connection = True       # its body would be read as the next request: refuse, and close
            return self.send_status(HTTPStatus.BAD_REQUEST, {"Connection": "close"})
        if not host_allowed(self.headers.get("Host"), self.server.server_address[1]):
            return self.send_status(HTTPStatus.MISDIRECTED_REQUEST)
        try:
            path = resolve(self.root, self.path)
        except UnicodeDecodeError:
            path = None
        if path is None:
            return self.send_status(HTTPStatus.NOT_FOUND)
        stat = path.stat()
        size = stat.st_size
        etag = f'"{size:x}-{stat.st_mtime_ns:x}"'  # changes whenever the build rewrites the file
        if etag in self.headers.get("If-None-Match", ""):
            return self.send_status(HTTPStatus.NOT_MODIFIED, {"ETag": etag})
        try:
            rng = byte_range(self.headers.get("Range"), size)
        except ValueError:
            return self.send_status(HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE, {"Content-Range": f"bytes */{size}"})
        first, last = rng or (0, size - 1)
        self.send_response(HTTPStatus.PARTIAL_CONTENT if rng else HTTPStatus.OK)
        self.send_header("Content-Type", CONTENT_TYPES.get(path.suffix.lower(), "application/octet-stream"))
        self.send_header("Content-Length", str(last - first + 1))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("ETag", etag)
        if rng:
            self.send_header("Content-Range", f"bytes {first}-{last}/{size}")
        self.end_headers()
        if body:
            with open(path, "rb") as f:
                f.seek(first)
                remaining = last - first + 1
                while remaining > 0:
                    chunk = f.read(min(CHUNK, remaining))
                    if not chunk:
                        break
                    self.wfile.write(chunk)
                    remaining -= len(chunk)

    def send_status(self, status: HTTPStatus, extra: dict | None = None) -> None:
        """A bodiless answer: a short text for errors, nothing at all for 304."""
        text = f"{status.value} {status.phrase}\n".encode()
        self.send_response(status)
        for key, value in (extra or {}).items():
            self.send_header(key, value)
        if status != HTTPStatus.NOT_MODIFIED:
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(text)))
        self.end_headers()
        if self.command != "HEAD" and status != HTTPStatus.NOT_MODIFIED:
            self.wfile.write(text)

    def end_headers(self) -> None:
        """Every reply's headers end with the policy ones: files, 304s, and the errors the base class
        sends itself (a bad request line, an unsupported method, a URI too long)."""
        for key, value in self.policy.items():
            self.send_header(key, value)
        super().end_headers()

    def log_message(self, format: str, *args) -> None:  # noqa: A002 (the base class's name)
        if os.environ.get("SERVE_QUIET") != "1":
            super().log_message(format, *args)


class Server(ThreadingHTTPServer):
    """One thread a connection, at most ``MAX_CONNECTIONS`` at once: one more is answered 503 and closed
    at once (a page opens a few; a flood of idle ones cannot hold a thread each)."""
    daemon_threads = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)

    def process_request(self, request, client_address) -> None:
        if not self.slots.acquire(blocking=False):
            try:
                request.sendall(BUSY)
            except OSError:
                pass
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def handle_error(self, request, client_address) -> None:
        """A client that went away mid-file (reload, stop, aborted fetch) is normal: say nothing."""
        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)


def make_server(root: Path, port: int) -> ThreadingHTTPServer:
    """A threaded server for ``root`` bound to 127.0.0.1:``port`` (0: any free port)."""
    handler = type("StaticHandler", (Handler,), {"root": root.resolve()})
    return Server((HOST, port), handler)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=int(os.environ.get("PORT") or 8000))
    ap.add_argument("--root", type=Path, default=ROOT / "static")
    args = ap.parse_args()
    if not (args.root / "index.html").is_file():
        sys.exit(f"error: {args.root}/index.html is missing: run `make build` first")
    try:
        server = make_server(args.root, args.port)
    except OSError as e:
        sys.exit(f"error: cannot listen on {HOST}:{args.port}: {e.strerror} (PORT=... picks another port)")
    print(f"serving {args.root} at http://{HOST}:{server.server_address[1]}/  (Ctrl+C stops)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
