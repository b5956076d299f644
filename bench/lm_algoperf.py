"""AlgoPerf's finewebedu_lm train pipeline, one rank of it, re-written from
its documented behaviour for bench/lm_bench.py (run with the Python of
scripts/reference-venv.sh: datasets + tf.data): load_from_disk, the rows
as one flat token stream, windows of 1,025 tokens (batch(1025)), inputs
and targets, shuffle(1000), batch(b), repeat, then islice(RANK, None, W).

  lm_algoperf.py SPLIT_FOLDER B W RANK WINDOWS
Prints one JSON line: windows/s after the first batch, the first batch's
seconds (from process start), the process's threads and peak RSS.
"""
import itertools
import json
import sys
import time

from procstat import status

T0 = time.monotonic()
import datasets  # noqa: E402
import tensorflow as tf  # noqa: E402


def main():
    folder, b, w, rank, windows = sys.argv[1:6]
    b, w, rank, windows = int(b), int(w), int(rank), int(windows)
    ds = datasets.load_from_disk(folder)
    rows = ds.to_tf_dataset(columns="input_ids", batch_size=None,
                            shuffle=False)
    tokens = rows.flat_map(tf.data.Dataset.from_tensor_slices)
    win = tokens.batch(1025, drop_remainder=True).map(
        lambda x: {"inputs": x[:-1], "targets": x[1:]},
        num_parallel_calls=tf.data.AUTOTUNE)
    win = win.shuffle(1000, seed=1).batch(b).repeat().prefetch(
        tf.data.AUTOTUNE)
    it = itertools.islice(win.as_numpy_iterator(), rank, None, w)
    next(it)
    first = time.monotonic() - T0
    t1 = time.monotonic()
    n = 0
    while n < windows:
        batch = next(it)
        n += len(batch["inputs"])
    rate = n / (time.monotonic() - t1)
    st = status("self")
    threads, rss = st["threads"], st["hwm"]
    print(json.dumps({"windows_per_s": rate, "first_batch_s": first,
                      "threads": threads, "peak_rss": rss}))


if __name__ == "__main__":
    main()
