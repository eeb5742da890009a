#!/usr/bin/python3
"""Cuts a small vocabulary out of Qwen3's tokenizer.json, and checks it.

The cut tokenizer is a tokenizer.json in the same Hugging Face format:

  - model.vocab: the 256 byte-level base tokens, then the regular tokens
    that are most frequent in the Qwen3 tokenization of the training text,
    each taken together with the tokens its merge is made of (recursively),
    so that BPE can still build it; when the text has too few distinct
    tokens, the rest is filled in Qwen3's id order (its earliest merges).
  - model.merges: Qwen3's merges whose two parts and result are all kept,
    in their original priority order.
  - ids renumbered densely: regular tokens 0..V-10 in Qwen3's id order (so
    the 256 byte tokens keep ids 0..255), then the special tokens LAST, in
    Qwen3's order, with their flags unchanged: <|endoftext|> <|im_start|>
    <|im_end|> <tool_call> </tool_call> <tool_response> </tool_response>
    <think> </think> (what the Qwen3.5 template and edge0 use; the vision
    and FIM tokens are left out: the demo model reads text only). As in
    Qwen3's file they are in added_tokens only, not in model.vocab.
  - normalizer (NFC), pre_tokenizer (the Qwen3 regex + ByteLevel),
    post_processor and decoder (ByteLevel) are Qwen3's, unchanged.

A word whose Qwen3 tokens are all kept gets exactly Qwen3's tokens (BPE
with a subset of the merges takes the same steps); any other word falls
back to shorter kept tokens, down to single bytes, so every text still
round-trips.

Checks (--check DIR, and at the end of prepare.py), on DIR/valid.txt:
  (a) encode then decode gives the text back exactly, with edge0's C
      tokenizer (`edge0 tokenize --tokenizer ... --jsonl`, one line per
      unit) and with bpe.py, the two give the same ids, and decoding
      DIR/valid.bin gives valid.txt;
  (b) a chat rendering (system, user, think block, tool call, tool
      response) encodes each special token as one id, in both;
  (c) tokens per word of the split, cut vocabulary against full Qwen3.

usage: cut_vocab.py --text TRAIN.txt --size 4096 --out DIR   (cut)
       cut_vocab.py --check DIR [--edge0 build/edge0]        (check)
"""

import argparse
import copy
import json
import os
import subprocess
import sys
import tempfile
from array import array
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
FULL_TOKENIZER = os.path.join(REPO, "assets", "qwen3-tokenizer", "tokenizer.json")

SPECIALS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>",
    "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>",
    "<think>", "</think>",
]


def cut(full, counts, size):
    """The cut tokenizer.json (a dict). full: bpe.BPE of Qwen3's file;
    counts: Counter of Qwen3 ids in the training text; size: vocabulary
    size with the specials."""
    doc = full.doc
    vocab = doc["model"]["vocab"]
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in doc["model"]["merges"]]
    parts = {a + b: (a, b) for a, b in merges}  # each Qwen3 token comes from one merge
    budget = size - len(SPECIALS)
    keep = set(bpe.BYTE_CHAR.values())
    if budget < len(keep):
        raise ValueError(f"a vocabulary of {size} cannot hold the 256 byte tokens and {len(SPECIALS)} specials")

    def needed(tok):
        """tok and the tokens it is merged from, those not kept yet."""
        out, stack = [], [tok]
        while stack:
            t = stack.pop()
            if t in keep or t in out:
                continue
            out.append(t)
            stack.extend(parts.get(t, ()))
        return out

    def take(tokens):
        for t in tokens:
            if len(keep) >= budget:
                return
            n = needed(t)
            if len(keep) + len(n) <= budget:
                keep.update(n)

    by_count = sorted((i for i in counts if i in full.id_to_token and i < len(vocab)), key=lambda i: (-counts[i], i))
    take(full.id_to_token[i] for i in by_count)
    take(sorted(vocab, key=vocab.get))  # fill: Qwen3's id order

    kept = sorted(keep, key=vocab.get)
    new_vocab = {t: i for i, t in enumerate(kept)}
    new_merges = [[a, b] for a, b in merges if a in keep and b in keep and a + b in keep]
    added = {a["content"]: a for a in doc["added_tokens"]}
    new_added = []
    for k, s in enumerate(SPECIALS):
        a = dict(added[s])
        a["id"] = len(kept) + k
        new_added.append(a)

    out = copy.deepcopy({k: v for k, v in doc.items() if k != "model"})
    out["added_tokens"] = new_added
    model = {k: v for k, v in doc["model"].items() if k not in ("vocab", "merges")}
    model["vocab"] = new_vocab
    model["merges"] = new_merges
    out["model"] = model
    return {k: out[k] for k in doc}  # Qwen3's key order


