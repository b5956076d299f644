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
  edges from its first node to itself, then empty graphs), in ROWS of
  r = ``graphs_per_row`` graph slots: a row holds at most r graphs, 26 r
  nodes and 56 r edges, and is padded to 26 r + 1 nodes, 56 r edges and
  r + 1 graphs. A global batch of B graphs is B / r rows, and a rank's
  slice k = B / (r W) consecutive rows, concatenated here (senders and
  receivers offset by the nodes of the rows before): N = k (26 r + 1),
  E = 56 k r, G = k (r + 1).
- By default r = B // W (W the world size): every rank's batch is one row
  of b = B // W slots, AlgoPerf's per-device batch, so the shapes are
  AlgoPerf's (nodes [26 b + 1, 9], edges [56 b, 3], n_node [b + 1], ...)
  at every B and W, and so are the rows: AlgoPerf packs one stream into
  batches of b slots and gives device d the d-th of each W, as batchd
  gives rank d row d of each global batch. Those rows depend on W, so a
  state_dict resumes exactly at the same W; resumed at another W the
  queue keeps the state's r (each rank then gets B / (r W) rows).
- ``options={"graphs_per_row": r}`` (B a multiple of r W) fixes the rows
  instead: the same at every W, so a job may resume at another world size
  with the same batches; a rank's batch then has k - 1 more padding nodes
  and graphs than AlgoPerf's (equal shapes at W = B / r).
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
NODES_PER_GRAPH = 26

GraphsTuple = collections.namedtuple(
    "GraphsTuple",
    ["nodes", "edges", "receivers", "senders", "globals", "n_node", "n_edge"])


def rows(global_batch_size, opts, world_size, saved_options):
    """The stream's global batch in rows of graphs_per_row graph slots,
    setting graphs_per_row where the caller did not: the resumed state's
    (`saved_options`: the options of a state_dict, or None), else
    AlgoPerf's per-device batch, global_batch_size // world_size."""
    if "graphs_per_row" not in opts:
        saved = (saved_options or {}).get("graphs_per_row")
        if saved is not None:
            opts["graphs_per_row"] = int(saved)
        else:
            per_rank = global_batch_size // world_size
            if per_rank < 1:
                raise ValueError(
                    f"ogbg: global_batch_size {global_batch_size} gives no "
                    f"graph to each of {world_size} ranks")
            opts["graphs_per_row"] = per_rank
            # AlgoPerf's global batch: W per-device batches of B // W slots
            # (B itself where W divides it).
            return world_size
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
