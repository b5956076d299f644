#!/usr/bin/python3
"""Generates a WMT17-sized German/English text set fast (numpy, minutes).

WMT17 de-en train has 5.9 M aligned pairs, about 2 GB of text, and a long
vocabulary tail (names, numbers, compounds, typos). Here: English words
drawn from a Zipf law over the words of Debian's licence texts, each with
an aligned German word chosen by hash from /usr/share/dict/ngerman (as
workloads/wmt/tools/generate_wmt.py does), and a share of the tokens
(--mutate, default 0.08) replaced by mutated words (a base word plus 1-4
random letters, from a pool of --tail distinct forms), most of which occur
only a few times: SentencePiece sees a long tail, as on the real data.
Sentence lengths are log-normal around 16 words (German dictionary words
are long: ~170 bytes a side, 2 GB for 5.9 M pairs, as WMT17), with WMT's rare
document-like lines of 200-600 words.

Writes, under --out: train.de, train.en (one sentence per line, aligned).
The output depends only on the arguments and the two word lists.

    make_wmt_scale.py --out DIR [--pairs 5900000] [--seed 0]
"""

import hashlib
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "workloads", "wmt", "tools"))
sys.path.insert(0, os.path.join(HERE, "..", "workloads", "common"))
import generate_wmt  # noqa: E402
import generator_cli  # noqa: E402

MEAN_WORDS = 16.0  # ~170 bytes a side: 2 GB at 5.9 M pairs
SIGMA = 0.75
LONG_RATE = 0.004
CHUNK = 100_000  # sentences per numpy pass (bounded memory)


def german_of(word, german):
    h = int.from_bytes(hashlib.blake2b(word.lower().encode(),
                                       digest_size=8).digest(), "little")
    return german[h % len(german)]


def table(words):
    """Every word + ' ' as one byte array, with starts and lengths."""
    encoded = [w.encode() + b" " for w in words]
    lengths = np.array([len(b) for b in encoded], dtype=np.int64)
    starts = np.zeros(len(encoded), dtype=np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    return np.frombuffer(b"".join(encoded), dtype=np.uint8), starts, lengths


def gather(blob, starts, lengths, ids, last):
    """The bytes of words `ids`, the last word of each sentence (mask
    `last`) ending in '\\n' instead of ' '."""
    wl = lengths[ids]
    total = int(wl.sum())
    ends = np.cumsum(wl)
    first = ends - wl
    offsets = np.arange(total, dtype=np.int64) - np.repeat(first, wl)
    out = blob[np.repeat(starts[ids], wl) + offsets]
    out[ends[last] - 1] = ord("\n")
    return out


def main():
    args = generator_cli.parser(__doc__, "--out", pairs=5_900_000,
                                mutate=0.08, tail=2_000_000,
                                seed=0).parse_args()
    t0 = time.monotonic()
    rng = np.random.default_rng(args.seed)

    english = sorted(set(w.strip(".,;:()\"'[]") for w in
                         generate_wmt.english_words()) - {""})
    german = generate_wmt.german_words()
    # The tail: mutated forms of random base words.
    letters = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz", dtype=np.uint8)
    bases = rng.integers(0, len(english), args.tail)
    suffix_len = rng.integers(1, 5, args.tail)
    suffix = letters[rng.integers(0, 26, (args.tail, 4))]
    en_words, de_words = list(english), [german_of(w, german) for w in english]
    for b, n, s in zip(bases.tolist(), suffix_len.tolist(), suffix):
        tail = s[:n].tobytes().decode()
        en_words.append(english[b] + tail)
        de_words.append(de_words[b] + tail)
    en_blob, en_starts, en_lengths = table(en_words)
    de_blob, de_starts, de_lengths = table(de_words)
    # Zipf weights over the base words (rank order is a fixed shuffle).
    zipf = 1.0 / np.arange(1, len(english) + 1) ** 1.05
    zipf = rng.permutation(zipf / zipf.sum())
    zipf_cdf = np.cumsum(zipf)
    print(f"make_wmt_scale: {len(english)} base words, {args.tail} tail "
          f"forms ({time.monotonic() - t0:.1f} s)", file=sys.stderr)

    os.makedirs(args.out, exist_ok=True)
    mu = np.log(MEAN_WORDS) - SIGMA * SIGMA / 2
    with open(os.path.join(args.out, "train.en.tmp"), "wb") as f_en, \
            open(os.path.join(args.out, "train.de.tmp"), "wb") as f_de:
        for lo in range(0, args.pairs, CHUNK):
            n = min(CHUNK, args.pairs - lo)
            lengths = np.clip(np.rint(rng.lognormal(mu, SIGMA, n)), 1, 180)
            long = rng.random(n) < LONG_RATE
            lengths[long] = rng.integers(200, 601, int(long.sum()))
            lengths = lengths.astype(np.int64)
            words = int(lengths.sum())
            ids = np.searchsorted(zipf_cdf, rng.random(words) * zipf_cdf[-1])
            ids = np.minimum(ids, len(english) - 1)
            mutated = rng.random(words) < args.mutate
            ids[mutated] = len(english) + rng.integers(0, args.tail,
                                                       int(mutated.sum()))
            last = np.zeros(words, dtype=bool)
            last[np.cumsum(lengths) - 1] = True
            f_en.write(gather(en_blob, en_starts, en_lengths, ids,
                              last).tobytes())
            f_de.write(gather(de_blob, de_starts, de_lengths, ids,
                              last).tobytes())
            if (lo // CHUNK) % 10 == 0:
                print(f"make_wmt_scale: {lo + n} pairs "
                      f"({time.monotonic() - t0:.0f} s)", file=sys.stderr)
    for lang in ("en", "de"):
        os.replace(os.path.join(args.out, f"train.{lang}.tmp"),
                   os.path.join(args.out, f"train.{lang}"))
    size = sum(os.path.getsize(os.path.join(args.out, f"train.{lang}"))
               for lang in ("en", "de"))
    print(f"make_wmt_scale: {args.pairs} pairs, {size / 1e9:.2f} GB in "
          f"{time.monotonic() - t0:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
