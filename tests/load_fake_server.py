#!/usr/bin/env python3
"""A stand-in for `edge0 serve` that answers scripts/load.py with chosen statuses (test_load.c).

  load_fake_server.py MODE PORTFILE
Listens on 127.0.0.1 (a free port, written to PORTFILE). /health, /tokenize (one token per
word) and non-streaming completions answer 200. Streaming completions, counted from 1:
the first (load.py's warm-up) streams 8 one-token chunks; after it, MODE decides:
  mixed   even requests 503, odd ones 500
  busy    even requests 503, odd ones stream
  pairs   every request streams 4 chunks of two tokens each, 200 ms apart (the chunks list
          their two tokens in logprobs when the request asks for logprobs)
Exits when its parent closes stdin.
"""
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODE, PORTFILE = sys.argv[1], sys.argv[2]
lock = threading.Lock()
count = [0]


class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def answer(self, status, obj):
        b = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)

    def do_GET(self):
        self.answer(200, {"status": "ok"}) if self.path == "/health" else self.answer(404, {"error": {"message": "no"}})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        if self.path == "/tokenize":
            return self.answer(200, {"tokens": list(range(len(body["content"].split())))})
        if not body.get("stream"):
            return self.answer(200, {"choices": [{"text": "x", "finish_reason": "length"}]})
        with lock:
            count[0] += 1
            k = count[0]
        if k > 1 and k % 2 == 0:
            return self.answer(503, {"error": {"message": "busy", "code": "unavailable"}})
        if k > 1 and MODE == "mixed":
            return self.answer(500, {"error": {"message": "broken", "code": "internal_error"}})
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        if MODE == "pairs":
            lp = ',"logprobs":{"tokens":["a","b"],"token_logprobs":[0,0]}' if "logprobs" in body else ""
            for i in range(4):
                if i:
                    time.sleep(0.2)
                self.wfile.write(('data: {"choices":[{"index":0,"text":"ab"%s,"finish_reason":null}]}\n\n' % lp).encode())
                self.wfile.flush()
            self.wfile.write(b'data: {"choices":[{"index":0,"text":"","finish_reason":"length"}],'
                             b'"usage":{"prompt_tokens":10,"completion_tokens":8}}\n\ndata: [DONE]\n\n')
            self.close_connection = True
            return
        for _ in range(8):
            self.wfile.write(b'data: {"choices":[{"index":0,"text":"a","finish_reason":null}]}\n\n')
        self.wfile.write(b'data: {"choices":[{"index":0,"text":"","finish_reason":"length"}],'
                         b'"usage":{"prompt_tokens":10,"completion_tokens":8}}\n\ndata: [DONE]\n\n')
        self.close_connection = True


srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
srv.daemon_threads = True
with open(PORTFILE + ".tmp", "w") as f:
    f.write(str(srv.server_address[1]))
os.rename(PORTFILE + ".tmp", PORTFILE)
threading.Thread(target=srv.serve_forever, daemon=True).start()
sys.stdin.read()
