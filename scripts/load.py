#!/usr/bin/env python3
"""Load test of `edge0 serve`: N concurrent streaming clients (issue 16).

For each concurrency level in --clients, that many client threads send
streaming /v1/completions (or /v1/chat/completions) requests back to back,
each with a fresh prompt of random words whose token count is drawn from
--prompt-tokens, asking for --max-tokens new tokens at temperature 0. One
table row per level:

  agg tok/s     generated tokens/s of all streams together in the level's
                steady state: from the moment every client has its first
                token to the moment the first client receives its last one
                (all N streams running; the warm-up is behind, the tail where
                fewer streams run is not counted). When that window is too
                short (a server that serves one request at a time, or one
                request per client), the level's whole wall time is used and
                the row says "e2e".
  ratio         agg tok/s over the 1-client level's
  decode tok/s  the server's decode throughput over the level: tokens its
                decode passes produced / the time spent in them, from the
                edge0_decode_tokens_total and edge0_decode_seconds_total
                counters of /metrics before and after (prompt prefill, which
                the agg figure shares its window with, left out); "dec
                ratio" is it over the 1-client level's. "-" for a server
                without those counters
  full tok/s    the same over only the decode passes that stepped all N
                sequences of an N-client level together
                (edge0_decode_passes_total / edge0_decode_pass_seconds_total
                {batch="N"}): the batched decode's throughput apart from the
                passes that ran short while other clients' prompts
                prefilled, which is what llama-batched-bench and `edge0 bench
                --batch` measure; "full ratio" is it over the 1-client
                level's, "full %" the share of the decode time in those passes
  e2e tok/s     all generated tokens over the level's wall time
  TTFT          request sent -> first token chunk (ms, p50 and p99)
  ITL           gaps between successive tokens of a stream (ms). A chunk may
                carry more than one token ("tok/chunk" in the JSON: a token
                whose text is held back, an incomplete UTF-8 sequence or, on a
                synth checkpoint with a smaller tokenizer, an id past its
                vocabulary, arrives with the next one): with --itl token (the
                default) the streams ask for logprobs, which list a chunk's
                tokens, and a chunk of k tokens that came g after the one
                before counts as k gaps of g/k; --itl chunk: one gap per chunk
  late ITL p99  with --late-prompt N: while the clients decode, one extra
                request with an N-token prompt arrives; the p99 of the running
                streams' gaps that overlap its prefill (sent -> its first
                token). Those gaps are left out of the ITL columns. A server
                that runs one request at a time passes this trivially: the
                long prompt waits in its queue (see "late TTFT").
  errors        by HTTP status ("conn": no answer, "stream": an error event
                inside a stream); "aborted" counts requests cut at the level's
                hard deadline (--seconds + --drain), which are not errors.

With --rounds R the levels run R times in turn (each round's prompts its
own), each ratio is taken against the same round's 1-client level, and per
level the median of the rounds' ratios is printed (and kept in the JSON
under "rounds"): levels measured minutes apart on a shared machine see
different neighbours, and alternating rounds are what a ratio can rest on.

p50/p99 interpolate linearly between the sorted samples (so with fewer than
100 samples p99 lies close to the largest).

The script starts `edge0 serve MODEL --port 0` itself on 127.0.0.1 (inside
scripts/memcap.sh with --memcap), waits for /health, and stops it with SIGTERM
at the end; or it attaches to a running server with --url (loopback only).
Exit status: 0 when every level completed requests and nothing failed; 1 on
any 5xx other than 503, any 4xx, a stream error, no answer, a server that
died or exited non-zero, an OOM kill under --memcap, or the overall
--timeout; 2 on bad arguments.

  scripts/load.py MODEL --clients 1,2,4,8 --late-prompt 512 --json /tmp/load.json
  scripts/load.py MODEL --memcap 8G --server-args "--parallel 4"
  scripts/load.py --url http://127.0.0.1:8080 --clients 1,2 --seconds 30
  scripts/load.py MODEL --peer /tmp/peer.json   # adds llama-batched-bench's figures (scripts/peer_batched.sh --json)

Python 3 standard library only.
"""
import argparse
import http.client
import ipaddress
import json
import os
import random
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Prompt material: common English words. Prompts are random sequences of
# them, different for every request from its first words on, so that no
# request shares a prefix with another (a prefix cache must not help here).
WORDS = """
time year people way day man thing woman life child world school state family student group country problem
hand part place case week company system program question work government number night point home water room
mother area money story fact month lot right study book eye job word business issue side kind head house
service friend father power hour game line end member law car city community name president team minute idea
kid body information back parent face others level office door health person art war history party result
change morning reason research girl guy moment air teacher force education foot boy age policy process music
market sense nation plan college interest death experience effect use class control care field development role
effort rate heart drug show leader light voice wife police mind price report decision son view relationship town
road arm difference value building action model season society tax director position player record paper space
ground form event official matter center couple site project activity star table need court oil situation cost
industry figure street image phone data picture practice piece land product doctor wall patient worker news test
movie north love support technology step baby computer type attention film tree source organization hair window
evidence population truth song energy bed plant bank river stone garden cloud winter summer glass bread letter
quickly slowly bright quiet green silver ancient modern simple careful gentle strong early late small large
""".split()


def pct(xs, q):
    """The q-th percentile (0..100) of xs, linear between closest ranks; None when empty."""
    if not xs:
        return None
    s = sorted(xs)
    k = (len(s) - 1) * q / 100.0
    i = int(k)
    return s[i] if i + 1 >= len(s) else s[i] + (s[i + 1] - s[i]) * (k - i)


