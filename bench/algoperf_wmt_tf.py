#!/usr/bin/python3
"""AlgoPerf's own WMT train input pipeline (TensorFlow), over the text set
of bench/wmt_cache_bench.py, for the rows/s batchd's train stream is
compared with. It runs AlgoPerf's code: tokenizer.load_tokenizer and
TokenizeOp (tensorflow-text SentencePiece, EOS appended), then
input_pipeline.preprocess_wmt_data (length filter, 1024-pair shuffle,
repeat, pack_dataset, batch of --global-batch rows). The one change: pairs
come from the aligned text files (train.de, train.en) instead of TFDS
shards, so TFDS's reader is not measured. Prints JSON (rows/s after
--warmup batches). bench/wmt_tf_pipeline.py (for bench/wmt_bench.sh)
writes the same pipeline out over TFDS shards, per core; this one imports
AlgoPerf's modules, for bench/wmt_cache_bench.py's full-size text set.

Needs an AlgoPerf checkout and, in a virtual environment that sees
Debian's torch:
    python3 -m venv --system-site-packages VENV
    VENV/bin/pip install 'tensorflow-cpu==2.15.*' 'tensorflow-text==2.15.*' \\
        'jax[cpu]' tensorflow-datasets
    VENV/bin/python bench/algoperf_wmt_tf.py --algoperf CHECKOUT \\
        --data /tmp/batchd-wmt-scale [--batches 300] [--global-batch 128]
"""

import argparse
import json
import os
import sys
import time
import types


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--algoperf", required=True,
                    help="a checkout of mlcommons/algorithmic-efficiency")
    ap.add_argument("--data", required=True,
                    help="train.de, train.en and wmt_sentencepiece_model")
    ap.add_argument("--batches", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--global-batch", type=int, default=128)
    args = ap.parse_args()
    sys.path.insert(0, os.path.abspath(args.algoperf))
    if not os.path.exists(os.path.join(args.algoperf, "algoperf",
                                       "_version.py")):
        # Written by its pip install (setuptools_scm); a plain checkout
        # lacks it.
        version = types.ModuleType("algoperf._version")
        version.version = "checkout"
        sys.modules["algoperf._version"] = version
    import tensorflow as tf
    from algoperf.workloads.wmt import input_pipeline, tokenizer

    autotune = tf.data.AUTOTUNE
    de = tf.data.TextLineDataset(os.path.join(args.data, "train.de"))
    en = tf.data.TextLineDataset(os.path.join(args.data, "train.en"))
    ds = tf.data.Dataset.zip((de, en)).map(
        lambda d, e: {"inputs": d, "targets": e}, num_parallel_calls=autotune)
    sp = tokenizer.load_tokenizer(
        os.path.join(args.data, "wmt_sentencepiece_model"))
    ds = ds.map(tokenizer.TokenizeOp(sp), num_parallel_calls=autotune)
    ds = input_pipeline.preprocess_wmt_data(
        ds, data_rng=[0, 0], train=True, shuffle=True,
        global_batch_size=args.global_batch, max_length=256)
    it = ds.as_numpy_iterator()
    t0 = time.monotonic()
    for _ in range(args.warmup):
        batch = next(it)
    first = time.monotonic() - t0
    t1 = time.monotonic()
    for _ in range(args.batches):
        batch = next(it)
    took = time.monotonic() - t1
    rows = len(batch["inputs"])
    print(json.dumps({
        "pipeline": "algoperf tf (text files)",
        "global_batch": rows,
        f"first_{args.warmup}_batches_s": round(first, 2),
        "steady_rows_per_s": round(args.batches * rows / took),
        "batches": args.batches,
    }, indent=1))


if __name__ == "__main__":
    main()
