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

import argparse
import hashlib

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from ddp_slices import end_rank, epoch_and_eval


def digests(batch):
    audio, audio_paddings = batch["inputs"]
    targets, target_paddings = batch["targets"]
    out = []
    for i in range(audio.shape[0]):
        h = hashlib.sha256()
        for t in (audio[i], audio_paddings[i], targets[i], target_paddings[i]):
            h.update(t.contiguous().numpy().tobytes())
        out.append((h.hexdigest(), h.hexdigest()))
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--global-batch-size", type=int, default=4)
    p.add_argument("--epoch", type=int, required=True)
    p.add_argument("--eval", type=int, required=True)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    dist.init_process_group("gloo")
    model = DDP(torch.nn.Linear(2, 1))

    def ddp_step(batch):
        audio, audio_paddings = batch["inputs"]
        x = torch.stack([audio.mean(1) / 32768, audio_paddings.mean(1)], 1)
        model(x).sum().backward()  # the DDP all-reduce

    epoch_and_eval("librispeech", a.global_batch_size, a.epoch, a.eval,
                   digests, ddp_step, seed=a.seed)
    end_rank()


if __name__ == "__main__":
    main()
