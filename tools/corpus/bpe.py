"""A small byte-level BPE tokenizer in pure Python, for Qwen3's tokenizer.json.

It follows the steps of the Hugging Face `tokenizers` library for this one
kind of file (and for the cut vocabularies that cut_vocab.py writes):

  1. added tokens are cut out of the raw text (leftmost, longest first);
  2. every other part is NFC-normalised;
  3. the Split pre-tokenizer's regex cuts it into pieces;
  4. each piece's UTF-8 bytes become byte-level characters (GPT-2's table)
     and BPE merges them, lowest merge rank first, leftmost on ties.

Python's `re` has no \\p{L} / \\p{N}, so the regex is rebuilt with explicit
character classes from unicodedata (letters: categories L*, numbers: N*), and
\\s / \\S mean Unicode White_Space as in Oniguruma, not str.isspace(). Only
the Qwen3 regex is supported: any other pattern in the file is refused rather
than guessed at. edge0's C tokenizer is the reference; prepare.py checks that
the two give the same ids on a whole split.

    tok = BPE.load("tokenizer.json")
    ids = tok.encode("Hello <|im_end|>")
    text = tok.decode(ids)
"""

import json
import re
import sys
import unicodedata

QWEN_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# Unicode White_Space (what Oniguruma's and edge0's \s match).
WHITE_SPACE = "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"


def _class_body(prefix):
    """The code points whose general category starts with prefix, as the
    inside of a regex character class ("\\u0041-\\u005a...")."""
    out, start, prev = [], None, None
    for cp in range(sys.maxunicode + 1):
        if unicodedata.category(chr(cp)).startswith(prefix):
            if start is None:
                start = cp
            prev = cp
        elif start is not None:
            out.append(_range(start, prev))
            start = None
    if start is not None:
        out.append(_range(start, prev))
    return "".join(out)


def _range(a, b):
    esc = lambda cp: "\\U%08x" % cp
    return esc(a) if a == b else esc(a) + "-" + esc(b)


def qwen_pattern():
    """Qwen3's pre-tokenizer regex, compiled for Python's re."""
    letters, numbers = _class_body("L"), _class_body("N")
    ws = WHITE_SPACE
    pat = (
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)"
        rf"|[^\r\n{letters}{numbers}]?[{letters}]+"
        rf"|[{numbers}]"
        rf"| ?[^{ws}{letters}{numbers}]+[\r\n]*"
        rf"|[{ws}]*[\r\n]+"
        rf"|[{ws}]+(?![^{ws}])"
        rf"|[{ws}]+"
    )
    return re.compile(pat)


def bytes_to_unicode():
    """GPT-2's byte -> printable character table used by ByteLevel."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


BYTE_CHAR = bytes_to_unicode()
CHAR_BYTE = {c: b for b, c in BYTE_CHAR.items()}


class BPE:
    def __init__(self, doc):
        """doc: a parsed tokenizer.json (dict)."""
        self.doc = doc
        model = doc["model"]
        if model.get("type") != "BPE":
            raise ValueError("only BPE models are supported")
        split = doc["pre_tokenizer"]["pretokenizers"][0]
        if split["pattern"]["Regex"] != QWEN_REGEX:
            raise ValueError("only Qwen3's pre-tokenizer regex is supported")
        self.vocab = model["vocab"]
        self.id_to_token = {i: s for s, i in self.vocab.items()}
        merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
        self.ranks = {pair: r for r, pair in enumerate(merges)}
        self.added = {a["content"]: a["id"] for a in doc.get("added_tokens", [])}
        for s, i in self.added.items():
            self.id_to_token[i] = s
        # longest first, so that the alternation is leftmost-longest
        alts = sorted(self.added, key=len, reverse=True)
        self.added_re = re.compile("|".join(re.escape(a) for a in alts)) if alts else None
        self.pattern = qwen_pattern()
        self.cache = {}

    @classmethod
    def load(cls, path):
        with open(path, encoding="utf-8") as f:
            return cls(json.load(f))

    def _bpe(self, piece):
        """Token strings of one pre-tokenized piece (byte-level characters)."""
        word = list(piece)
        while len(word) > 1:
            best, at = None, -1
            for i in range(len(word) - 1):
                r = self.ranks.get((word[i], word[i + 1]))
                if r is not None and (best is None or r < best):
                    best, at = r, i
            if best is None:
                break
            a, b = word[at], word[at + 1]
            merged, i = [], 0
            while i < len(word):  # every occurrence of the pair, left to right
                if i + 1 < len(word) and word[i] == a and word[i + 1] == b:
                    merged.append(a + b)
                    i += 2
                else:
                    merged.append(word[i])
                    i += 1
            word = merged
        return word

    def _encode_plain(self, text, out):
        text = unicodedata.normalize("NFC", text)
        for m in self.pattern.finditer(text):
            piece = m.group()
            ids = self.cache.get(piece)
            if ids is None:
                chars = "".join(BYTE_CHAR[b] for b in piece.encode("utf-8"))
                ids = [self.vocab[t] for t in self._bpe(chars)]
                self.cache[piece] = ids
            out.extend(ids)

    def encode(self, text):
        """Ids of text; added tokens written in it are matched as tokens."""
        out, pos = [], 0
        if self.added_re:
            for m in self.added_re.finditer(text):
                self._encode_plain(text[pos : m.start()], out)
                out.append(self.added[m.group()])
                pos = m.end()
        self._encode_plain(text[pos:], out)
        return out

    def decode(self, ids):
        """Text of ids, added tokens included."""
        parts, buf = [], bytearray()
        for i in ids:
            tok = self.id_to_token[i]
            if tok in self.added and self.added[tok] == i:
                parts.append(buf.decode("utf-8", errors="replace"))
                buf = bytearray()
                parts.append(tok)
            else:
                buf.extend(CHAR_BYTE[c] for c in tok)
        parts.append(buf.decode("utf-8", errors="replace"))
        return "".join(parts)

    def token_bytes(self, i):
        """The bytes of a regular token (for counting and cutting)."""
        return bytes(CHAR_BYTE[c] for c in self.id_to_token[i])
