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

import hashlib

import torch

from ddp_slices import epoch_and_eval_job


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


def features(batch):
    return torch.stack([batch["mean"], batch["std"]], 1)


def main():
    epoch_and_eval_job("fastmri", rows, features, validation_files=100)


if __name__ == "__main__":
    main()
