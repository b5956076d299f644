"""librispeech (AlgoPerf's `librispeech_conformer` and
`librispeech_deepspeech`, which share one input pipeline): what
`batchd.algoperf.input_queue("librispeech", ...)` yields.

- A dict ``{"inputs": [audio, audio_paddings], "targets": [targets,
  target_paddings]}``, as AlgoPerf's DataLoader collates its Dataset's
  ``((audio, audio_paddings), (targets, target_paddings))`` (torch's
  default_collate turns the tuples into lists): audio float32 [B, 320000]
  (the raw int16 samples as floats, 0 after the utterance),
  audio_paddings float32 [B, 320000] (0 on samples, 1 after them),
  targets float32 [B, 256] (token ids, 0 after them), target_paddings
  float32 [B, 256]. Values are exactly AlgoPerf's. No ``weights``.
- Where the tensors live: on ``device`` (default cuda:LOCAL_RANK when CUDA
  is there, else the CPU). AlgoPerf leaves them on the CPU (pinned) and its
  model_fn moves inputs with ``.to(DEVICE)``, which is then a no-op. The
  ring carries the int16 samples and the lengths (~0.64 MB an utterance
  instead of 2.56 MB of float32 audio and paddings): the copy to the GPU
  moves those, and the float32 tensors and the paddings are made there, as
  ImageNet's uint8 is normalised there. Pass ``device="cpu"`` for AlgoPerf's
  placement (the widening then runs on the host).
- Evaluation: batchd pads the last global batch of a pass to full size (so
  that every rank's slot has one shape); this queue cuts the padding off
  again, so the last batch is short and carries no weights, as AlgoPerf's
  is. That matters: AlgoPerf's eval loss (``loss_fn`` without a mask) sums
  the CTC loss of every row, and a padded row would add one. A rank whose
  slice of the last global batch is all padding gets a batch of 0 rows;
  AlgoPerf's ``loss_fn`` counts such a batch as max(0, 1) = 1 valid
  example, so the ctc_loss denominator grows by 1 per such batch (AlgoPerf's
  strided DistributedEvalSampler never leaves a rank empty; batchd's
  contiguous slices can). WER is unchanged.
- Splits: train = train-clean-100 + train-clean-360 + train-other-500,
  shuffled by batchd's seeded global order (AlgoPerf: DistributedSampler
  with seed 0 and set_epoch), last partial batch dropped; eval_train =
  AlgoPerf's ``random.Random(seed)`` shuffle of the train indices, the
  first 5,376 in that order (pass ``seed=int(data_rng[0])``); validation =
  dev-clean + dev-other; test = test-clean, both in csv order.
- Repeat: evaluation queues start the same pass again at its end whatever
  repeat_final_dataset says, as AlgoPerf's ``data_utils.cycle`` does
  (AlgoPerf ignores both repeat_final_dataset and num_batches; a
  num_batches given here ends each pass after that many batches); train
  runs on.
- Ranks: rank r gets the r-th contiguous slice of every global batch
  (AlgoPerf's samplers stride); that changes which rank sees an utterance,
  not the sums its metrics all-reduce (but see the empty batch above).
"""

WORKLOAD = "librispeech"  # the daemon's workload
NUM_EVAL_TRAIN_EXAMPLES = 5376
MAX_AUDIO = 320000
MAX_TARGETS = 256


def repeats(split, num_batches, repeat_final_dataset):
    return split != "train"


def _paddings(lengths, width, torch):
    """float32 [b, width]: 0 before each row's length, 1 from it on."""
    if lengths.device.type == "cpu":
        # One pass over the output (a comparison through a bool tensor
        # takes three times as long on the host).
        out = torch.ones(lengths.shape[0], width)
        for i, n in enumerate(lengths.tolist()):
            out[i, :n] = 0
        return out
    # On the GPU one kernel, not a launch per row.
    steps = torch.arange(width, device=lengths.device, dtype=torch.int32)
    return (steps[None, :] >= lengths[:, None]).to(torch.float32)


def convert(host, split, move, torch):
    if "weights" in host:
        # Real rows come first in a rank's slice; padding only ends the
        # last global batch.
        n = int((host["weights"] > 0).sum())
        host = {k: v[:n] for k, v in host.items()}
    audio = move(host["audio"], None, copy=False)
    audio = audio.view(torch.int16).to(torch.float32)
    audio_lengths = move(host["audio_lengths"], None, copy=False)
    targets = move(host["targets"], torch.float32)
    target_lengths = move(host["target_lengths"], None, copy=False)
    return {"inputs": [audio, _paddings(audio_lengths, MAX_AUDIO, torch)],
            "targets": [targets,
                        _paddings(target_lengths, MAX_TARGETS, torch)]}
