"""A torch DDP job over Gloo whose ranks read AlgoPerf's LibriSpeech through
batchd.algoperf, for tests/python/test_torchrun.py, launched by torchrun:

    torchrun --standalone --nproc_per_node 2 \\
        tests/python/librispeech_ddp_check.py --global-batch-size 4 \\
        --epoch 16 --eval 7

Each step of one train epoch (--epoch utterances) and of one validation
pass (--eval utterances), rank 0 gathers every rank's utterances (a
SHA-256 per row of the four float32 tensors) and checks that the slices
are disjoint and, together, the whole global batch; then it prints each
train utterance's digest ("train DIGEST") for the test to compare with
AlgoPerf's set, and one DDP step (the gradients' all-reduce) runs.
Prints "librispeech ddp ok" at the end (rank 0).
"""

import torch

from ddp_slices import epoch_and_eval_job
from librispeech_digest import utterance_digest


def digests(batch):
    return [(d, d) for d in (utterance_digest(batch, i)
                             for i in range(batch["inputs"][0].shape[0]))]


def features(batch):
    audio, audio_paddings = batch["inputs"]
    return torch.stack([audio.mean(1) / 32768, audio_paddings.mean(1)], 1)


def main():
    epoch_and_eval_job("librispeech", digests, features)


if __name__ == "__main__":
    main()
