"""A torch DDP job over Gloo, fed by batchd, for tests/python/test_torchrun.py
and launched by torch's own torchrun:

    torchrun --standalone --nproc_per_node 2 tests/python/ddp_check.py \
        --server unix:///tmp/batchd.sock --stream S --steps 40

Every step each rank checks that its slice holds the positions the
determinism contract gives it (s·G + r·G/W ...), rank 0 gathers every rank's
ids and positions and checks that together they are the whole global batch,
each example once, and that each epoch visits every example once; then one
DDP step (the gradients' all-reduce) runs. --steps -1 runs until stopped.
Prints "rank R pid P" at start and "step S ok" (rank 0) per step.
"""

import argparse
import itertools
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import batchd

FEATURES = 16


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--server", default=os.environ.get("BATCHD_SERVER"))
    p.add_argument("--stream", default="ddp-check")
    p.add_argument("--global-batch-size", type=int, default=32)
    p.add_argument("--examples", type=int, default=320)
    p.add_argument("--steps", type=int, default=40)
    args = p.parse_args()
    g, n = args.global_batch_size, args.examples

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    # One write(2) of a short line: the ranks share torchrun's stdout.
    os.write(1, f"rank {rank} pid {os.getpid()}\n".encode())
    loader = batchd.Loader(args.stream, g, format="torch", workload="synthetic",
                           seed=7, server=args.server, timeout=120,
                           options={"examples": n, "payload_bytes": FEATURES})
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(FEATURES, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    steps_per_epoch = n // g
    share = g // world
    seen = set()
    steps = itertools.count() if args.steps < 0 else range(args.steps)
    for step in steps:
        batch = next(loader)
        info = loader.last_batch_info
        epoch, offset = divmod(step, steps_per_epoch)
        assert (info.step, info.epoch) == (step, epoch), (info, step)
        ids = batch["ids"].clone()
        positions = batch["positions"].clone()
        first = offset * g + rank * share
        assert positions.tolist() == list(range(first, first + share)), \
            f"rank {rank} step {step}: positions {positions.tolist()}"
        gathered_ids = [torch.empty_like(ids) for _ in range(world)]
        gathered_pos = [torch.empty_like(positions) for _ in range(world)]
        dist.all_gather(gathered_ids, ids)
        dist.all_gather(gathered_pos, positions)
        if rank == 0:
            all_ids = torch.cat(gathered_ids).tolist()
            all_pos = sorted(torch.cat(gathered_pos).tolist())
            assert all_pos == list(range(offset * g, (offset + 1) * g)), \
                f"step {step}: the ranks' positions are not the global batch"
            assert len(set(all_ids)) == g, f"step {step}: the ranks' slices overlap"
            assert not seen & set(all_ids), f"step {step}: an example came twice in epoch {epoch}"
            seen |= set(all_ids)
            if offset == steps_per_epoch - 1:
                assert seen == set(range(n)), f"epoch {epoch} missed {n - len(seen)} examples"
                seen = set()
        x = batch["payload"].to(torch.float32) / 127.5 - 1.0
        del batch
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if rank == 0:
            print(f"step {step} ok", flush=True)
    if rank == 0:
        print(f"ddp_check: {args.steps} steps on {world} ranks: every step's "
              "slices disjoint and complete, every epoch whole", flush=True)
    loader.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
