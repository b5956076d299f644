#!/usr/bin/env python3
"""A small ogbg-molpcba data set in TFDS's layout (ogbg_molpcba 0.1.3), as
AlgoPerf reads it, without TensorFlow: random molecules (a spanning tree of
bonds plus a few rings), 9 atom and 3 bond features, 128 labels of which
some are NaN (missing). Deterministic from --seed.

    make_ogbg.py OUT [--train N] [--validation N] [--test N] [--seed S]
                 [--stats uniform|molpcba]

--stats picks the molecules' sizes and features:
  uniform  (the default; the tests' small sets) 5..60 atoms, uniform (mean
           32.5), 0..3 ring bonds (~33 bonds), features uniform small ints.
  molpcba  ogbg-molpcba's (OGB's release: 26 atoms and 28 bonds a
           graph on average): atoms 1 + Gamma (mean 26, sd ~6.5, skewed
           right), ring bonds Poisson (mean 3.1: 28.1 bonds), atom features
           of drug-like molecules (mostly C, N, O; degree the atom's own
           bond count; aromatic and ring flags), bond features mostly single
           and double. For benchmarks (bench/ogbg_bench.py): AlgoPerf's batch
           budget (26 b + 1 nodes, 56 b edges) is sized for these means, so
           larger molecules close batches early and change graphs/s.

writes OUT/ogbg_molpcba/0.1.3/ with dataset_info.json, features.json and
ogbg_molpcba-{train.tfrecord-0000{0..7}-of-00008,
validation.tfrecord-00000-of-00001, test.tfrecord-00000-of-00001}.
Needs numpy only.
"""

import json
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "common"))
import generator_cli  # noqa: E402
from records import field_bytes, varint, write_tfrecord  # noqa: E402

VERSION_DIR = os.path.join("ogbg_molpcba", "0.1.3")
TRAIN_SHARDS = 8
FEATURES = {
    # name: (dtype, shape) as tfds.features.FeaturesDict of ogbg_molpcba.
    "edge_feat": ("float32", [None, 3]),
    "edge_index": ("int64", [None, 2]),
    "labels": ("float32", [128]),
    "node_feat": ("float32", [None, 9]),
    "num_edges": ("int64", [None]),
    "num_nodes": ("int64", [None]),
}


def _float_feature(values):
    packed = struct.pack(f"<{len(values)}f", *values)
    return field_bytes(2, field_bytes(1, packed))  # Feature.float_list


def _int64_feature(values):
    packed = b"".join(varint(int(v)) for v in values)
    return field_bytes(3, field_bytes(1, packed))  # Feature.int64_list


def serialize_graph(node_feat, edge_feat, edge_index, labels):
    """A TFDS-serialised tf.train.Example of one graph (keys sorted)."""
    n, e = len(node_feat), len(edge_feat)
    feats = {
        "edge_feat": _float_feature(np.asarray(edge_feat, np.float32).ravel()),
        "edge_index": _int64_feature(np.asarray(edge_index).ravel()),
        "labels": _float_feature(np.asarray(labels, np.float32).ravel()),
        "node_feat": _float_feature(np.asarray(node_feat, np.float32).ravel()),
        "num_edges": _int64_feature([e]),
        "num_nodes": _int64_feature([n]),
    }
    body = b"".join(field_bytes(1, field_bytes(1, k) + field_bytes(2, v))
                    for k, v in sorted(feats.items()))
    return field_bytes(1, body)


def random_graph(rng):
    n = int(rng.integers(5, 61))
    # A spanning tree, then a few ring-closing bonds.
    bonds = [(int(rng.integers(0, i)), i) for i in range(1, n)]
    for _ in range(int(rng.integers(0, 4))):
        a, b = (int(x) for x in rng.integers(0, n, 2))
        if a != b:
            bonds.append((a, b))
    node_feat = rng.integers(0, 10, (n, 9)).astype(np.float32)
    edge_feat = rng.integers(0, 4, (len(bonds), 3)).astype(np.float32)
    labels = rng.integers(0, 2, 128).astype(np.float32)
    labels[rng.random(128) < 0.6] = np.nan
    return serialize_graph(node_feat, edge_feat, np.array(bonds, np.int64),
                           labels)


# OGB's atom feature columns (atomic number - 1, chirality, degree, formal
# charge + 5, hydrogens, radical electrons, hybridisation, aromatic, in a
# ring) and bond columns (type, stereo, conjugated): drug-like frequencies.
ATOMS = ((5, 6, 7, 8, 15, 16, 34), (0.72, 0.12, 0.12, 0.02, 0.01, 0.005,
                                     0.005))  # C N O F S Cl Br


