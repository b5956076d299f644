"""A torch DDP job over Gloo, fed by batchd, for tests/python/test_torchrun.py
and tests/python/test_multinode.py, launched by torch's own torchrun:

    torchrun --standalone --nproc_per_node 2 tests/python/ddp_check.py \
        --server unix:///tmp/batchd.sock --stream S --steps 40

Synthetic streams (the default): every step each rank checks that its slice
holds the positions the determinism contract gives it (s·G + r·G/W ...),
rank 0 gathers every rank's ids and positions and checks that together they
are the whole global batch, each example once, and that each epoch visits
every example once. Any workload (--workload, --data, --option): with
--record DIR each rank writes what it got, a JSON line per step to
DIR/rank<R>.jsonl (step, epoch, its server, each tensor's shape and
SHA-256), and at the end its reconnects and state_dict(), for the test to
check against the one global order. Then one DDP step (the gradients'
all-reduce) runs. --steps -1 runs until stopped; --state FILE resumes from
a state_dict() saved as JSON; --hold-at S makes every rank wait after step S
until --hold-file exists (the test acts on the daemons meanwhile).
Prints "rank R pid P" at start and "step S ok" (rank 0) per step.
"""

import argparse
import hashlib
import itertools
import json
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import batchd
from ddp_slices import end_rank, sgd_step

FEATURES = 16
HOLD_DEADLINE = 300  # seconds a held rank waits for --hold-file


def features(batch, workload):
    """The model's input: the synthetic payload, else the first tensor's
    first FEATURES values per row."""
    if workload == "synthetic":
        x = batch["payload"]
    else:
        x = batch[sorted(batch)[0]]
        x = x.reshape(x.shape[0], -1)[:, :FEATURES]
    return x.to(torch.float32) / 127.5 - 1.0


def record_line(step, info, batch):
    return {"step": step, "epoch": info.epoch,
            "shape": {k: list(t.shape) for k, t in batch.items()},
            "sha256": {k: hashlib.sha256(t.contiguous().numpy().tobytes()).hexdigest()
                       for k, t in batch.items()}}


def hold(path):
    deadline = time.monotonic() + HOLD_DEADLINE
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear in {HOLD_DEADLINE} s")
        time.sleep(0.05)


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--server", default=os.environ.get("BATCHD_SERVER"))
    p.add_argument("--stream", default="ddp-check")
    p.add_argument("--workload", default="synthetic")
    p.add_argument("--data", default="")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="a workload option (synthetic: --examples and "
                        "payload_bytes are set)")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--global-batch-size", type=int, default=32)
    p.add_argument("--examples", type=int, default=320)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--state", help="a state_dict() as JSON to resume from")
    p.add_argument("--record", help="directory for each rank's rank<R>.jsonl")
    p.add_argument("--hold-at", type=int, help="wait for --hold-file after this step")
    p.add_argument("--hold-file")
    args = p.parse_args()
    if (args.hold_at is None) != (args.hold_file is None):
        p.error("--hold-at and --hold-file go together")
    g, n = args.global_batch_size, args.examples
    synthetic = args.workload == "synthetic"
    options = dict(o.split("=", 1) for o in args.option)
    if synthetic:
        options.update(examples=n, payload_bytes=FEATURES)
    state = None
    if args.state:
        with open(args.state) as f:
            state = json.load(f)

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    # One write(2) of a short line: the ranks share torchrun's stdout.
    os.write(1, f"rank {rank} pid {os.getpid()}\n".encode())
    loader = batchd.Loader(args.stream, g, format="torch", workload=args.workload,
                           data=args.data, seed=args.seed, server=args.server,
                           timeout=120, options=options, state=state)
    record = None
    if args.record:
        record = open(os.path.join(args.record, f"rank{rank}.jsonl"), "w")

    def write(line):
        line.update(rank=rank, world=world, server=args.server)
        record.write(json.dumps(line) + "\n")
        record.flush()

    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(FEATURES, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    steps_per_epoch = n // g
    share = g // world
    first_step = state["next_step"] if state else 0
    # A whole epoch is checked only from its first step on.
    seen = set() if first_step % steps_per_epoch == 0 else None
    if args.steps < 0:
        steps = itertools.count(first_step)
    else:
        steps = range(first_step, first_step + args.steps)
    for step in steps:
        batch = next(loader)
        info = loader.last_batch_info
        assert info.step == step, (info, step)
        if record:
            write(record_line(step, info, batch))
        if synthetic:
            epoch, offset = divmod(step, steps_per_epoch)
            assert info.epoch == epoch, (info, step)
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
                if seen is not None:
                    assert not seen & set(all_ids), \
                        f"step {step}: an example came twice in epoch {epoch}"
                    seen |= set(all_ids)
                if offset == steps_per_epoch - 1:
                    if seen is not None:
                        assert seen == set(range(n)), \
                            f"epoch {epoch} missed {n - len(seen)} examples"
                    seen = set()
        x = features(batch, args.workload)
        del batch
        sgd_step(opt, model(x).pow(2).mean())
        if rank == 0:
            print(f"step {step} ok", flush=True)
        if step == args.hold_at:
            hold(args.hold_file)
    if record:
        write({"end": True, "next_step": loader.state_dict()["next_step"],
               "reconnects": loader.reconnects[0], "state": loader.state_dict()})
        record.close()
    if rank == 0:
        if synthetic:
            print(f"ddp_check: {args.steps} steps on {world} ranks: every step's "
                  "slices disjoint and complete, every epoch whole", flush=True)
        else:
            print(f"ddp_check: {args.steps} steps of {args.workload} on {world} ranks",
                  flush=True)
    loader.close()
    end_rank()


if __name__ == "__main__":
    main()
