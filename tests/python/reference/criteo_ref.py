"""Expected criteo1tb rows, computed with TensorFlow as AlgoPerf's
pipeline does (algoperf/workloads/criteo1tb/input_pipeline.py):
TextLineDataset over the files, tf.io.decode_csv (tab, na_value '-1',
float defaults for the label and the 13 dense fields, '00000000' for the
26 categorical ones), log(relu(x) + 1) with tf.math.log,
tf.strings.to_hash_bucket_fast(field + str(i), vocab[i]) cast to float32.

usage: criteo_ref.py OUT.npz FILE...   (the lines of the files, in order)
Writes inputs float32 [n, 39], targets float32 [n], and ids int64 [n, 26]
(before the cast), plus farmhash int64 [n, 26]: pyfarmhash's
fingerprint64 of the same strings modulo the vocabulary, as a second
opinion on TF's bucket.
"""
import sys

import numpy as np
import tensorflow as tf

VOCAB = [39884406, 39043, 17289, 7420, 20263, 3, 7120, 1543, 63, 38532951,
         2953546, 403346, 10, 2208, 11938, 155, 4, 976, 14, 39979771,
         25641295, 39664984, 585935, 12972, 108, 36]


def main():
    out, files = sys.argv[1], sys.argv[2:]
    ds = tf.data.Dataset.from_tensor_slices(files).flat_map(
        tf.data.TextLineDataset)
    lines = [l for l in ds.as_numpy_iterator()]
    n = len(lines)
    defaults = [[0.0]] * 14 + [["00000000"]] * 26
    cols = tf.io.decode_csv(tf.constant(lines, tf.string), defaults,
                            field_delim="\t", na_value="-1")
    targets = cols[0].numpy().astype(np.float32)
    # TF computes the log of a tensor's last (size mod packet) elements
    # with the scalar std::log, the rest with Eigen's vectorised log. A
    # full AlgoPerf batch (B x 13, B a multiple of 16) is all vectorised:
    # so is this one, padded to a multiple of 64 elements.
    x = tf.reshape(tf.nn.relu(tf.stack(cols[1:14], axis=1)) + 1.0, [-1])
    pad = -(n * 13) % 64
    x = tf.concat([x, tf.ones([pad], tf.float32)], axis=0)
    dense = tf.reshape(tf.math.log(x)[:n * 13], [n, 13])
    ids = []
    for i in range(26):
        ids.append(tf.strings.to_hash_bucket_fast(
            cols[14 + i] + str(i), VOCAB[i]))
    ids = tf.stack(ids, axis=1)
    inputs = tf.concat([dense, tf.cast(ids, tf.float32)], axis=1).numpy()
    import farmhash
    fh = np.zeros((n, 26), np.int64)
    strs = [c.numpy() for c in cols[14:]]
    for i in range(26):
        for r in range(n):
            fh[r, i] = farmhash.fingerprint64(
                strs[i][r].decode() + str(i)) % VOCAB[i]
    np.savez(out, inputs=inputs.astype(np.float32), targets=targets,
             ids=ids.numpy().astype(np.int64), farmhash=fh)


if __name__ == "__main__":
    main()
