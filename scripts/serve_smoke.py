#!/usr/bin/env python3
"""A served model answering several chat requests at once (a smoke run of
`edge0 serve` where no test harness is, e.g. the GPU machine).

    scripts/serve_smoke.py PORT [N]    N requests at once (default 2)

Waits for /health, sends N chat completions of 24 tokens at once, prints
each one's status, finish reason, usage and time, then the server's
tokens-per-second metrics. Exits 1 unless every request got a 200 with
24 completion tokens (or a stop) and a non-empty answer.
"""
import json
import sys
import threading
import time
import urllib.request


def get(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.status, r.read().decode()


def main():
    port, n = int(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 2
    base = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            if get(base + "/health")[0] == 200:
                break
        except OSError:
            pass
        time.sleep(0.5)
    else:
        sys.exit("serve_smoke: no /health in 300 s")
    out = [None] * n

    def one(i):
        body = {"model": "m", "max_tokens": 24, "temperature": 0,
                "messages": [{"role": "user", "content": f"Request {i}: name three colours."}]}
        req = urllib.request.Request(base + "/v1/chat/completions", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
        t0 = time.time()
        try:
            with urllib.request.urlopen(req, timeout=300) as r:
                out[i] = (r.status, json.loads(r.read()), time.time() - t0)
        except urllib.error.HTTPError as e:
            out[i] = (e.code, e.read().decode()[:300], time.time() - t0)
        except OSError as e:
            out[i] = (0, str(e), time.time() - t0)

    ts = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    ok = True
    for i, (code, r, dt) in enumerate(out):
        if code != 200:
            print(f"request {i}: HTTP {code}: {r}")
            ok = False
            continue
        c = r["choices"][0]
        text = c["message"].get("content") or c["message"].get("reasoning_content") or ""
        print(f"request {i}: 200 in {dt:.2f} s, finish {c['finish_reason']}, usage {r['usage']}, "
              f"answer {text[:60]!r}")
        ok &= bool(text) and (c["finish_reason"] == "stop" or r["usage"]["completion_tokens"] == 24)
    metrics = get(base + "/metrics")[1]
    for line in metrics.splitlines():
        if line.startswith(("edge0_decode_tokens_per_second", "edge0_prefill_tokens_per_second",
                            "edge0_requests_total", "edge0_slots")):
            print(line)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
