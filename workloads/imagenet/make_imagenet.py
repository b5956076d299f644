#!/usr/bin/python3
"""Writes a small ImageNet-like data set for batchd's tests and benchmarks.

Layout (what the imagenet workload reads; see workloads/imagenet/imagenet.h):

    OUT/train/<wnid>/<wnid>_<i>.JPEG        ImageFolder trees
    OUT/val/<wnid>/ILSVRC2012_val_<i>.JPEG
    OUT/tfds/imagenet2012-train.tfrecord-00000-of-0000K      TFDS shards
    OUT/tfds/imagenet2012-validation.tfrecord-00000-of-0000K

The images are about 500 x 375 (some portrait), JPEG quality 90 with 4:2:0
chroma, ~100 KB on average: random crops, scales, flips and colour shifts of
the natural photos Debian's python3-skimage ships, with a little grain. As
ImageNet does, train also holds a few grayscale JPEGs, one CMYK JPEG, one PNG
named .JPEG, and (with --truncated, the default) one truncated JPEG. The same
arguments give the same bytes.

Which of ImageNet's statistics it follows (ILSVRC2012 train: 1,281,167
JPEGs, ~110 KB on average, most 500 pixels on the long side, quality ~90):
the sizes in pixels (500 x 375 and 500 x 333 most often, some portrait,
a few 500 x 400 and 640 x 480), the quality and chroma subsampling, the
bytes a file (~100 KB, natural photos with grain, not flat synthetic
images a decoder finds little to do in) and the odd files. Not followed:
ImageNet's few percent of files far larger (1,000 to 4,000+ pixels a
side) or smaller than 500 pixels; and the counts, which --classes and
--per-class set (bench/make_imagenet_scale.py makes ImageNet's).

    /usr/bin/python3 workloads/imagenet/make_imagenet.py OUT \\
        [--classes 4] [--per-class 6] [--val-per-class 2] [--seed 0] \\
        [--shards 2] [--no-tfrecord] [--no-imagefolder] [--no-truncated]
"""

import importlib.util
import io
import os
import sys

import numpy as np
from PIL import Image

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), "common"))
import generator_cli  # noqa: E402
from records import field_bytes, varint, write_tfrecord  # noqa: E402,F401

COLOUR_PHOTOS = ["astronaut.png", "chelsea.png", "coffee.png", "rocket.jpg",
                 "hubble_deep_field.jpg", "ihc.png", "motorcycle_left.png",
                 "motorcycle_right.png", "retina.jpg"]
GRAY_PHOTOS = ["camera.png", "coins.png", "moon.png", "grass.png",
               "gravel.png", "brick.png", "clock_motion.png"]
# ImageNet's common sizes: mostly 500 x 375 and 500 x 333, some portrait.
SIZES = [(500, 375)] * 6 + [(500, 333)] * 2 + [(375, 500), (333, 500),
                                                (500, 400), (640, 480)]


def skimage_data_dir():
    spec = importlib.util.find_spec("skimage")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("make_imagenet: needs python3-skimage (its sample photos)")
    return os.path.join(spec.submodule_search_locations[0], "data")


def load_photos():
    d = skimage_data_dir()
    colour = [np.asarray(Image.open(os.path.join(d, f)).convert("RGB"))
              for f in COLOUR_PHOTOS]
    gray = [np.asarray(Image.open(os.path.join(d, f)).convert("L"))
            for f in GRAY_PHOTOS]
    return colour, gray


def make_picture(rng, photos, gray):
    """One ImageNet-like picture (a PIL image) from a random photo."""
    src = photos[rng.integers(len(photos))]
    h, w = src.shape[:2]
    out_w, out_h = SIZES[rng.integers(len(SIZES))]
    # A crop of 35..100 % of the photo's side with the output's aspect.
    scale = rng.uniform(0.35, 1.0)
    cw = min(w, int(round(scale * min(w, h * out_w / out_h))))
    ch = min(h, int(round(cw * out_h / out_w)))
    x = int(rng.integers(0, w - cw + 1))
    y = int(rng.integers(0, h - ch + 1))
    img = Image.fromarray(src[y:y + ch, x:x + cw])
    img = img.resize((out_w, out_h), Image.BICUBIC)
    if rng.random() < 0.5:
        img = img.transpose(Image.FLIP_LEFT_RIGHT)
    a = np.asarray(img).astype(np.float32)
    if not gray:  # colour shift
        a = a * rng.uniform(0.75, 1.25, size=3) + rng.uniform(-20, 20, size=3)
    # Grain in the luminance, as camera sensors leave it: the sample photos
    # are smoother than ImageNet's, and grain brings JPEGs to ~100 KB.
    grain = rng.normal(0, rng.uniform(8.0, 16.0), size=a.shape[:2])
    a = a + (grain if gray else grain[..., None])
    return Image.fromarray(np.clip(a, 0, 255).astype(np.uint8))


