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

Writes, under --out:
  wmt17_translate/de-en/1.0.0/wmt17_translate-train.tfrecord-NNNNN-of-SSSSS
  wmt14_translate/de-en/1.0.0/wmt14_translate-{validation,test}.tfrecord-00000-of-00001
  {train,validation,test}.{de,en}
The TFDS shards and the text files hold the same pairs in the same order.
The output depends only on the seed, the counts and the two input files.

    generate_wmt.py --out DIR [--train 3000] [--validation 300] [--test 300]
                    [--shards 16] [--seed 0]
"""

import argparse
import hashlib
import math
import os
import random
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wmt_data  # noqa: E402

ENGLISH_DIR = "/usr/share/common-licenses"
GERMAN_WORDS = "/usr/share/dict/ngerman"

MEAN_WORDS = 25.0
SIGMA = 0.75          # log-normal spread of the sentence length in words
LONG_RATE = 0.004     # share of document-like lines (a web-crawl artefact)


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


def germanize(word, german, first):
    """The German word standing for an English one, punctuation kept."""
    m = re.match(r"^(\W*)(.*?)(\W*)$", word)
    lead, core, trail = m.groups()
    if not core:
        return word
    h = int.from_bytes(hashlib.blake2b(core.lower().encode(),
                                       digest_size=8).digest(), "little")
    g = german[h % len(german)]
    if first:
        g = g[:1].upper() + g[1:]
    return lead + g + trail


def sentence_length(rng):
    if rng.random() < LONG_RATE:
        return rng.randint(200, 600)
    mu = math.log(MEAN_WORDS) - SIGMA * SIGMA / 2  # mean of the log-normal
    return max(1, min(180, int(round(rng.lognormvariate(mu, SIGMA)))))


def make_pairs(n, rng, english, german):
    pairs = []
    for _ in range(n):
        length = sentence_length(rng)
        start = rng.randrange(0, len(english) - length)
        en_words = english[start:start + length]
        de_words = [germanize(w, german, i == 0) for i, w in enumerate(en_words)]
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
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--train", type=int, default=3000)
    ap.add_argument("--validation", type=int, default=300)
    ap.add_argument("--test", type=int, default=300)
    ap.add_argument("--shards", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    english, german = english_words(), german_words()
    os.makedirs(args.out, exist_ok=True)
    for i, (split, n, shards) in enumerate((
            ("train", args.train, args.shards),
            ("validation", args.validation, 1),
            ("test", args.test, 1))):
        rng = random.Random(f"{args.seed}/{split}")
        write_split(args.out, split, make_pairs(n, rng, english, german),
                    shards)
    print(f"generate_wmt: {args.train}/{args.validation}/{args.test} pairs "
          f"in {args.out}")


if __name__ == "__main__":
    main()
