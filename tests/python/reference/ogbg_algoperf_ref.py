"""Expected ogbg batches as AlgoPerf's input pipeline makes them for W
devices (algoperf/workloads/ogbg/input_pipeline.py, `_get_batch_iterator`,
and the PyTorch workload's `_build_input_queue`): graphs made jraph
GraphsTuples as ogbg_ref.py does (AlgoPerf's `_to_jraph`), batched by
jraph.dynamically_batch with b = B // W graph slots per device (26 b + 1
nodes, 56 b edges, b + 1 graphs), each batch's labels split off
(globals = {}), NaN labels 0 and weights = label present and graph real
(jraph.get_graph_padding_mask); W consecutive batches make a global batch,
device d taking the d-th, and the batches after the last whole group are
dropped, as AlgoPerf's iterator drops them.

    ogbg_algoperf_ref.py DIR OUTDIR SPLIT:B:W[:ORDER.npy] ...

reads DIR/ogbg_molpcba/0.1.3's SPLIT shards in file order (train: the 8
train shards), or the graphs at the file-order indices ORDER in that order
(batchd's shuffle of an epoch, which AlgoPerf's own shuffle cannot give),
and writes OUTDIR/SPLIT-B-W.npz (one TensorFlow start for every job).
Each holds, stacked [global batches, W, ...]: nodes, edges, senders,
receivers, n_node, n_edge, targets, weights; `rest_*`: the same fields of
the batches AlgoPerf drops (fewer than W, stacked [k, ...]); and each
graph of the split in file order: graph_nodes (node count), graph_labels
(NaN -> -1), graph_node_feat (every graph's nodes, concatenated).
"""

import os
import sys

import jraph
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ogbg_ref import graphs  # noqa: E402

FIELDS = ("nodes", "edges", "senders", "receivers", "n_node", "n_edge",
          "targets", "weights")


def device_batches(gs, per_device):
    """AlgoPerf's per-device batches of `gs`, as dicts of FIELDS."""
    for batched in jraph.dynamically_batch(iter(gs), 26 * per_device + 1,
                                           56 * per_device, per_device + 1):
        labels = batched.globals
        graph = batched._replace(globals={})
        nan = np.isnan(labels)
        targets = np.copy(labels)
        np.place(targets, nan, 0)
        weights = (1.0 - nan) * jraph.get_graph_padding_mask(graph)[:, None]
        yield {"nodes": graph.nodes, "edges": graph.edges,
               "senders": graph.senders, "receivers": graph.receivers,
               "n_node": graph.n_node, "n_edge": graph.n_edge,
               "targets": targets, "weights": weights.astype(bool)}


def write(every, order, global_batch, world, out):
    batches = list(device_batches([every[i] for i in order],
                                  global_batch // world))
    whole = len(batches) // world * world
    result = {}
    for name in FIELDS:
        kept = [b[name] for b in batches[:whole]]
        result[name] = np.stack(kept).reshape(whole // world, world,
                                              *kept[0].shape)
        rest = [b[name] for b in batches[whole:]]
        if rest:
            result["rest_" + name] = np.stack(rest)
    result["graph_nodes"] = np.array([int(g.n_node[0]) for g in every])
    result["graph_labels"] = np.stack(
        [np.nan_to_num(g.globals[0], nan=-1.0) for g in every])
    result["graph_node_feat"] = np.concatenate([g.nodes for g in every])
    np.savez(out, **result)


def main():
    data, outdir = sys.argv[1], sys.argv[2]
    split_graphs = {}
    for job in sys.argv[3:]:
        split, b, w, *order = job.split(":")
        if split not in split_graphs:
            split_graphs[split] = list(graphs(data, split))
        every = split_graphs[split]
        order = (np.load(order[0]).tolist() if order
                 else range(len(every)))
        write(every, order, int(b), int(w),
              os.path.join(outdir, f"{split}-{b}-{w}.npz"))


if __name__ == "__main__":
    main()
