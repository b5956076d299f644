"""Expected criteo1tb rows from AlgoPerf's pipeline as it runs
(algoperf/workloads/criteo1tb/input_pipeline.py): its _parse_example_fn,
reproduced below op for op as a tf.function, mapped over
TextLineDataset(files).batch(BATCH) inside tf.data, as
get_criteo1tb_dataset builds the validation and test splits. tf.data runs
the function as a graph: TF's optimizer rewrites log(x + 1) into
log1p(x), and TF computes the last (rows mod 8) values of each column of
a batch one at a time with the C library's log1pf. The values here are
those of that run, not of eager ops.

usage: criteo_ref.py OUT.npz BATCH [--vectorised] FILE...
  (the lines of the files, in order, in batches of BATCH)
--vectorised: the values every line takes where it is not among a
batch's last (rows mod 8), as in batches of a multiple of 8 rows (train's
lines, whose place in AlgoPerf's batches is not batchd's): the last
batch is padded to a multiple of 8 lines (copies of its first) and the
padding dropped.
Writes inputs float32 [n, 39], targets float32 [n], and ids int64 [n, 26]
(before the cast), plus farmhash int64 [n, 26]: pyfarmhash's
fingerprint64 of the same strings modulo the vocabulary, as a second
opinion on TF's bucket.
"""
import functools
import sys

import numpy as np
import tensorflow as tf

VOCAB = [39884406, 39043, 17289, 7420, 20263, 3, 7120, 1543, 63, 38532951,
         2953546, 403346, 10, 2208, 11938, 155, 4, 976, 14, 39979771,
         25641295, 39664984, 585935, 12972, 108, 36]


@tf.function
def parse_example(num_dense_features, example):
    """AlgoPerf's _parse_example_fn, op for op."""
    label_defaults = [[0.0]]
    int_defaults = [[0.0] for _ in range(num_dense_features)]
    categorical_defaults = [['00000000'] for _ in range(len(VOCAB))]
    record_defaults = label_defaults + int_defaults + categorical_defaults
    fields = tf.io.decode_csv(example, record_defaults, field_delim='\t',
                              na_value='-1')
    features = {'targets': tf.reshape(fields[0], (-1,))}
    int_features = []
    for idx in range(num_dense_features):
        positive_val = tf.nn.relu(fields[idx + 1])
        int_features.append(tf.math.log(positive_val + 1))
    int_features = tf.stack(int_features, axis=1)
    cat_features = []
    for idx in range(len(VOCAB)):
        field = fields[idx + num_dense_features + 1]
        cat_features.append(
            tf.strings.to_hash_bucket_fast(field + str(idx), VOCAB[idx]))
    cat_features = tf.cast(tf.stack(cat_features, axis=1),
                           dtype=int_features.dtype)
    features['inputs'] = tf.concat([int_features, cat_features], axis=1)
    return features


def main():
    out, batch = sys.argv[1], int(sys.argv[2])
    vectorised = sys.argv[3] == '--vectorised'
    files = sys.argv[4:] if vectorised else sys.argv[3:]
    lines = [l for l in tf.data.Dataset.from_tensor_slices(files).flat_map(
        tf.data.TextLineDataset).as_numpy_iterator()]
    n = len(lines)
    if vectorised and batch % 8:
        sys.exit('criteo_ref.py: --vectorised takes a BATCH of 8k rows')
    if vectorised and n % 8:
        lines += [lines[n - n % batch if n % batch else n - batch]] * (
            -n % 8)
    ds = tf.data.Dataset.from_tensor_slices(tf.constant(lines, tf.string))
    ds = ds.batch(batch, drop_remainder=False)
    ds = ds.map(functools.partial(parse_example, 13), num_parallel_calls=16)
    ds = ds.prefetch(10)
    got = list(ds.as_numpy_iterator())
    inputs = np.concatenate([b['inputs'] for b in got])[:n]
    targets = np.concatenate([b['targets'] for b in got])[:n]
    # The exact ids (AlgoPerf casts them to float32) and pyfarmhash's.
    cols = tf.io.decode_csv(tf.constant(lines[:n], tf.string),
                            [[0.0]] * 14 + [['00000000']] * 26,
                            field_delim='\t', na_value='-1')
    ids = np.stack([tf.strings.to_hash_bucket_fast(
        cols[14 + i] + str(i), VOCAB[i]).numpy() for i in range(26)], axis=1)
    import farmhash
    fh = np.zeros((n, 26), np.int64)
    for i in range(26):
        for r, s in enumerate(cols[14 + i].numpy()):
            fh[r, i] = farmhash.fingerprint64(s.decode() + str(i)) % VOCAB[i]
    np.savez(out, inputs=inputs.astype(np.float32),
             targets=targets.astype(np.float32), ids=ids.astype(np.int64),
             farmhash=fh)


if __name__ == '__main__':
    main()
