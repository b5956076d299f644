"""finewebedu_lm (AlgoPerf's decoder-only LM workload): what
`batchd.algoperf.input_queue("finewebedu_lm", ...)` yields.

- ``inputs`` int32 [b, 1024] and ``targets`` int64 [b, 1024]: window w of
  the split's flat token stream is tokens [1025w, 1025w + 1025), inputs its
  first 1,024 tokens, targets its last 1,024 (the daemon's ring carries
  int32; targets are widened here). On the rank's GPU (cuda:RANK), or the
  CPU without one.
- eval splits (``eval_train``: train/ from its start, the first
  num_eval_train_examples = 10,000 windows; ``validation``: val/), in
  order: ``weights`` float32 [b, 1024], 1 on real rows, 0 on the rows of
  -1 (inputs and targets) that pad the last batch of a pass. Queues repeat
  as AlgoPerf's ``take(num_batches).repeat()``. Evaluation covers every
  window exactly once across the ranks, whatever the world size; AlgoPerf's
  ranks each run the whole pipeline and stride through num_batches local
  batches, so with W > 1 it covers only the first num_examples / W
  windows, each W times.
- train: ``weights`` None. Windows are shuffled over the whole split per
  epoch (batchd's seeded global shuffle, seeded by ``data_rng``), where
  AlgoPerf shuffles within a buffer of 1,000 windows; each epoch's
  remainder (fewer than a global batch of windows) is dropped, where
  AlgoPerf serves it as a last batch padded with 0 rows and float64
  weights: at AlgoPerf's batch sizes that is under 0.01 % of an epoch,
  and its runs do not finish one.
"""

WORKLOAD = "finewebedu_lm"
NUM_EVAL_TRAIN_EXAMPLES = 10000


def convert(host, split, move, torch):
    return {"inputs": move(host["inputs"], torch.int32),
            "targets": move(host["targets"], torch.int64),
            "weights": (move(host["weights"], torch.float32)
                        if "weights" in host else None)}
