#!/usr/bin/python3
"""Issue 41's MTP same run: the trained demo model (assets/demo-model)
converted to GGUF with its MTP block by llama.cpp's own converter, then
llama.cpp's server with and without its MTP speculative decoding
(`--spec-type draft-mtp`) against edge0's server with `--mtp on`, `--mtp
off` and `--mtp auto`, all on that one file, the same threads, the same greedy
requests.

    /usr/bin/python3 scripts/mtp_same_run.py --llama-src SRC --llama-bin DIR [--edge0 BIN]
        [--threads N] [--rounds R] [--max-tokens M] [--out DIR]

SRC: llama.cpp's source (the peer kit's; only the converter is used, run as
scripts/make_mtp_gguf.py runs it: Debian's python3-torch, -numpy, -yaml and
-tqdm, and a stand-in for transformers). DIR: its build (llama-server and
its libraries, the peer kit's build_llama.sh). Each round starts each of
the five servers in turn (alternated, so that drift on a shared machine
falls on all four), sends the prompts one after another (chat completions,
temperature 0, max_tokens M) and times each answer on the client. Prints
per configuration the median over rounds of generated tokens per second,
the answers' identity with and without MTP for each engine, llama.cpp's
drafts and acceptance as its server reports them and edge0's from its
/metrics, and the ratios: each engine's speed-up from MTP, edge0 over
llama.cpp with MTP. Writes every round's figures as JSON into --out.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import make_mtp_gguf  # noqa: E402  (its converter driver)

WORDS = ["happiness", "a violin", "a river", "courage", "a library", "winter", "a bridge", "friendship",
         "an engine", "music", "a forest", "justice"]


def post(port, path, body, timeout=300):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def get(port, path):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as r:
        return r.read().decode()


def wait_up(port, proc, log):
    for _ in range(600):
        if proc.poll() is not None:
            sys.exit(f"server exited ({proc.returncode}); its log: {log}")
        try:
            get(port, "/health")
            return
        except Exception:
            time.sleep(0.1)
    sys.exit(f"server on port {port} did not come up; its log: {log}")


def label(mtp):
    return mtp if isinstance(mtp, str) else "MTP" if mtp else "plain"


def start(cfg, a, gguf, port, logdir):
    engine, mtp = cfg
    log = os.path.join(logdir, f"{engine}-{label(mtp)}.log")
    if engine == "llama":
        cmd = [os.path.join(a.llama_bin, "llama-server"), "-m", gguf, "--port", str(port), "--threads",
               str(a.threads), "-c", "4096", "-np", "1", "--jinja", "--no-webui"]
        if mtp:
            cmd += ["--spec-type", "draft-mtp"]
        env = dict(os.environ, LD_LIBRARY_PATH=a.llama_bin)
    else:
        cmd = [a.edge0, "serve", gguf, "--port", str(port), "--threads", str(a.threads), "--parallel", "1",
               "--mtp", mtp if isinstance(mtp, str) else "on" if mtp else "off"]
        env = dict(os.environ)
    f = open(log, "w")
    p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env)
    wait_up(port, p, log)
    return p, f


def ask(port, word, max_tokens):
    body = {"model": "demo", "messages": [{"role": "user", "content": f"What does {word} mean?"}],
            "temperature": 0, "max_tokens": max_tokens}
    t0 = time.perf_counter()
    r = post(port, "/v1/chat/completions", body)
    dt = time.perf_counter() - t0
    n = r.get("usage", {}).get("completion_tokens", 0)
    return r["choices"][0]["message"].get("content") or "", n, dt, r.get("timings", {})


def edge0_mtp(port):
    """edge0's /metrics MTP counters (drafts, accepted)."""
    out = {}
    for line in get(port, "/metrics").splitlines():
        for k in ("edge0_mtp_drafts_total", "edge0_mtp_accepted_total"):
            if line.startswith(k + " "):
                out[k] = float(line.split()[1])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--llama-src", required=True)
    ap.add_argument("--llama-bin", required=True)
    ap.add_argument("--edge0", default=os.path.join(ROOT, "build", "edge0"))
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    out = a.out or tempfile.mkdtemp(prefix="mtp-same-run-")
    os.makedirs(out, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        hf = os.path.join(tmp, "hf")
        shutil.copytree(os.path.join(ROOT, "assets", "demo-model"), hf)
        gguf = os.path.join(out, "demo-F32.gguf")
        make_mtp_gguf.convert(os.path.abspath(a.llama_src), hf, gguf, "--outtype", "f32")
    print(f"converted by llama.cpp's convert_hf_to_gguf.py: {gguf} ({os.path.getsize(gguf) / 1e6:.1f} MB)")
    cfgs = [("llama", False), ("llama", True), ("edge0", False), ("edge0", True), ("edge0", "auto")]
    rates = {c: [] for c in cfgs}
    answers = {c: None for c in cfgs}
    extra = {c: {} for c in cfgs}
    port = 18731
    for r in range(a.rounds):
        for c in cfgs:
            p, f = start(c, a, gguf, port, out)
            try:
                ask(port, "a word", 8)  # warm-up, not timed
                m0 = edge0_mtp(port) if c[0] == "edge0" else {}
                texts, toks, secs, drafted, accepted = [], 0, 0.0, 0, 0
                for w in WORDS:
                    text, n, dt, tm = ask(port, w, a.max_tokens)
                    texts.append(text)
                    toks += n
                    secs += dt
                    drafted += int(tm.get("draft_n", 0) or 0)
                    accepted += int(tm.get("draft_n_accepted", 0) or 0)
                if c[0] == "edge0":
                    m1 = edge0_mtp(port)
                    drafted = int(m1.get("edge0_mtp_drafts_total", 0) - m0.get("edge0_mtp_drafts_total", 0))
                    accepted = int(m1.get("edge0_mtp_accepted_total", 0) - m0.get("edge0_mtp_accepted_total", 0))
            finally:
                p.terminate()
                p.wait(timeout=30)
                f.close()
            rate = toks / secs
            rates[c].append(rate)
            if answers[c] is None:
                answers[c] = texts
            extra[c] = {"tokens": toks, "drafted": drafted, "accepted": accepted}
            name = f"{c[0]} {label(c[1])}"
            acc = f", drafts {drafted}, accepted {accepted} ({100.0 * accepted / drafted:.0f}%)" if drafted else ""
            print(f"round {r + 1} {name:12s} {toks} tokens in {secs:.3f} s: {rate:.1f} tok/s{acc}", flush=True)
            with open(os.path.join(out, "rounds.jsonl"), "a") as j:
                j.write(json.dumps({"round": r + 1, "engine": c[0], "mtp": c[1], "tokens": toks, "seconds": secs,
                                    "tok_s": rate, "drafted": drafted, "accepted": accepted}) + "\n")
    med = {c: statistics.median(v) for c, v in rates.items()}
    print(f"\nmedians over {a.rounds} rounds, {len(WORDS)} prompts, max_tokens {a.max_tokens}, {a.threads} threads:")
    for c in cfgs:
        print(f"  {c[0]:6s} {label(c[1]):6s} {med[c]:8.1f} tok/s")
    for e in ("llama", "edge0"):
        same = answers[(e, False)] == answers[(e, True)]
        print(f"  {e}: answers with MTP {'identical to' if same else 'DIFFER from'} those without")
    sl = med[("llama", True)] / med[("llama", False)]
    se = med[("edge0", True)] / med[("edge0", False)]
    print(f"  speed-up from MTP: llama.cpp {sl:.3f}x, edge0 {se:.3f}x (--mtp auto {med[('edge0', 'auto')] / med[('edge0', False)]:.3f}x)")
    print(f"  edge0 over llama.cpp, both with MTP: {med[('edge0', True)] / med[('llama', True)]:.2f}x; "
          f"without: {med[('edge0', False)] / med[('llama', False)]:.2f}x")
    print(f"rounds: {os.path.join(out, 'rounds.jsonl')}")


if __name__ == "__main__":
    main()
