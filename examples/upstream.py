#!/usr/bin/env python3
"""A stand-in "paid model" API for the App Attest gateway: the upstream that `make run` and the tests put
behind the gateway. Python standard library only; HTTP/1.1 with keep-alive.

Routes:
  POST /v1/ai/generate          {"prompt": "..."} -> {"model", "output", "prompt_chars"}
  GET|POST /v1/ai/stream        text/event-stream: `data: {"token": i}` events then `data: [DONE]`
                                (?events=N&interval_ms=M, defaults 5 and 100)
  POST /promo/claim             {"claimed": true}
  ANY /echo/...                 what arrived: method, path, raw query, headers, base64 body, client port,
                                and the server-side connection number
  GET /slow?ms=N                waits N ms, then 200
  GET /status/{code}            that status (200–999: 600 and up is what a broken upstream sends)
  GET /healthz                  200
  GET /response-headers?k=v&... each query pair sent back as a response header, repeats kept in order
  GET /bytes?n=N[&chunked=1][&ms=M]  N deterministic bytes (byte i is i % 251), after M ms
  GET /early-hints              a 103 interim response, then 200
  GET /truncated                promises 100 bytes, sends 10, closes
  GET /garbage                  a reply that is not HTTP
  GET /hang-up                  200 "bye", then closes the kept-alive connection without warning
"""
import argparse
import base64
import itertools
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, urlsplit

_connection_numbers = itertools.count(1)
_connection_lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "example-upstream/1"
    disable_nagle_algorithm = True  # SSE events leave as soon as they are written
    timeout = 120  # an idle keep-alive connection is closed after this many seconds

    def setup(self):
        super().setup()
        with _connection_lock:
            self.connection_number = next(_connection_numbers)

    def log_message(self, format, *args):
        sys.stderr.write("upstream: %s %s\n" % (self.address_string(), format % args))

    # Every method goes through one dispatcher; BaseHTTPRequestHandler looks up do_<METHOD>.
    def do_GET(self):
        self.dispatch()

    do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = do_HEAD = do_GET

    def dispatch(self):
        url = urlsplit(self.path)
        self.route_path, self.raw_query = url.path, url.query
        self.query = dict(parse_qsl(url.query))
        self.body = self.read_body()
        path, method = self.route_path, self.command
        if path == "/v1/ai/generate" and method == "POST":
            return self.generate()
        if path == "/v1/ai/stream" and method in ("GET", "POST"):
            return self.stream()
        if path == "/promo/claim" and method == "POST":
            return self.send_json(200, {"claimed": True})
        if path == "/echo" or path.startswith("/echo/"):
            return self.echo()
        if method not in ("GET", "HEAD"):
            return self.send_json(405, {"error": "method_not_allowed"})
        routes = {
            "/healthz": self.healthz,
            "/slow": self.slow,
            "/response-headers": self.response_headers,
            "/bytes": self.bytes,
            "/early-hints": self.early_hints,
            "/truncated": self.truncated,
            "/garbage": self.garbage,
            "/hang-up": self.hang_up,
        }
        if path in routes:
            return routes[path]()
        if path.startswith("/status/"):
            return self.status(path[len("/status/"):])
        self.send_json(404, {"error": "not_found"})

    def read_body(self):
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            return self.read_chunked_body()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def read_chunked_body(self):
        body = b""
        while True:
            size = int(self.rfile.readline().split(b";")[0].strip(), 16)
            if size == 0:
                while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return body
            body += self.rfile.read(size)
            self.rfile.readline()

    # --- the "paid model" -------------------------------------------------------------------------
    def generate(self):
        try:
            prompt = json.loads(self.body or b"{}")["prompt"]
            if not isinstance(prompt, str):
                raise TypeError("prompt must be a string")
        except (ValueError, KeyError, TypeError) as error:
            return self.send_json(400, {"error": "bad_request", "detail": str(error)})
        output = "demo answer to: " + prompt
        self.send_json(200, {"model": "demo", "output": output, "prompt_chars": len(prompt)})

    def stream(self):
        events = int(self.query.get("events", 5))
        interval = int(self.query.get("interval_ms", 100)) / 1000
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for token in range(events):
                self.write_chunk(b'data: {"token": %d}\n\n' % token)
                time.sleep(interval)
            self.write_chunk(b"data: [DONE]\n\n")
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def write_chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    # --- test helpers -----------------------------------------------------------------------------
    def echo(self):
        self.send_json(200, {
            "method": self.command,
            "path": self.route_path,
            "query": self.raw_query,
            "headers": [[name, value] for name, value in self.headers.items()],
            "body_base64": base64.b64encode(self.body).decode("ascii"),
            "client_port": self.client_address[1],
            "connection_number": self.connection_number,
        })

    def healthz(self):
        self.send_bytes(200, b"ok\n", "text/plain")

    def slow(self):
        time.sleep(int(self.query.get("ms", 1000)) / 1000)
        self.send_bytes(200, b"slow\n", "text/plain")

    def status(self, code):
        # 600–999 too: what a broken upstream sends (the gateway answers 502 upstream_protocol_error).
        if not code.isdigit() or not 200 <= int(code) <= 999:
            return self.send_json(400, {"error": "status must be 200..999"})
        if int(code) in (204, 304):
            self.send_response(int(code))
            self.end_headers()
            return
        self.send_json(int(code), {"status": int(code)})

    def response_headers(self):
        self.send_response(200)
        for name, value in parse_qsl(self.raw_query):
            self.send_header(name, value)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def bytes(self):
        time.sleep(int(self.query.get("ms", 0)) / 1000)
        count = int(self.query.get("n", 0))
        data = bytes(i % 251 for i in range(count))
        if self.query.get("chunked") != "1":
            return self.send_bytes(200, data, "application/octet-stream")
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for start in range(0, count, 65536):
            self.write_chunk(data[start:start + 65536])
        self.wfile.write(b"0\r\n\r\n")

    def early_hints(self):
        self.send_response_only(103)
        self.send_header("Link", "</style.css>; rel=preload")
        self.end_headers()
        self.send_bytes(200, b"after hints\n", "text/plain")

    def truncated(self):
        self.send_response(200)
        self.send_header("Content-Length", "100")
        self.end_headers()
        self.wfile.write(b"0123456789")
        self.close_connection = True

    def garbage(self):
        self.wfile.write(b"THIS IS NOT HTTP\r\n\r\n")
        self.close_connection = True

    def hang_up(self):
        self.send_bytes(200, b"bye\n", "text/plain")
        self.close_connection = True  # no "Connection: close": the client learns it on its next request

    # --- responses --------------------------------------------------------------------------------
    def send_json(self, status, document):
        self.send_bytes(status, json.dumps(document).encode("utf-8"), "application/json")

    def send_bytes(self, status, data, content_type):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)


def main():
    parser = argparse.ArgumentParser(description="Example upstream API for the App Attest gateway.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8081, help="0 picks a free port")
    args = parser.parse_args()
    server = ThreadingHTTPServer((args.host, args.port), Handler)
    server.daemon_threads = True
    host, port = server.server_address[:2]
    print("listening on http://%s:%d" % (host, port), flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
