"""AlgoPerf's criteo1tb input pipeline (input_pipeline.py's
get_criteo1tb_dataset, train split), re-written from its documented
behaviour with TensorFlow, on a fixed number of threads: files ->
flat_map(TextLineDataset) -> batch(B, drop_remainder) -> map(decode_csv +
log(relu(x) + 1) + to_hash_bucket_fast, cast to float32) -> prefetch.
Prints JSON: rows/s after the first batch, and the first batch's time.

usage: criteo_tf.py THREADS BATCH ROWS FILE...
"""
import json
import sys
import time

t0 = time.monotonic()
import tensorflow as tf  # noqa: E402

VOCAB = [39884406, 39043, 17289, 7420, 20263, 3, 7120, 1543, 63, 38532951,
         2953546, 403346, 10, 2208, 11938, 155, 4, 976, 14, 39979771,
         25641295, 39664984, 585935, 12972, 108, 36]


def parse(lines):
    cols = tf.io.decode_csv(lines, [[0.0]] * 14 + [["00000000"]] * 26,
                            field_delim="\t", na_value="-1")
    dense = tf.math.log(tf.nn.relu(tf.stack(cols[1:14], axis=1)) + 1.0)
    ids = [tf.strings.to_hash_bucket_fast(cols[14 + i] + str(i), VOCAB[i])
           for i in range(26)]
    inputs = tf.concat([dense, tf.cast(tf.stack(ids, axis=1), tf.float32)],
                       axis=1)
    return {"inputs": inputs, "targets": cols[0]}


def main():
    threads, batch, rows = map(int, sys.argv[1:4])
    files = sys.argv[4:]
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(threads)
    ds = tf.data.Dataset.from_tensor_slices(files).flat_map(
        tf.data.TextLineDataset)
    ds = ds.repeat().batch(batch, drop_remainder=True)
    ds = ds.map(parse, num_parallel_calls=16).prefetch(10)
    opts = tf.data.Options()
    opts.threading.private_threadpool_size = threads
    ds = ds.with_options(opts)
    it = iter(ds)
    next(it)
    first = time.monotonic() - t0
    t1 = time.monotonic()
    n = 0
    while n < rows:
        next(it)
        n += batch
    dt = time.monotonic() - t1
    print(json.dumps({"rows_per_s": n / dt, "first_batch_s": first}))


if __name__ == "__main__":
    main()
