#!/usr/bin/python3
"""Helper of bench/wmt_bench.sh: AlgoPerf's TensorFlow WMT train pipeline
as the peer to beat, a token count of batchd's rows, and the report.

    wmt_tf_pipeline.py tf --data DIR [--vocab FILE] [--threads one|default]
        [--warmup N] [--batches N] [--rank R] [--json]
AlgoPerf's train pipeline (algoperf/workloads/wmt/input_pipeline.py) on
the TFDS shards of DIR: TFRecordDataset of the wmt17_translate train
shards in order, tf.train.Example parse of `de` and `en` (inputs = de,
targets = en), tensorflow-text's SentencepieceTokenizer (add_eos), drop
pairs longer than 256 tokens, shuffle(1024), repeat, pack_dataset(256)
(windows of 256 examples packed greedily with tf.while_loop, as
_pack_with_tf_ops does), batch(128, drop_remainder), prefetch; iterated as
numpy arrays. --threads one is what AlgoPerf gives ranks other than 0:
TF intra- and inter-op threads 1, private_threadpool_size 1 and sequential
maps; --threads default is rank 0's: AUTOTUNE and TF's default pools.
After --warmup batches, times --batches batches and prints one JSON
object: rows/s, non-padding tokens/s (inputs and targets), the process's
CPU seconds over the timed span, its peak thread count and RSS.

    wmt_tf_pipeline.py batchd-tokens --server ADDR --data PATH --batches N
Reads N batches of a fresh wmt train stream with the batchd Python client
(Debian's python3 with torch) and prints the mean non-padding tokens per
row, as the tf mode counts them.

    wmt_tf_pipeline.py report FILE [--json]
Prints the table of the JSON lines the script collected.
"""

import argparse
import glob
import json
import os
import sys
import time

from procstat import status

MAX_LENGTH = 256
GLOBAL_BATCH = 128
KEYS = ("inputs", "targets")


def build_pipeline(tf, tf_text, data, vocab, parallel, seed):
    """AlgoPerf's WMT train pipeline; `parallel` is AUTOTUNE or None."""
    pattern = os.path.join(data, "wmt17_translate", "de-en", "1.0.0",
                           "wmt17_translate-train.tfrecord-*")
    files = sorted(glob.glob(pattern))
    if not files:
        sys.exit(f"wmt_tf_pipeline: no TFDS shards match {pattern}")
    ds = tf.data.TFRecordDataset(files)
    if parallel is None:
        options = tf.data.Options()
        options.threading.private_threadpool_size = 1
        ds = ds.with_options(options)

    spec = {"de": tf.io.FixedLenFeature([], tf.string),
            "en": tf.io.FixedLenFeature([], tf.string)}

    def parse(record):
        ex = tf.io.parse_single_example(record, spec)
        return {"inputs": ex["de"], "targets": ex["en"]}

    ds = ds.map(parse, num_parallel_calls=parallel)

    with open(vocab, "rb") as f:
        tokenizer = tf_text.SentencepieceTokenizer(
            model=f.read(), add_bos=False, add_eos=True)

    def tokenize(x):
        return {k: tokenizer.tokenize(x[k]) for k in KEYS}

    ds = ds.map(tokenize, num_parallel_calls=parallel)

    def short_enough(x):
        n = tf.maximum(tf.shape(x["inputs"])[0], tf.shape(x["targets"])[0])
        return n <= MAX_LENGTH

    ds = ds.filter(short_enough)
    ds = ds.shuffle(1024, seed=seed)
    ds = ds.repeat()
    ds = pack(tf, ds, MAX_LENGTH, parallel)
    ds = ds.batch(GLOBAL_BATCH, drop_remainder=True)
    return ds.prefetch(parallel)


