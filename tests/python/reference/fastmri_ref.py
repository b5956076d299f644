"""Expected fastmri examples, computed with TensorFlow and h5py as
AlgoPerf's knee single-coil pipeline computes them
(algoperf/workloads/fastmri/input_pipeline.py, `_process_example`): per
slice, the column mask (centre fraction 0.08, acceleration 4, uniforms from
`tf.random.stateless_uniform`), masked k-space, `tf.signal.ifftshift`,
`tf.signal.ifft2d`, `tf.signal.fftshift`, times sqrt(rows x width), the
320 x 320 centre crop, the magnitude, `tf.math.reduce_mean` /
`tf.math.reduce_std`, normalisation of input and target with the input's
statistics, clipped to [-6, 6].

usage: fastmri_ref.py OUT.npz SPLIT SEED VALIDATION_FILES EVAL_TRAIN FILE...
  FILE...: the split's volumes (the train or val directory's *.h5), taken
  in sorted order; validation keeps the first VALIDATION_FILES, test the
  rest, eval_train the first EVAL_TRAIN slices.

Eval splits use AlgoPerf's mask seed (0, 0) through TF itself. train and
eval_train use batchd's masks, whose uniforms are re-derived here from
their definition (Philox4x32-10 keyed by SplitMix64(seed), counter (slice,
0, block); the 23 low bits of each word as TF maps them to [0, 1)), so
that every train slice can be compared too.

Writes inputs, targets float32 [n, 320, 320], mean, std, volume_max
float32 [n], masks uint8 [n, width_max] (1 kept), widths int32 [n].
"""
import sys

import h5py
import numpy as np
import tensorflow as tf

from counter_rng import M32, philox4x32_10, splitmix64_finaliser


def word_to_uniform(words):
    bits = (np.asarray(words, np.uint32) & 0x7FFFFF) | 0x3F800000
    return bits.view(np.float32) - np.float32(1.0)


def batchd_train_uniforms(seed, slice_index, n):
    key = splitmix64_finaliser(seed)
    words = []
    block = 0
    while len(words) < n:
        words += philox4x32_10([slice_index & M32, slice_index >> 32, 0,
                                block], key)
        block += 1
    return word_to_uniform(words[:n])


def column_mask(u, width):
    w = tf.constant(width, tf.float32)
    low = int(tf.cast(w * tf.constant(0.08, tf.float32), tf.int32))
    pad = (width - low + 1) // 2
    centre = np.zeros(width, np.float32)
    centre[pad:pad + low] = 1
    lowf = tf.constant(low, tf.float32)
    prob = (w / tf.constant(4.0, tf.float32) - lowf) / (w - lowf)
    accel = tf.cast(tf.constant(u) < prob, tf.float32)
    return tf.maximum(tf.constant(centre), accel)


def transform(kspace, target, mask):
    rows, width = kspace.shape
    k = tf.constant(kspace) * tf.cast(mask, tf.complex64)[None, :] + 0.0
    image = tf.signal.fftshift(
        tf.signal.ifft2d(tf.signal.ifftshift(k, axes=(0, 1))), axes=(0, 1))
    image = image * tf.cast(tf.math.sqrt(float(rows * width)), tf.complex64)
    r0, c0 = (rows - 320) // 2, (width - 320) // 2
    crop = image[r0:r0 + 320, c0:c0 + 320]
    mag = tf.math.sqrt(tf.math.real(crop) ** 2 + tf.math.imag(crop) ** 2)
    mean = tf.math.reduce_mean(mag)
    std = tf.math.reduce_std(mag)
    inputs = tf.clip_by_value((mag - mean) / std, -6.0, 6.0)
    targets = tf.clip_by_value((tf.constant(target) - mean) / std, -6.0, 6.0)
    return inputs.numpy(), targets.numpy(), float(mean), float(std)


def main():
    out, split, seed, validation_files, eval_train = sys.argv[1:6]
    seed, validation_files = int(seed), int(validation_files)
    files = sorted(sys.argv[6:])
    if split == "validation":
        files = files[:validation_files]
    elif split == "test":
        files = files[validation_files:]
    train = split in ("train", "eval_train")
    rows = {k: [] for k in ("inputs", "targets", "mean", "std", "volume_max",
                            "masks", "widths")}
    index = 0
    for path in files:
        with h5py.File(path, "r") as f:
            volume_max = np.float32(f.attrs.get("max", 0.0))
            for s in range(f["kspace"].shape[0]):
                kspace = f["kspace"][s]
                width = kspace.shape[1]
                if train:
                    u = batchd_train_uniforms(seed, index, width)
                else:
                    u = tf.random.stateless_uniform(
                        (width,), seed=tf.constant([0, 0], tf.int64),
                        dtype=tf.float32).numpy()
                mask = column_mask(u, width)
                x, y, mean, std = transform(kspace, f["reconstruction_esc"][s],
                                            mask)
                rows["inputs"].append(x)
                rows["targets"].append(y)
                rows["mean"].append(mean)
                rows["std"].append(std)
                rows["volume_max"].append(volume_max)
                rows["masks"].append(mask.numpy().astype(np.uint8))
                rows["widths"].append(width)
                index += 1
    if split == "eval_train":
        rows = {k: v[:int(eval_train)] for k, v in rows.items()}
    widest = max(rows["widths"])
    rows["masks"] = [np.pad(m, (0, widest - len(m))) for m in rows["masks"]]
    np.savez(out, **{k: np.stack(v) if k in ("inputs", "targets", "masks")
                     else np.asarray(v, np.int32 if k == "widths"
                                     else np.float32)
                     for k, v in rows.items()})


if __name__ == "__main__":
    main()
