"""A torchrun DDP job (2 ranks, Gloo) reading finewebedu_lm through
batchd.algoperf, for tests/python/test_torchrun.py:

    torchrun --standalone --nproc_per_node 2 tests/python/lm_ddp_check.py \
        --steps 4 --global-batch-size 16

Every step rank 0 gathers every rank's windows and checks that together
they are the global batch a world-size-1 stream of the same seed serves
(so the ranks' slices are disjoint and complete), for train and for
validation (with its weights); then one DDP step runs. Prints
"lm SPLIT step S ok".
"""

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

from ddp_slices import against_one_rank, end_rank, sgd_step, start


def main():
    a, rank, world = start(steps=4, global_batch_size=16)
    g, b = a.global_batch_size, a.global_batch_size // world
    model = DDP(torch.nn.Sequential(torch.nn.Embedding(50257, 4),
                                    torch.nn.Linear(4, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for split in ("train", "validation"):
        for step, (batch, rows) in enumerate(against_one_rank(
                "finewebedu_lm", split, g, a.steps)):
            assert batch["inputs"].shape == (b, 1024), batch["inputs"].shape
            assert batch["inputs"].dtype == torch.int32
            assert batch["targets"].dtype == torch.int64
            if split == "train":
                assert batch["weights"] is None
            else:
                assert batch["weights"].shape == (b, 1024)
            if rank == 0:
                assert len({r.numpy().tobytes() for r in rows["inputs"]}) == g
                print(f"lm {split} step {step} ok", flush=True)
            out = model(batch["inputs"].clamp(min=0).long()).squeeze(-1)
            loss = (out - batch["targets"].clamp(min=0).float() / 50257).pow(2)
            if batch["weights"] is not None:
                loss = loss * batch["weights"]
            sgd_step(opt, loss.mean())
    if rank == 0:
        print("lm: every global batch disjoint and complete", flush=True)
    end_rank()


if __name__ == "__main__":
    main()
