#!/usr/bin/python3
"""ogbg: batchd's daemon against AlgoPerf's pipeline, side by side on the
same cores, graphs per CPU-second (per core), and the daemon's threads and
RSS at W = 1 and W = 8.

    ogbg_bench.py [--graphs N] [--global-batch B] [--rounds K] [--data DIR]

Makes DIR/ogbg (workloads/ogbg/make_ogbg.py --stats molpcba: N train graphs
of ogbg-molpcba's sizes, 26 atoms and 28 bonds on average, in its 8 train
shards) unless it is there, then alternates K rounds of:
- algoperf: AlgoPerf's ogbg input pipeline re-written from its documented
  behaviour, in the reference venv (scripts/reference-venv.sh): tf.data
  TFRecordDataset over the 8 train shards (as TFDS reads them, with
  shuffle_files and a 2^15 shuffle buffer), parse with the TFDS feature
  spec, per graph a jraph.GraphsTuple with doubled edges, NaN labels as 0
  and their weights, jraph.dynamically_batch(26 b + 1, 56 b, b + 1) with
  b = B / W, numpy batches; one process, as rank 0 runs it (before its
  broadcast). Its CPU time is the process's (user + system, all threads).
- batchd: a daemon (--threads 2) serving the train split to W ranks
  (one Loader each, read round-robin from one process); its CPU time is
  the daemon's. Graphs counted are real graphs in the rows delivered.
Prints one JSON line per run and a summary (medians); the machine may be
shared, so rates are per CPU-second of the pipeline's own process.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from procstat import cpu_seconds, status
from ref_python import run_pipeline

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

ALGOPERF = r'''
import os, sys, time, json
import numpy as np
import tensorflow as tf
import jraph
data, graphs_wanted, b = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
d = os.path.join(data, "ogbg_molpcba", "0.1.3")
files = [os.path.join(d, f"ogbg_molpcba-train.tfrecord-{i:05d}-of-00008")
         for i in range(8)]
spec = {"num_nodes": tf.io.FixedLenFeature([1], tf.int64),
        "num_edges": tf.io.FixedLenFeature([1], tf.int64),
        "node_feat": tf.io.VarLenFeature(tf.float32),
        "edge_feat": tf.io.VarLenFeature(tf.float32),
        "edge_index": tf.io.VarLenFeature(tf.int64),
        "labels": tf.io.FixedLenFeature([128], tf.float32)}
def parse(r):
    ex = tf.io.parse_single_example(r, spec)
    return {k: (tf.sparse.to_dense(v) if isinstance(v, tf.SparseTensor) else v)
            for k, v in ex.items()}
ds = tf.data.Dataset.from_tensor_slices(files).shuffle(8, seed=1)
ds = ds.interleave(tf.data.TFRecordDataset, cycle_length=8,
                   num_parallel_calls=tf.data.AUTOTUNE, deterministic=False)
ds = ds.map(parse, num_parallel_calls=tf.data.AUTOTUNE)
ds = ds.shuffle(2 ** 15, seed=2).repeat().prefetch(tf.data.AUTOTUNE)
def to_jraph(ex):
    n = int(ex["num_nodes"][0]); e = int(ex["num_edges"][0])
    ei = ex["edge_index"].reshape(e, 2); ef = ex["edge_feat"].reshape(e, 3)
    return jraph.GraphsTuple(
        n_node=np.array([n]), n_edge=np.array([2 * e]),
        nodes=ex["node_feat"].reshape(n, 9), edges=np.concatenate([ef, ef]),
        senders=np.concatenate([ei[:, 0], ei[:, 1]]),
        receivers=np.concatenate([ei[:, 1], ei[:, 0]]),
        globals=ex["labels"][None])
def graphs():
    for ex in ds.as_numpy_iterator():
        yield to_jraph(ex)
t0 = time.time(); c0 = os.times()
count = 0
for batch in jraph.dynamically_batch(graphs(), n_node=26 * b + 1,
                                     n_edge=56 * b, n_graph=b + 1):
    labels = batch.globals
    weights = ~np.isnan(labels) & jraph.get_graph_padding_mask(batch)[:, None]
    targets = np.nan_to_num(labels)
    count += int(jraph.get_graph_padding_mask(batch).sum())
    if count >= graphs_wanted:
        break
c1 = os.times()
print(json.dumps({"graphs": count, "wall": time.time() - t0,
                  "cpu": (c1.user - c0.user) + (c1.system - c0.system)}))
'''


def run_algoperf(data, graphs, b):
    r = run_pipeline("-c", ALGOPERF, data, str(graphs), str(b))
    return {"pipeline": "algoperf", "b": b, **r,
            "graphs_per_cpu_s": r["graphs"] / r["cpu"]}


def run_batchd(daemon, data, graphs, global_rows, world, r, tag):
    import batchd
    loaders = [batchd.Loader(stream=f"bench-{tag}", global_batch_size=global_rows,
                             workload="ogbg", data="ogbg", split="train",
                             world_size=world, rank=k, seed=1,
                             server=daemon.address, format="numpy",
                             options={"graphs_per_row": r}, timeout=600)
               for k in range(world)]
    # The first batch (indexing the shards) is not timed.
    for ld in loaders:
        next(ld)
    c0, t0 = cpu_seconds([daemon.proc.pid], reaped=False), time.time()
    count = 0
    while count < graphs:
        for ld in loaders:
            batch = next(ld)
            n_node = batch["n_node"]
            # Real graphs: slots before each row's padding graph (its last
            # slot with nodes).
            for row in n_node:
                count += int(row.nonzero()[0][-1])
            del batch
    cpu = cpu_seconds([daemon.proc.pid], reaped=False) - c0
    wall = time.time() - t0
    st = status(daemon.proc.pid)
    threads, rss = st["threads"], st["rss"]
    for ld in loaders:
        ld.close()
    return {"pipeline": "batchd", "world": world, "graphs": count,
            "wall": wall, "cpu": cpu, "graphs_per_cpu_s": count / cpu,
            "daemon_threads": threads, "daemon_rss_mb": rss / 2 ** 20}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graphs", type=int, default=20000,
                    help="train graphs generated; AlgoPerf's run reads these")
    ap.add_argument("--batchd-graphs", type=int, default=200000,
                    help="graphs batchd delivers per run (epochs of --graphs:"
                         " its CPU time is long enough to measure)")
    ap.add_argument("--global-batch", type=int, default=512)
    ap.add_argument("--graphs-per-row", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--data", default=os.path.join(tempfile.gettempdir(),
                                                   "batchd-ogbg-bench"))
    a = ap.parse_args()
    data = os.path.join(a.data, "ogbg")
    # molpcba's sizes (make_ogbg.py --stats molpcba); a set made before with
    # other statistics or another count is made again.
    stamp = os.path.join(data, f".made-{a.graphs}-molpcba")
    if not os.path.exists(stamp):
        shutil.rmtree(data, ignore_errors=True)
        subprocess.run([sys.executable,
                        os.path.join(REPO, "workloads", "ogbg", "make_ogbg.py"),
                        data, "--train", str(a.graphs), "--validation", "10",
                        "--test", "10", "--stats", "molpcba"], check=True)
        open(stamp, "w").close()
    sys.path.insert(0, os.path.join(REPO, "tests", "python"))
    from batchd_daemon import Daemon
    daemon = Daemon(a.data, os.path.join(a.data, "batchd.log"), threads=2)
    rows = a.global_batch // a.graphs_per_row
    results = []
    try:
        for k in range(a.rounds):
            for world in (1, 8):
                r = run_batchd(daemon, data, a.batchd_graphs, rows, world,
                               a.graphs_per_row, f"{k}-{world}")
                print(json.dumps(r), flush=True)
                results.append(r)
                r = run_algoperf(data, a.graphs, a.global_batch // world)
                r["world"] = world
                print(json.dumps(r), flush=True)
                results.append(r)
    finally:
        daemon.stop()
    print("pipeline  W  graphs/CPU-s (median)  daemon threads  daemon RSS MB")
    for world in (1, 8):
        for p in ("batchd", "algoperf"):
            rs = [r for r in results if r["pipeline"] == p and
                  r["world"] == world]
            med = statistics.median(r["graphs_per_cpu_s"] for r in rs)
            th = max((r.get("daemon_threads", 0) for r in rs), default=0)
            rss = max((r.get("daemon_rss_mb", 0) for r in rs), default=0)
            print(f"{p:9} {world}  {med:20.0f}  {th or '-':>14}  "
                  f"{round(rss) if rss else '-':>13}")


if __name__ == "__main__":
    main()
