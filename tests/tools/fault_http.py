#!/usr/bin/env python3
"""A misbehaving remote store for the store tests: serves a directory laid out as the remote
(/cas/<hash>, /ac/<identity>) on 127.0.0.1, but damages every /cas/ answer in one way:

  corrupt   flips a byte in the middle of the body
  swap      answers with another blob's (valid) bytes
  truncate  announces the full length, sends half, and closes
  error     answers 500
  slow      waits STALL seconds before answering
  redirect  answers 302 to the same path on http://localhost:<its port>/moved/ (another
            host name for the same server), which it then serves as usual

Every request is logged to PORT_FILE.log as "METHOD PATH auth=yes|no" (whether it carried an
Authorization header), so a test can tell what reached which path with which credentials.

Usage: fault_http.py ROOT MODE PORT_FILE [STALL]. It writes the port it listens on to
PORT_FILE, serves for at most 120 seconds, and then exits by itself."""
import http.server
import os
import sys
import threading
import time

ROOT, MODE, PORT_FILE = sys.argv[1], sys.argv[2], sys.argv[3]
STALL = float(sys.argv[4]) if len(sys.argv) > 4 else 30.0
LIFETIME = 120


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _log(self):
        with open(PORT_FILE + ".log", "a") as f:
            auth = "yes" if self.headers.get("Authorization") else "no"
            f.write(f"{self.command} {self.path} auth={auth}\n")

    def _file(self):
        path = os.path.normpath(self.path.split("?")[0]).lstrip("/")
        if path.startswith("moved/"):
            path = path[len("moved/"):]
        if path.startswith("..") or not (path.startswith("cas/") or path.startswith("ac/")):
            return None
        full = os.path.join(ROOT, path)
        return full if os.path.isfile(full) else None

    def _send(self, code, body, length=None):
        self.send_response(code)
        self.send_header("Content-Length", str(len(body) if length is None else length))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        self._log()
        full = self._file()
        if not full:
            return self._send(404, b"not found\n")
        body = open(full, "rb").read()
        if MODE == "redirect" and not self.path.startswith("/moved/"):
            self.send_response(302)
            self.send_header("Location", f"http://localhost:{self.server.server_address[1]}/moved{self.path}")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return None
        if not self.path.startswith("/cas/"):
            return self._send(200, body)
        if MODE == "error":
            return self._send(500, b"internal error\n")
        if MODE == "slow":
            time.sleep(STALL)
            return self._send(200, body)
        if MODE == "corrupt":
            b = bytearray(body)
            b[len(b) // 2] ^= 0x5A
            return self._send(200, bytes(b))
        if MODE == "swap":
            cas = os.path.join(ROOT, "cas")
            others = sorted(f for f in os.listdir(cas) if f != os.path.basename(full))
            other = open(os.path.join(cas, others[0]), "rb").read() if others else b"\x00"
            return self._send(200, other)
        if MODE == "truncate":
            self._send(200, body[: len(body) // 2], length=len(body))
            self.close_connection = True
            return None
        return self._send(200, body)


def main():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    with open(PORT_FILE + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    os.rename(PORT_FILE + ".tmp", PORT_FILE)
    threading.Timer(LIFETIME, server.shutdown).start()
    server.serve_forever()


if __name__ == "__main__":
    main()