def encode_jpeg(img):
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=90, subsampling=2)  # 2: 4:2:0
    return buf.getvalue()


# --- TFRecord and tf.train.Example, written directly ----------------------

def serialize_example(image, label, file_name):
    """tf.train.Example{features{feature{image, label, file_name}}}."""
    def bytes_feature(v):  # Feature.bytes_list(1).value(1)
        return field_bytes(1, field_bytes(1, v))

    def int64_feature(v):  # Feature.int64_list(3).value(1), packed
        return field_bytes(3, field_bytes(1, varint(v)))

    feats = [("image", bytes_feature(image)), ("label", int64_feature(label)),
             ("file_name", bytes_feature(file_name.encode()))]
    features = b"".join(field_bytes(1, field_bytes(1, k.encode()) + field_bytes(2, v))
                        for k, v in feats)
    return field_bytes(1, features)


# --- the data set ------------------------------------------------------------

def build_split(split, classes, per_class, seed, colour, gray, odd):
    """[(wnid, file name, bytes, label)] in ImageFolder order."""
    items = []
    for label, wnid in enumerate(classes):
        for i in range(per_class):
            rng = np.random.default_rng([seed, 0 if split == "train" else 1,
                                         label, i])
            is_gray = rng.random() < 0.03
            img = make_picture(rng, gray if is_gray else colour, is_gray)
            if is_gray:
                img = img.convert("L")
            name = (f"{wnid}_{i}.JPEG" if split == "train" else
                    f"ILSVRC2012_val_{label * per_class + i + 1:08d}.JPEG")
            items.append([wnid, name, encode_jpeg(img), label])
    if odd and split == "train" and len(items) >= 4:
        # ImageNet's oddities, at fixed places: the first file of the first
        # class is grayscale, a CMYK JPEG, a PNG named .JPEG, a truncated file.
        rng = np.random.default_rng([seed, 2])
        n = len(items)
        items[0][2] = encode_jpeg(make_picture(rng, gray, True).convert("L"))
        buf = io.BytesIO()
        make_picture(rng, colour, False).convert("CMYK").save(
            buf, "JPEG", quality=90)
        items[n // 4][2] = buf.getvalue()
        buf = io.BytesIO()
        make_picture(rng, colour, False).save(buf, "PNG")
        items[n // 2][2] = buf.getvalue()
        if odd == "truncated":
            data = items[3 * n // 4][2]
            items[3 * n // 4][2] = data[:len(data) * 6 // 10]
    return items


def main():
    ap = generator_cli.parser(__doc__, classes=4, per_class=6,
                              val_per_class=2, seed=0, shards=2)
    ap.add_argument("--no-tfrecord", action="store_true")
    ap.add_argument("--no-imagefolder", action="store_true")
    ap.add_argument("--no-truncated", action="store_true")
    ap.add_argument("--no-odd", action="store_true",
                    help="no grayscale / CMYK / PNG / truncated files")
    args = ap.parse_args()

    colour, gray = load_photos()
    classes = [f"n{1440764 + 37 * c:08d}" for c in range(args.classes)]
    odd = (False if args.no_odd else
           ("odd" if args.no_truncated else "truncated"))
    total = 0
    for split, per, tfds_split in (("train", args.per_class, "train"),
                                   ("val", args.val_per_class, "validation")):
        if per <= 0:
            continue
        items = build_split(split, classes, per, args.seed, colour, gray, odd)
        total += len(items)
        if not args.no_imagefolder:
            for wnid, name, data, _ in items:
                d = os.path.join(args.out, split, wnid)
                os.makedirs(d, exist_ok=True)
                with open(os.path.join(d, name), "wb") as f:
                    f.write(data)
        if not args.no_tfrecord:
            d = os.path.join(args.out, "tfds")
            os.makedirs(d, exist_ok=True)
            k = max(1, min(args.shards, len(items)))
            for s in range(k):
                lo, hi = len(items) * s // k, len(items) * (s + 1) // k
                write_tfrecord(
                    os.path.join(d, f"imagenet2012-{tfds_split}.tfrecord-"
                                    f"{s:05d}-of-{k:05d}"),
                    [serialize_example(data, label, name)
                     for _, name, data, label in items[lo:hi]])
        sizes = [len(it[2]) for it in items]
        print(f"make_imagenet: {split}: {len(items)} images, "
              f"{sum(sizes) / len(sizes) / 1000:.0f} KB on average",
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
