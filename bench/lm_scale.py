"""finewebedu_lm at scale: a set of >= 1 G tokens written with pyarrow
(rows of 2,049 tokens, record batches of 1,000 rows, as datasets writes
them) in DIR/finewebedu_lm/{train,val}, then a daemon over it: the first
batch of a train stream (opening reads metadata only), a resume far into
the epoch (start_step near its end: O(1), nothing replayed), and the
daemon's peak RSS. DIR is deleted after unless --keep.

usage: BATCHD_BIN=build/server/batchd PYTHONPATH=build/python \
  python3 bench/lm_scale.py DIR [--tokens 1100000000] [--shards 8]
(the set is written with the Python of scripts/reference-venv.sh)
"""
import argparse
import os
import shutil
import subprocess
import sys
import time

from procstat import status
from ref_python import REF_PYTHON

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))

WRITER = r'''
import os, sys
import numpy as np
import pyarrow as pa
out, rows, shards = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
os.makedirs(out, exist_ok=True)
rng = np.random.default_rng(0)
per = -(-rows // shards)
schema = pa.schema([("input_ids", pa.list_(pa.int32()))])
for s in range(shards):
    n = min(per, rows - s * per)
    path = os.path.join(out, f"data-{s:05d}-of-{shards:05d}.arrow")
    with pa.OSFile(path, "wb") as f, pa.ipc.new_stream(f, schema) as w:
        for b in range(0, n, 1000):
            k = min(1000, n - b)
            vals = pa.array(rng.integers(0, 50257, k * 2049, dtype=np.int32))
            offs = pa.array(np.arange(0, (k + 1) * 2049, 2049, dtype=np.int32))
            w.write_batch(pa.record_batch(
                [pa.ListArray.from_arrays(offs, vals)], schema=schema))
'''


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--tokens", type=int, default=1_100_000_000)
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    import batchd
    from batchd_daemon import Daemon
    lm = os.path.join(a.dir, "finewebedu_lm")
    rows = -(-a.tokens // 2049)
    try:
        t = time.monotonic()
        subprocess.run([REF_PYTHON, "-c", WRITER, os.path.join(lm, "train"),
                        str(rows), str(a.shards)], check=True)
        subprocess.run([REF_PYTHON, "-c", WRITER, os.path.join(lm, "val"),
                        "4881", "1"], check=True)
        print(f"wrote {rows} rows ({rows * 2049 / 1e9:.2f} G tokens) in "
              f"{time.monotonic() - t:.0f} s")
        for dirpath, _, names in os.walk(lm):
            for n in names:
                fd = os.open(os.path.join(dirpath, n), os.O_RDONLY)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                os.close(fd)
        d = Daemon(a.dir, os.path.join(a.dir, "batchd.log"), threads=2)
        try:
            t0 = time.monotonic()
            l = batchd.Loader("scale", 64, workload="finewebedu_lm",
                              data="finewebedu_lm", split="train", seed=1,
                              server=d.address, timeout=600.0)
            _, info = l.next_batch()
            print(f"first batch {time.monotonic() - t0:.2f} s")
            l.close()
            windows = rows * 2049 // 1025
            far = windows // 64 - 2
            t0 = time.monotonic()
            l = batchd.Loader("scale-far", 64, workload="finewebedu_lm",
                              data="finewebedu_lm", split="train", seed=1,
                              server=d.address, timeout=600.0,
                              start_step=far)
            l.next_batch()
            print(f"resume at step {far} of {windows // 64}: first batch "
                  f"{time.monotonic() - t0:.2f} s")
            for _ in range(200):
                l.next_batch()
            l.close()
            print(f"daemon peak RSS "
                  f"{status(d.proc.pid)['hwm'] / 2 ** 20:.1f} MiB")
        finally:
            d.stop()
    finally:
        if not a.keep:
            shutil.rmtree(a.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
