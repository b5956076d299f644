#!/usr/bin/env python3
"""Writes a Criteo 1TB data set in AlgoPerf's on-disk layout, with the real
set's statistics.

AlgoPerf's dataset_setup.py unzips day_D.gz and splits it into files of
5,000,000 lines named day_{D}_{NN} (two-digit NN, no extension) in one
folder: 40 tab-separated fields per line (label, 13 integer counts that may
be empty and, for I2, negative, 26 categorical fields of 8 lowercase hex
characters or empty), '\\n' line ends. This writes the same, deterministic
from --seed: --train-days days of --files-per-day files each (0..22), and
day 23's 36 files (test day_23_00..18, validation day_23_19..35), each
file --lines lines (a day's last file shorter). numpy only.

What the lines hold (docs/criteo1tb.md, "Generated sets"):
- label 1 with probability 0.03;
- dense column j: empty with its share of DENSE_EMPTY, else a count whose
  log(1 + x) is normal with the median and quartiles of DENSE_QUARTILES
  (rough quartiles of Criteo's counts; heavy tails: I5 reaches millions),
  capped at DENSE_MAX; I2 is negative (-1..-3) in 10 % of lines;
- categorical column i: empty with its share of CAT_EMPTY, else one of
  CARDINALITY[i] distinct 8-hex values (AlgoPerf's _VOCAB_SIZES: 3 to
  ~40 M), the value of rank k drawn with probability ~ 1 / k^--zipf
  (default 1.1: the rarest of ~40 M values still occurs in a full
  4.2 G-line set), ranks mapped to 32-bit values by a per-column
  bijection.
Lines average about 240 bytes, as Criteo's do (1.1 TB / 4.37 G lines).

--pool K draws every line from a pool of K distinct lines (for scale runs
of tens of millions of lines: the categorical values then repeat far more
than Criteo's; per-core figures need a set without --pool).
"""
import argparse
import os

import numpy as np

# Share of empty dense / categorical fields per column (roughly Criteo's).
DENSE_EMPTY = [0.45, 0.0, 0.2, 0.2, 0.03, 0.22, 0.04, 0.0, 0.04, 0.45,
               0.04, 0.76, 0.2]
CAT_EMPTY = [0.0, 0.0, 0.03, 0.03, 0.0, 0.12, 0.0, 0.0, 0.0, 0.0, 0.0,
             0.03, 0.0, 0.0, 0.0, 0.03, 0.0, 0.0, 0.44, 0.44, 0.03, 0.76,
             0.0, 0.03, 0.44, 0.44]
# Quartiles (25 %, 50 %, 75 %) and maxima of the non-empty counts I1..I13.
DENSE_QUARTILES = [(0, 1, 3), (0, 3, 36), (2, 6, 18), (2, 4, 10),
                   (320, 2813, 10131), (8, 33, 102), (1, 3, 11), (2, 8, 19),
                   (10, 38, 110), (0, 1, 1), (1, 1, 3), (0, 0, 1), (2, 4, 10)]
DENSE_MAX = [5775, 257675, 65535, 969, 23159456, 431037, 56311, 6047, 29019,
             11, 231, 4008, 7393]
# Distinct values per categorical column: AlgoPerf's _VOCAB_SIZES.
CARDINALITY = [39884406, 39043, 17289, 7420, 20263, 3, 7120, 1543, 63,
               38532951, 2953546, 403346, 10, 2208, 11938, 155, 4, 976, 14,
               39979771, 25641295, 39664984, 585935, 12972, 108, 36]
POSITIVE = 0.03
CHUNK = 250_000  # lines rendered at once (memory: ~200 MB)


def zipf_ranks(rng, n, v, s):
    """n ranks in [0, v), rank k with probability ~ 1 / (k + 1)^s: the
    inverse of a power law's distribution function on [1, v + 1)."""
    u = rng.random(n)
    top = (v + 1.0) ** (1.0 - s) - 1.0
    x = (1.0 + u * top) ** (1.0 / (1.0 - s))
    return np.clip(np.floor(x).astype(np.int64) - 1, 0, v - 1)


def to_value(rank, column):
    """Rank -> 32-bit value, a bijection per column (distinct ranks give
    distinct values): an odd multiply, a column offset and xor-shifts."""
    x = (rank.astype(np.uint64) * np.uint64(2654435761)
         + np.uint64(column * 0x85EBCA6B + 0x6A09E667)) & np.uint64(0xFFFFFFFF)
    x ^= x >> np.uint64(15)
    x = (x * np.uint64(0x2C1B3C6D)) & np.uint64(0xFFFFFFFF)
    x ^= x >> np.uint64(12)
    return x


