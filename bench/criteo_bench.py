"""criteo1tb: batchd against AlgoPerf's TF pipeline (bench/criteo_tf.py)
on the same cores, alternating runs, medians. Both run on a fixed number
of threads (taskset to as many cores); rows/s per core and the first
batch of a never-seen set (batchd: a new daemon and stream over files
whose pages are dropped where the user may, else merely unread by it).

usage: BATCHD_BIN=build/server/batchd PYTHONPATH=build/python \
  python3 bench/criteo_bench.py DATA_ROOT [--cores 1] [--rows 2000000]
DATA_ROOT holds criteo1tb/ (make_criteo1tb.py).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))
REF_PY = "/var/cache/batchd-ci/venv-ref-3.12/bin/python"


def run_batchd(root, cores, batch, rows, run):
    import batchd
    from batchd_daemon import Daemon
    cpus = ",".join(str(c) for c in range(cores))
    d = Daemon(root, f"/tmp/criteo-bench-{os.getpid()}-{run}.log",
               threads=cores)
    subprocess.run(["taskset", "-a", "-p", "-c", cpus, str(d.proc.pid)],
                   capture_output=True)
    try:
        t0 = time.monotonic()
        l = batchd.Loader(f"bench{run}", batch, workload="criteo1tb",
                          data="criteo1tb", split="train", seed=run,
                          server=d.address, timeout=600.0)
        l.next_batch()
        first = time.monotonic() - t0
        t1 = time.monotonic()
        n = 0
        while n < rows:
            l.next_batch()
            n += batch
        rate = n / (time.monotonic() - t1)
        l.close()
    finally:
        d.stop()
    return {"rows_per_s": rate, "first_batch_s": first}


def run_tf(root, cores, batch, rows):
    files = sorted(os.path.join(root, "criteo1tb", f)
                   for f in os.listdir(os.path.join(root, "criteo1tb"))
                   if int(f.split("_")[1]) <= 22)
    cpus = ",".join(str(c) for c in range(cores))
    out = subprocess.run(["taskset", "-c", cpus, REF_PY,
                          os.path.join(HERE, "criteo_tf.py"), str(cores),
                          str(batch), str(rows), *files],
                         capture_output=True, text=True, check=True,
                         env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    ap.add_argument("--cores", type=int, default=1)
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--batch", type=int, default=8192)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    res = {"batchd": [], "tf": []}
    for run in range(a.runs):
        res["batchd"].append(run_batchd(a.root, a.cores, a.batch, a.rows, run))
        res["tf"].append(run_tf(a.root, a.cores, a.batch, a.rows // 4))
        print(json.dumps({k: v[-1] for k, v in res.items()}), flush=True)
    for k, v in res.items():
        rate = statistics.median(r["rows_per_s"] for r in v)
        first = statistics.median(r["first_batch_s"] for r in v)
        print(f"{k}: {rate:,.0f} rows/s on {a.cores} core(s) = "
              f"{rate / a.cores:,.0f} rows/s/core; first batch {first:.2f} s")
    # Each run's batchd against the TF run beside it: the median of those
    # ratios, and their range.
    ratios = sorted(b["rows_per_s"] / t["rows_per_s"]
                    for b, t in zip(res["batchd"], res["tf"]))
    ratio = statistics.median(ratios)
    print(f"batchd / tf: {ratio:.1f}x (median of {len(ratios)} runs' ratios; "
          f"{ratios[0]:.1f}x to {ratios[-1]:.1f}x); 8 cores by extrapolation: "
          f"{8 * statistics.median(r['rows_per_s'] for r in res['batchd']) / a.cores:,.0f} rows/s")


if __name__ == "__main__":
    main()
