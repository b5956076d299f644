"""AlgoPerf's criteo1tb input pipeline, train split, as it runs: its
get_criteo1tb_dataset (algoperf/workloads/criteo1tb/input_pipeline.py)
op for op around its _parse_example_fn (reproduced in
tests/python/reference/criteo_ref.py): list_files(day_{0..22}_*,
shuffled with the seed), shuffle(1024), flat_map(TextLineDataset),
batch(B, drop_remainder), map(parse, 16 parallel calls), repeat(),
prefetch(10), each batch turned into numpy as its shard_and_maybe_pad_np
does. TF's thread pools are sized to THREADS (run it under taskset on as
many cores). Prints JSON: rows/s after the first batch, rows per CPU
second of the whole process over the same span, and the first batch's
time (TF's import included).

usage: criteo_tf.py THREADS BATCH ROWS DATA_DIR
"""
import functools
import json
import os
import sys
import time

t0 = time.monotonic()
import tensorflow as tf  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "tests", "python", "reference"))
from criteo_ref import parse_example  # noqa: E402


def get_train_dataset(data_dir, global_batch_size, seed):
    file_paths = [os.path.join(data_dir, f"day_{d}_*") for d in range(0, 23)]
    ds = tf.data.Dataset.list_files(file_paths, shuffle=True, seed=seed)
    ds = ds.shuffle(buffer_size=1024)
    ds = ds.flat_map(tf.data.TextLineDataset)
    ds = ds.batch(global_batch_size, drop_remainder=True)
    ds = ds.map(functools.partial(parse_example, 13), num_parallel_calls=16)
    ds = ds.repeat()
    ds = ds.prefetch(10)
    return ds


def to_numpy(batch):
    """shard_and_maybe_pad_np on one device, a full batch: numpy arrays
    reshaped to [1, B, ...]."""
    return {k: v._numpy().reshape((1, -1, *v.shape[1:]))
            for k, v in batch.items()}


def main():
    threads, batch, rows = map(int, sys.argv[1:4])
    data_dir = sys.argv[4]
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(threads)
    ds = get_train_dataset(data_dir, batch, seed=0)
    opts = tf.data.Options()
    opts.threading.private_threadpool_size = threads
    ds = ds.with_options(opts)
    it = map(to_numpy, ds)
    next(it)
    first = time.monotonic() - t0
    t1, c1 = time.monotonic(), time.process_time()
    n = 0
    while n < rows:
        next(it)
        n += batch
    dt, cpu = time.monotonic() - t1, time.process_time() - c1
    print(json.dumps({"rows_per_s": n / dt, "rows_per_cpu_s": n / cpu,
                      "first_batch_s": first}))


if __name__ == "__main__":
    main()
