"""A torch DDP job over Gloo whose ranks read AlgoPerf's fastMRI through
batchd.algoperf, for tests/python/test_torchrun.py, launched by torchrun:

    torchrun --standalone --nproc_per_node 2 \\
        tests/python/fastmri_ddp_check.py --global-batch-size 4 \\
        --epoch 12 --eval 5 --validation-files 2

Each step of one train epoch (--epoch slices) and of one validation pass
(--eval slices), rank 0 gathers every rank's rows (a SHA-256 of each
row's inputs and targets, and its mean) and checks that the slices are
disjoint and, together, the whole global batch (validation: the real rows
are those of weight 1, the padding's weight is 0); one DDP step (the
gradients' all-reduce) runs on each train batch. Then it prints each
slice's mean ("train MEAN", "validation MEAN") for the test to compare
with AlgoPerf's, and "fastmri ddp ok" (rank 0).
"""

import argparse
import hashlib

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from ddp_slices import end_rank, epoch_and_eval


def rows(batch):
    out = []
    weights = batch.get("weights")
    for i in range(batch["inputs"].shape[0]):
        if weights is not None and weights[i] == 0:
            continue  # padding of the last batch
        h = hashlib.sha256(batch["inputs"][i].numpy().tobytes())
        h.update(batch["targets"][i].numpy().tobytes())
        out.append((h.hexdigest(), repr(float(batch["mean"][i]))))
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--global-batch-size", type=int, default=4)
    p.add_argument("--epoch", type=int, required=True)
    p.add_argument("--eval", type=int, required=True)
    p.add_argument("--validation-files", type=int, default=100)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    dist.init_process_group("gloo")
    model = DDP(torch.nn.Linear(2, 1))

    def ddp_step(batch):
        x = torch.stack([batch["mean"], batch["std"]], 1)
        model(x).sum().backward()  # the DDP all-reduce

    epoch_and_eval("fastmri", a.global_batch_size, a.epoch, a.eval, rows,
                   ddp_step, seed=a.seed,
                   options={"validation_files": a.validation_files})
    end_rank()


if __name__ == "__main__":
    main()