def pack(tf, ds, length, parallel):
    """pack_dataset(ds, length) for the keys inputs and targets: cut each
    sequence to `length`, group the stream into windows of `length`
    examples (padded_batch), pack every window greedily in a tf.while_loop
    (an example joins the open row while both of its sides still fit,
    otherwise the row is written out first; the open row is written out at
    the end of the window), then number segments from 1 with 0 on padding.
    A sequence's length is its count of non-zero tokens, as in AlgoPerf."""
    ds = ds.map(lambda x: {k: x[k][:length] for k in KEYS},
                num_parallel_calls=parallel)
    ds = ds.padded_batch(length, padded_shapes={k: [-1] for k in KEYS})
    fields = [k + s for k in KEYS for s in ("", "_position")]

    def empty_row():
        return {f: tf.zeros([0], tf.int32) for f in fields}

    def emit(row, out):
        return {f: out[f].write(out[f].size(),
                                tf.pad(row[f], [[0, length - tf.size(row[f])]]))
                for f in fields}

    def pack_window(window):
        count = tf.shape(window[KEYS[0]])[0]
        out = {f: tf.TensorArray(tf.int32, size=0, dynamic_size=True,
                                 element_shape=[length]) for f in fields}

        def step(i, row, out):
            example = {}
            fits = tf.constant(True)
            for k in KEYS:
                seq = tf.cast(window[k][i], tf.int32)
                seq = seq[:tf.math.count_nonzero(seq, dtype=tf.int32)]
                example[k] = seq
                fits = tf.logical_and(
                    fits, tf.size(row[k]) + tf.size(seq) <= length)
            row, out = tf.cond(fits, lambda: (row, out),
                               lambda: (empty_row(), emit(row, out)))
            grown = {}
            for k in KEYS:
                seq = example[k][:length]
                grown[k] = tf.concat([row[k], seq], 0)
                grown[k + "_position"] = tf.concat(
                    [row[k + "_position"], tf.range(tf.size(seq))], 0)
            return i + 1, grown, out

        _, row, out = tf.while_loop(
            lambda *_: True, step, (tf.constant(0), empty_row(), out),
            shape_invariants=(tf.TensorShape([]),
                              {f: tf.TensorShape([None]) for f in fields},
                              {f: tf.TensorShape(None) for f in fields}),
            maximum_iterations=count)
        out = emit(row, out)
        rows = {f: out[f].stack() for f in fields}
        for k in KEYS:
            starts = tf.cast(tf.equal(rows[k + "_position"], 0), tf.int32)
            rows[k + "_segmentation"] = (
                tf.cumsum(starts, axis=1)
                * tf.cast(tf.not_equal(rows[k], 0), tf.int32))
        return rows

    ds = ds.map(pack_window, num_parallel_calls=parallel).unbatch()
    return ds.map(lambda x: {f: tf.reshape(v, [length]) for f, v in x.items()},
                  num_parallel_calls=parallel)


def tf_main(args):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import numpy as np
    import tensorflow as tf
    import tensorflow_text as tf_text

    one = args.threads == "one"
    if one:
        tf.config.threading.set_intra_op_parallelism_threads(1)
        tf.config.threading.set_inter_op_parallelism_threads(1)
    parallel = None if one else tf.data.AUTOTUNE
    vocab = args.vocab or os.path.join(args.data, "wmt_sentencepiece_model")
    ds = build_pipeline(tf, tf_text, args.data, vocab, parallel, args.seed)
    it = ds.as_numpy_iterator()

    t_start = time.perf_counter()
    for _ in range(args.warmup):
        next(it)
    warm_s = time.perf_counter() - t_start
    peak_threads = 0
    cpu0, t0 = time.process_time(), time.perf_counter()
    rows = tokens = 0
    for i in range(args.batches):
        b = next(it)
        rows += b["inputs"].shape[0]
        tokens += (int(np.count_nonzero(b["inputs"]))
                   + int(np.count_nonzero(b["targets"])))
        if i % 4 == 0:
            peak_threads = max(peak_threads, status("self")["threads"])
    seconds = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    st = status("self")
    threads, rss, hwm = st["threads"], st["rss"], st["hwm"]
    print(json.dumps({
        "pipeline": "tf", "threads_mode": args.threads, "rank": args.rank,
        "tf_version": tf.__version__, "tf_text_version": tf_text.__version__,
        "affinity": len(os.sched_getaffinity(0)),
        "warmup_batches": args.warmup, "warmup_seconds": warm_s,
        "batches": args.batches, "rows": rows, "tokens": tokens,
        "seconds": seconds, "cpu_seconds": cpu,
        "rows_per_s": rows / seconds, "tokens_per_s": tokens / seconds,
        "rows_per_cpu_s": rows / cpu if cpu > 0 else None,
        "tokens_per_row": tokens / rows,
        "proc_threads": max(peak_threads, threads), "rss_bytes": rss,
        "peak_rss_bytes": hwm,
    }), flush=True)


