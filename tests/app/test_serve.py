"""build_scripts/serve.py: headers, content types, ranges, and nothing outside the root.

The server runs as `make run` runs it (a subprocess, port from $PORT, here 0 = a free one) over a
temporary root with a secret file beside it and symlinks pointing out.
"""

from __future__ import annotations

import http.client
import os
import re
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SECRET = b"outside the root\n"
BIG = 16 << 20  # bytes: more than the socket buffers hold, so an abort lands mid-file
IDLE = 2        # seconds: the idle timeout the server runs with here (20 by default)
MAX_CONNECTIONS = 8  # served at once here (64 by default)
CSP = ("default-src 'self'; script-src 'self' 'wasm-unsafe-eval'; img-src 'self' data:; object-src 'none'; "
       "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
FILES = {  # path under the root -> (bytes, expected Content-Type)
    "index.html": (b"<!doctype html><title>t</title>", "text/html; charset=utf-8"),
    "app.mjs": (b"export const a = 1;", "text/javascript; charset=utf-8"),
    "worker.js": (b"self.onmessage = () => {};", "text/javascript; charset=utf-8"),
    "style.css": (b"body{}", "text/css; charset=utf-8"),
    "pyodide/pyodide.asm.wasm": (b"\0asm\1\0\0\0", "application/wasm"),
    "pyodide/python_stdlib.zip": (b"PK\5\6" + bytes(18), "application/zip"),
    "pyodide/pyodide-lock.json": (b'{"packages": {}}', "application/json"),
    "wheels/x-1.0-py3-none-any.whl": (b"PK\5\6" + bytes(18), "application/zip"),
    "models/m.gguf": (b"GGUF" + bytes(range(60)), "application/octet-stream"),
    "sub/index.html": (b"<p>sub</p>", "text/html; charset=utf-8"),
}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    base = tmp_path_factory.mktemp("serve")
    root = base / "static"
    for rel, (data, _) in FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    (root / "empty").mkdir()
    (root / "models" / "big.gguf").write_bytes(bytes(BIG))
    (base / "secret.txt").write_bytes(SECRET)
    (root / "link-out.txt").symlink_to(base / "secret.txt")
    (root / "dir-out").symlink_to(base)
    (root / "link-in.css").symlink_to(root / "style.css")
    proc = subprocess.Popen([sys.executable, str(ROOT / "build_scripts" / "serve.py"), "--root", str(root)],
                            env={**os.environ, "PORT": "0", "SERVE_QUIET": "1", "SERVE_IDLE_SECONDS": str(IDLE),
                                 "SERVE_MAX_CONNECTIONS": str(MAX_CONNECTIONS)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    m = re.search(r"http://([\d.]+):(\d+)/", line)
    if not m:
        proc.kill()
        pytest.fail(f"serve.py printed no URL: {line!r} {proc.stderr.read()!r}")
    yield m.group(1), int(m.group(2))
    proc.terminate()
    proc.wait(timeout=10)
    assert "Traceback" not in proc.stderr.read()  # aborted downloads and bad requests are handled quietly


def get(server, path: str, method: str = "GET", headers: dict | None = None):
    conn = http.client.HTTPConnection(*server, timeout=10)
    conn.request(method, path, headers=headers or {})
    resp = conn.getresponse()
    body = resp.read()
    conn.close()
    return resp, body


def test_prints_a_loopback_url_and_listens_on_loopback_only(server):
    host, port = server
    assert host == "127.0.0.1"
    listening = []  # (local address hex, port) of LISTEN sockets, from the kernel's table
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if os.path.exists(table):
            for row in open(table).read().splitlines()[1:]:
                local, state = row.split()[1], row.split()[3]
                addr, p = local.split(":")
                if state == "0A" and int(p, 16) == port:
                    listening.append(addr)
    assert listening == ["0100007F"]  # 127.0.0.1, little-endian; not 0.0.0.0 and not IPv6


@pytest.mark.parametrize("rel", sorted(FILES))
def test_serves_each_file_with_its_type_and_the_isolation_headers(server, rel):
    resp, body = get(server, "/" + rel)
    data, ctype = FILES[rel]
    assert resp.status == 200
    assert body == data
    assert resp.getheader("Content-Type") == ctype
    assert resp.getheader("Content-Length") == str(len(data))
    assert resp.getheader("Cross-Origin-Opener-Policy") == "same-origin"
    assert resp.getheader("Cross-Origin-Embedder-Policy") == "require-corp"
    assert resp.getheader("Cross-Origin-Resource-Policy") == "same-origin"
    assert resp.getheader("Cache-Control") == "no-cache"
    assert resp.getheader("Content-Security-Policy") == CSP


def test_directories_serve_index_html_and_are_never_listed(server):
    assert get(server, "/")[1] == FILES["index.html"][0]
    assert get(server, "/sub/")[1] == FILES["sub/index.html"][0]
    assert get(server, "/sub")[1] == FILES["sub/index.html"][0]
    resp, body = get(server, "/empty/")
    assert resp.status == 404 and b"href" not in body


@pytest.mark.parametrize("path", [
    "/../secret.txt",
    "/%2e%2e/secret.txt",
    "/%2E%2E%2Fsecret.txt",
    "/sub/..%2f..%2fsecret.txt",
    "/sub/%2e%2e/%2e%2e/secret.txt",
    "/./index.html",
    "/..%5csecret.txt",
    "/index.html%00.txt",
    "/%ff%fe",
    "../secret.txt",
    "//etc/passwd",
    "/etc/passwd",
    "/link-out.txt",
    "/dir-out/secret.txt",
    "/missing.js",
])
def test_nothing_outside_the_root_is_reachable(server, path):
    resp, body = get(server, path)
    assert resp.status == 404, path
    assert SECRET not in body and b"root:" not in body
    assert resp.getheader("Cross-Origin-Embedder-Policy") == "require-corp"


def test_symlink_inside_the_root_is_served(server):
    resp, body = get(server, "/link-in.css")
    assert (resp.status, body) == (200, b"body{}")


def test_head_sends_headers_without_a_body(server):
    resp, body = get(server, "/pyodide/pyodide.asm.wasm", method="HEAD")
    assert resp.status == 200 and body == b""
    assert resp.getheader("Content-Length") == "8"
    assert resp.getheader("Content-Type") == "application/wasm"


@pytest.mark.parametrize("header, status, span", [
    ("bytes=0-3", 206, (0, 3)),
    ("bytes=10-19", 206, (10, 19)),
    ("bytes=60-", 206, (60, 63)),
    ("bytes=-5", 206, (59, 63)),
    ("bytes=50-1000", 206, (50, 63)),
    ("bytes=64-70", 416, None),      # starts past the end: unsatisfiable
    ("bytes=-0", 416, None),         # the last 0 bytes: unsatisfiable
    ("bytes=5-3", 200, (0, 63)),     # invalid (RFC 9110: last before first): ignored, the whole file
    ("items=0-3", 200, (0, 63)),     # another unit: ignored
    ("bytes=0-1,4-5", 200, (0, 63)),  # several ranges: the whole file
])
def test_ranges(server, header, status, span):
    data = FILES["models/m.gguf"][0]
    resp, body = get(server, "/models/m.gguf", headers={"Range": header})
    assert resp.status == status
    if status == 416:
        assert resp.getheader("Content-Range") == "bytes */64"
        return
    first, last = span
    assert body == data[first:last + 1]
    if status == 206:
        assert resp.getheader("Content-Range") == f"bytes {first}-{last}/64"


def test_a_client_that_aborts_mid_file_leaves_the_server_working(server):
    for _ in range(3):
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # small, so the server blocks mid-file
            sock.settimeout(10)
            sock.connect(server)
            sock.sendall(f"GET /models/big.gguf HTTP/1.1\r\nHost: 127.0.0.1:{server[1]}\r\n\r\n".encode())
            assert sock.recv(4096).startswith(b"HTTP/1.1 200 OK")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close with a reset
    resp, body = get(server, "/models/big.gguf", headers={"Range": f"bytes={BIG - 4}-"})
    assert (resp.status, body) == (206, bytes(4))


def test_etag_revalidation_answers_304_without_a_body(server):
    resp, _ = get(server, "/app.mjs")
    etag = resp.getheader("ETag")
    assert etag and etag.startswith('"')
    resp, body = get(server, "/app.mjs", headers={"If-None-Match": etag})
    assert (resp.status, body, resp.getheader("ETag")) == (304, b"", etag)
    assert resp.getheader("Cross-Origin-Embedder-Policy") == "require-corp"
    resp, body = get(server, "/app.mjs", headers={"If-None-Match": '"0-0"'})
    assert (resp.status, body) == (200, FILES["app.mjs"][0])


def test_a_port_in_use_is_a_clear_error(server, tmp_path):
    (tmp_path / "index.html").write_text("<p>x</p>")
    proc = subprocess.run([sys.executable, str(ROOT / "build_scripts" / "serve.py"), "--port", str(server[1]),
                           "--root", str(tmp_path)], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1
    assert f"cannot listen on 127.0.0.1:{server[1]}" in proc.stderr and "Traceback" not in proc.stderr


def raw(server, data: bytes) -> bytes:
    """What the server answers to ``data`` sent as is on a new connection, until it closes or goes quiet."""
    with socket.create_connection(server, timeout=IDLE + 5) as sock:
        sock.sendall(data)
        out = b""
        while chunk := sock.recv(65536):
            out += chunk
        return out


@pytest.mark.parametrize("host, status", [
    ("127.0.0.1:{port}", 200), ("localhost:{port}", 200), ("LOCALHOST:{port}", 200), ("[::1]:{port}", 200),
    ("evil.example:{port}", 421),    # a page that rebinds its name to 127.0.0.1 (DNS rebinding)
    ("127.0.0.1.evil.example:{port}", 421), ("127.0.0.1", 421), ("127.0.0.1:1", 421), ("", 421),
])
def test_only_requests_naming_this_server_are_answered(server, host, status):
    resp, body = get(server, "/index.html", headers={"Host": host.format(port=server[1])})
    assert resp.status == status
    assert (body == FILES["index.html"][0]) == (status == 200)
    assert resp.getheader("Content-Security-Policy") == CSP     # the policy on the refusal too


def test_a_request_without_host_is_refused(server):
    answer = raw(server, b"GET /index.html HTTP/1.0\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 421 ") and FILES["index.html"][0] not in answer


@pytest.mark.parametrize("request_bytes, status", [
    (b"POST /index.html HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\n\r\n", b"501"),
    (b"GET / x HTTP/1.1\r\n\r\n", b"400"),
    (b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\n\r\n", b"414"),
])
def test_the_server_s_own_errors_carry_the_headers(server, request_bytes, status):
    answer = raw(server, request_bytes.replace(b"{port}", str(server[1]).encode()))
    head = answer.split(b"\r\n\r\n")[0].decode()
    assert head.startswith(f"HTTP/1.1 {status.decode()} "), head
    for name, value in (("Content-Security-Policy", CSP), ("Cross-Origin-Embedder-Policy", "require-corp"),
                        ("Cross-Origin-Opener-Policy", "same-origin")):
        assert f"{name}: {value}" in head, head


@pytest.mark.parametrize("sent", [b"", b"GET /index.html HTTP/1.1\r\n"])   # nothing; a request never finished
def test_an_idle_connection_is_closed(server, sent):
    with socket.create_connection(server, timeout=IDLE + 10) as sock:
        sock.sendall(sent)
        t0 = time.monotonic()
        assert sock.recv(4096) == b""                  # closed by the server, with nothing sent
        assert IDLE - 0.5 < time.monotonic() - t0 < IDLE + 5


@pytest.mark.parametrize("framing", [b"Content-Length: {n}\r\n", b"Transfer-Encoding: chunked\r\n"])
def test_a_request_with_a_body_gets_400_and_its_body_is_never_read_as_a_request(server, framing):
    hidden = b"GET /index.html HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" % server[1]
    body = hidden if b"Length" in framing else b"%x\r\n%s\r\n0\r\n\r\n" % (len(hidden), hidden)
    head = b"GET /index.html HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n" % server[1] + framing.replace(
        b"{n}", str(len(body)).encode()) + b"\r\n"
    answer = raw(server, head + body)
    assert answer.startswith(b"HTTP/1.1 400 ") and answer.count(b"HTTP/1.1") == 1, answer[:300]
    assert FILES["index.html"][0] not in answer and b"Connection: close" in answer


def test_connections_past_the_bound_get_503_at_once_and_the_server_recovers(server):
    held = [socket.create_connection(server, timeout=10) for _ in range(MAX_CONNECTIONS)]
    try:
        time.sleep(0.3)                                           # each has its thread
        t0 = time.monotonic()
        with socket.create_connection(server, timeout=10) as extra:
            answer = b""
            while chunk := extra.recv(4096):
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 503 ") and f"Content-Security-Policy: {CSP}".encode() in answer
        assert time.monotonic() - t0 < 1.5
    finally:
        for sock in held:
            sock.close()
    time.sleep(0.3)
    resp, body = get(server, "/index.html")
    assert resp.status == 200 and body == FILES["index.html"][0]


def test_the_page_carries_the_same_policy_in_a_meta_tag():
    """web/index.html's meta tag is serve.py's policy, less frame-ancestors (which a meta tag cannot carry),
    and comes before any script or style, so another static server keeps the policy."""
    sys.path.insert(0, str(ROOT / "build_scripts"))
    import serve
    html = (ROOT / "web" / "index.html").read_text()
    meta = re.search(r'<meta http-equiv="Content-Security-Policy" content="([^"]*)">', html)
    assert serve.CSP == CSP and meta
    assert meta.group(1) == CSP.replace("; frame-ancestors 'none'", "")
    assert meta.start() < min(html.index("<script"), html.index("<link rel=\"stylesheet\""))