class Fatal(Exception):
    pass


def drop_pages(model):
    """Drops the model's pages from the page cache (posix_fadvise DONTNEED), so that a capped server's
    cgroup is charged for every page it reads, not served from pages charged to someone else."""
    files = [model] if os.path.isfile(model) else [os.path.join(d, f) for d, _, fs in os.walk(model) for f in fs]
    for f in files:
        try:
            fd = os.open(f, os.O_RDONLY)
        except OSError:
            continue
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


# ---- the server --------------------------------------------------------------------


class Server:
    """`edge0 serve` started by this script (or None parts when attached with --url)."""

    def __init__(self, args, logdir):
        self.args, self.proc, self.log_path = args, None, os.path.join(logdir, "server.log")
        self.exit_code = None
        self.memcap = None  # {"peak": str, "oom_kills": int} from memcap.sh's last line

    def start(self):
        a = self.args
        extra = shlex.split(a.server_args or "")
        for bad in ("--port", "--host"):
            if bad in extra:
                raise Fatal("--server-args must not set %s: the script picks a free port on 127.0.0.1" % bad)
        cmd = [a.bin, "serve", a.model, "--host", "127.0.0.1", "--port", "0"] + extra
        if a.memcap:
            cmd = [os.path.join(ROOT, "scripts", "memcap.sh"), a.memcap, "--"] + cmd
        self.cmd = cmd
        if a.memcap:
            drop_pages(a.model)
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.monotonic() + a.start_timeout
        port = None
        while port is None:
            if self.proc.poll() is not None:
                raise Fatal("the server exited with status %d before listening:\n%s" % (self.proc.returncode, self.tail()))
            if time.monotonic() > deadline:
                raise Fatal("the server did not listen within %d s:\n%s" % (a.start_timeout, self.tail()))
            m = re.search(rb"listening on http://127\.0\.0\.1:(\d+)", open(self.log_path, "rb").read())
            if m:
                port = int(m.group(1))
            else:
                time.sleep(0.1)
        return port

    def pid(self):
        """The edge0 process: our child, or memcap.sh's child (its subshell execs edge0)."""
        if not self.proc or not self.args.memcap:
            return self.proc.pid if self.proc else None
        try:
            for t in os.listdir("/proc/%d/task" % self.proc.pid):
                kids = open("/proc/%d/task/%s/children" % (self.proc.pid, t)).read().split()
                if kids:
                    return int(kids[0])
        except OSError:
            pass
        return None

    def alive(self):
        return self.proc is None or self.proc.poll() is None

    def rss(self):
        p = self.pid()
        try:
            for line in open("/proc/%d/status" % p):
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        except (OSError, TypeError):
            pass
        return None

    def tail(self, n=30):
        try:
            lines = open(self.log_path, errors="replace").read().splitlines()
            return "\n".join([x for x in lines if "/tokenize " not in x][-n:])
        except OSError:
            return ""

    def stop(self):
        """SIGTERM to edge0, then wait (its --shutdown-grace, default 10 s, plus margin); SIGKILL after that."""
        if not self.proc:
            return
        if self.proc.poll() is None:
            p = self.pid()
            if p:
                try:
                    os.kill(p, signal.SIGTERM)
                except ProcessLookupError:
                    pass
            try:
                self.proc.wait(timeout=self.args.stop_timeout)
            except subprocess.TimeoutExpired:
                sys.stderr.write("load: the server did not stop within %d s of SIGTERM; killing it\n" % self.args.stop_timeout)
                for q in (self.pid(), self.proc.pid):
                    if q:
                        try:
                            os.kill(q, signal.SIGKILL)
                        except ProcessLookupError:
                            pass
                self.proc.wait()
        self.exit_code = self.proc.returncode
        self.log.close()
        m = re.search(r"memcap: limit (\S+), peak (\S+), oom kills (\d+), exit (-?\d+)", self.tail(5))
        if m:
            self.memcap = {"limit": m.group(1), "peak": m.group(2), "oom_kills": int(m.group(3))}


# ---- HTTP ---------------------------------------------------------------------------


