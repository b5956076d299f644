#!/usr/bin/python3
"""Generates a small WMT-like German/English data set for tests and demos.

English sentences are runs of words of real English text shipped with
Debian (the licences in /usr/share/common-licenses, package base-files);
each German sentence is its English one with every word replaced by a word
of the German dictionary /usr/share/dict/ngerman (package wngerman), chosen
by a hash of the English word, so the two sides are aligned word for word
and keep English's word frequencies, with German spelling (umlauts, ß,
capitalised nouns). Sentence lengths follow WMT's shape: about 25 words on
average (log-normal) and a long tail, some past 256 tokens, which batchd
drops as AlgoPerf does.

--stats picks the sizes (the shape above holds for both):
  small  (the default; tests and demos) 25 words on average; each German
         word is any dictionary word, so the German side is ~2x the
         English one in bytes (~350 and ~160 bytes a line).
  wmt17  WMT17 de-en train's (5,906,184 pairs, ~2 GB of text: ~170 bytes a
         side): 23 words on average, each German word a dictionary word of
         the English one's length or up to 2 letters longer (~180 and ~150
         bytes a line), and 8 % of the words given 1-4 random letters more,
         on both sides, so that the vocabulary has the real set's long tail
         of rare forms (names, numbers, compounds, typos) and a SentencePiece
         model of AlgoPerf's 32,000 pieces can be trained on 40,000 pairs
         (10^7 characters, what AlgoPerf trains its model on). For
         benchmarks (bench/wmt_bench.sh): the tokenizer's work follows the
         bytes of a line and the pieces it splits into.

Writes, under --out:
  wmt17_translate/de-en/1.0.0/wmt17_translate-train.tfrecord-NNNNN-of-SSSSS
  wmt14_translate/de-en/1.0.0/wmt14_translate-{validation,test}.tfrecord-00000-of-00001
  {train,validation,test}.{de,en}
The TFDS shards and the text files hold the same pairs in the same order.
The output depends only on the seed, the counts and the two input files.

    generate_wmt.py --out DIR [--train 3000] [--validation 300] [--test 300]
                    [--shards 16] [--seed 0] [--stats small|wmt17]
"""

import hashlib
import math
import os
import random
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(
    os.path.dirname(os.path.abspath(__file__)))), "common"))
import generator_cli  # noqa: E402
import wmt_data  # noqa: E402

ENGLISH_DIR = "/usr/share/common-licenses"
GERMAN_WORDS = "/usr/share/dict/ngerman"

MEAN_WORDS = 25.0
SIGMA = 0.75          # log-normal spread of the sentence length in words
LONG_RATE = 0.004     # share of document-like lines (a web-crawl artefact)
# --stats wmt17
WMT17_MEAN_WORDS = 23.0
WMT17_MUTATE = 0.08   # share of words given 1-4 random letters more
LETTERS = "abcdefghijklmnopqrstuvwxyz"


def english_words():
    words = []
    for name in sorted(os.listdir(ENGLISH_DIR)):
        path = os.path.join(ENGLISH_DIR, name)
        if os.path.islink(path) or not os.path.isfile(path):
            continue  # GPL -> GPL-3 and friends: read each text once
        with open(path, encoding="utf-8", errors="replace") as f:
            words.extend(w for w in f.read().split() if re.search(r"\w", w))
    if len(words) < 1000:
        sys.exit(f"generate_wmt: too little English text in {ENGLISH_DIR}")
    return words


def german_words():
    try:
        with open(GERMAN_WORDS, encoding="utf-8") as f:
            words = [w.strip() for w in f if w.strip() and "'" not in w]
    except FileNotFoundError:
        sys.exit(f"generate_wmt: {GERMAN_WORDS} is missing "
                 "(Debian package wngerman; scripts/install-deps.sh)")
    return words


def by_length(german):
    """The German words grouped by their length in characters."""
    groups = {}
    for w in german:
        groups.setdefault(len(w), []).append(w)
    return groups


