#!/usr/bin/python3
"""fastmri: batchd's daemon against AlgoPerf's pipeline, side by side on the
same cores, slices per CPU-second (per core), and the daemon's threads and
RSS at W = 1 and W = 8.

    fastmri_bench.py [--volumes N] [--slices MIN MAX] [--global-batch B]
                     [--steps K] [--rounds R] [--data DIR] [--no-cache]
                     [--chunked]

Makes DIR/fastmri (workloads/fastmri/make_fastmri.py: N train volumes of 30
to 42 slices, 36 on average as the release's, widths 368 and 372, all
contiguous; --chunked: DIR/fastmri-chunked, all chunked and
gzip-compressed, so that every slice batchd serves is read by libhdf5 in
the stream owner's HDF5 helper) unless it is there, then
alternates R rounds of batchd at W = 1, algoperf, batchd at W = 8:
- algoperf: AlgoPerf's fastMRI train input pipeline re-written from its
  documented behaviour, in the reference venv (scripts/reference-venv.sh):
  tf.data from_tensor_slices(the train .h5 paths), interleave of one
  from_generator per file (h5py, a slice at a time: k-space, its shape,
  reconstruction_esc, attrs max) with cycle_length 32, block_length 64,
  16 parallel calls; ds.cache() of the raw slices (KEPT, as AlgoPerf's
  train split has it: the timed batches come from RAM, not from h5py, so
  its warm-up is one epoch more than batchd's; --no-cache drops it);
  enumerate; map(16 parallel calls) of the per-slice transform (column mask
  of centre fraction 0.08 and acceleration 4, uniforms from
  stateless_uniform with a seed folded in with the slice's index; masked
  k-space, ifftshift, ifft2d, fftshift, times sqrt(640 W), 320 x 320 centre
  crop, magnitude, normalised by its own mean and std and clipped to
  [-6, 6], the target with the same statistics); shuffle(16 B); repeat;
  batch(B, drop_remainder); prefetch(10); numpy batches. One process, as
  AlgoPerf's rank 0 runs it for the global batch before its broadcast
  (the same whatever W, so it runs once per round). Its CPU time is the
  process's (user + system, all threads) over the timed batches.
- batchd: a fresh daemon per run (--threads 2) serving the train split to
  W ranks (one Loader each, numpy, read round-robin from this process),
  --warmup untimed global batches, then --steps timed; its CPU time is
  the daemon's and its HDF5 helper's (none used on contiguous files after
  the split opens). Slices counted: B per global batch.
Prints one JSON line per run and a summary (medians); the machine may be
shared, so rates are per CPU-second of the pipeline's own processes.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

from procstat import cpu_seconds, descendants, status
from ref_python import run_pipeline

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

ALGOPERF = r'''
import glob, json, os, sys, time
import h5py
import numpy as np
import tensorflow as tf
data, B, warmup, steps, cache = (sys.argv[1], int(sys.argv[2]),
                                 int(sys.argv[3]), int(sys.argv[4]),
                                 sys.argv[5] == "1")
paths = sorted(glob.glob(os.path.join(data, "knee_singlecoil_train", "*.h5")))
slices = 0
for p in paths:
    with h5py.File(p, "r") as f:
        slices += f["kspace"].shape[0]
epoch_batches = slices // B
# With the cache, the first epoch reads the files and fills it (the 16 B
# shuffle buffer holds at least an epoch of this small set); time after it.
if cache:
    warmup += epoch_batches + 1

def volume_slices(path):
    with h5py.File(path, "r") as f:
        kspace, target = f["kspace"], f["reconstruction_esc"]
        vmax = np.float32(f.attrs.get("max", 0.0))
        for i in range(kspace.shape[0]):
            k = kspace[i]
            yield k, np.asarray(k.shape, np.int32), target[i], vmax

signature = (tf.TensorSpec((640, None), tf.complex64),
             tf.TensorSpec((2,), tf.int32),
             tf.TensorSpec((320, 320), tf.float32),
             tf.TensorSpec((), tf.float32))

def one_file(path):
    return tf.data.Dataset.from_generator(volume_slices, args=(path,),
                                          output_signature=signature)

SEED = tf.constant([7, 11], tf.int64)  # a fixed pair, as fold_in(rng, 0)

def transform(index, example):
    kspace, shape, target, vmax = example
    seed = tf.random.experimental.stateless_fold_in(SEED, index)
    width = shape[1]
    wf = tf.cast(width, tf.float32)
    low = tf.cast(wf * 0.08, tf.int32)
    start = (width - low + 1) // 2
    cols = tf.range(width)
    centre = tf.logical_and(cols >= start, cols < start + low)
    lowf = tf.cast(low, tf.float32)
    prob = (wf / 4.0 - lowf) / (wf - lowf)
    accel = tf.random.stateless_uniform(tf.reshape(width, [1]), seed) < prob
    mask = tf.cast(tf.logical_or(centre, accel), tf.complex64)[None, :]
    masked = kspace * mask + 0.0
    image = tf.signal.fftshift(
        tf.signal.ifft2d(tf.signal.ifftshift(masked, axes=(0, 1))),
        axes=(0, 1))
    image = image * tf.cast(tf.math.sqrt(tf.cast(640 * width, tf.float32)),
                            tf.complex64)
    c0 = (width - 320) // 2
    crop = image[160:480, c0:c0 + 320]
    mag = tf.math.sqrt(tf.math.real(crop) ** 2 + tf.math.imag(crop) ** 2)
    mean = tf.math.reduce_mean(mag)
    std = tf.math.reduce_std(mag)
    return {"inputs": tf.clip_by_value((mag - mean) / std, -6.0, 6.0),
            "targets": tf.clip_by_value((target - mean) / std, -6.0, 6.0),
            "mean": mean, "std": std, "volume_max": vmax}

ds = tf.data.Dataset.from_tensor_slices(paths)
ds = ds.interleave(one_file, cycle_length=32, block_length=64,
                   num_parallel_calls=16)
if cache:
    ds = ds.cache()
ds = ds.enumerate().map(transform, num_parallel_calls=16)
ds = ds.shuffle(16 * B, seed=2, reshuffle_each_iteration=True).repeat()
ds = ds.batch(B, drop_remainder=True).prefetch(10)
it = ds.as_numpy_iterator()
t_start = time.time()
for _ in range(warmup):
    next(it)
first = time.time() - t_start
t0, c0 = time.time(), os.times()
count = 0
for _ in range(steps):
    batch = next(it)
    count += batch["inputs"].shape[0]
    del batch
c1, wall = os.times(), time.time() - t0
status = dict(l.split(":", 1) for l in open("/proc/self/status") if ":" in l)
print(json.dumps({"slices": count, "wall": wall,
                  "cpu": (c1.user - c0.user) + (c1.system - c0.system),
                  "warmup_batches": warmup, "warmup_wall": first,
                  "epoch_slices": slices, "cache": cache,
                  "threads": int(status["Threads"]),
                  "rss_mb": int(status["VmRSS"].split()[0]) / 1024,
                  "hwm_mb": int(status["VmHWM"].split()[0]) / 1024}))
'''


def run_algoperf(data, b, warmup, steps, cache):
    r = run_pipeline("-c", ALGOPERF, data, str(b), str(warmup), str(steps),
                     "1" if cache else "0")
    return {"pipeline": "algoperf", "world": "-", "b": b, **r,
            "slices_per_s": r["slices"] / r["wall"],
            "slices_per_cpu_s": r["slices"] / r["cpu"]}


# The data set under --data that batchd serves (main() sets it).
DATA_NAME = "fastmri"


def run_batchd(root, b, world, warmup, steps, tag):
    """One run on a fresh daemon (no earlier stream's rings or read-ahead
    in its RSS or CPU time)."""
    from batchd_daemon import Daemon
    daemon = Daemon(root, os.path.join(root, "batchd.log"), threads=2)
    try:
        return measure_batchd(daemon, b, world, warmup, steps, tag)
    finally:
        daemon.stop()


def measure_batchd(daemon, b, world, warmup, steps, tag):
    import batchd
    loaders = [batchd.Loader(f"bench-{tag}", b, workload="fastmri",
                             data=DATA_NAME, split="train", world_size=world,
                             rank=k, seed=1, server=daemon.address,
                             format="numpy", timeout=600)
               for k in range(world)]
    pid = daemon.proc.pid
    # The first batches (opening the split) are not timed.
    for _ in range(warmup):
        for ld in loaders:
            ld.next_batch()
    c0, t0 = cpu_seconds(descendants([pid])), time.time()
    count = 0
    threads = rss = anon = helper_rss = 0
    for step in range(steps):
        for ld in loaders:
            batch, _ = ld.next_batch()
            count += batch["inputs"].shape[0]
            del batch
        st = status(pid)
        threads, rss = max(threads, st["threads"]), max(rss, st["rss"])
        anon = max(anon, st["anon"])
        helper_rss = max(helper_rss, sum(status(p)["rss"]
                                         for p in descendants([pid])[1:]))
    cpu, wall = cpu_seconds(descendants([pid])) - c0, time.time() - t0
    for ld in loaders:
        ld.close()
    if count != steps * b:
        raise RuntimeError(f"batchd delivered {count} slices, not {steps * b}")
    return {"pipeline": "batchd", "world": world, "b": b, "slices": count,
            "wall": wall, "cpu": cpu, "slices_per_s": count / wall,
            "slices_per_cpu_s": count / cpu, "threads": threads,
            "rss_mb": rss / 2 ** 20, "anon_mb": anon / 2 ** 20,
            "helper_rss_mb": helper_rss / 2 ** 20}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--volumes", type=int, default=20,
                    help="train volumes generated")
    ap.add_argument("--slices", type=int, nargs="+", default=[30, 42],
                    metavar="S", help="slices per generated volume: S, or "
                    "MIN MAX (the default: the release's train volumes "
                    "average 35.7)")
    ap.add_argument("--global-batch", type=int, default=32,
                    help="AlgoPerf's global batch for fastmri")
    ap.add_argument("--steps", type=int, default=60,
                    help="timed global batches per run")
    ap.add_argument("--warmup", type=int, default=3,
                    help="untimed global batches first (algoperf: plus an "
                         "epoch, which fills its cache)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-cache", action="store_true",
                    help="algoperf without its ds.cache() of raw slices")
    ap.add_argument("--data", default="/work/scratch-fastmri")
    ap.add_argument("--chunked", action="store_true",
                    help="volumes chunked and compressed (read by libhdf5)")
    a = ap.parse_args()
    global DATA_NAME
    DATA_NAME = "fastmri-chunked" if a.chunked else "fastmri"
    data = os.path.join(a.data, DATA_NAME)
    if len(a.slices) not in (1, 2):
        ap.error("--slices S or --slices MIN MAX")
    lo, hi = a.slices[0], a.slices[-1]
    # A set made before with other sizes is made again.
    stamp = os.path.join(data, f".made-{a.volumes}-{lo}-{hi}")
    if not os.path.exists(stamp):
        shutil.rmtree(data, ignore_errors=True)
        subprocess.run([sys.executable, os.path.join(
            REPO, "workloads", "fastmri", "make_fastmri.py"), data,
            "--train", str(a.volumes), "--val", "1", "--slices",
            str(lo), str(hi), "--widths", "368", "372",
            "--seed", "1", "--chunked-every", "1" if a.chunked else "0"],
            check=True)
        open(stamp, "w").close()
    os.environ.setdefault("BATCHD_BIN", os.path.join(REPO, "build", "server",
                                                     "batchd"))
    sys.path.insert(0, os.path.join(REPO, "tests", "python"))
    B = a.global_batch
    results = []
    for k in range(a.rounds):
        for side in ("batchd-1", "algoperf", "batchd-8"):
            if side == "algoperf":
                r = run_algoperf(data, B, a.warmup, a.steps, not a.no_cache)
            else:
                world = int(side.split("-")[1])
                r = run_batchd(a.data, B, world, a.warmup, a.steps,
                               f"{k}-{world}")
            r["round"] = k
            print(json.dumps(r), flush=True)
            results.append(r)

    def med(p, world, key):
        return statistics.median(r[key] for r in results
                                 if r["pipeline"] == p and r["world"] == world)

    print(f"\nmedians of {a.rounds} alternating rounds; global batch {B}, "
          f"{a.steps} timed batches; {os.cpu_count()} cores; algoperf "
          f"{'without' if a.no_cache else 'with'} ds.cache()")
    print(f"{'pipeline':9} {'W':>2} {'slices/CPU-s':>12} {'slices/s':>9} "
          f"{'threads':>7} {'RSS MB':>7}")
    ap_rate = med("algoperf", "-", "slices_per_cpu_s")
    for p, world in (("algoperf", "-"), ("batchd", 1), ("batchd", 8)):
        helper = (f"  (anonymous {med(p, world, 'anon_mb'):.0f} MB; "
                  f"+ HDF5 helper {med(p, world, 'helper_rss_mb'):.0f} MB)"
                  if p == "batchd" else
                  f"  (rank 0's one process; peak "
                  f"{med(p, world, 'hwm_mb'):.0f} MB)")
        print(f"{p:9} {world:>2} {med(p, world, 'slices_per_cpu_s'):12.1f} "
              f"{med(p, world, 'slices_per_s'):9.1f} "
              f"{med(p, world, 'threads'):7.0f} "
              f"{med(p, world, 'rss_mb'):7.0f}{helper}")
    for world in (1, 8):
        print(f"per CPU-second, W={world}: batchd / algoperf = "
              f"{med('batchd', world, 'slices_per_cpu_s') / ap_rate:.2f}x")


if __name__ == "__main__":
    main()