class Target:
    def __init__(self, host, port, args):
        self.host, self.port, self.args = host, port, args
        self.path = "/v1/completions" if args.endpoint == "completions" else "/v1/chat/completions"
        self.ignore_eos = False
        self.per_word = None  # tokens per word, measured once
        self.words = WORDS

    def conn(self, timeout=None):
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout or self.args.read_timeout)

    def call(self, method, path, body=None, timeout=30):
        c = self.conn(timeout)
        try:
            c.request(method, path, body=json.dumps(body) if body is not None else None,
                      headers={"Content-Type": "application/json"} if body is not None else {})
            r = c.getresponse()
            data = r.read()
            try:
                return r.status, json.loads(data) if data else None
            except ValueError:
                return r.status, None
        finally:
            c.close()

    def body(self, prompt, max_tokens, seed, stream=True):
        b = {"max_tokens": max_tokens, "temperature": 0, "seed": seed, "stream": stream}
        if stream:
            b["stream_options"] = {"include_usage": True}
        if self.args.endpoint == "completions":
            b["prompt"] = prompt
        else:
            b["messages"] = [{"role": "user", "content": prompt}]
        if stream and self.args.itl == "token":  # the chunks then list their tokens (Record.gaps)
            b["logprobs"] = 0 if self.args.endpoint == "completions" else True
        if self.ignore_eos:
            b["ignore_eos"] = True
        return b

    def probe_ignore_eos(self):
        """A server that knows ignore_eos refuses a wrongly typed one (400 naming it); one that
        does not know it ignores the field, and then the script never sends it."""
        b = self.body("hello", 1, 1, stream=False)
        b["ignore_eos"] = "not-a-bool"
        st, j = self.call("POST", self.path, b)
        err = (j or {}).get("error") if isinstance(j, dict) else None
        self.ignore_eos = st == 400 and isinstance(err, dict) and "ignore_eos" in str(err.get("param") or err.get("message"))
        if st not in (200, 400):
            raise Fatal("probe request: HTTP %d %s" % (st, json.dumps(j)[:300]))
        if st == 400 and not self.ignore_eos:
            raise Fatal("probe request refused: %s" % json.dumps(j)[:300])

    def decode_counters(self):
        """The server's decode counters so far (/metrics): {"tokens", "seconds", "passes": {N: (passes, seconds)}},
        or None."""
        c = self.conn(30)
        try:
            c.request("GET", "/metrics")
            r = c.getresponse()
            text = r.read().decode("utf-8", "replace")
            if r.status != 200:
                return None
        except (OSError, http.client.HTTPException):
            return None
        finally:
            c.close()
        got, by = {}, {}
        for line in text.splitlines():
            f = line.split()
            if len(f) != 2:
                continue
            m = re.fullmatch(r'edge0_decode_pass(es|_seconds)_total\{batch="(\d+)"\}', f[0])
            try:
                if f[0] in ("edge0_decode_tokens_total", "edge0_decode_seconds_total"):
                    got[f[0]] = float(f[1])
                elif m:
                    by.setdefault(int(m.group(2)), [0.0, 0.0])[0 if m.group(1) == "es" else 1] = float(f[1])
            except ValueError:
                return None
        if len(got) != 2:
            return None
        return {"tokens": got["edge0_decode_tokens_total"], "seconds": got["edge0_decode_seconds_total"],
                "passes": {n: tuple(v) for n, v in by.items()}}

    def tokenize(self, text):
        st, j = self.call("POST", "/tokenize", {"content": text})
        if st != 200 or not isinstance(j, dict) or not isinstance(j.get("tokens"), list):
            raise Fatal("/tokenize answered HTTP %d: the server must tokenize to size the prompts" % st)
        return j["tokens"]

    def ntokens(self, text):
        return len(self.tokenize(text))

    def limit_vocab(self, n):
        """Only words whose tokens are all below id n (a test shape whose embedding is smaller than
        its tokenizer's vocabulary)."""
        self.words = [w for w in WORDS if all(isinstance(t, int) and t < n for t in self.tokenize(" " + w) + self.tokenize(w))]
        if len(self.words) < 20:
            raise Fatal("--vocab-limit %d leaves %d words to make prompts from" % (n, len(self.words)))

    def make_prompt(self, rng, target):
        """Random words, as many as /tokenize says make `target` tokens (or the nearest count): a
        secant search on the number of words, a few /tokenize calls per prompt."""
        if self.per_word is None:
            self.per_word = max(0.1, self.ntokens(" ".join(self.words)) / len(self.words))
        pool = [rng.choice(self.words) for _ in range(int(target / self.per_word * 1.5) + 8)]
        k, best, seen = max(1, round(target / self.per_word)), None, set()
        while k not in seen and len(seen) < 16:
            seen.add(k)
            while k > len(pool):
                pool.append(rng.choice(self.words))
            n = self.ntokens(" ".join(pool[:k]))
            if best is None or (abs(n - target), n > target) < (abs(best[1] - target), best[1] > target):
                best = (k, n)
            if n == target:
                break
            step = round((target - n) / self.per_word) or (1 if n < target else -1)
            k = max(1, k + step)
        return " ".join(pool[:best[0]]), best[1]


# ---- one streaming request -----------------------------------------------------------


class Record:
    def __init__(self, kind, client, idx, target):
        self.kind, self.client, self.idx, self.target = kind, client, idx, target
        self.status = None  # HTTP status, or None when there was no answer
        self.error = None  # None, or the key it is counted under in "errors"
        self.aborted = False
        self.done = False  # [DONE] (or a complete non-200 answer) received
        self.exc = None
        self.detail = None  # the error answer or event (start of it)
        self.t_send = self.t_first = self.t_end = None
        self.chunks = []  # arrival time of every chunk that carried generated text
        self.ntok = []  # the tokens each of those chunks carried (its logprobs), None when it did not say
        self.completion_tokens = self.prompt_tokens = self.cached_tokens = None
        self.finish = None

    def tokens(self):
        return self.completion_tokens if self.completion_tokens is not None else len(self.chunks)

    def gaps(self):
        """(start, end, gap) of each inter-token gap after the first chunk: a chunk of k known tokens
        counts as k gaps of a k-th of the time since the chunk before."""
        out = []
        for a, b, k in zip(self.chunks, self.chunks[1:], self.ntok[1:]):
            k = k if k and k > 1 else 1
            out.extend([(a, b, (b - a) / k)] * k)
        return out

    def weight(self):
        """Tokens per chunk of this request (the usage spread over its chunks)."""
        if self.completion_tokens is None or not self.chunks:
            return 1.0
        return self.completion_tokens / len(self.chunks)


def carries_text(choice):
    if "text" in choice:
        return bool(choice.get("text"))
    d = choice.get("delta") or {}
    return bool(d.get("content") or d.get("reasoning_content") or d.get("tool_calls"))


