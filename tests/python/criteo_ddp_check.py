"""A torchrun DDP job (2 ranks, Gloo) reading criteo1tb through
batchd.algoperf, for tests/python/test_torchrun.py:

    torchrun --standalone --nproc_per_node 2 tests/python/criteo_ddp_check.py \
        --steps 6 --global-batch-size 64

Every step rank 0 gathers every rank's rows and checks that together they
are the global batch a world-size-1 stream of the same seed serves (so the
ranks' slices are disjoint and complete), for train and for validation
(with its weights); then one DDP step runs. Prints "criteo step S ok".
"""

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

from ddp_slices import against_one_rank, end_rank, sgd_step, start

OPTS = {"block_kib": "64", "window_blocks": "2"}


def main():
    a, rank, world = start(steps=6, global_batch_size=64)
    g = a.global_batch_size
    model = DDP(torch.nn.Linear(39, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for split in ("train", "validation"):
        for step, (batch, _) in enumerate(against_one_rank(
                "criteo1tb", split, g, a.steps, options=OPTS)):
            assert batch["inputs"].shape == (g // world, 39), batch["inputs"].shape
            assert batch["targets"].shape == (g // world,)
            assert batch["weights"].shape == (g // world,)
            if rank == 0:
                print(f"criteo {split} step {step} ok", flush=True)
            loss = (model(batch["inputs"]).squeeze(1) -
                    batch["targets"]).pow(2).mul(batch["weights"]).mean()
            sgd_step(opt, loss)
    if rank == 0:
        print("criteo: every global batch disjoint and complete", flush=True)
    end_rank()


if __name__ == "__main__":
    main()
