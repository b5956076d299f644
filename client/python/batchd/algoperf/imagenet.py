"""imagenet (AlgoPerf's `imagenet_resnet` and `imagenet_vit`): what
`batchd.algoperf.input_queue("imagenet", ...)` yields.

- ``inputs`` float32 [B, 3, 224, 224] normalised with ImageNet's mean and
  std on the device (the ring carries uint8 NCHW: 4x less shared-memory
  traffic than float32), ``targets`` int64 [B]. Evaluation splits add
  ``weights`` float32 [B], 1 on real examples and 0 on the padding of the
  last global batch. AlgoPerf yields no ``weights`` on validation and
  eval_train (its per-rank DistributedEvalSampler leaves the last batches
  uneven instead) and float ``weights`` only on the padded last batch of
  test; its eval loop reads them with ``batch.get('weights')``, where a
  weight of 1 counts as no weight, so the metrics are the same and every
  rank gets equally shaped batches (uneven ones hang DDP collectives). This
  is deliberate.
- eval_train is AlgoPerf's, not the train stream: Resize(256) +
  CenterCrop(224) over the very subset AlgoPerf draws,
  ``random.Random(seed).shuffle(list(range(N)))[:num_eval_train_examples]``
  (N = the train split's size; AlgoPerf hard-codes 1,281,167, the real
  size), in that order; pass ``seed=int(data_rng[0])`` of the data_rng
  AlgoPerf's `_eval_model_on_split` derives.
- test = ImageNet-v2 (AlgoPerf loads TFDS
  ``imagenet_v2/matched-frequency:3.0.0``): point ``data`` at the TFDS
  data_dir (AlgoPerf's imagenet_v2_data_dir), which holds
  ``imagenet_v2/matched-frequency/3.0.0/imagenet_v2-test.tfrecord-*``; a
  ``test`` folder or ``*-test.tfrecord-*`` shards there are used first.
  batchd decodes it with the same Resize(256) + CenterCrop(224) as
  validation; AlgoPerf's TF pipeline resizes ImageNet-v2 its own way.
- Evaluation queues repeat when num_batches is None, as AlgoPerf's
  ``data_utils.cycle`` (test: ``itertools.cycle``) does; a queue given
  num_batches stops after them unless ``repeat_final_dataset``, where
  AlgoPerf's ignores the argument.
- Ranks: AlgoPerf's ImageNet samplers stride (``indices[r::W]``) where
  batchd gives rank r the r-th contiguous slice; that changes which rank
  sees an example, not the sums its metrics all-reduce.
"""

from .. import normalize

WORKLOAD = "imagenet"  # the daemon's workload
NUM_EVAL_TRAIN_EXAMPLES = 50176
KEYS = ("inputs", "targets")


def options(split, opts):
    opts.setdefault("layout", "nchw")


def repeats(split, num_batches, repeat_final_dataset):
    return split != "train" and (repeat_final_dataset or num_batches is None)


def convert(host, split, move, torch):
    out = {"inputs": normalize(move(host["inputs"], None, copy=False),
                                layout="nchw"),
           "targets": move(host["targets"], torch.int64)}
    if "weights" in host:
        out["weights"] = move(host["weights"], torch.float32)
    return out