def chunk_tokens(choice):
    """The tokens a chunk carries, from its logprobs (completions: tokens; chat: content); None when absent."""
    lp = choice.get("logprobs")
    if not isinstance(lp, dict):
        return None
    t = lp.get("tokens") if "tokens" in lp else lp.get("content")
    return len(t) if isinstance(t, list) else None


def stream_request(target, conn, rec, body, live=None):
    """Sends one streaming request on conn and fills rec. live: a dict the main thread reads
    (in_flight, chunks in the current request)."""
    payload = json.dumps(body)
    rec.t_send = time.monotonic()
    if live is not None:
        live["chunks"] = 0
        live["in_flight"] = True
    try:
        if conn.sock is None:
            conn.connect()
            rec.t_send = time.monotonic()  # a new connection's handshake is not the server's time to first token
        conn.request("POST", target.path, body=payload, headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        rec.status = r.status
        if r.status != 200:
            rec.detail = r.read()[:400].decode("utf-8", "replace")
            rec.error, rec.done = str(r.status), True
            return
        while True:
            line = r.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                rec.done = True
                r.read()  # the end of the chunked body, so that the connection can carry the next request
                break
            now = time.monotonic()
            try:
                j = json.loads(data)
            except ValueError:
                rec.error, rec.detail = "stream", data[:400].decode("utf-8", "replace")
                continue
            if "error" in j:
                rec.detail = data[:400].decode("utf-8", "replace")
                e = j["error"] if isinstance(j["error"], dict) else {}
                code = e.get("code")
                rec.error = "stream:503" if code == "unavailable" or e.get("status") == 503 else "stream"
                continue
            ch = j.get("choices") or []
            if ch and carries_text(ch[0]):
                rec.chunks.append(now)
                rec.ntok.append(chunk_tokens(ch[0]))
                if rec.t_first is None:
                    rec.t_first = now
                if live is not None:
                    live["chunks"] += 1
            if ch and ch[0].get("finish_reason"):
                rec.finish = ch[0]["finish_reason"]
            u = j.get("usage")
            if isinstance(u, dict):
                rec.completion_tokens = u.get("completion_tokens")
                rec.prompt_tokens = u.get("prompt_tokens")
                rec.cached_tokens = (u.get("prompt_tokens_details") or {}).get("cached_tokens")
        if not rec.done and rec.error is None:
            rec.error, rec.detail = "conn", "the stream ended without [DONE]"
    except (OSError, http.client.HTTPException) as e:
        rec.error = "conn"
        rec.detail = repr(e)
        conn.close()
    finally:
        rec.t_end = time.monotonic()
        if live is not None:
            live["in_flight"] = False
        if live is not None and live.get("abort") and not rec.done:
            rec.aborted, rec.error = True, None


# ---- one concurrency level -------------------------------------------------------------


class Client(threading.Thread):
    def __init__(self, target, cid, prompts, level, stop_new_at):
        super().__init__(daemon=True)
        self.target, self.cid, self.prompts, self.level, self.stop_new_at = target, cid, prompts, level, stop_new_at
        self.records, self.live, self.conn = [], {"in_flight": False, "chunks": 0, "abort": False}, None

    def run(self):
        self.conn = self.target.conn()
        for i, (text, n, seed) in enumerate(self.prompts):
            if time.monotonic() >= self.stop_new_at or self.live["abort"]:
                break
            rec = Record("client", self.cid, i, n)
            self.records.append(rec)
            stream_request(self.target, self.conn, rec, self.target.body(text, self.target.args.max_tokens, seed), self.live)
            if rec.error == "conn":
                self.conn.close()  # a fresh connection for the next request
        self.conn.close()

    def abort(self):
        self.live["abort"] = True
        c = self.conn
        if c is not None and c.sock is not None:
            try:
                c.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class Late(threading.Thread):
    def __init__(self, target, text, n, seed):
        super().__init__(daemon=True)
        self.target, self.text, self.seed = target, text, seed
        self.rec = Record("late", -1, 0, n)
        self.live = {"in_flight": False, "chunks": 0, "abort": False}
        self.conn = None

    def run(self):
        self.conn = self.target.conn()
        # A few tokens are enough: what matters is its prefill, and it ends soon after.
        stream_request(self.target, self.conn, self.rec, self.target.body(self.text, 4, self.seed), self.live)
        self.conn.close()

    abort = Client.abort


def run_level(target, server, args, n, deadline_all, rnd=0):
    rpc = args.requests_per_client
    lo, hi = args.prompt_range
    prompts = []
    seen = set()
    # round 0 keeps the seeds of a run without --rounds; later rounds get prompts of their own (a prefix cache
    # would otherwise answer a repeated prompt from memory)
    tag = ":r%d" % rnd if rnd else ""
    for c in range(n):
        ps = []
        for i in range(rpc):
            rng = random.Random("%d:%d:%d:%d" % (args.seed, n, c, i) + tag)
            for _ in range(50):  # a different start from every other prompt (short prompts may run out)
                text, got = target.make_prompt(rng, rng.randint(lo, hi))
                key = tuple(text.split()[:6])
                if key not in seen:
                    break
            seen.add(key)
            ps.append((text, got, rng.randrange(1, 1 << 31)))
        prompts.append(ps)
    late = None
    if args.late_prompt:
        rng = random.Random("%d:%d:late" % (args.seed, n) + tag)
        text, got = target.make_prompt(rng, args.late_prompt)
        late = Late(target, text, got, rng.randrange(1, 1 << 31))

    dec0 = target.decode_counters()
    t0 = time.monotonic()
    stop_new_at = t0 + args.seconds
    hard_at = min(stop_new_at + args.drain, deadline_all)
    clients = [Client(target, c, prompts[c], n, stop_new_at) for c in range(n)]
    for cl in clients:
        cl.start()
    late_sent, late_how, fatal = False, None, None
    while any(cl.is_alive() for cl in clients) or (late is not None and late.is_alive()):
        time.sleep(0.02)
        now = time.monotonic()
        if not server.alive():
            fatal = "the server died (exit status %s) during the %d-client level:\n%s" % (
                server.proc.returncode, n, server.tail())
        elif now >= deadline_all:
            fatal = "the overall --timeout (%d s) ran out during the %d-client level" % (args.timeout, n)
        if fatal or now >= hard_at:
            for x in clients + ([late] if late_sent else []):
                x.abort()
            if fatal:
                break
            continue
        if late is not None and not late_sent and now < stop_new_at:
            # While the clients decode: every client has a stream with >= 3 token chunks; or, for a server that
            # runs one request at a time (never all at once), once a request has completed, with a stream decoding.
            lv = [cl.live for cl in clients]
            if all(v["in_flight"] and v["chunks"] >= 3 for v in lv):
                late_how = "all streams decoding"
            elif any(r.done for cl in clients for r in cl.records) and any(v["in_flight"] and v["chunks"] >= 3 for v in lv):
                late_how = "one stream decoding, after a request completed"
            if late_how:
                late.start()
                late_sent = True
    for cl in clients:
        cl.join(5)
    if late_sent:
        late.join(5)
    if fatal:
        raise Fatal(fatal)
    dec1 = target.decode_counters()
    row = summarize(n, t0, clients, late if late_sent else None, late_how, server)
    row["decode_tok_s"] = row["full_tok_s"] = row["full_share"] = None
    if dec0 and dec1 and dec1["seconds"] > dec0["seconds"]:
        row["decode_tokens"] = dec1["tokens"] - dec0["tokens"]
        row["decode_tok_s"] = row["decode_tokens"] / (dec1["seconds"] - dec0["seconds"])
        k0, s0 = dec0["passes"].get(n, (0.0, 0.0))
        k1, s1 = dec1["passes"].get(n, (0.0, 0.0))
        if k1 > k0 and s1 > s0:
            row["full_passes"] = k1 - k0
            row["full_tok_s"] = n * (k1 - k0) / (s1 - s0)
            all_s = sum(v[1] for v in dec1["passes"].values()) - sum(v[1] for v in dec0["passes"].values())
            row["full_share"] = (s1 - s0) / all_s
    return row


def summarize(n, t0, clients, late, late_how, server):
    recs = [r for cl in clients for r in cl.records]
    errors = {}
    for r in recs + ([late.rec] if late else []):
        if r.error:
            errors[r.error] = errors.get(r.error, 0) + 1
    ok = [r for r in recs if r.status == 200 and not r.error and not r.aborted]
    samples = {}
    for r in recs + ([late.rec] if late else []):
        if r.error and r.error not in samples:
            samples[r.error] = r.detail
    streamed = [r for r in recs if r.status == 200 and r.chunks]

    # The late prompt's prefill window: sent -> its first token (or its end when it had none).
    win = None
    if late and late.rec.t_send is not None:
        win = (late.rec.t_send, late.rec.t_first or late.rec.t_end)
    gaps, late_gaps = [], []
    for r in streamed:
        for a, b, g in r.gaps():
            (late_gaps if win and b > win[0] and a < win[1] else gaps).append(g)

    # Steady state: every client has its first token .. the first client receives its last.
    per_client = [[r for r in cl.records if r.status == 200 and r.chunks] for cl in clients]
    t_end = max([r.t_end for r in recs if r.t_end] or [t0])
    wall = t_end - t0
    total = sum(r.tokens() for r in streamed)
    e2e = total / wall if wall > 0 else None
    agg, method, window = e2e, "e2e", None
    if all(per_client):
        ta = max(rs[0].chunks[0] for rs in per_client)
        tb = min(rs[-1].chunks[-1] for rs in per_client)
        tok = sum(r.weight() for r in streamed for t in r.chunks if ta < t <= tb)
        if tb - ta >= max(1.0, 0.25 * wall) and tok >= 8:
            agg, method, window = tok / (tb - ta), "steady", tb - ta
    chunks = sum(len(r.chunks) for r in streamed)
    row = {
        "clients": n,
        "requests": len(ok),
        "aborted": sum(r.aborted for r in recs),
        "errors": errors,
        "error_samples": samples,
        "agg_tok_s": agg,
        "agg_method": method,
        "agg_window_s": window,
        "e2e_tok_s": e2e,
        "wall_s": wall,
        "generated_tokens": total,
        "tokens_per_chunk": total / chunks if chunks else None,
        "prompt_tokens_mean": (sum(r.prompt_tokens for r in ok if r.prompt_tokens) / len(ok)) if ok else None,
        "completion_tokens_mean": (sum(r.tokens() for r in ok) / len(ok)) if ok else None,
        "cached_tokens": sum(r.cached_tokens or 0 for r in ok),
        "ttft_p50_ms": ms(pct([r.t_first - r.t_send for r in ok if r.t_first], 50)),
        "ttft_p99_ms": ms(pct([r.t_first - r.t_send for r in ok if r.t_first], 99)),
        "itl_p50_ms": ms(pct(gaps, 50)),
        "itl_p99_ms": ms(pct(gaps, 99)),
        "itl_samples": len(gaps),
        "server_rss": server.rss() if server.proc else None,
    }
    if late:
        lr = late.rec
        row["late"] = {
            "prompt_tokens": lr.prompt_tokens or lr.target,
            "trigger": late_how,
            "status": lr.status,
            "error": lr.error,
            "ttft_ms": ms(lr.t_first - lr.t_send) if lr.t_first else None,
            "itl_p99_ms": ms(pct(late_gaps, 99)),
            "itl_max_ms": ms(max(late_gaps)) if late_gaps else None,
            "itl_samples": len(late_gaps),
        }
    return row


def ms(s):
    return None if s is None else s * 1e3


# ---- output ---------------------------------------------------------------------------

HEAD = "%-6s %10s %7s %10s %9s %10s %10s %10s %6s %9s %9s %8s %8s %12s %10s %6s  %s" % (
    "level", "agg tok/s", "ratio", "e2e tok/s", "dec tok/s", "dec ratio", "full tok/s", "full ratio", "full %",
    "TTFT p50", "TTFT p99", "ITL p50", "ITL p99", "late ITL p99", "late TTFT", "reqs", "errors")


def fmt(v, f="%.1f"):
    return "-" if v is None else f % v


RATIOS = (("ratio", "agg_tok_s"), ("decode_ratio", "decode_tok_s"), ("full_ratio", "full_tok_s"))


def set_ratios(levels):
    """Each level's ratios to the 1-client level of its round (None without one): the throughputs of RATIOS,
    and late_itl_ratio, the late prompt's ITL p99 over that level's ITL p99."""
    for L in levels:
        one = one_client(levels, L) or {}
        for key, field in RATIOS:
            L[key] = L[field] / one[field] if L.get(field) and one.get(field) else None
        late = (L.get("late") or {}).get("itl_p99_ms")
        L["late_itl_ratio"] = late / one["itl_p99_ms"] if late and one.get("itl_p99_ms") else None


def table(levels, peer=None):
    """The table of levels (set_ratios first)."""
    out = [HEAD + ("   x llama.cpp" if peer else "")]
    rounds = max(L.get("round", 1) for L in levels) if levels else 1
    shown = None
    for L in levels:
        if rounds > 1 and L.get("round") != shown:
            shown = L.get("round")
            out.append("round %d" % shown)
        late = L.get("late") or {}
        err = ",".join("%s:%d" % kv for kv in sorted(L["errors"].items())) or "0"
        if L["aborted"]:
            err += " (aborted %d)" % L["aborted"]
        ratio, dec, full, share = L["ratio"], L.get("decode_tok_s"), L.get("full_tok_s"), L.get("full_share")
        line = "%-6d %10s %7s %10s %9s %10s %10s %10s %6s %9s %9s %8s %8s %12s %10s %6d  %s" % (
            L["clients"], fmt(L["agg_tok_s"], "%.2f") + ("*" if L["agg_method"] == "e2e" else ""),
            fmt(ratio, "%.2fx"), fmt(L["e2e_tok_s"], "%.2f"), fmt(dec, "%.2f"), fmt(L["decode_ratio"], "%.2fx"),
            fmt(full, "%.2f"), fmt(L["full_ratio"], "%.2fx"), fmt(None if share is None else 100 * share, "%.0f"),
            fmt(L["ttft_p50_ms"], "%.0f"),
            fmt(L["ttft_p99_ms"], "%.0f"), fmt(L["itl_p50_ms"]), fmt(L["itl_p99_ms"]), fmt(late.get("itl_p99_ms")),
            fmt(late.get("ttft_ms"), "%.0f"), L["requests"], err)
        if peer:
            p = peer.get(L["clients"])
            line += "   %s" % (fmt(L["agg_tok_s"] / p, "%.2fx") if p and L["agg_tok_s"] else "-")
        out.append(line)
    out.append("(times in ms; * = e2e: no steady window with all streams running, the whole level's wall time)")
    return "\n".join(out)


def one_client(levels, L):
    """The 1-client level of L's round (its ratios' base), or None."""
    for o in levels:
        if o["clients"] == 1 and o.get("round", 1) == L.get("round", 1):
            return o
    return None


def median(xs):
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return None
    m = len(xs) // 2
    return xs[m] if len(xs) % 2 else (xs[m - 1] + xs[m]) / 2


def rounds_summary(levels):
    """Per level with more than one client: the median over rounds of each ratio to the same round's 1-client
    level (agg, decode, full), and of the late prompt's ITL p99 over the 1-client ITL p99. Measured minutes
    apart, two levels see different neighbours on a shared machine; rounds that alternate them and the median
    of their ratios are what a claim can rest on."""
    out = {}
    names = (("agg", "ratio"), ("decode", "decode_ratio"), ("full", "full_ratio"), ("late_itl", "late_itl_ratio"))
    for n in sorted({L["clients"] for L in levels if L["clients"] != 1}):
        mine = [L for L in levels if L["clients"] == n and one_client(levels, L)]
        out[str(n)] = {name: {"per_round": [L[key] for L in mine], "median": median([L[key] for L in mine])}
                       for name, key in names}
    return out


def rounds_lines(summary, rounds):
    lines = []
    for n, r in summary.items():
        what = "median of %d rounds" % rounds if rounds > 1 else "one round"
        lines.append("%s clients / 1 (%s): agg %s, dec %s, full %s" % (
            n, what, fmt(r["agg"]["median"], "%.2fx"), fmt(r["decode"]["median"], "%.2fx"),
            fmt(r["full"]["median"], "%.2fx")) + (
            "; per round full %s" % " ".join(fmt(x, "%.2fx") for x in r["full"]["per_round"]) if rounds > 1 else ""))
        if n == "4" and r["late_itl"]["median"] is not None:
            lines.append("late-prompt ITL p99 at 4 clients / 1-client ITL p99 = %.2f (%s; issue 16 asks <= 2)" % (
                r["late_itl"]["median"], what))
    return lines


def load_peer(path):
    """{npl: aggregate generated tok/s} from scripts/peer_batched.sh --json."""
    j = json.load(open(path))
    return {int(L["clients"]): L["agg_tok_s"] for L in j.get("levels", []) if L.get("agg_tok_s")}


# ---- main -----------------------------------------------------------------------------


def loopback_url(url):
    u = urllib.parse.urlsplit(url)
    try:
        port = u.port
    except ValueError:
        port = None
    if u.scheme != "http" or not u.hostname or not port or u.path not in ("", "/"):
        raise Fatal("--url must be http://HOST:PORT, got %r" % url)
    host = u.hostname
    try:
        ok = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        ok = False
    if not ok:
        raise Fatal("--url %r is not a loopback address: this script only talks to 127.0.0.1/::1" % url)
    return "127.0.0.1" if host == "localhost" else host, port


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=None,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", nargs="?", help="model for `edge0 serve` (not with --url)")
    p.add_argument("--url", help="attach to a running server on a loopback address instead of starting one")
    p.add_argument("--bin", default=os.path.join(ROOT, "build", "edge0"), help="the edge0 binary (build/edge0)")
    p.add_argument("--memcap", help="run the server inside scripts/memcap.sh SIZE (root)")
    p.add_argument("--server-args", default="", help='further `edge0 serve` arguments, e.g. "--parallel 4"')
    p.add_argument("--clients", default="1,2,4,8", help="concurrency levels (1,2,4,8)")
    p.add_argument("--prompt-tokens", default="64-512", help="prompt length range in tokens, LO-HI (64-512)")
    p.add_argument("--max-tokens", type=int, default=128, help="new tokens per request (128)")
    p.add_argument("--requests-per-client", type=int, default=2, help="requests each client sends per level (2)")
    p.add_argument("--seconds", type=float, default=240, help="per level: no new request after this (240)")
    p.add_argument("--drain", type=float, default=240, help="per level: running requests are cut this long after --seconds (240)")
    p.add_argument("--timeout", type=float, default=3600, help="the whole run, server start included (3600)")
    p.add_argument("--late-prompt", type=int, default=0, help="tokens of the extra prompt that arrives mid-level (0: none)")
    p.add_argument("--endpoint", choices=("completions", "chat"), default="completions")
    p.add_argument("--itl", choices=("token", "chunk"), default="token",
                   help="inter-token gaps per token (streams ask for logprobs to count a chunk's tokens; default) "
                   "or per chunk")
    p.add_argument("--vocab-limit", type=int, default=0,
                   help="make prompts only from words whose token ids are below this (synth test shapes with a small vocab)")
    p.add_argument("--rounds", type=int, default=1,
                   help="run the --clients levels this many times in turn; each ratio is against the same round's "
                        "1-client level, and the medians of the rounds' ratios are printed (1)")
    p.add_argument("--warmup", type=int, default=1, help="requests before the first level, not measured (1)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", help="write the results here")
    p.add_argument("--peer", help="scripts/peer_batched.sh --json output: adds a column agg / llama.cpp's at the same level")
    p.add_argument("--log-dir", help="keep the server log here (default: a temporary directory, printed)")
    p.add_argument("--read-timeout", type=float, default=900, help="socket timeout of one read (900)")
    p.add_argument("--start-timeout", type=int, default=600, help="seconds the server may take to listen (600)")
    p.add_argument("--stop-timeout", type=int, default=60, help="seconds the server may take to exit after SIGTERM (60)")
    a = p.parse_args(argv)
    try:
        a.levels = [int(x) for x in a.clients.split(",")]
        lo, _, hi = a.prompt_tokens.partition("-")
        a.prompt_range = (int(lo), int(hi or lo))
    except ValueError:
        p.error("--clients takes N,N,... and --prompt-tokens LO-HI")
    if any(x < 1 or x > 256 for x in a.levels):
        p.error("--clients: levels from 1 to 256")
    if not 1 <= a.prompt_range[0] <= a.prompt_range[1] <= 100000:
        p.error("--prompt-tokens: 1 <= LO <= HI")
    if a.max_tokens < 1 or a.requests_per_client < 1 or a.seconds <= 0 or a.drain < 0 or a.timeout <= 0:
        p.error("--max-tokens and --requests-per-client must be >= 1, --seconds and --timeout > 0, --drain >= 0")
    if a.late_prompt < 0:
        p.error("--late-prompt must be >= 0")
    if not 1 <= a.rounds <= 100:
        p.error("--rounds: from 1 to 100")
    if bool(a.url) == bool(a.model):
        p.error("give MODEL (the script starts the server) or --url (attach), not both")
    if a.url and (a.memcap or a.server_args):
        p.error("--memcap and --server-args are for a server this script starts, not with --url")
    if a.url:
        try:
            a.host_port = loopback_url(a.url)
        except Fatal as e:
            p.error(str(e))
    return a


def main(argv):
    a = parse_args(argv)
    t_start = time.monotonic()
    deadline_all = t_start + a.timeout
    logdir = a.log_dir or tempfile.mkdtemp(prefix="edge0-load-")
    os.makedirs(logdir, exist_ok=True)
    server = Server(a, logdir)
    result = {"config": {k: v for k, v in vars(a).items() if k not in ("levels", "prompt_range", "host_port")},
              "levels": []}
    problems = []
    # A watchdog for the parts outside a level (server start, prompt sizing, warm-up).
    watchdog = threading.Timer(a.timeout + 30, lambda: (sys.stderr.write("load: overall timeout\n"), server.stop(), os._exit(1)))
    watchdog.daemon = True
    watchdog.start()
    try:
        if a.url:
            host, port = a.host_port
        else:
            if not os.access(a.bin, os.X_OK):
                raise Fatal("no edge0 binary at %s (make build/edge0, or --bin)" % a.bin)
            host, port = "127.0.0.1", server.start()
            sys.stderr.write("load: %s (log %s)\n" % (" ".join(shlex.quote(x) for x in server.cmd), server.log_path))
        target = Target(host, port, a)
        # A server this script started has loaded its model by now; one it attaches to gets 30 s.
        health_by = min(deadline_all, time.monotonic() + (30 if a.url else a.start_timeout))
        while True:
            try:
                st, _ = target.call("GET", "/health", timeout=10)
            except OSError:
                st = None
            if st == 200:
                break
            if not server.alive():
                raise Fatal("the server exited:\n" + server.tail())
            if time.monotonic() > health_by:
                raise Fatal("http://%s:%d/health did not answer 200 (last: %s)" % (host, port, st or "no answer"))
            time.sleep(0.2)
        if a.vocab_limit:
            target.limit_vocab(a.vocab_limit)
        target.probe_ignore_eos()
        result["ignore_eos"] = target.ignore_eos
        for i in range(a.warmup):
            rng = random.Random("%d:warmup:%d" % (a.seed, i))
            text, n = target.make_prompt(rng, a.prompt_range[1])
            rec = Record("warmup", -1, i, n)
            c = target.conn()
            stream_request(target, c, rec, target.body(text, a.max_tokens, i + 1))
            c.close()
            if rec.error:
                raise Fatal("the warm-up request failed (%s, HTTP %s): %s" % (rec.error, rec.status, rec.detail))
            sys.stderr.write("load: warm-up %d: %d prompt tokens, %d generated in %.1f s\n" % (
                i + 1, rec.prompt_tokens or n, rec.tokens(), rec.t_end - rec.t_send))
        for n, rnd in [(n, r) for r in range(a.rounds) for n in a.levels]:
            L = run_level(target, server, a, n, deadline_all, rnd)
            L["round"] = rnd + 1
            result["levels"].append(L)
            sys.stderr.write("load: %s%d clients: %d requests, agg %s tok/s (%s), errors %s\n" % (
                "round %d, " % (rnd + 1) if a.rounds > 1 else "", n, L["requests"], fmt(L["agg_tok_s"], "%.2f"),
                L["agg_method"], L["errors"] or 0))
            if not L["requests"]:
                problems.append("%d clients: no request completed" % n)
            bad = {k: v for k, v in L["errors"].items() if k not in ("503", "stream:503")}
            if bad:
                problems.append("%d clients: errors %s; e.g. %s" % (
                    n, bad, "; ".join("%s: %s" % (k, L["error_samples"].get(k)) for k in bad)))
    except Fatal as e:
        problems.append(str(e))
    except KeyboardInterrupt:
        problems.append("interrupted")
    finally:
        server.stop()
        watchdog.cancel()
    if server.proc:
        result["server"] = {"cmd": server.cmd, "exit": server.exit_code, "memcap": server.memcap, "log": server.log_path}
        if server.exit_code != 0:
            problems.append("the server exited with status %s (log %s)" % (server.exit_code, server.log_path))
        if server.memcap and server.memcap["oom_kills"]:
            problems.append("%d OOM kills under --memcap" % server.memcap["oom_kills"])
    peer = load_peer(a.peer) if a.peer else None
    if result["levels"]:
        print("edge0 serve load: %s, %s, prompts %s tokens, %d new tokens%s, %d requests/client, %g s/level%s%s" % (
            a.model or a.url, a.endpoint, a.prompt_tokens, a.max_tokens,
            "" if result.get("ignore_eos") else " (no ignore_eos: answers may end early)", a.requests_per_client,
            a.seconds, ", late prompt %d" % a.late_prompt if a.late_prompt else "",
            ", memcap %s" % a.memcap if a.memcap else ""))
        set_ratios(result["levels"])
        print(table(result["levels"], peer))
        if server.memcap:
            print("memcap: limit %s, peak %s, oom kills %d" % (server.memcap["limit"], server.memcap["peak"],
                                                              server.memcap["oom_kills"]))
        result["rounds"] = rounds_summary(result["levels"])
        for line in rounds_lines(result["rounds"], a.rounds):
            print(line)
    result["problems"] = problems
    result["ok"] = not problems
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)
    for p_ in problems:
        sys.stderr.write("load: FAIL: %s\n" % p_)
    if not a.log_dir and not problems:
        try:
            os.remove(server.log_path)
            os.rmdir(logdir)
        except OSError:
            pass
    return 0 if not problems else 1


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except Fatal as e:
        sys.stderr.write("load: %s\n" % e)
        sys.exit(2)
