"""A small DDP job over batchd: each rank trains a linear model on its slice
of the synthetic stream and checks, every step, that the ranks' examples are
disjoint. Launch with torchrun (or torch.distributed.run):

    /usr/bin/python3 -m torch.distributed.run --standalone --nproc_per_node=2 \
        examples/synthetic_ddp.py --server unix:///run/batchd/batchd.sock

The target is a fixed linear function of the example's payload bytes, so the
loss falls as the model learns it.
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import batchd
from ddp_exit import end_rank


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--server", default=os.environ.get("BATCHD_SERVER"))
    p.add_argument("--stream", default="demo-train")
    p.add_argument("--global-batch-size", type=int, default=256)
    p.add_argument("--examples", type=int, default=50000)
    p.add_argument("--features", type=int, default=64)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)

    loader = batchd.Loader(args.stream, args.global_batch_size,
                           workload="synthetic", seed=args.seed,
                           server=args.server,
                           options={"examples": args.examples,
                                    "payload_bytes": args.features})
    # The function to learn: a fixed random projection of the payload.
    truth = torch.Generator().manual_seed(1234)
    w_true = torch.randn(args.features, 1, generator=truth) / args.features ** 0.5
    model = DDP(torch.nn.Linear(args.features, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    wait = 0.0
    first_loss = None
    t0 = time.perf_counter()
    for step in range(args.steps):
        t = time.perf_counter()
        batch = next(loader)  # runs on across epochs: a trainer of steps
        wait += time.perf_counter() - t
        x = batch["payload"].to(torch.float32) / 127.5 - 1.0
        y = x @ w_true
        # Disjointness, checked for real across the ranks every step.
        ids = batch["ids"].clone()
        gathered = [torch.empty_like(ids) for _ in range(world)]
        dist.all_gather(gathered, ids)
        all_ids = torch.cat(gathered)
        assert all_ids.unique().numel() == all_ids.numel(), "ranks overlap"
        del batch
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if first_loss is None:
            first_loss = loss.item()
        if rank == 0 and (step + 1) % max(50, args.steps // 10) == 0:
            el = time.perf_counter() - t0
            print(f"rank 0 step {step + 1:4d}  loss {loss.item():.5f}  "
                  f"{(step + 1) / el:7.1f} steps/s  "
                  f"{(step + 1) * args.global_batch_size / el:9.0f} examples/s (global)  "
                  f"data wait {100 * wait / el:4.1f}% of step time", flush=True)
    el = time.perf_counter() - t0
    final = torch.tensor([loss.item(), wait / el])
    dist.all_reduce(final)
    if rank == 0:
        print(f"done: {args.steps} steps on {world} ranks in {el:.1f} s; loss "
              f"{first_loss:.4f} -> {final[0].item() / world:.5f}; ranks waited "
              f"{100 * final[1].item() / world:.1f}% of the time for data; "
              "every step's ranks held disjoint examples", flush=True)
    loader.close()
    end_rank()  # ddp_exit.py: why a rank leaves without the teardown


if __name__ == "__main__":
    main()
