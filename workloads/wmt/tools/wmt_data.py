"""WMT data files without TensorFlow: TFRecord framing, tf.train.Example
with bytes features, and the TFDS / text layouts batchd reads (see
workloads/wmt/pair_source.h). Used by generate_wmt.py, train_sentencepiece.py
and the tests.
"""

import glob
import os
import re
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(
    os.path.dirname(os.path.abspath(__file__)))), "common"))
# CRC32C and TFRecord writing are records.py's; wmt_data.crc32c and
# wmt_data.write_tfrecord stay names of this module for its users.
from records import crc32c, field_bytes, write_tfrecord  # noqa: E402,F401
from records import masked_crc as masked_crc32c  # noqa: E402


def read_tfrecord(path):
    """Yields the records of a file; ValueError naming file and offset."""
    with open(path, "rb") as f:
        data = f.read()
    pos = 0
    while pos < len(data):
        if len(data) - pos < 12:
            raise ValueError(f"{path}: truncated record at offset {pos}")
        (length,) = struct.unpack_from("<Q", data, pos)
        (crc,) = struct.unpack_from("<I", data, pos + 8)
        if masked_crc32c(data[pos:pos + 8]) != crc:
            raise ValueError(f"{path}: bad length CRC at offset {pos}")
        end = pos + 12 + length
        if end + 4 > len(data):
            raise ValueError(f"{path}: truncated record at offset {pos}")
        record = data[pos + 12:end]
        (crc,) = struct.unpack_from("<I", data, end)
        if masked_crc32c(record) != crc:
            raise ValueError(f"{path}: bad data CRC at offset {pos}")
        yield record
        pos = end + 4


# --- tf.train.Example with bytes features --------------------------------------


def encode_example(features):
    """features: {name: bytes}, each a one-value bytes_list, keys sorted."""
    body = b""
    for name in sorted(features):
        bytes_list = field_bytes(1, features[name])
        feature = field_bytes(1, bytes_list)
        entry = field_bytes(1, name.encode()) + field_bytes(2, feature)
        body += field_bytes(1, entry)
    return field_bytes(1, body)


def _read_varint(buf, pos):
    result = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def _fields(buf):
    pos = 0
    while pos < len(buf):
        tag, pos = _read_varint(buf, pos)
        wire = tag & 7
        if wire == 2:
            n, pos = _read_varint(buf, pos)
            yield tag >> 3, buf[pos:pos + n]
            pos += n
        elif wire == 0:
            _, pos = _read_varint(buf, pos)
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            raise ValueError("malformed tf.train.Example")


def decode_example(serialized):
    """{name: [bytes, ...]} of the bytes features of an Example."""
    out = {}
    for f, features in _fields(serialized):
        if f != 1:
            continue
        for g, entry in _fields(features):
            if g != 1:
                continue
            key, values = b"", None
            for h, v in _fields(entry):
                if h == 1:
                    key = v
                elif h == 2:
                    for kind, lst in _fields(v):
                        if kind == 1:
                            values = [x for n, x in _fields(lst) if n == 1]
            if values is not None:
                out[key.decode()] = values
    return out


# --- Layouts ------------------------------------------------------------------

BUILDERS = {"train": "wmt17_translate", "validation": "wmt14_translate",
            "test": "wmt14_translate"}


def tfds_dir(data, split):
    builder = BUILDERS[split]
    return os.path.join(data, builder, "de-en", "1.0.0")


def tfds_shard_name(split, index, count):
    return f"{BUILDERS[split]}-{split}.tfrecord-{index:05d}-of-{count:05d}"


def tfds_shards(data, split):
    pattern = os.path.join(tfds_dir(data, split),
                           f"{BUILDERS[split]}-{split}.tfrecord-*-of-*")
    paths = glob.glob(pattern)
    return sorted(p for p in paths if re.search(r"-\d{5}-of-\d{5}$", p))


def read_pairs(data, split):
    """(de, en) byte strings of a split, in batchd's order: TFDS shards when
    present, else <split>.de / <split>.en."""
    shards = tfds_shards(data, split)
    if shards:
        for path in shards:
            for record in read_tfrecord(path):
                ex = decode_example(record)
                yield ex["de"][0], ex["en"][0]
        return
    with open(os.path.join(data, split + ".de"), "rb") as de, \
            open(os.path.join(data, split + ".en"), "rb") as en:
        for d, e in zip(de, en):
            yield d.rstrip(b"\n").rstrip(b"\r"), e.rstrip(b"\n").rstrip(b"\r")