def batchd_tokens_main(args):
    import batchd
    loader = batchd.Loader(f"wmt-bench-tokens-{os.getpid()}",
                           global_batch_size=GLOBAL_BATCH, workload="wmt",
                           data=args.data, split="train", rank=0,
                           world_size=1, server=args.server)
    rows = tokens = 0
    try:
        for _ in range(args.batches):
            batch = next(loader)  # across epochs: a small set has short ones
            rows += batch["inputs"].shape[0]
            tokens += (int((batch["inputs"] != 0).sum())
                       + int((batch["targets"] != 0).sum()))
            del batch
    finally:
        loader.close()
    print(json.dumps({"pipeline": "batchd_tokens", "rows": rows,
                      "tokens": tokens, "tokens_per_row": tokens / rows}))


def fmt(v, spec, none="-"):
    return none if v is None else format(v, spec)


def _bd_fig(r):
    b = r["bench"]
    rows_s = b["examples_per_s"]
    cpu_rows = (r["rows_for_cpu"] / r["cpu_seconds"]
                if r.get("cpu_seconds") else None)
    return rows_s, cpu_rows


def _report_throughput(meta, tf_runs, bd_runs, tpr_batchd, out):
    print()
    print(f"WMT train stream, global batch {GLOBAL_BATCH}, rows of "
          f"{MAX_LENGTH}; {meta.get('pairs', '?')} pairs, vocab "
          f"{meta.get('vocab', '?')}, {meta.get('cores', '?')} cores")
    if meta.get("tf_missing"):
        print(f"TensorFlow side not run: {meta['tf_missing']}")
    print()
    hdr = (f"{'pipeline':<40}{'cores':>6}{'rows/s':>9}{'tokens/s':>11}"
           f"{'rows/s/core':>12}{'rows/CPU-s':>11}{'tok/row':>8}")
    print(hdr)
    print("-" * len(hdr))

    def line(name, cores, rows_s, tpr, cpu_rows):
        toks = rows_s * tpr if tpr else None
        print(f"{name:<40}{cores:>6}{rows_s:>9.0f}{fmt(toks, '11.0f'):>11}"
              f"{rows_s / cores:>12.0f}{fmt(cpu_rows, '11.0f'):>11}"
              f"{fmt(tpr, '8.1f'):>8}")
        out["throughput"].append({"pipeline": name, "cores": cores,
                                  "rows_per_s": rows_s, "tokens_per_s": toks,
                                  "rows_per_s_per_core": rows_s / cores,
                                  "rows_per_cpu_s": cpu_rows,
                                  "tokens_per_row": tpr})

    names = {"one": "TF, 1 thread (AlgoPerf rank>0), taskset 0",
             "default": "TF, default threads (AlgoPerf rank 0)"}
    for label, r in tf_runs.items():
        line(names.get(label, label), r["affinity"], r["rows_per_s"],
             r["tokens_per_row"], r["rows_per_cpu_s"])
    for label, r in sorted(bd_runs.items()):
        rows_s, cpu_rows = _bd_fig(r)
        pin = ", taskset 0" if r["pinned"] else ""
        line(f"batchd, --threads {r['threads']}{pin}", r["threads"], rows_s,
             tpr_batchd, cpu_rows)
    print()


def _report_ratios(meta, tf_runs, bd_runs, tpr_batchd):
    one = tf_runs.get("one")
    ratios = {}
    if not (one and bd_runs):
        return ratios
    for label, r in sorted(bd_runs.items()):
        rows_s, cpu_rows = _bd_fig(r)
        per_core = rows_s / r["threads"]
        ratio = per_core / one["rows_per_s"]
        ratio_cpu = (cpu_rows / one["rows_per_cpu_s"]
                     if cpu_rows and one.get("rows_per_cpu_s") else None)
        tok_ratio = (per_core * tpr_batchd
                     / (one["rows_per_s"] * one["tokens_per_row"])
                     if tpr_batchd else None)
        ratios[label] = {"rows_per_core": ratio, "rows_per_cpu_s": ratio_cpu,
                         "tokens_per_core": tok_ratio}
        print(f"per core, batchd --threads {r['threads']} / TF 1 thread: "
              f"rows {ratio:.1f}x, tokens {fmt(tok_ratio, '.1f')}x, "
              f"rows per CPU-second {fmt(ratio_cpu, '.1f')}x "
              f"(target >= 5x)")
    dflt, two = tf_runs.get("default"), bd_runs.get("t2p0")
    if dflt and two:
        whole = two["bench"]["examples_per_s"] / dflt["rows_per_s"]
        ratios["whole_machine"] = {"rows": whole}
        print(f"all {meta.get('cores', '?')} cores, batchd --threads 2 / "
              f"TF default threads: rows {whole:.1f}x")
    print()
    return ratios


