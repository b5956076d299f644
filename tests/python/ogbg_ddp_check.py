"""A torch DDP job over Gloo fed by batchd.algoperf's ogbg queue, for
tests/python/test_torchrun.py (launched by torchrun, 2 ranks):

    torchrun --standalone --nproc_per_node 2 tests/python/ogbg_ddp_check.py \
        --data ogbg --steps 6 --global-batch 16 --graphs-per-row 4

Every step each rank takes its GraphsTuple from
batchd.algoperf.input_queue("ogbg", "train", ...); rank 0 gathers every
rank's batch and checks that, concatenated in rank order, they are the
global batch a one-rank queue of the same spec gives (disjoint and
complete: each rank holds its own rows, together every row once), and that
each rank's GraphsTuple is consistent (n_node sums to its nodes, every edge
within its own graph). Then one DDP step. Prints "ogbg step S ok" (rank 0)
per step and "ogbg: every global batch disjoint and complete" at the end.
"""

import argparse

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import batchd.algoperf
from ddp_slices import end_rank, sgd_step


def flat(batch):
    g = batch["inputs"]
    return [g.nodes, g.edges, g.senders, g.receivers, g.n_node, g.n_edge,
            batch["targets"], batch["weights"].to(torch.uint8)]


def consistent(batch):
    g = batch["inputs"]
    node_graph = torch.repeat_interleave(torch.arange(len(g.n_node)), g.n_node)
    edge_graph = torch.repeat_interleave(torch.arange(len(g.n_edge)), g.n_edge)
    return (int(g.n_node.sum()) == g.nodes.shape[0] and
            torch.equal(node_graph[g.senders], edge_graph) and
            torch.equal(node_graph[g.receivers], edge_graph))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="ogbg")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--global-batch", type=int, default=16)
    ap.add_argument("--graphs-per-row", type=int, default=4)
    a = ap.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    opts = {"graphs_per_row": a.graphs_per_row}
    q = batchd.algoperf.input_queue(
        "ogbg", "train", a.global_batch, data=a.data, seed=11, rank=rank,
        world_size=world, device="cpu", options=opts, timeout=120,
        stream="ogbg-ddp")
    whole = None
    if rank == 0:
        whole = batchd.algoperf.input_queue(
            "ogbg", "train", a.global_batch, data=a.data, seed=11, rank=0,
            world_size=1, device="cpu", options=opts, timeout=120,
            stream="ogbg-ddp-one")
    model = DDP(torch.nn.Linear(9, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    rows = a.global_batch // a.graphs_per_row // world
    for step in range(a.steps):
        batch = next(q)
        assert consistent(batch), f"rank {rank} step {step}"
        parts = flat(batch)
        gathered = [[torch.empty_like(t) for t in parts] for _ in range(world)]
        for k, t in enumerate(parts):
            out = [g[k] for g in gathered]
            dist.all_gather(out, t)
        if rank == 0:
            want = flat(next(whole))
            for k in range(len(parts)):
                got = torch.cat([g[k] for g in gathered])
                if k in (2, 3):  # senders/receivers: offsets of earlier ranks
                    n = gathered[0][0].shape[0]
                    got = torch.cat([g[k] + r * n
                                     for r, g in enumerate(gathered)])
                assert torch.equal(got, want[k]), (step, k)
            print(f"ogbg step {step} ok", flush=True)
        sgd_step(opt, model(batch["inputs"].nodes).mean())
    assert rows >= 1
    q.close()
    if whole is not None:
        whole.close()
        print("ogbg: every global batch disjoint and complete", flush=True)
    end_rank()


if __name__ == "__main__":
    main()
