"""criteo1tb: batchd against AlgoPerf's TF pipeline (bench/criteo_tf.py:
its get_criteo1tb_dataset and _parse_example_fn, train split) on the same
cores, alternating runs, medians. Both run on a fixed number of threads
(taskset to as many cores); rows/s per core, rows per CPU second (the
daemon's; TF's whole process), and the first batch of a never-seen set
(batchd: a new daemon and stream).

usage: BATCHD_BIN=build-rel/server/batchd PYTHONPATH=build-rel/python \
  python3 bench/criteo_bench.py DATA_ROOT [--cores 1] [--rows 2000000]
DATA_ROOT holds criteo1tb/ (make_criteo1tb.py, with Criteo's statistics:
no --pool). A Release build: BATCHD_BUILD=build-rel scripts/build.sh
-DCMAKE_BUILD_TYPE=Release.
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
sys.path.insert(0, HERE)
from ref_python import run_pipeline  # noqa: E402


def run_batchd(root, cores, batch, rows, run):
    import batchd
    from batchd_daemon import Daemon
    from procstat import cpu_seconds
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
        t1, c1 = time.monotonic(), cpu_seconds([d.proc.pid])
        n = 0
        while n < rows:
            l.next_batch()
            n += batch
        rate = n / (time.monotonic() - t1)
        cpu = cpu_seconds([d.proc.pid]) - c1
        l.close()
    finally:
        d.stop()
    return {"rows_per_s": rate, "rows_per_cpu_s": n / max(cpu, 1e-9),
            "first_batch_s": first}


def run_tf(root, cores, batch, rows):
    cpus = ",".join(str(c) for c in range(cores))
    return run_pipeline(os.path.join(HERE, "criteo_tf.py"), str(cores),
                        str(batch), str(rows), os.path.join(root, "criteo1tb"),
                        cores=cpus)


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
        cpu = statistics.median(r["rows_per_cpu_s"] for r in v)
        first = statistics.median(r["first_batch_s"] for r in v)
        print(f"{k}: {rate:,.0f} rows/s on {a.cores} core(s) = "
              f"{rate / a.cores:,.0f} rows/s/core; {cpu:,.0f} rows per CPU "
              f"second; first batch {first:.2f} s")
    # Each run's batchd against the TF run beside it: the median of those
    # ratios, and their range.
    for key, what in (("rows_per_s", "per core"),
                      ("rows_per_cpu_s", "per CPU second")):
        ratios = sorted(b[key] / t[key]
                        for b, t in zip(res["batchd"], res["tf"]))
        print(f"batchd / tf, {what}: {statistics.median(ratios):.1f}x "
              f"(median of {len(ratios)} runs' ratios; {ratios[0]:.1f}x to "
              f"{ratios[-1]:.1f}x)")


if __name__ == "__main__":
    main()
