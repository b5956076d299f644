#!/usr/bin/env python3
"""Writes a small Criteo 1TB data set in AlgoPerf's on-disk layout.

AlgoPerf's dataset_setup.py unzips day_D.gz and splits it into files of
5,000,000 lines named day_{D}_{NN} (two-digit NN, no extension) in one
folder: 40 tab-separated fields per line (label, 13 integer counts that may
be empty and, for I2, negative, 26 categorical fields of 8 lowercase hex
characters or empty), '\\n' line ends. This writes the same, deterministic
from --seed: --train-days days of --files-per-day files each (0..22), and
day 23's 36 files (test day_23_00..18, validation day_23_19..35), each
file --lines lines (a day's last file shorter). numpy only.

--pool K draws every line from a pool of K distinct lines (fast: for
scale runs of tens of millions of lines).
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
CAT_VOCAB = [1400, 550, 100000, 50000, 300, 20, 12000, 600, 3, 60000,
             5000, 90000, 3000, 27, 14000, 80000, 10, 5000, 2100, 4,
             90000, 17, 15, 50000, 100, 40000]


def make_lines(rng, n):
    """n lines as a list of bytes (without '\\n')."""
    cols = []
    cols.append((rng.random(n) < 0.03).astype(np.int64).astype(str))
    for i in range(13):
        v = np.floor(rng.lognormal(1.5, 2.0, n)).astype(np.int64)
        s = v.astype(str).astype(object)
        if i == 1:  # I2: negatives, the literal -1 among them
            neg = rng.random(n) < 0.1
            s[neg] = (-rng.integers(1, 4, n)[neg]).astype(str)
        s[rng.random(n) < DENSE_EMPTY[i]] = ''
        s[rng.random(n) < 0.01] = '-1'
        cols.append(s)
    for i in range(26):
        # Zipf-like draws over the column's vocabulary of 8-hex strings.
        k = np.minimum(rng.zipf(1.3, n) - 1, CAT_VOCAB[i] - 1)
        h = (k * 2654435761 + i * 97 + 12345) & 0xffffffff
        s = np.char.mod('%08x', h).astype(object)
        s[rng.random(n) < CAT_EMPTY[i]] = ''
        cols.append(s)
    rows = zip(*cols)
    return ['\t'.join(r).encode() for r in rows]


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
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    os.makedirs(a.out, exist_ok=True)
    pool = make_lines(rng, a.pool) if a.pool else None
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
        if pool is not None:
            lines = [pool[i] for i in rng.integers(0, len(pool), n)]
        else:
            lines = make_lines(rng, n)
        with open(os.path.join(a.out, name), 'wb') as f:
            f.write(b'\n'.join(lines) + (b'\n' if lines else b''))


if __name__ == '__main__':
    main()
