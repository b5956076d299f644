"""Expected ogbg rows, computed with TensorFlow and jraph as AlgoPerf's
ogbg input pipeline does, in batchd's row budget.

    ogbg_ref.py DIR SPLIT R OUT.npz [COUNT]

reads DIR/ogbg_molpcba/0.1.3's SPLIT shards (train: the 8 train shards) in
file order with tf.data.TFRecordDataset, parses each record with the TFDS
feature spec of ogbg_molpcba 0.1.3, makes each graph a jraph.GraphsTuple as
AlgoPerf's _to_jraph does (edges doubled: senders = src ++ dst, receivers =
dst ++ src; globals = labels [1, 128]), keeps the first COUNT graphs if
given, and batches them with jraph.dynamically_batch(n_node = 26 R + 1,
n_edge = 56 R, n_graph = R + 1) (which pads with pad_with_graphs). Graphs
that alone exceed the budget are left out (AlgoPerf raises). Writes every
row's nodes, edges, senders, receivers, n_node, n_edge, targets (NaN -> 0)
and weights (label present and graph real), stacked on a leading axis, and
`graph_labels` / `graph_nodes`: each kept graph's labels (NaN -> -1) and
node count, in file order (train is compared as a multiset).
"""

import os
import sys

import jraph
import numpy as np
import tensorflow as tf

SPEC = {
    "num_nodes": tf.io.FixedLenFeature([1], tf.int64),
    "num_edges": tf.io.FixedLenFeature([1], tf.int64),
    "node_feat": tf.io.VarLenFeature(tf.float32),
    "edge_feat": tf.io.VarLenFeature(tf.float32),
    "edge_index": tf.io.VarLenFeature(tf.int64),
    "labels": tf.io.FixedLenFeature([128], tf.float32),
}


def files(data, split):
    d = os.path.join(data, "ogbg_molpcba", "0.1.3")
    if split in ("train", "eval_train"):
        return [os.path.join(d, f"ogbg_molpcba-train.tfrecord-{i:05d}-of-00008")
                for i in range(8)]
    return [os.path.join(d, f"ogbg_molpcba-{split}.tfrecord-00000-of-00001")]


def graphs(data, split):
    for record in tf.data.TFRecordDataset(files(data, split)):
        ex = tf.io.parse_single_example(record, SPEC)
        n = int(ex["num_nodes"][0])
        e = int(ex["num_edges"][0])
        nodes = tf.sparse.to_dense(ex["node_feat"]).numpy().reshape(n, 9)
        efeat = tf.sparse.to_dense(ex["edge_feat"]).numpy().reshape(e, 3)
        index = tf.sparse.to_dense(ex["edge_index"]).numpy().reshape(e, 2)
        src, dst = index[:, 0], index[:, 1]
        yield jraph.GraphsTuple(
            n_node=np.array([n]), n_edge=np.array([2 * e]),
            nodes=nodes, edges=np.concatenate([efeat, efeat]),
            senders=np.concatenate([src, dst]),
            receivers=np.concatenate([dst, src]),
            globals=ex["labels"].numpy()[None])


def main():
    data, split, r, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    count = int(sys.argv[5]) if len(sys.argv) > 5 else None
    kept = []
    for i, g in enumerate(graphs(data, split)):
        if count is not None and i >= count:
            break
        if int(g.n_node[0]) > 26 * r or int(g.n_edge[0]) > 56 * r:
            continue
        kept.append(g)
    rows = {k: [] for k in ("nodes", "edges", "senders", "receivers",
                            "n_node", "n_edge", "targets", "weights")}
    for b in jraph.dynamically_batch(iter(kept), n_node=26 * r + 1,
                                     n_edge=56 * r, n_graph=r + 1):
        labels = b.globals
        real = jraph.get_graph_padding_mask(b)
        rows["nodes"].append(b.nodes)
        rows["edges"].append(b.edges)
        rows["senders"].append(b.senders)
        rows["receivers"].append(b.receivers)
        rows["n_node"].append(b.n_node)
        rows["n_edge"].append(b.n_edge)
        rows["targets"].append(np.nan_to_num(labels, nan=0.0))
        rows["weights"].append(~np.isnan(labels) & real[:, None])
    np.savez(out, **{k: np.stack(v) for k, v in rows.items()},
             graph_labels=np.stack([np.nan_to_num(g.globals[0], nan=-1.0)
                                    for g in kept]),
             graph_nodes=np.array([int(g.n_node[0]) for g in kept]))


if __name__ == "__main__":
    main()
