#!/usr/bin/python3
"""Writes the seed corpora of the fuzz targets (fuzz/*_fuzz.cc), one
directory per target under OUT: small valid inputs of each format and a few
broken ones, so that a short, fixed number of runs reaches deep into every
parser. Deterministic: the same files every time.

    /usr/bin/python3 fuzz/make_seeds.py OUT

The formats are written here from their public definitions (TFRecord
framing with masked CRC32C, the tf.train.Example and batchd.v1 protobuf wire
formats, TOML, Arrow IPC streams), not through the code under test. Each
format's seeds include the hostile shapes the daemon must refuse cheaply:
lengths that claim more than the input holds, and nesting that is shared
(a DAG) or deep; the run's -timeout and -rss_limit_mb turn a parser that
believes them into a failure. Needs numpy and PIL
(Debian: python3-numpy, python3-pil) for the images.
"""

import os
import re
import struct
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "workloads", "common"))
sys.path.insert(0, os.path.join(REPO, "workloads", "finewebedu_lm"))
import arrow_ipc  # noqa: E402
from records import (crc32c, field_bytes, field_varint,  # noqa: E402
                     masked_crc, tfrecord, varint)


# --- tf.train.Example (tensorflow/core/example/{example,feature}.proto) ---

def feature(value):
    """A Feature message: bytes_list = 1, float_list = 2, int64_list = 3."""
    kind, items = value
    if kind == "bytes":
        inner = b"".join(field_bytes(1, v) for v in items)
        return field_bytes(1, inner)
    if kind == "float":
        return field_bytes(2, field_bytes(1, b"".join(struct.pack("<f", v)
                                                      for v in items)))
    packed = b"".join(varint(v) for v in items)
    return field_bytes(3, field_bytes(1, packed))


def example(features):
    entries = b"".join(
        field_bytes(1, field_bytes(1, k) + field_bytes(2, feature(v)))
        for k, v in features.items())
    return field_bytes(1, entries)


EXAMPLES = [
    example({"de": ("bytes", [b"Guten Morgen"]),
             "en": ("bytes", [b"Good morning"])}),
    example({"image": ("bytes", [b"\xff\xd8\xff\xe0" + b"\0" * 12]),
             "label": ("int64", [417]),
             "file_name": ("bytes", [b"n01440764_10026.JPEG"])}),
    example({"x": ("float", [1.0, -2.5]), "y": ("int64", [1, -1, 2**40]),
             "z": ("bytes", [b"", b"a", "ü".encode()])}),
    example({}),
    b"",
    # A length that claims far more than the input holds.
    varint((1 << 3) | 2) + varint(1 << 40) + b"ab",
]


# --- batchd.v1.OpenStreamRequest (proto/batchd/v1/batchd.proto) ----------

