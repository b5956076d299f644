"""wmt (AlgoPerf's `wmt` Transformer): what
`batchd.algoperf.input_queue("wmt", ...)` yields.

- int64 [B, 256] everywhere, as AlgoPerf's PyTorch workload casts every
  array with ``torch.as_tensor(value, dtype=torch.int64)``: train
  ``inputs``, ``inputs_position``, ``inputs_segmentation``, ``targets``,
  ``targets_position``, ``targets_segmentation`` and ``weights`` =
  ``targets > 0`` (BaseWmtWorkload._build_input_queue adds
  ``np.where(batch['targets'] > 0, 1, 0)`` to train batches too, and the
  baseline submissions mask the loss with ``batch.get('weights')``);
  evaluation splits ``inputs``, ``targets``, ``weights`` = ``targets > 0``
  and 0 on padding rows (``logical_and`` of the padding mask with
  ``targets > 0``), integer so that ``translate_and_calculate_bleu``'s
  ``range(weights.sum(0)[0].item())`` works. Its odd ``weights.sum(0)[0]``
  (the rows whose first target token is not padding) counts the real rows
  because every kept pair has at least EOS.
- eval_train: the first num_eval_train_examples length-filtered train
  pairs in file order, padded one pair per row like validation. AlgoPerf
  draws them through ``shuffle(1024, seed)`` over the same file order and
  reshuffles on every repeat, so each of its passes holds a different draw
  of about the first num_eval_train_examples + 1023 pairs; batchd's passes
  are the same fixed set every time (deliberately: repeated evaluations
  then measure the same examples).
- Evaluation queues repeat with ``repeat_final_dataset`` as AlgoPerf's
  ``ds.take(num_batches).repeat()`` (it draws 2 x num_batches per
  evaluation: metrics, then BLEU). Like it, a split shorter than
  num_batches (its length filter drops pairs, while AlgoPerf counts
  num_batches from the unfiltered size) starts again early: the metrics
  loop then reads into the next pass and the BLEU loop starts mid-pass, as
  in AlgoPerf.
- Ranks: rank r gets the r-th contiguous slice of every global batch, as
  AlgoPerf's WMT does (``tensor[0]`` of the batch reshaped to [W, B, 256]).
"""

WORKLOAD = "wmt"
NUM_EVAL_TRAIN_EXAMPLES = 3072
TRAIN_KEYS = ("inputs", "inputs_position", "inputs_segmentation",
              "targets", "targets_position", "targets_segmentation",
              "weights")
EVAL_KEYS = ("inputs", "targets", "weights")


def convert(host, split, move, torch):
    names = TRAIN_KEYS[:-1] if split == "train" else EVAL_KEYS[:-1]
    out = {name: move(host[name], torch.int64) for name in names}
    # AlgoPerf: weights = np.where(targets > 0, 1, 0), and-ed with the
    # padding mask where the batch has one; int64 once in torch.
    real = out["targets"] > 0
    if "weights" in host:
        real &= move(host["weights"], torch.float32) > 0
    out["weights"] = real.to(torch.int64)
    return out