def make_fields(rng, n, zipf):
    """The fields of n lines, as pieces (chars uint8 [n, w], length [n]):
    a line is each piece's first `length` chars, in order."""
    pieces = []

    def number(v, present):
        """A decimal integer (sign and digits), or nothing."""
        neg = present & (v < 0)
        a = np.abs(v)
        digits = np.ones(n, np.int64)
        for p in range(1, 10):
            digits += a >= 10 ** p
        width = int(digits.max()) if n else 1
        j = np.arange(width)
        power = 10 ** np.clip(digits[:, None] - 1 - j, 0, None)
        chars = (a[:, None] // power % 10 + ord('0')).astype(np.uint8)
        pieces.append((np.full((n, 1), ord('-'), np.uint8), neg.astype(int)))
        pieces.append((chars, np.where(present, digits, 0)))

    def sep(c):
        pieces.append((np.full((n, 1), ord(c), np.uint8), np.ones(n, int)))

    number((rng.random(n) < POSITIVE).astype(np.int64), np.ones(n, bool))
    for j in range(13):
        q25, q50, q75 = (np.log1p(q) for q in DENSE_QUARTILES[j])
        sigma = max((q75 - q25) / 1.349, 0.3)
        v = np.floor(np.expm1(rng.normal(q50, sigma, n)) + 0.5).astype(np.int64)
        v = np.clip(v, 0, DENSE_MAX[j])
        if j == 1:  # I2: negatives, the literal -1 among them
            neg = rng.random(n) < 0.1
            v[neg] = -rng.integers(1, 4, n)[neg]
        sep('\t')
        number(v, rng.random(n) >= DENSE_EMPTY[j])
    hexdigits = np.frombuffer(b'0123456789abcdef', np.uint8)
    for i in range(26):
        value = to_value(zipf_ranks(rng, n, CARDINALITY[i], zipf), i)
        shifts = np.uint64(28) - np.uint64(4) * np.arange(8, dtype=np.uint64)
        nibbles = (value[:, None] >> shifts) & np.uint64(15)
        present = rng.random(n) >= CAT_EMPTY[i]
        sep('\t')
        pieces.append((hexdigits[nibbles.astype(np.int64)],
                       np.where(present, 8, 0)))
    sep('\n')
    return pieces


def render(pieces, rows):
    """The bytes of lines `rows` of `pieces`, each ending in '\\n'."""
    chars = np.concatenate([c[rows] for c, _ in pieces], axis=1)
    keep = np.concatenate([np.arange(c.shape[1])[None, :] < k[rows][:, None]
                           for c, k in pieces], axis=1)
    return chars[keep].tobytes()


def write_file(path, rng, n, zipf, pool):
    with open(path, 'wb') as f:
        for start in range(0, n, CHUNK):
            m = min(CHUNK, n - start)
            if pool is not None:
                f.write(render(pool, rng.integers(0, len(pool[0][1]), m)))
            else:
                f.write(render(make_fields(rng, m, zipf), np.arange(m)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--out', required=True)
    ap.add_argument('--seed', type=int, default=0)
    ap.add_argument('--train-days', default='0,1,22',
                    help='comma-separated days of 0..22')
    ap.add_argument('--files-per-day', type=int, default=2)
    ap.add_argument('--lines', type=int, default=50)
    ap.add_argument('--day23-lines', type=int, default=None,
                    help='lines per day-23 file (default: --lines)')
    ap.add_argument('--pool', type=int, default=0)
    ap.add_argument('--zipf', type=float, default=1.1,
                    help='exponent of the categorical values\' frequencies')
    a = ap.parse_args()
    if a.zipf <= 1.0:
        ap.error('--zipf must be above 1')
    rng = np.random.default_rng(a.seed)
    os.makedirs(a.out, exist_ok=True)
    pool = make_fields(rng, a.pool, a.zipf) if a.pool else None
    files = []
    for d in [int(x) for x in a.train_days.split(',') if x != '']:
        for k in range(a.files_per_day):
            last = k == a.files_per_day - 1
            files.append((f'day_{d}_{k:02d}',
                          a.lines - (a.lines // 3 if last else 0)))
    d23 = a.day23_lines if a.day23_lines is not None else a.lines
    for k in range(36):
        files.append((f'day_23_{k:02d}', d23 - (d23 // 3 if k == 35 else 0)))
    for name, n in files:
        write_file(os.path.join(a.out, name), rng, n, a.zipf, pool)


if __name__ == '__main__':
    main()
