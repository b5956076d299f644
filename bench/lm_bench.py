"""finewebedu_lm: batchd against AlgoPerf's per-rank pipeline
(bench/lm_algoperf.py: datasets + tf.data) on the same cores, alternating
runs, medians. Windows/s per core (one core: taskset, a daemon of one
thread), the first batch of a never-seen set (a new daemon and stream; the
shards' pages dropped with posix_fadvise where the user may), and threads
and peak RSS: the daemon's at W=1 and W=8 against the sum over AlgoPerf's
W processes (each runs the whole pipeline with b = B / W and keeps every
W-th batch).

usage: BATCHD_BIN=build/server/batchd PYTHONPATH=build/python \
  python3 bench/lm_bench.py DATA_ROOT [--windows 20000] [--runs 3]
DATA_ROOT holds finewebedu_lm/ (make_finewebedu_lm.py).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from procstat import drop_pages, status
from ref_python import REF_PYTHON, quiet_env

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))
B = 64


def run_batchd(root, world, windows, run):
    import batchd
    from batchd_daemon import Daemon
    drop_pages(os.path.join(root, "finewebedu_lm"))
    d = Daemon(root, f"/tmp/lm-bench-{os.getpid()}-{run}.log", threads=1)
    subprocess.run(["taskset", "-a", "-p", "-c", "0", str(d.proc.pid)],
                   capture_output=True)
    try:
        t0 = time.monotonic()
        ls = [batchd.Loader(f"bench{run}-{world}", B, workload="finewebedu_lm",
                            data="finewebedu_lm", split="train", seed=run,
                            world_size=world, rank=r, server=d.address,
                            timeout=600.0) for r in range(world)]
        for l in ls:
            l.next_batch()
        first = time.monotonic() - t0
        t1 = time.monotonic()
        n = 0
        while n < windows:
            for l in ls:
                l.next_batch()
            n += B
        rate = n / (time.monotonic() - t1)
        st = status(d.proc.pid)
        threads, rss = st["threads"], st["hwm"]
        for l in ls:
            l.close()
    finally:
        d.stop()
    return {"windows_per_s": rate, "first_batch_s": first,
            "threads": threads, "peak_rss": rss}


def run_algoperf(root, world, windows):
    folder = os.path.join(root, "finewebedu_lm", "train")
    drop_pages(os.path.join(root, "finewebedu_lm"))
    t0 = time.monotonic()
    procs = [subprocess.Popen(["taskset", "-c", "0", REF_PYTHON,
                               os.path.join(HERE, "lm_algoperf.py"), folder,
                               str(B // world), str(world), str(r),
                               str(windows // world)],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              text=True, env=quiet_env())
             for r in range(world)]
    outs = [json.loads(p.communicate()[0].strip().splitlines()[-1])
            for p in procs]
    wall = time.monotonic() - t0
    return {"windows_per_s": min(o["windows_per_s"] for o in outs) * world,
            "first_batch_s": max(o["first_batch_s"] for o in outs),
            "threads": sum(o["threads"] for o in outs),
            "peak_rss": sum(o["peak_rss"] for o in outs), "wall_s": wall}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    ap.add_argument("--windows", type=int, default=20000)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    res = {}
    for run in range(a.runs):
        for world in (1, 8):
            res.setdefault(("batchd", world), []).append(
                run_batchd(a.root, world, a.windows, run))
            res.setdefault(("algoperf", world), []).append(
                run_algoperf(a.root, world, a.windows))
    print("one core (taskset -c 0), B = 64, medians of", a.runs, "runs")
    print(f"{'pipeline':10} {'W':>2} {'windows/s':>10} {'first batch s':>14} "
          f"{'threads':>8} {'peak RSS MiB':>13}")
    for (name, world), rows in sorted(res.items()):
        med = {k: statistics.median(r[k] for r in rows)
               for k in ("windows_per_s", "first_batch_s", "threads",
                         "peak_rss")}
        print(f"{name:10} {world:>2} {med['windows_per_s']:>10.0f} "
              f"{med['first_batch_s']:>14.2f} {med['threads']:>8.0f} "
              f"{med['peak_rss'] / 2**20:>13.1f}")


if __name__ == "__main__":
    main()
