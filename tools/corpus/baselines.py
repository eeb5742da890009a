#!/usr/bin/python3
"""Unigram and bigram perplexities of the test split, in the cut vocabulary's
token ids, for comparison with a trained model (issue 41: the model must
beat both by a wide margin).

Both models are estimated on train.bin, their one parameter is chosen on
valid.bin (a grid search), and the perplexity reported is per token over
every token of test.bin, the stream as prepare.py wrote it (units joined,
<|endoftext|> between them); the first token is scored by the unigram
model. A trained model should be scored on the same stream.

  unigram  add-k: p(w) = (c(w) + k) / (N + k V), k tuned on valid.
  bigram   interpolated Kneser-Ney with one discount D tuned on valid:
             p(w | v) = max(c(v w) - D, 0) / c(v) + D N1+(v .) / c(v) * q(w)
           where q is the continuation distribution
             q(w) = (N1+(. w) + 1) / (N1+(. .) + V)
           (add-one, so that a word never seen after anything keeps some
           mass), and p(w | v) = q(w) for a context v never seen in train.

Writes DIR/baselines.json and prints the numbers.

usage: baselines.py [--data DIR]     (default ~/.cache/edge0-train/data)
"""

import argparse
import json
import math
import os
import sys

import numpy as np

CACHE = os.environ.get("EDGE0_TRAIN_CACHE", os.path.expanduser("~/.cache/edge0-train"))


def load(data, split):
    return np.fromfile(os.path.join(data, split + ".bin"), dtype="<u2").astype(np.int64)


def unigram_logp(counts, k, ids):
    """log p of each id under add-k."""
    p = (counts + k) / (counts.sum() + k * len(counts))
    return np.log(p[ids])


class Bigram:
    """Interpolated Kneser-Ney bigram counts of one token stream."""

    def __init__(self, ids, vocab):
        self.V = vocab
        pairs = ids[:-1] * vocab + ids[1:]
        self.pair = np.bincount(pairs, minlength=vocab * vocab).reshape(vocab, vocab)
        self.ctx = self.pair.sum(axis=1)  # c(v) as a context
        self.types_after = (self.pair > 0).sum(axis=1)  # N1+(v .)
        cont = (self.pair > 0).sum(axis=0)  # N1+(. w)
        self.q = (cont + 1.0) / (cont.sum() + vocab)

    def logp(self, ids, d):
        """log p(w | v) of every token after the first."""
        v, w = ids[:-1], ids[1:]
        c_vw = self.pair[v, w]
        c_v = self.ctx[v]
        seen = c_v > 0
        safe = np.where(seen, c_v, 1)
        p = np.maximum(c_vw - d, 0) / safe + d * self.types_after[v] / safe * self.q[w]
        p = np.where(seen, p, self.q[w])
        return np.log(p)


def ppl(logp):
    return math.exp(-float(np.mean(logp)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=os.path.join(CACHE, "data"))
    args = ap.parse_args()
    with open(os.path.join(args.data, "stats.json")) as f:
        V = json.load(f)["vocab_size"]
    train, valid, test = (load(args.data, s) for s in ("train", "valid", "test"))
    print(f"{args.data}: vocabulary {V}, tokens train {len(train)} valid {len(valid)} test {len(test)}")

    counts = np.bincount(train, minlength=V).astype(np.float64)
    ks = [0.001, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0]
    valid_uni = {k: ppl(unigram_logp(counts, k, valid)) for k in ks}
    k = min(valid_uni, key=valid_uni.get)
    uni_test = ppl(unigram_logp(counts, k, test))
    print(f"unigram add-k: k = {k} (valid ppl {valid_uni[k]:.2f}); test ppl {uni_test:.2f}")

    bi = Bigram(train, V)
    ds = [round(0.05 * i, 2) for i in range(2, 20)]  # 0.10 .. 0.95

    def bigram_ppl(ids, d):
        first = unigram_logp(counts, k, ids[:1])
        return ppl(np.concatenate([first, bi.logp(ids, d)]))

    valid_bi = {d: bigram_ppl(valid, d) for d in ds}
    d = min(valid_bi, key=valid_bi.get)
    bi_test = bigram_ppl(test, d)
    print(f"bigram interpolated Kneser-Ney: D = {d} (valid ppl {valid_bi[d]:.2f}); test ppl {bi_test:.2f}")

    out = {
        "vocab_size": V,
        "test_tokens": int(len(test)),
        "unigram": {"smoothing": "add-k", "k": k, "valid_ppl": round(valid_uni[k], 3), "test_ppl": round(uni_test, 3)},
        "bigram": {"smoothing": "interpolated Kneser-Ney, one discount", "D": d,
                   "valid_ppl": round(valid_bi[d], 3), "test_ppl": round(bi_test, 3)},
    }
    with open(os.path.join(args.data, "baselines.json"), "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