def molpcba_graph(rng):
    n = 1 + int(round(rng.gamma(14.8, 25.0 / 14.8)))
    bonds = [(int(rng.integers(0, i)), i) for i in range(1, n)]
    have = set(bonds)
    rings = min(int(rng.poisson(3.1)), n * (n - 1) // 2 - len(bonds))
    while rings > 0:
        a, b = sorted(int(x) for x in rng.integers(0, n, 2))
        if a != b and (a, b) not in have:
            have.add((a, b))
            bonds.append((a, b))
            rings -= 1
    degree = np.bincount(np.array(bonds, np.int64).ravel(), minlength=n) \
        if bonds else np.zeros(n, np.int64)
    aromatic = rng.random(n) < 0.4
    node_feat = np.stack([
        rng.choice(ATOMS[0], n, p=ATOMS[1] / np.sum(ATOMS[1])),
        (rng.random(n) < 0.03).astype(np.int64),
        degree,
        5 + (rng.random(n) < 0.02).astype(np.int64),
        rng.choice(4, n, p=(0.45, 0.30, 0.15, 0.10)),
        np.zeros(n, np.int64),
        np.where(aromatic, 2, rng.choice((1, 2, 3), n, p=(0.05, 0.35, 0.6))),
        aromatic,
        aromatic | (rng.random(n) < 0.2)], axis=1).astype(np.float32)
    e = len(bonds)
    edge_feat = np.stack([
        rng.choice(4, e, p=(0.60, 0.12, 0.01, 0.27)),
        (rng.random(e) < 0.02).astype(np.int64) * 3,
        rng.random(e) < 0.45], axis=1).astype(np.float32)
    labels = (rng.random(128) < 0.02).astype(np.float32)
    labels[rng.random(128) < 0.6] = np.nan
    return serialize_graph(node_feat, edge_feat,
                           np.array(bonds, np.int64).reshape(-1, 2), labels)


STATS = {"uniform": random_graph, "molpcba": molpcba_graph}


def write_info(out, sizes):
    with open(os.path.join(out, "features.json"), "w") as f:
        json.dump({
            "type": "tensorflow_datasets.core.features.features_dict."
                    "FeaturesDict",
            "content": {"features": {
                k: {"type": "tensorflow_datasets.core.features.tensor_feature."
                            "Tensor",
                    "content": {"shape": {"dimensions": [
                        -1 if d is None else d for d in shape]},
                        "dtype": dtype, "encoding": "none"}}
                for k, (dtype, shape) in FEATURES.items()}}}, f, indent=1)
    with open(os.path.join(out, "dataset_info.json"), "w") as f:
        json.dump({
            "name": "ogbg_molpcba", "version": "0.1.3",
            "fileFormat": "tfrecord", "moduleName":
                "tensorflow_datasets.graphs.ogbg_molpcba.ogbg_molpcba",
            "splits": [{"name": name, "numBytes": "0",
                        "shardLengths": [str(x) for x in lengths],
                        "filepathTemplate":
                            "{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}"}
                       for name, lengths in sizes.items()]}, f, indent=1)


def main():
    ap = generator_cli.parser(__doc__, train=400, validation=120, test=120,
                              seed=0)
    ap.add_argument("--stats", choices=sorted(STATS), default="uniform",
                    help="sizes and features: uniform (small test sets) or "
                    "molpcba (ogbg-molpcba's, for benchmarks; see above)")
    a = ap.parse_args()
    make_graph = STATS[a.stats]
    out = os.path.join(a.out, VERSION_DIR)
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(a.seed)
    sizes = {}
    train = [make_graph(rng) for _ in range(a.train)]
    per = [len(range(s, a.train, TRAIN_SHARDS)) for s in range(TRAIN_SHARDS)]
    at = 0
    for s, count in enumerate(per):
        write_tfrecord(os.path.join(
            out, f"ogbg_molpcba-train.tfrecord-{s:05d}-of-{TRAIN_SHARDS:05d}"),
            train[at:at + count])
        at += count
    sizes["train"] = per
    for split in ("validation", "test"):
        n = getattr(a, split)
        write_tfrecord(os.path.join(
            out, f"ogbg_molpcba-{split}.tfrecord-00000-of-00001"),
            [make_graph(rng) for _ in range(n)])
        sizes[split] = [n]
    write_info(out, sizes)


if __name__ == "__main__":
    main()