def size(doc):
    return len(doc["model"]["vocab"]) + len(doc["added_tokens"])


def write(doc, path):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")


def write_config(doc, path):
    """A minimal tokenizer_config.json (eos = <|im_end|>, pad =
    <|endoftext|>, the added tokens); the chat template is the
    chat_template.jinja beside it."""
    cfg = {
        "tokenizer_class": "Qwen2Tokenizer",
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "bos_token": None,
        "unk_token": None,
        "add_prefix_space": False,
        "clean_up_tokenization_spaces": False,
        "added_tokens_decoder": {
            str(a["id"]): {k: a[k] for k in ("content", "lstrip", "normalized", "rstrip", "single_word", "special")}
            for a in doc["added_tokens"]
        },
    }
    with open(path, "w", encoding="utf-8") as f:
        json.dump(cfg, f, ensure_ascii=False, indent=1)
        f.write("\n")


# ---- checks ----------------------------------------------------------------

CHAT_SAMPLE = (
    "<|im_start|>system\nYou are terse.<|im_end|>\n"
    "<|im_start|>user\nWhat is a dog?<|im_end|>\n"
    "<|im_start|>assistant\n<think>\n\n</think>\n\nA dog is a domestic animal.<|im_end|>\n"
    "<|im_start|>user\nWeather in Paris?<|im_end|>\n"
    "<|im_start|>assistant\n<think>\nI should call the tool.\n</think>\n\n"
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call><|im_end|>\n"
    "<|im_start|>user\n<tool_response>\nsunny\n</tool_response><|im_end|>\n"
    "<|im_start|>assistant\n<think>\n"
)


