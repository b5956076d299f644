#!/usr/bin/env python3
"""Writes a small fastMRI knee single-coil set in the release's layout
(numpy and h5py):

    OUT/knee_singlecoil_train/fileNNNNNNN.h5
    OUT/knee_singlecoil_val/fileNNNNNNN.h5

one volume per file, as the release writes them: dataset ``kspace``
complex64 [slices, 640, width], dataset ``reconstruction_esc`` float32
[slices, 320, 320], attributes ``max`` (the volume's largest target
value), ``norm``, ``acquisition``, ``patient_id`` and a dataset
``ismrmrd_header``. Each slice is a phantom of random ellipses with a
smooth phase; its k-space is the centred orthonormal 2-D FFT of the 640 x
width image and its target the magnitude of the image's 320 x 320 centre
(as the release's emulated single-coil reconstruction is). Widths cycle
through --widths (368 and 372 are the release's common ones; an odd one
exercises the shifts). Every --chunked-every-th file is stored chunked and
gzip-compressed (the HDF5 library then reads it), the others contiguous
as h5py writes by default. Deterministic from --seed.
"""

import argparse
import os

import h5py
import numpy as np

ROWS = 640
CROP = 320


def phantom(rng, width):
    """A complex image [640, width]: a few ellipses, a smooth phase."""
    y, x = np.mgrid[-1:1:ROWS * 1j, -1:1:width * 1j]
    img = np.zeros((ROWS, width))
    for _ in range(int(rng.integers(3, 7))):
        cy, cx = rng.uniform(-0.4, 0.4, 2)
        ay, ax = rng.uniform(0.1, 0.5, 2)
        img += rng.uniform(0.2, 1.0) * (((y - cy) / ay) ** 2 +
                                        ((x - cx) / ax) ** 2 <= 1)
    img += rng.normal(0, 0.02, img.shape)
    phase = rng.uniform(-1, 1) * x + rng.uniform(-1, 1) * y
    return (img * 1e-4) * np.exp(1j * phase)


def centred_fft2(image):
    shifted = np.fft.ifftshift(image)
    return np.fft.fftshift(np.fft.fft2(shifted, norm="ortho"))


def write_volume(path, rng, slices, width, chunked, with_max):
    kspace = np.empty((slices, ROWS, width), np.complex64)
    target = np.empty((slices, CROP, CROP), np.float32)
    for s in range(slices):
        image = phantom(rng, width)
        kspace[s] = centred_fft2(image).astype(np.complex64)
        r0, c0 = (ROWS - CROP) // 2, (width - CROP) // 2
        target[s] = np.abs(image[r0:r0 + CROP, c0:c0 + CROP])
    kchunks = tchunks = {}
    if chunked:
        kchunks = {"chunks": (1, ROWS // 4, width), "compression": "gzip"}
        tchunks = {"chunks": (1, CROP // 4, CROP), "compression": "gzip"}
    with h5py.File(path, "w") as f:
        f.create_dataset("kspace", data=kspace, **kchunks)
        f.create_dataset("reconstruction_esc", data=target, **tchunks)
        f.create_dataset("ismrmrd_header", data=np.bytes_(b"<ismrmrdHeader/>"))
        if with_max:
            f.attrs["max"] = float(target.max())
        f.attrs["norm"] = float(np.linalg.norm(target))
        f.attrs["acquisition"] = "CORPD_FBK"
        f.attrs["patient_id"] = "%064x" % int(rng.integers(1 << 62))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--train", type=int, default=5, help="train volumes")
    p.add_argument("--val", type=int, default=3, help="val volumes")
    p.add_argument("--slices", type=int, nargs=2, default=[2, 3],
                   metavar=("MIN", "MAX"), help="slices per volume")
    p.add_argument("--widths", type=int, nargs="+", default=[368, 372, 369],
                   help="k-space widths, cycled (at least 320)")
    p.add_argument("--chunked-every", type=int, default=2, metavar="K",
                   help="every K-th file chunked and compressed (1: all; "
                        "0: none)")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    if min(a.widths) < CROP:
        p.error(f"--widths must be at least {CROP}")
    if not 1 <= a.slices[0] <= a.slices[1]:
        p.error("--slices MIN MAX with 1 <= MIN <= MAX")
    rng = np.random.default_rng(a.seed)
    n = 0
    for sub, count in (("knee_singlecoil_train", a.train),
                       ("knee_singlecoil_val", a.val)):
        os.makedirs(os.path.join(a.out, sub), exist_ok=True)
        for _ in range(count):
            name = "file%07d.h5" % int(rng.integers(1000000, 2000000))
            write_volume(os.path.join(a.out, sub, name), rng,
                         int(rng.integers(a.slices[0], a.slices[1] + 1)),
                         a.widths[n % len(a.widths)],
                         a.chunked_every > 0 and
                         n % a.chunked_every == a.chunked_every - 1,
                         with_max=n % 4 != 3)
            n += 1


if __name__ == "__main__":
    main()