def germanize(word, german, first, lengths=None):
    """The German word standing for an English one, punctuation kept.
    lengths (by_length's groups, --stats wmt17): a word of the English
    one's length or up to 2 letters longer."""
    m = re.match(r"^(\W*)(.*?)(\W*)$", word)
    lead, core, trail = m.groups()
    if not core:
        return word
    h = int.from_bytes(hashlib.blake2b(core.lower().encode(),
                                       digest_size=8).digest(), "little")
    if lengths is None:
        g = german[h % len(german)]
    else:
        words = (lengths.get(len(core) + h % 3) or lengths.get(len(core))
                 or german)
        g = words[(h >> 2) % len(words)]
    if first:
        g = g[:1].upper() + g[1:]
    return lead + g + trail


def sentence_length(rng, mean_words=MEAN_WORDS):
    if rng.random() < LONG_RATE:
        return rng.randint(200, 600)
    mu = math.log(mean_words) - SIGMA * SIGMA / 2  # mean of the log-normal
    return max(1, min(180, int(round(rng.lognormvariate(mu, SIGMA)))))


def mutated(words, rng):
    """words, 8 % of them with 1-4 random letters more; and those letters
    (empty for the others)."""
    out, suffixes = [], []
    for w in words:
        suffix = ""
        if w.isalpha() and rng.random() < WMT17_MUTATE:
            suffix = "".join(rng.choice(LETTERS)
                             for _ in range(rng.randint(1, 4)))
        out.append(w + suffix)
        suffixes.append(suffix)
    return out, suffixes


def make_pairs(n, rng, english, german, stats="small"):
    pairs = []
    lengths = by_length(german) if stats == "wmt17" else None
    for _ in range(n):
        if stats == "wmt17":
            length = sentence_length(rng, WMT17_MEAN_WORDS)
        else:
            length = sentence_length(rng)
        start = rng.randrange(0, len(english) - length)
        en_words = english[start:start + length]
        if stats == "wmt17":
            de_words = [germanize(w, german, i == 0, lengths)
                        for i, w in enumerate(en_words)]
            en_words, suffixes = mutated(en_words, rng)
            de_words = [d + x for d, x in zip(de_words, suffixes)]
        else:
            de_words = [germanize(w, german, i == 0)
                        for i, w in enumerate(en_words)]
        en = " ".join(en_words)
        en = en[:1].upper() + en[1:]
        pairs.append((" ".join(de_words).encode(), en.encode()))
    return pairs


def write_split(out, split, pairs, shards):
    d = wmt_data.tfds_dir(out, split)
    os.makedirs(d, exist_ok=True)
    for k in range(shards):
        lo, hi = k * len(pairs) // shards, (k + 1) * len(pairs) // shards
        records = [wmt_data.encode_example({"de": de, "en": en})
                   for de, en in pairs[lo:hi]]
        wmt_data.write_tfrecord(
            os.path.join(d, wmt_data.tfds_shard_name(split, k, shards)),
            records)
    for side, lang in ((0, "de"), (1, "en")):
        with open(os.path.join(out, f"{split}.{lang}"), "wb") as f:
            for p in pairs:
                f.write(p[side] + b"\n")


def main():
    ap = generator_cli.parser(__doc__, "--out", train=3000, validation=300,
                              test=300, shards=16, seed=0)
    ap.add_argument("--stats", choices=("small", "wmt17"), default="small",
                    help="sizes: small (tests, demos) or wmt17 (WMT17's, "
                    "for benchmarks; see above)")
    args = ap.parse_args()
    english, german = english_words(), german_words()
    os.makedirs(args.out, exist_ok=True)
    for i, (split, n, shards) in enumerate((
            ("train", args.train, args.shards),
            ("validation", args.validation, 1),
            ("test", args.test, 1))):
        rng = random.Random(f"{args.seed}/{split}")
        write_split(args.out, split,
                    make_pairs(n, rng, english, german, args.stats), shards)
    print(f"generate_wmt: {args.train}/{args.validation}/{args.test} pairs "
          f"in {args.out}")


if __name__ == "__main__":
    main()
