"""What the torchrun DDP checks of the AlgoPerf workloads share
(tests/python/*_ddp_check.py): gathering every rank's slice of a step,
and the two ways of checking that the slices are disjoint and complete.

- `against_one_rank`: each step's slices, gathered on rank 0, equal the
  global batch a world-size-1 stream of the same seed serves (`start`
  parses such a check's flags and joins the job).
- `epoch_and_eval`: each step's rows, by a digest of each, are distinct
  across the ranks and make the whole global batch; one train epoch and
  one validation pass, each row's printed value listed for the test
  (`epoch_and_eval_job` is such a check's whole rank).

`sgd_step` is every check's optimiser step; `end_rank` ends every
check's rank (see there).
"""

import argparse
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import batchd
from batchd import algoperf


def start(steps, global_batch_size):
    """Parses an against_one_rank check's flags (--steps and
    --global-batch-size, these their defaults) and joins the Gloo group
    torchrun set up: (flags, rank, world size)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=steps)
    ap.add_argument("--global-batch-size", type=int,
                    default=global_batch_size)
    a = ap.parse_args()
    dist.init_process_group("gloo")
    return a, dist.get_rank(), dist.get_world_size()


def sgd_step(opt, loss):
    """One step of `opt` down the gradient of `loss` (DDP all-reduces the
    gradients)."""
    opt.zero_grad()
    loss.backward()
    opt.step()


def end_rank():
    """Destroys the process group and ends the rank at once, without the
    interpreter's teardown. A Gloo group that DDP used outlives
    destroy_process_group (torch keeps references to it), and its worker
    threads may still hold the last collective's tensors: a worker that
    drops one while the interpreter exits takes the GIL, which CPython
    answers by ending the thread in a way that aborts the process
    ("terminate called without an active exception")."""
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def gathered(t):
    """Every rank's `t`, concatenated in rank order."""
    parts = [torch.empty_like(t) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, t.contiguous())
    return torch.cat(parts)


def against_one_rank(workload, split, g, steps, *, seed=5, options=None):
    """Yields (batch, rows) for `steps` steps of the rank's queue; rows (on
    rank 0, else None) are the ranks' tensors gathered, already checked
    against the world-size-1 stream's batch (every tensor of the batch;
    a None value, such as train's weights, is skipped)."""
    rank = dist.get_rank()
    q = algoperf.input_queue(workload, split, g, data=workload, seed=seed,
                             device="cpu", options=options,
                             num_batches=steps,
                             repeat_final_dataset=split != "train",
                             stream=f"ddp-{workload}-{split}")
    ref = None
    if rank == 0:
        ref = batchd.Loader(f"ddp-{workload}-{split}-w1", g,
                            workload=workload, data=workload, split=split,
                            seed=seed, world_size=1, rank=0, options=options,
                            timeout=60.0)
    try:
        for step in range(steps):
            batch = next(q)
            rows = {k: gathered(v) for k, v in batch.items()
                    if torch.is_tensor(v)}
            assert {"inputs", "targets"} <= rows.keys(), sorted(batch)
            if rank == 0:
                want, _ = ref.next_batch()
                for k, t in rows.items():
                    assert torch.equal(t, want[k].to(t.dtype)), (split, step, k)
            yield batch, rows if rank == 0 else None
    finally:
        q.close()
        if ref is not None:
            ref.close()


def epoch_and_eval_job(workload, digests, features, **int_options):
    """The whole rank of an epoch_and_eval check: its flags
    (--global-batch-size, --epoch, --eval, --seed, and for each of
    `int_options`, {option: default}, a flag of its name with dashes whose
    value goes to the workload as that option), the Gloo group torchrun
    set up, and epoch_and_eval with a DDP step on features(batch) (two
    features a row); then end_rank."""
    p = argparse.ArgumentParser()
    p.add_argument("--global-batch-size", type=int, default=4)
    p.add_argument("--epoch", type=int, required=True)
    p.add_argument("--eval", type=int, required=True)
    for option, default in int_options.items():
        p.add_argument("--" + option.replace("_", "-"), type=int,
                       default=default)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    dist.init_process_group("gloo")
    model = DDP(torch.nn.Linear(2, 1))

    def ddp_step(batch):
        model(features(batch)).sum().backward()  # the DDP all-reduce

    options = {option: getattr(a, option) for option in int_options}
    epoch_and_eval(workload, a.global_batch_size, a.epoch, a.eval, digests,
                   ddp_step, seed=a.seed, options=options or None)
    end_rank()


def epoch_and_eval(workload, g, epoch, evaluated_rows, digests, ddp_step, *,
                   seed=1, options=None):
    """One train epoch of `epoch` rows (epoch // g steps) and one
    validation pass of `evaluated_rows` rows through the rank's queues.
    digests(batch): a (digest, printed value) per real row of the slice
    (padding left out). Each step rank 0 checks that the slices are
    disjoint and, together, the global batch; ddp_step(batch) runs one
    DDP step on each train batch. Rank 0 then prints "train VALUE" and
    "validation VALUE" for each row and "WORKLOAD ddp ok"."""
    rank, world = dist.get_rank(), dist.get_world_size()

    def parts_of(batch):
        parts = [None] * world
        dist.all_gather_object(parts, digests(batch))
        return parts

    opened = []

    def queue(split, **kw):
        # The server: $BATCHD_SERVER, as for any queue.
        q = algoperf.input_queue(workload, split, g, data=workload,
                                 timeout=120, device="cpu", options=options,
                                 **kw)
        opened.append(q)
        return q

    seen, evaluated = [], []
    try:
        train = queue("train", seed=seed)
        for step in range(epoch // g):
            batch = next(train)
            parts = parts_of(batch)
            if rank == 0:
                flat = [r for part in parts for r in part]
                assert all(len(part) == g // world for part in parts), parts
                assert len({d for d, _ in flat}) == g, f"step {step}: overlap"
                seen += flat
            ddp_step(batch)
        # Opened after the epoch, as a trainer's evaluation does.
        validation = queue("validation")
        for _ in range(-(-evaluated_rows // g)):
            flat = [r for part in parts_of(next(validation)) for r in part]
            assert len({d for d, _ in flat}) == len(flat), "validation overlap"
            evaluated += flat
        if rank == 0:
            assert len({d for d, _ in seen}) == (epoch // g) * g, \
                "the epoch repeats a row"
            assert len(evaluated) == evaluated_rows, \
                (len(evaluated), evaluated_rows)
            for _, value in seen:
                print("train", value)
            for _, value in evaluated:
                print("validation", value)
            print(f"{workload} ddp ok", flush=True)
    finally:
        for q in opened:
            q.close()
