"""A small AlgoPerf-style DDP job whose input queues come from batchd.

Each rank builds its queue with `batchd.algoperf.input_queue`, the drop-in
for AlgoPerf's PyTorch `_build_input_queue`, and trains a small model with
torch's DistributedDataParallel: a ResNet-18-shaped network on `imagenet`,
or an encoder-decoder Transformer on `wmt`. NCCL on CUDA, Gloo otherwise.

    torchrun --standalone --nproc_per_node=2 examples/algoperf_ddp.py \\
        --workload imagenet --data imagenet --server unix:///run/batchd/batchd.sock
    # Debian's torch 1.13 torchrun fails on Python 3.11; there:
    /usr/bin/python3 examples/launch.py --nproc 2 -- \\
        examples/algoperf_ddp.py --workload wmt --data wmt

It prints steps/s, examples/s, the share of step time spent waiting for the
input queue (AlgoPerf counts that time), and the loss; on CUDA also the
host-to-device copy bandwidth from the pinned ring.
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import batchd.algoperf
from ddp_exit import end_rank


def resnet(classes):
    """ResNet-18's shape at a quarter of its width."""
    def block(cin, cout, stride):
        return torch.nn.Sequential(
            torch.nn.Conv2d(cin, cout, 3, stride, 1, bias=False),
            torch.nn.BatchNorm2d(cout), torch.nn.ReLU(inplace=True),
            torch.nn.Conv2d(cout, cout, 3, 1, 1, bias=False),
            torch.nn.BatchNorm2d(cout), torch.nn.ReLU(inplace=True))
    w = 16
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, w, 7, 2, 3, bias=False), torch.nn.BatchNorm2d(w),
        torch.nn.ReLU(inplace=True), torch.nn.MaxPool2d(3, 2, 1),
        block(w, w, 1), block(w, 2 * w, 2), block(2 * w, 4 * w, 2),
        block(4 * w, 8 * w, 2), torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(), torch.nn.Linear(8 * w, classes))


class Seq2Seq(torch.nn.Module):
    def __init__(self, vocab, d=64):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, d)
        self.pos = torch.nn.Embedding(256, d)
        self.t = torch.nn.Transformer(d, 4, 2, 2, 4 * d, 0.0, batch_first=True)
        self.out = torch.nn.Linear(d, vocab)

    def forward(self, src, src_pos, tgt_in, tgt_pos):
        L = tgt_in.shape[1]
        causal = torch.triu(torch.full((L, L), float("-inf"),
                                       device=src.device), 1)
        y = self.t(self.embed(src) + self.pos(src_pos),
                   self.embed(tgt_in) + self.pos(tgt_pos), tgt_mask=causal,
                   src_key_padding_mask=src.eq(0).index_fill(1, torch.tensor([0], device=src.device), False),
                   memory_key_padding_mask=src.eq(0).index_fill(1, torch.tensor([0], device=src.device), False))
        return self.out(y)


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workload", choices=["imagenet", "wmt"], required=True)
    p.add_argument("--data", required=True, help="under the server's --data-root")
    p.add_argument("--server", default=os.environ.get("BATCHD_SERVER"))
    p.add_argument("--global-batch-size", type=int, default=16)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--classes", type=int, default=1000)
    p.add_argument("--vocab-size", type=int, default=32000)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--lr", type=float, default=0.01)
    args = p.parse_args()

    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) \
        if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    torch.manual_seed(0)
    options = {"image_size": args.image_size} if args.workload == "imagenet" \
        else {"index_threads": 1}
    queue = batchd.algoperf.input_queue(
        args.workload, "train", args.global_batch_size, data=args.data,
        server=args.server, device=device, options=options, timeout=600)
    if args.workload == "imagenet":
        model = resnet(args.classes).to(device)
    else:
        model = Seq2Seq(args.vocab_size).to(device)
    model = DDP(model, device_ids=[device.index] if cuda else None)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9) \
        if args.workload == "imagenet" else \
        torch.optim.Adam(model.parameters(), lr=1e-3)

    wait, losses = 0.0, []
    t0 = time.perf_counter()
    for step in range(args.steps):
        t = time.perf_counter()
        batch = next(queue)
        wait += time.perf_counter() - t
        if args.workload == "imagenet":
            loss = torch.nn.functional.cross_entropy(
                model(batch["inputs"]), batch["targets"] % args.classes)
        else:
            tgt = batch["targets"]
            tgt_in = torch.roll(tgt, 1, 1).masked_fill(
                batch["targets_position"].eq(0), 0)
            logits = model(batch["inputs"], batch["inputs_position"], tgt_in,
                           batch["targets_position"])
            # As AlgoPerf's baselines: mask_batch=batch.get('weights'),
            # loss = summed_loss / n_valid_examples.
            weights = batch["weights"]
            per_token = torch.nn.functional.cross_entropy(
                logits.flatten(0, 1), tgt.flatten(), reduction="none")
            loss = torch.where(weights.flatten().bool(), per_token,
                               torch.zeros_like(per_token)).sum() \
                / weights.sum().clamp_min(1)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    if cuda:
        torch.cuda.synchronize()
    el = time.perf_counter() - t0
    stats = torch.tensor([wait / el, sum(losses[:5]) / min(5, len(losses)),
                          sum(losses[-5:]) / min(5, len(losses))], device=device)
    dist.all_reduce(stats)
    stats /= world
    if rank == 0:
        print(f"algoperf {args.workload}: {args.steps} steps on {world} ranks, "
              f"{args.steps / el:.2f} steps/s, "
              f"{args.steps * args.global_batch_size / el:.1f} examples/s, "
              f"input queue wait {100 * stats[0].item():.1f}% of step time, "
              f"loss {stats[1].item():.4f} -> {stats[2].item():.4f}, "
              f"pinned ring: {queue._pinned}", flush=True)
    queue.close()
    end_rank()  # ddp_exit.py: why a rank leaves without the teardown


if __name__ == "__main__":
    main()