def edge0_encode(edge0, tokenizer, texts):
    """[(ids, decoded)] of each text by `edge0 tokenize --jsonl`."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "in.jsonl")
        with open(path, "w", encoding="utf-8") as f:
            for t in texts:
                f.write(json.dumps({"text": t}, ensure_ascii=False) + "\n")
        r = subprocess.run([edge0, "tokenize", "--tokenizer", tokenizer, "--jsonl", path],
                           capture_output=True, text=True, encoding="utf-8")
    if r.returncode != 0:
        raise RuntimeError(f"edge0 tokenize failed: {r.stderr.strip()}")
    rows = [json.loads(line) for line in r.stdout.splitlines() if line.strip()]
    return [(row["ids"], row["decoded"]) for row in rows]


def words_of(text):
    for s in SPECIALS:
        text = text.replace(s, " ")
    return len(text.split())


def check(full_path, cut_path, data_dir, edge0):
    """Runs checks (a) to (c) and prints them; True when all pass."""
    full, cut_tok = bpe.BPE.load(full_path), bpe.BPE.load(cut_path)
    with open(os.path.join(data_dir, "valid.txt"), encoding="utf-8") as f:
        text = f.read()
    ok = True

    def report(name, good, detail):
        nonlocal ok
        ok = ok and good
        print(f"check {name}: {'ok' if good else 'FAILED'}: {detail}", flush=True)

    # (a) round trips
    ids = cut_tok.encode(text)
    report("a  python round trip", cut_tok.decode(ids) == text, f"valid.txt, {len(text)} chars, {len(ids)} tokens")
    bin_ids = array("H")
    with open(os.path.join(data_dir, "valid.bin"), "rb") as f:
        bin_ids.frombytes(f.read())
    if sys.byteorder != "little":
        bin_ids.byteswap()
    report("a  valid.bin decodes to valid.txt", cut_tok.decode(bin_ids) == text, f"{len(bin_ids)} ids")
    eot = "<|endoftext|>"
    units = [u + eot for u in text.split(eot)[:-1]]
    assert "".join(units) == text
    if not os.access(edge0, os.X_OK):
        report("a  edge0", False, f"no {edge0}: build it with make")
    else:
        rows = edge0_encode(edge0, cut_path, units)
        same_text = sum(d == u for (_, d), u in zip(rows, units))
        same_ids = sum(i == cut_tok.encode(u) for (i, _), u in zip(rows, units))
        n_ids = sum(len(i) for i, _ in rows)
        report("a  edge0 round trip", len(rows) == len(units) and same_text == len(units),
               f"{same_text}/{len(units)} units decode to their text ({n_ids} tokens)")
        report("a  edge0 ids == python ids", same_ids == len(units), f"{same_ids}/{len(units)} units")

    # (b) special tokens as single ids
    want = [cut_tok.added[s] for s in SPECIALS]
    n_spec = sum(CHAT_SAMPLE.count(s) for s in SPECIALS)
    py = cut_tok.encode(CHAT_SAMPLE)
    py_spec = [i for i in py if i in want]
    good = len(py_spec) == n_spec and cut_tok.decode(py) == CHAT_SAMPLE
    detail = f"{n_spec} special tokens, python {len(py_spec)}"
    if os.access(edge0, os.X_OK):
        (e_ids, e_dec), = edge0_encode(edge0, cut_path, [CHAT_SAMPLE])
        good = good and e_ids == py and e_dec == CHAT_SAMPLE
        detail += f", edge0 {'the same ids' if e_ids == py else 'DIFFERENT ids'}"
    report("b  chat rendering", good, detail + "; ids " + " ".join(f"{s}={cut_tok.added[s]}" for s in SPECIALS))

    # (c) tokens per word
    words = words_of(text)
    n_full = len(full.encode(text))
    print(f"check c  tokens/word of valid ({words} words): cut {len(ids) / words:.3f} "
          f"({len(ids)} tokens), full Qwen3 {n_full / words:.3f} ({n_full} tokens), "
          f"+{100 * (len(ids) / n_full - 1):.1f}%", flush=True)
    plain = "".join(u for u in units if not u.startswith("<|im_start|>"))
    if plain:  # the prose alone, without the chat markup
        words, n_cut, n_full = words_of(plain), len(cut_tok.encode(plain)), len(full.encode(plain))
        print(f"check c  tokens/word of valid's plain text ({words} words): cut {n_cut / words:.3f}, "
              f"full Qwen3 {n_full / words:.3f}, +{100 * (n_cut / n_full - 1):.1f}%", flush=True)
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokenizer", default=FULL_TOKENIZER, help="the full Qwen3 tokenizer.json")
    ap.add_argument("--text", help="training text to count tokens on")
    ap.add_argument("--size", type=int, default=4096, help="vocabulary size, specials included")
    ap.add_argument("--out", help="directory for tokenizer.json")
    ap.add_argument("--check", metavar="DIR", help="check DIR/tokenizer.json on DIR/valid.txt")
    ap.add_argument("--edge0", default=os.path.join(REPO, "build", "edge0"))
    args = ap.parse_args()
    if args.check:
        return 0 if check(args.tokenizer, os.path.join(args.check, "tokenizer.json"), args.check, args.edge0) else 1
    if not args.text or not args.out:
        ap.error("give --text and --out to cut, or --check DIR")
    full = bpe.BPE.load(args.tokenizer)
    with open(args.text, encoding="utf-8") as f:
        counts = Counter(full.encode(f.read()))
    doc = cut(full, counts, args.size)
    os.makedirs(args.out, exist_ok=True)
    write(doc, os.path.join(args.out, "tokenizer.json"))
    print(f"{os.path.join(args.out, 'tokenizer.json')}: {size(doc)} tokens, {len(doc['model']['merges'])} merges")
    return 0


if __name__ == "__main__":
    sys.exit(main())
