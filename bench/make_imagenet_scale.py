#!/usr/bin/python3
"""Writes an ImageNet-sized data set cheaply, for the index benchmarks.

    OUT/pool/img_<k>.JPEG                 POOL generated JPEGs (the bytes)
    OUT/train/<wnid>/<wnid>_<i>.JPEG      CLASSES x ~FILES/CLASSES hard links
                                          to the pool (ImageNet's 1,281,167
                                          files in 1000 class folders)
    OUT/tfds/imagenet2012-train.tfrecord-NNNNN-of-SSSSS
                                          SHARDS TFDS-named shards holding
                                          RECORDS tf.train.Examples in all,
                                          which repeat the POOL's JPEGs,
                                          scaled down

The JPEGs come from workloads/imagenet/make_imagenet.py (same generator,
same sizes, ~100 KB each). The file tree costs the pool's bytes plus one
directory entry per file. The shards keep TFDS's naming and framing, which
is what indexing reads, and by default ImageNet's sizes too: each record
is as long as the pool JPEG it stands for (~100 KB; ImageNet's 1,024 train
shards hold ~140 GB, ~110 KB a record), and its image bytes are zeros left
as holes in a sparse file, so the shards take ~140 GB of apparent size
but only the blocks that hold the records' headers, labels and names on
disk (~5 GB). Their records are well-formed (CRCs and all) but their
images are not JPEGs: the shards are for indexing, not for serving. The
scan that indexes a shard reads at every record's header, so the records'
size decides how much of a shard it reads. --record-scale S instead
writes the pool's JPEGs scaled by S as real bytes (0.2: ~3.8 KB a record,
4.8 GB of shards; earlier figures used it). Re-running with the same
arguments does nothing (OUT/.done-* markers).

    /usr/bin/python3 bench/make_imagenet_scale.py OUT [--classes 1000]
        [--files 1281167] [--pool 1000] [--shards 1024] [--records 1281167]
        [--record-scale S] [--no-tree] [--no-tfrecord]
"""

import importlib.util
import os
import struct
import sys

import numpy as np
from PIL import Image

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "workloads", "common"))
import generator_cli  # noqa: E402
from records import masked_crc  # noqa: E402


def load_make_imagenet():
    path = os.path.join(REPO, "workloads", "imagenet", "make_imagenet.py")
    spec = importlib.util.spec_from_file_location("make_imagenet", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def picture(mi, colour, gray, seed, k):
    rng = np.random.default_rng([seed, 7, k])
    is_gray = rng.random() < 0.03
    img = mi.make_picture(rng, gray if is_gray else colour, is_gray)
    return img.convert("L") if is_gray else img


def write_pool(mi, out, n, seed):
    colour, gray = mi.load_photos()
    d = os.path.join(out, "pool")
    os.makedirs(d, exist_ok=True)
    paths = []
    for k in range(n):
        p = os.path.join(d, f"img_{k}.JPEG")
        if not os.path.exists(p):
            data = mi.encode_jpeg(picture(mi, colour, gray, seed, k))
            with open(p + ".tmp", "wb") as f:
                f.write(data)
            os.rename(p + ".tmp", p)
        paths.append(p)
    return paths


def class_names(classes):
    return [f"n{1440764 + 37 * c:08d}" for c in range(classes)]


def write_tree(out, classes, files, pool):
    names = class_names(classes)
    base, extra = divmod(files, classes)
    k = 0
    for c, wnid in enumerate(names):
        d = os.path.join(out, "train", wnid)
        os.makedirs(d, exist_ok=True)
        for i in range(base + (1 if c < extra else 0)):
            # A fixed scatter over the pool, so neighbours differ.
            src = pool[(k * 2654435761) % len(pool)]
            k += 1
            dst = os.path.join(d, f"{wnid}_{i}.JPEG")
            try:
                os.link(src, dst)
            except FileExistsError:
                pass
        if c % 100 == 99:
            print(f"make_imagenet_scale: {k} links in {c + 1} classes",
                  file=sys.stderr)


def framed(mi, record):
    head = struct.pack("<Q", len(record))
    return (head + struct.pack("<I", masked_crc(head)) + record +
            struct.pack("<I", masked_crc(record)))


def sparse_framed(mi, length, label, name):
    """A framed record of an Example whose image is `length` zero bytes, as
    (bytes before the zeros, bytes after them): the zeros are written as a
    hole."""
    record = mi.serialize_example(bytes(length), label, name)
    at = record.index(bytes(length))
    whole = framed(mi, record)
    return (whole[:12 + at], length, whole[12 + at + length:])


def write_tfrecords(mi, out, classes, shards, records, pool, scale):
    framed_pool = []
    for k, path in enumerate(pool):
        label = k % classes
        name = f"{class_names(classes)[label]}_{k}.JPEG"
        if scale is None:
            framed_pool.append(sparse_framed(mi, os.path.getsize(path),
                                             label, name))
            continue
        img = Image.open(path)
        img.load()
        w, h = img.size
        img = img.resize((max(1, int(w * scale)), max(1, int(h * scale))),
                         Image.BILINEAR)
        rec = framed(mi, mi.serialize_example(mi.encode_jpeg(img), label,
                                              name))
        framed_pool.append((rec, 0, b""))
    d = os.path.join(out, "tfds")
    os.makedirs(d, exist_ok=True)
    total = 0
    for s in range(shards):
        lo, hi = records * s // shards, records * (s + 1) // shards
        path = os.path.join(
            d, f"imagenet2012-train.tfrecord-{s:05d}-of-{shards:05d}")
        with open(path + ".tmp", "wb") as f:
            for r in range(lo, hi):
                head, hole, tail = framed_pool[
                    (r * 2654435761) % len(framed_pool)]
                f.write(head)
                if hole:
                    f.seek(hole, os.SEEK_CUR)
                f.write(tail)
                total += len(head) + hole + len(tail)
        os.rename(path + ".tmp", path)
    print(f"make_imagenet_scale: {shards} shards, {records} records, "
          f"{total / 1e9:.2f} GB", file=sys.stderr)


def main():
    ap = generator_cli.parser(__doc__, classes=1000, files=1281167, pool=1000,
                              shards=1024, records=1281167)
    ap.add_argument("--record-scale", type=float, default=None,
                    help="records of the pool's JPEGs scaled by this, as real "
                    "bytes (default: ImageNet-sized sparse records)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-tree", action="store_true")
    ap.add_argument("--no-tfrecord", action="store_true")
    args = ap.parse_args()
    mi = load_make_imagenet()
    os.makedirs(args.out, exist_ok=True)
    tag = lambda what, *v: os.path.join(  # noqa: E731
        args.out, f".done-{what}-" + "-".join(str(x) for x in v))
    if not args.no_tree:
        t = tag("tree", args.classes, args.files, args.pool, args.seed)
        if not os.path.exists(t):
            pool = write_pool(mi, args.out, args.pool, args.seed)
            write_tree(args.out, args.classes, args.files, pool)
            open(t, "w").close()
    if not args.no_tfrecord:
        t = tag("tfrecord", args.classes, args.shards, args.records,
                args.pool, args.record_scale or "sparse", args.seed)
        if not os.path.exists(t):
            pool = write_pool(mi, args.out, args.pool, args.seed)
            write_tfrecords(mi, args.out, args.classes, args.shards,
                            args.records, pool, args.record_scale)
            open(t, "w").close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
