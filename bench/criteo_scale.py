"""criteo1tb at scale: a train set of tens of millions of lines
(make_criteo1tb.py --pool), served by a new daemon: time to the first
batch of a set it has never seen (the files' pages dropped from the page
cache with posix_fadvise first), rows/s over N steps, then a second new
daemon resuming at step N + 1 from the cursor of step N (state_dict's
way) with an empty --cache-dir, and two resuming from the step alone, with
the first daemon's --cache-dir (where the block line counts are kept) and
with an empty one (it counts the epoch up to the step), the pages dropped
again before each; each daemon's peak RSS (VmHWM).

usage: BATCHD_BIN=build/server/batchd PYTHONPATH=build/python \
  python3 bench/criteo_scale.py DATA_ROOT [--steps 120] [--batch 262144]
"""
import argparse
import os
import sys
import time

from procstat import drop_pages, status

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))


def serve(root, batch, threads, steps, cache, **kw):
    import batchd
    from batchd_daemon import Daemon
    d = Daemon(root, f"/tmp/criteo-scale-{os.getpid()}.log", threads=threads,
               args=("--cache-dir", cache))
    try:
        t0 = time.monotonic()
        l = batchd.Loader("scale", batch, workload="criteo1tb",
                          data="criteo1tb", split="train", seed=1,
                          server=d.address, timeout=600.0, **kw)
        _, info = l.next_batch()
        first = time.monotonic() - t0
        cursors = [info.cursor]
        t1 = time.monotonic()
        for _ in range(steps):
            _, info = l.next_batch()
            cursors.append(info.cursor)
        rate = steps * batch / (time.monotonic() - t1) if steps else 0
        l.close()
        return first, rate, cursors, status(d.proc.pid)["hwm"] / 2 ** 20
    finally:
        d.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--batch", type=int, default=262144)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    folder = os.path.join(a.root, "criteo1tb")
    size = sum(os.path.getsize(os.path.join(folder, f))
               for f in os.listdir(folder))
    print(f"set: {size / 1e9:.1f} GB in {len(os.listdir(folder))} files")
    import tempfile
    kept = tempfile.mkdtemp(prefix="criteo-scale-cache-")
    drop_pages(folder)
    first, rate, cursors, rss = serve(a.root, a.batch, a.threads, a.steps,
                                      kept)
    print(f"never-seen set: first batch {first:.2f} s; {rate:,.0f} rows/s "
          f"over {a.steps} steps on {a.threads} threads; peak RSS "
          f"{rss:.0f} MiB")
    far = cursors[-1]
    print(f"cursor of step {far.step}: {tuple(far)}")
    resumes = [
        ("from its cursor, new --cache-dir (nothing counted before)",
         tempfile.mkdtemp(prefix="criteo-scale-cache-"),
         {"start_cursor": far}),
        ("from the step alone, same --cache-dir (counts kept)", kept, {}),
        ("from the step alone, new --cache-dir (counts the epoch so far)",
         tempfile.mkdtemp(prefix="criteo-scale-cache-"), {}),
    ]
    batches = []
    for what, cache, kw in resumes:
        drop_pages(folder)
        first, _, got, rss = serve(a.root, a.batch, a.threads, 0, cache,
                                   start_step=far.step + 1, **kw)
        batches.append(got[0])
        print(f"resume at step {far.step + 1} {what}: first batch "
              f"{first:.2f} s; peak RSS {rss:.0f} MiB")
    print(f"same batch every way: {all(b == batches[0] for b in batches)}")

if __name__ == "__main__":
    main()