def graphs():
    """ogbg-molpcba records: a triangle, a bond naming a missing node, and
    lengths that disagree."""
    def graph(n, bonds, node_values=None, labels=128):
        return example({
            "num_nodes": ("int64", [n]), "num_edges": ("int64", [len(bonds)]),
            "node_feat": ("float", [1.0] * (node_values or 9 * n)),
            "edge_feat": ("float", [0.5] * 3 * len(bonds)),
            "edge_index": ("int64", [v for b in bonds for v in b]),
            "labels": ("float", [float("nan"), 1.0] * (labels // 2))})
    return [graph(3, [(0, 1), (1, 2), (2, 0)]), graph(2, [(0, 5)]),
            graph(4, [(0, 1)], node_values=7, labels=10),
            graph(1 << 30, [], node_values=9)]


def stream_spec(name="s", workload="synthetic", data="", split="",
                global_batch_size=32, world_size=2, seed=0, start_step=0,
                slots=0, options=None, cursor=None):
    out = field_bytes(1, name) + field_bytes(2, workload)
    if data:
        out += field_bytes(3, data)
    if split:
        out += field_bytes(4, split)
    out += field_varint(5, global_batch_size) + field_varint(6, world_size)
    out += field_varint(7, seed) + field_varint(8, start_step)
    out += field_varint(9, slots)
    for k, v in (options or {}).items():
        out += field_bytes(10, field_bytes(1, k) + field_bytes(2, v))
    if cursor is not None:
        out += field_bytes(11, b"".join(field_varint(i + 1, c)
                                        for i, c in enumerate(cursor)))
    return out


def open_request(spec, rank=0, client_pid=1234):
    return (field_bytes(1, spec) + field_varint(2, rank) +
            field_varint(3, client_pid))


SPECS = [
    stream_spec(options={"examples": "1000", "payload_bytes": "64"}),
    stream_spec(split="validation", global_batch_size=7, world_size=1,
                options={"examples": "10"}),
    stream_spec(global_batch_size=1 << 22, world_size=1, slots=1024,
                options={"examples": str(1 << 23), "payload_bytes": "65536"}),
    stream_spec(name="wmt-train", workload="wmt", data="wmt",
                global_batch_size=8, world_size=2, start_step=5,
                cursor=(1, 2, 3)),
    stream_spec(name="img", workload="imagenet", data="../../etc",
                split="train", options={"image_size": "224"}),
    stream_spec(name="-dash", workload="synthetic", world_size=0),
    # Issue 10, break 1: each bound passes but slots x batch x payload
    # wraps to a 4 MiB segment. Fails spec_fuzz until sizes are checked as
    # products.
    stream_spec(name="wrap", global_batch_size=1 << 22, world_size=1,
                slots=1024, options={"examples": str(1 << 22),
                                     "payload_bytes": str(2**32 - 24)}),
    stream_spec(start_step=2**63, seed=2**64 - 1,
                options={"examples": "18446744073709551615",
                         "payload_bytes": "4294967296"}),
]


# --- the daemon's TOML config file ----------------------------------------

def config_keys():
    """The keys of server/config.cc's flag table, so that the seeds follow
    the flags as they are added."""
    src = open(os.path.join(REPO, "server", "config.cc")).read()
    return sorted(set(re.findall(r'(?:_FLAG\(|Flag\{)"([a-z][a-z0-9-]*)"',
                                 src)))


def configs():
    keys = config_keys()
    sample = {"listen": '"unix:///run/batchd/batchd.sock"',
              "data-root": '"/tmp"', "threads": "2", "slots": "4",
              "allow-remote": "false", "socket-mode": '"0660"',
              "client-stale-seconds": "10.5", "log-level": '"info"'}
    # Every key, with its sample value or an empty string (which integer
    # keys refuse: the error path of each kind).
    empty = '""'
    every = "".join(f"{k} = {sample.get(k, empty)}\n" for k in keys)
    return [
        "# batchd settings\n" + "".join(f"{k} = {v}\n"
                                        for k, v in sample.items()),
        every,
        'listen = "tcp://127.0.0.1:0"\nmax-streams = 64\n'
        'max-stream-bytes = 1073741824\nthroughput-log-seconds = 0\n',
        "threads = 18446744073709551615\nidle-stream-seconds = 1e308\n",
        # Found by config_fuzz: accepted, truncated, printed unloadable.
        "threads = +407370955615\nidle-stream-seconds = 1e308\n",
        "client-stale-seconds = nan\nmax-stream-bytes = 9223372036854775807\n",
        'tls-cert = """\nmulti\nline"""\n[table]\nx = [1, 2]\n',
        "data-root = 'lit\\eral'\n# comment ü\n",
        "",
    ]


# --- text for the tokenizer ------------------------------------------------

TEXTS = [
    "Guten Morgen\tGood morning",
    "Die Straße über dem Fluss ist naïve.\tThe street over the river.",
    "der die das und ist nicht 2017 42 €",
    "  leading  and   repeated   spaces\t",
    "\tonly english",
    "tabs\tand\nnew\rlines\x0bvertical\x0cform",
    "日本語のテキスト\t中文",
    "e\u0301 combining, \u200b zero width, \ufeff bom",
]
BAD_TEXTS = [b"\xff\xfe invalid", b"ok \xc3", b"\xed\xa0\x80 surrogate",
             b"nul\x00inside\tx"]


# --- SentencePiece model files ---------------------------------------------

def piece(text, score=-1.0, kind=1):
    body = field_bytes(1, text.encode()) + b"\x15" + struct.pack("<f", score)
    if kind != 1:
        body += field_varint(3, kind)
    return field_bytes(1, body)


def model(pieces):
    """A ModelProto: <unk>, <s>, </s> and `pieces`, a unigram trainer spec
    and the identity normaliser."""
    out = piece("<unk>", 0.0, 2) + piece("<s>", 0.0, 3) + piece("</s>", 0.0, 3)
    for i, text in enumerate(pieces):
        out += piece(text, -1.0 - i / 10)
    trainer = field_varint(3, 1)  # model_type: UNIGRAM
    normalizer = field_bytes(1, b"identity") + field_varint(3, 1)
    return out + field_bytes(2, trainer) + field_bytes(3, normalizer)


def models():
    words = ["\u2581der", "\u2581die", "\u2581the", "s", "e", "n", "t",
             "\u2581", "a", "ß", "ü"]
    return [model(words), model(words[:3]), model(["x" * 40]),
            model([f"\u2581w{i}" for i in range(64)]),
            model(words)[:-5], b"\x0a\xff", b""]


# --- the cache's entry and blob files (storage/cache_dir.h) ------

CACHE_KIND, CACHE_KEY = b"fuzz-entry", b"a fuzzed key"  # cache_entry_fuzz.cc


def cache_entry(value, kind=CACHE_KIND, key=CACHE_KEY, version=1):
    body = (b"BATCHDC\x01" + struct.pack("<IIQQ", version, len(kind),
                                          len(key), len(value)) +
            kind + key + value)
    return body + struct.pack("<I", crc32c(body))


def cache_blob(value, kind=CACHE_KIND, key=CACHE_KEY):
    body = (value + kind + key + b"BATCHDB\x01" +
            struct.pack("<IIQQ", 1, len(kind), len(key), len(value)))
    return body + struct.pack("<I", crc32c(body))


def cache_files():
    """cache_entry_fuzz inputs: byte 0 is the mode (bit 0 blob, bit 1 seal)."""
    value = bytes(range(64)) * 3
    entry, blob = cache_entry(value), cache_blob(value)
    return [b"\0" + entry, b"\2" + entry, b"\0" + cache_entry(b""),
            b"\0" + entry[:-9], b"\2" + entry[:-4] + b"tail" + entry[-4:],
            b"\2" + cache_entry(value, key=b"other"),
            b"\2" + cache_entry(value, version=2),
            b"\1" + blob, b"\3" + blob, b"\1" + cache_blob(b""),
            b"\3" + blob[:40] + blob[-36:]]


def cache_values():
    """cache_index_fuzz inputs: byte 0 picks the entry (bit 0: listing)
    and the mode (bits 1-2: raw, overwrite at, cut at; LE16 offset next)."""
    return [b"\0" + varint(0), b"\1" + varint(1) + b"\0\0\0",
            b"\2\x01\x00\xff", b"\3\x04\x00\x05", b"\4\x08\x00",
            b"\5\x10\x00", b"\6\x02\x00\x80\x80\x80\x80",
            b"\7\x00\x01" + varint(1 << 40)]


def length_tables():
    """wmt_lengths_fuzz inputs: byte 0 is max_length, then uint16 pairs."""
    def table(max_length, pairs):
        return bytes([max_length]) + b"".join(struct.pack("<HH", a, b)
                                              for a, b in pairs)
    return [table(255, [(3, 5), (255, 0), (0xfffc, 0xfffc), (0xfffd, 0xfffd)]),
            table(16, [(17, 1)]), table(16, [(0xfffc, 3)]), table(8, [])[:1],
            table(64, [(1, 2)] * 40) + b"\x01"]


def images(out):
    import numpy as np
    from PIL import Image
    rng = np.random.default_rng(0)
    a = (rng.random((48, 64, 3)) * 255).astype(np.uint8)
    img = Image.fromarray(a)
    for name, im, kw in [("rgb.jpg", img, {"quality": 90}),
                         ("gray.jpg", img.convert("L"), {}),
                         ("cmyk.jpg", img.convert("CMYK"), {}),
                         ("prog.jpg", img, {"progressive": True}),
                         ("444.jpg", img, {"subsampling": 0})]:
        im.save(os.path.join(out, name), "JPEG", **kw)
    img.save(os.path.join(out, "rgb.png"), "PNG")
    img.convert("P").save(os.path.join(out, "palette.png"), "PNG")
    img.convert("LA").save(os.path.join(out, "gray_alpha.png"), "PNG")


def npy(descr, values, fortran=False, major=1):
    """A .npy file as numpy writes one (header padded to 64 bytes)."""
    header = (f"{{'descr': '{descr}', 'fortran_order': {fortran}, "
              f"'shape': ({len(values)},), }}")
    prefix = 10 if major == 1 else 12
    header += " " * (-(prefix + len(header) + 1) % 64) + "\n"
    size = len(header).to_bytes(2 if major == 1 else 4, "little")
    width = int(descr[2])
    data = b"".join(v.to_bytes(width, "little", signed=True) for v in values)
    return b"\x93NUMPY" + bytes([major, 0]) + size + header.encode() + data


def npys():
    good = npy("<i8", [0, 1, -32768, 32767])
    huge = good.replace(b"(4,)", b"(1152921504606846976,)")
    return [good, good[:-3], npy("<i4", [7, 2]), npy("<i2", [1], major=2),
            npy("<i8", [5], fortran=True), npy("<f8", [0]),
            npy("<i8", [], major=3),
            # Lengths that claim more than the file holds.
            b"\x93NUMPY\x02\x00\xff\xff\xff\xff{", huge]


def write(directory, name, data):
    os.makedirs(directory, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(directory, name), "wb") as f:
        f.write(data)


def criteo_lines():
    """criteo_line_fuzz inputs: lines of a day file (no '\\n'): a label,
    13 counts and 26 categorical fields of 8 hex characters, tab-separated,
    each kind of field empty somewhere, and lines that are not examples."""
    hexes = ["68fd1e64", "80e26c9b", "fb936136", "7b4723c4", "25c83c98"]
    cats = [hexes[i % 5] for i in range(26)]
    good = "\t".join(["1"] + [str(7 ** i % 1000) for i in range(13)] + cats)
    sparse = "\t".join(["0", "", "-1", "12345678", "3.5e2"] + [""] * 9 +
                        [""] * 3 + cats[3:])
    odd = "\t".join(["1", "-7", "0x10", "1e40", "+4"] + ["99"] * 9 +
                     ["ABCDEF12", "abc", "0123456789"] + cats[3:-1] + [""])
    short = "\t".join(["1"] + ["2"] * 12 + cats)  # 12 counts: 39 fields
    return [x.encode() for x in (good, sparse, odd, short, good + "\r",
                                 good[:-4], "", "\t" * 39, "\t" * 40)]


def arrow_streams():
    """arrow_ipc_fuzz inputs: byte 0 is the exponent of a hole after the
    bytes (0: none), then an Arrow IPC stream."""
    rows = [[1, 2, 3], [4, 5], [], [6, 7, 8, 9]]
    good = arrow_ipc.token_stream([rows[:2], rows[2:], []])
    # Before Arrow 0.15 a message had no continuation marker.
    legacy = good.replace(b"\xff\xff\xff\xff", b"")
    other_first = arrow_ipc.framed(arrow_ipc.flatbuffer(arrow_ipc.message(
        arrow_ipc.SCHEMA, arrow_ipc.schema([
            arrow_ipc.field("text", 5, arrow_ipc.Table({})),
            arrow_ipc.field("pair", arrow_ipc.STRUCT, arrow_ipc.Table({}), [
                arrow_ipc.field("a", arrow_ipc.INT, arrow_ipc.int_type(64)),
                arrow_ipc.field("b", 6, arrow_ipc.Table({}))]),
            arrow_ipc.list_of_int()])))) + arrow_ipc.END
    return [
        b"\0" + good, b"\0" + legacy, b"\0" + good[:-13], b"\0" + other_first,
        b"\0" + arrow_ipc.token_stream([[[i]] for i in range(20)]),
        b"\x14" + arrow_ipc.token_stream([[[7] * 40]]),
        # Issue 35, L1: a schema that is a DAG, 2^60 fields walked as a tree.
        b"\0" + arrow_ipc.dag_schema_stream(60),
        # Issue 35, L2: 2 GiB of metadata claimed, inside a sparse 2 GiB file.
        b"\x1f" + arrow_ipc.claimed_metadata_prefix(0x7FFFFFF8),
        b"\x28" + arrow_ipc.claimed_metadata_prefix(0x7FFFFFF8)[4:],
    ]


def criteo_blocks():
    """criteo_blocks_fuzz inputs: block size / 64 - 1, max_line - 1, then a
    day file (criteo_lines() one per line)."""
    lines = criteo_lines()
    day = b"\n".join(lines[:4]) + b"\n"
    return [bytes([3, 255]) + day, bytes([0, 255]) + day,
            bytes([31, 99]) + b"\n".join(lines) + b"\n",
            bytes([0, 0]) + b"\n\n\t\n", bytes([1, 255]) + day[:-1],
            bytes([2, 127]) + day + day[:100]]
def hdf5_replies():
    """hdf5_reply_fuzz inputs: a file size (8 bytes) and an HDF5 helper's
    reply (workloads/fastmri/hdf5_wire.h's Hdf5Reply, 2048 bytes: code,
    slices, width, volume_max, contiguous, 4 bytes of padding, the two
    offsets, the message's length and 2000 bytes of message, 4 of
    padding)."""
    def reply(code=0, slices=2, width=368, contiguous=1, koff=2048,
              toff=2048 + 2 * 640 * 368 * 8, message=b""):
        return struct.pack("<iIIfI4xQQI2000s4x", code, slices, width, 0.25,
                           contiguous, koff, toff, len(message), message)
    size = 2048 + 2 * (640 * 368 * 8 + 320 * 320 * 4)
    good = struct.pack("<Q", size) + reply()
    return [good, struct.pack("<Q", size - 1) + reply(),
            struct.pack("<Q", size) + reply(contiguous=0, slices=7),
            struct.pack("<Q", size) + reply(width=2049),
            struct.pack("<Q", 1 << 63) + reply(koff=(1 << 64) - 8),
            struct.pack("<Q", size) + reply(code=15, message=b"bad\x1b[2J\n"),
            struct.pack("<Q", size) + reply(code=3, message=b"x" * 2000),
            good[:-1], good + b"!"]


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    shards = [EXAMPLES[:1], EXAMPLES[:3], [], [b"x" * 100]]
    # Each target's numbered seeds: out/<target>/<name with i for {}>.
    numbered = [
        ("example_fuzz", "example{}", EXAMPLES),
        ("ogbg_graph_fuzz", "graph{}", graphs()),
        ("tfrecord_fuzz", "shard{}", [tfrecord(r) for r in shards]),
        ("spec_fuzz", "request{}", [open_request(spec, rank=i % 2)
                                    for i, spec in enumerate(SPECS)]),
        ("config_fuzz", "config{}.toml", configs()),
        ("tokenizer_fuzz", "text{}", TEXTS),
        ("tokenizer_fuzz", "bad{}", BAD_TEXTS),
        ("sentencepiece_model_fuzz", "model{}", models()),
        ("cache_entry_fuzz", "file{}", cache_files()),
        ("cache_index_fuzz", "value{}", cache_values()),
        ("wmt_lengths_fuzz", "table{}", length_tables()),
        ("npy_fuzz", "array{}", npys()),
        ("criteo_line_fuzz", "line{}", criteo_lines()),
        ("criteo_blocks_fuzz", "day{}", criteo_blocks()),
        ("arrow_ipc_fuzz", "stream{}", arrow_streams()),
        ("hdf5_reply_fuzz", "reply{}", hdf5_replies()),
    ]
    for target, name, seeds in numbered:
        for i, data in enumerate(seeds):
            write(f"{out}/{target}", name.format(i), data)
    write(f"{out}/tfrecord_fuzz", "truncated", tfrecord(EXAMPLES[:2])[:-7])
    claim = struct.pack("<Q", 1 << 40)  # a record longer than the file
    write(f"{out}/tfrecord_fuzz", "claimed",
          claim + struct.pack("<I", masked_crc(claim)) + b"x" * 20)
    os.makedirs(f"{out}/image_decoder_fuzz", exist_ok=True)
    images(f"{out}/image_decoder_fuzz")


if __name__ == "__main__":
    main()
