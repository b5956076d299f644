"""ogbg (AlgoPerf's ogbg-molpcba GNN): what
`batchd.algoperf.input_queue("ogbg", ...)` yields.

- ``inputs``: a ``GraphsTuple`` (a namedtuple with jraph's fields, in
  jraph's order: nodes, edges, receivers, senders, globals, n_node,
  n_edge) of torch tensors: nodes float32 [N, 9], edges float32 [E, 3],
  receivers and senders int64 [E], globals ``{}``, n_node and n_edge int64
  [G]; ``targets`` float32 [G, 128] (labels, NaN -> 0); ``weights`` bool
  [G, 128] (label present and graph real). Device ``cuda:RANK`` (the
  queue's device). jraph is not needed.
- Batching is AlgoPerf's jraph ``dynamically_batch`` + ``pad_with_graphs``
  with the same budget per graph slot (26 nodes, 56 directed edges; edges
  doubled, one padding graph holding the padding nodes and edges, its
  edges from its first node to itself, then empty graphs), but in ROWS of
  r = ``graphs_per_row`` graph slots (default 64) that do not depend on the
  world size: a row holds at most r graphs, 26 r nodes and 56 r edges, and
  is padded to 26 r + 1 nodes, 56 r edges and r + 1 graphs. A global batch
  of B graphs is B / r rows, and a rank's slice k = B / (r W) consecutive
  rows, concatenated here (senders/receivers offset by the nodes of the
  rows before): N = k (26 r + 1), E = 56 k r, G = k (r + 1). AlgoPerf packs
  one batch of b = B / W slots per rank (26 b + 1 nodes, 56 b edges, b + 1
  graphs), so its packing, and which graphs share a batch, change with W;
  batchd's are the same at every W, and a rank's batch has k - 1 more
  padding nodes and graphs than AlgoPerf's at W = B / r (equal shapes
  there). B must be a multiple of r W.
- train: batchd's global seeded shuffle of the graphs (each epoch), packed
  in that order; AlgoPerf shuffles files and a 2^15 buffer.
- eval_train: the first num_eval_train_examples (43,793) train graphs in
  file order, the same every pass; AlgoPerf draws a shuffled, repeating
  train stream. validation and test: file order, as AlgoPerf.
- Evaluation queues repeat (AlgoPerf's ``itertools.cycle`` over stored
  batches; eval_train's ``repeat()``); the last global batch of a pass is
  completed with all-padding rows (weights 0) where AlgoPerf's last batch
  is short.
- A graph that cannot be parsed or names a node out of range is left out
  and counted by the daemon; so is one over a row's budget on its own
  (AlgoPerf raises).
"""

import collections

WORKLOAD = "ogbg"
NUM_EVAL_TRAIN_EXAMPLES = 43793
DEFAULT_GRAPHS_PER_ROW = 64
NODES_PER_GRAPH = 26

GraphsTuple = collections.namedtuple(
    "GraphsTuple",
    ["nodes", "edges", "receivers", "senders", "globals", "n_node", "n_edge"])


def options(split, opts):
    opts.setdefault("graphs_per_row", DEFAULT_GRAPHS_PER_ROW)


def rows(global_batch_size, opts):
    """The stream's global batch in rows of graphs_per_row graph slots."""
    r = int(opts["graphs_per_row"])
    if global_batch_size % r:
        raise ValueError(f"ogbg: global_batch_size {global_batch_size} is not "
                         f"a multiple of graphs_per_row {r}")
    return global_batch_size // r


def repeats(split, num_batches, repeat_final_dataset):
    return split != "train"


def convert(host, split, move, torch):
    k, n_per_row = host["nodes"].shape[:2]
    nodes = move(host["nodes"], torch.float32).reshape(-1, 9)
    edges = move(host["edges"], torch.float32).reshape(-1, 3)
    offset = (torch.arange(k, device=nodes.device) * n_per_row)[:, None]
    senders = (move(host["senders"], torch.int64) + offset).reshape(-1)
    receivers = (move(host["receivers"], torch.int64) + offset).reshape(-1)
    graphs = GraphsTuple(
        nodes=nodes, edges=edges, receivers=receivers, senders=senders,
        globals={}, n_node=move(host["n_node"], torch.int64).reshape(-1),
        n_edge=move(host["n_edge"], torch.int64).reshape(-1))
    return {"inputs": graphs,
            "targets": move(host["targets"], torch.float32).reshape(-1, 128),
            "weights": move(host["weights"], torch.bool).reshape(-1, 128)}
