"""criteo1tb (AlgoPerf's DLRM workloads): what
`batchd.algoperf.input_queue("criteo1tb", ...)` yields.

- ``inputs`` float32 [b, 39] (13 dense features log(max(x, 0) + 1), then
  the 26 hashed categorical ids cast to float32, ids above 2^24 rounded as
  AlgoPerf's cast rounds them), ``targets`` float32 [b], ``weights``
  float32 [b]: ones on train; on eval splits 1 on real rows and 0 on the
  zero rows that pad the last batch of a pass. A line that is not a Criteo
  example (wrong field count, a non-number, over max_line_bytes) is served
  as a zero row of weight 0 and counted; AlgoPerf's pipeline would stop
  with an error. Option ``ids="int64"`` adds ``ids`` int64 [b, 26], the
  exact ids.
- Shapes are those AlgoPerf's queue yields on rank 0 (and on one process)
  on every rank: ``targets`` and ``weights`` [b]. Its ranks > 0 get
  [b, 1] (an artefact of broadcasting [W, b, 1]), and its eval batches that
  need no padding carry weights [b, 1]; the model's loss broadcasts either.
- Eval queues repeat as AlgoPerf's ``take(num_batches).repeat()``.
  Evaluation covers every line once across the ranks (batchd's slices),
  with no rank-0 broadcast.
- train: not AlgoPerf's order (a shuffle of the day files' names, lines in
  file order): blocks of the files permuted per epoch and lines shuffled
  within windows of blocks (docs/criteo1tb.md), seeded by ``data_rng``.
- eval_train: the first num_eval_train_examples lines of the train files in
  file order (day_0_00, day_0_01, ...), the same lines every pass; AlgoPerf
  reads them from an unseeded shuffle of the train files (different lines
  on every run).
"""

WORKLOAD = "criteo1tb"
NUM_EVAL_TRAIN_EXAMPLES = 83279872


def convert(host, split, move, torch):
    out = {"inputs": move(host["inputs"], torch.float32),
           "targets": move(host["targets"], torch.float32),
           "weights": move(host["weights"], torch.float32)}
    if "ids" in host:
        out["ids"] = move(host["ids"], torch.int64)
    return out
