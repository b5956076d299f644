"""fastmri (AlgoPerf's knee single-coil U-Net): what
`batchd.algoperf.input_queue("fastmri", ...)` yields.

- ``inputs`` and ``targets`` float32 [b, 320, 320] (the masked k-space's
  centred inverse FFT, cropped, its magnitude normalised by its own mean
  and std and clipped to [-6, 6]; the target normalised with the same
  statistics), ``mean``, ``std`` and ``volume_max`` float32 [b], as
  AlgoPerf's `_process_example` computes them (float32; the FFT by FFTW).
  Evaluation splits add ``weights`` float64 [b]: 1 on real slices, 0 on
  the zero rows that pad the last batch of a pass to the global batch, as
  AlgoPerf's DDP queue hands them on every batch (its one-process queue
  has weights only on the padded last batch).
- Masks: validation and test use AlgoPerf's fixed eval mask (seed (0, 0),
  TF's stateless uniform reproduced bit for bit: the same inputs as
  AlgoPerf's to float32 rounding). train and eval_train draw each slice's
  mask from batchd's counter-based stream of (seed, slice) with AlgoPerf's
  distribution (centre fraction 0.08, acceleration 4); like AlgoPerf's, a
  slice keeps its mask for the whole run. Pass ``seed=int(data_rng[0])``.
- train: every slice of the train volumes in batchd's seeded global
  shuffle, re-drawn each epoch (AlgoPerf: a 16 x B shuffle buffer over the
  volumes in filesystem order), last partial batch dropped; batchd reads
  ahead with constant memory where AlgoPerf caches the raw train split in
  RAM (~80 GB on the release).
- eval_train: the first num_eval_train_examples (3,584) train slices, the
  volumes in sorted order, the same every pass; AlgoPerf draws them from
  its shuffled train stream. validation: the first 100 sorted val volumes'
  slices in order; test: the rest (AlgoPerf's split of the val
  directory; option ``validation_files`` moves the cut).
- Eval queues repeat when ``repeat_final_dataset`` is set, as AlgoPerf's
  ``take(num_batches).cache().repeat()``; every rank reads its own slice
  of each batch from its ring, with no rank-0 pipeline and no broadcast.
"""

WORKLOAD = "fastmri"
NUM_EVAL_TRAIN_EXAMPLES = 3584


def convert(host, split, move, torch):
    out = {key: move(host[key], torch.float32)
           for key in ("inputs", "targets", "mean", "std", "volume_max")}
    if "weights" in host:
        out["weights"] = move(host["weights"], torch.float64)
    return out