def _report_world(world, out):
    if not world:
        return
    hdr = (f"{'W':>3}{'batchd threads':>16}{'batchd RSS MiB':>16}"
           f"{'TF procs':>10}{'TF threads':>12}{'TF RSS MiB':>12}")
    print("Threads and RSS against W ranks")
    print(hdr)
    print("-" * len(hdr))
    for r in sorted(world, key=lambda r: r["world"]):
        b = r.get("bench") or {}
        tf_list = r.get("tf") or []
        tf_threads = sum(t["proc_threads"] for t in tf_list) if tf_list else None
        tf_rss = sum(t["rss_bytes"] for t in tf_list) if tf_list else None
        bt = b.get("server_threads")
        br = b.get("server_rss_bytes")
        print(f"{r['world']:>3}{fmt(bt, '16d'):>16}"
              f"{fmt(br / 2**20 if br else None, '16.0f'):>16}"
              f"{len(tf_list) if tf_list else '-':>10}"
              f"{fmt(tf_threads, '12d'):>12}"
              f"{fmt(tf_rss / 2**20 if tf_rss else None, '12.0f'):>12}")
        out["world"].append({"world": r["world"], "batchd_threads": bt,
                             "batchd_rss_bytes": br,
                             "batchd_ring_bytes": b.get("server_ring_bytes"),
                             "batchd_rows_per_s": b.get("examples_per_s"),
                             "tf_processes": len(tf_list),
                             "tf_threads": tf_threads,
                             "tf_rss_bytes": tf_rss})
    print()


def _report_legend():
    print("rows/s/core: rows/s over the cores the pipeline may use "
          "(taskset or --threads).")
    print("rows/CPU-s: rows per CPU-second the pipeline process used while "
          "timed (batchd: the")
    print("daemon's CPU over the extra steps of a long run over a short one); "
          "independent of")
    print("other load on the machine. tok/row: non-padding tokens of inputs "
          "+ targets per row")
    print("(batchd: from a sample of its rows). batchd threads/RSS: the "
          "daemon's, RSS without")
    print("its rings; TF: W processes (rank 0 default threads, others 1 "
          "thread, as AlgoPerf),")
    print("threads and RSS summed (shared pages counted in each process).")


def report_main(args):
    recs = [json.loads(line) for line in open(args.file) if line.strip()]

    def by(kind):
        return [r for r in recs if r.get("pipeline") == kind]

    meta = next(iter(by("meta")), {})
    tok = next(iter(by("batchd_tokens")), None)
    tpr_batchd = tok["tokens_per_row"] if tok else None
    tf_runs = {r["label"]: r for r in by("tf_single")}
    bd_runs = {r["label"]: r for r in by("batchd_single")}
    out = {"meta": meta, "throughput": [], "world": []}
    _report_throughput(meta, tf_runs, bd_runs, tpr_batchd, out)
    out["ratios"] = _report_ratios(meta, tf_runs, bd_runs, tpr_batchd)
    _report_world(by("world"), out)
    _report_legend()
    if args.json:
        print(json.dumps(out))


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("tf")
    p.add_argument("--data", required=True)
    p.add_argument("--vocab")
    p.add_argument("--threads", choices=("one", "default"), default="one")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--batches", type=int, default=30)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rank", type=int, default=0)
    p = sub.add_parser("batchd-tokens")
    p.add_argument("--server", required=True)
    p.add_argument("--data", default=".")
    p.add_argument("--batches", type=int, default=20)
    p = sub.add_parser("report")
    p.add_argument("file")
    p.add_argument("--json", action="store_true")
    args = ap.parse_args()
    {"tf": tf_main, "batchd-tokens": batchd_tokens_main,
     "report": report_main}[args.cmd](args)


if __name__ == "__main__":
    main()
