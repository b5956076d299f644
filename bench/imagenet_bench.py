#!/usr/bin/python3
"""Helper of bench/imagenet_bench.sh: AlgoPerf's PyTorch ImageNet input
pipeline as the peer to beat, and the report.

    imagenet_bench.py torchvision --data DIR --split train|val --world W
        --workers N --global-batch G --steps S
Runs W rank processes, each torchvision ImageFolder + DistributedSampler
(shuffle for train; eval gives rank r indices[r::W] as AlgoPerf does) +
DataLoader(num_workers=N, drop_last=True for train, persistent workers),
with AlgoPerf's transforms (train: RandomResizedCrop(224),
RandomHorizontalFlip, ToTensor, Normalize; eval: Resize(256),
CenterCrop(224), ToTensor, Normalize) and OMP_NUM_THREADS=1 as torchrun
sets. Ranks start together; prints one JSON object: images/s over the span
from the first rank's start to the last rank's end, and the peak thread
count and summed RSS of all rank and worker processes.

    imagenet_bench.py report FILE
Prints the table of the JSON lines the script collected.
"""

import argparse
import json
import os
import subprocess
import sys
import threading
import time

from procstat import descendants, status


def rank_main(args):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch
    from torch.utils.data import DataLoader, Subset
    from torch.utils.data.distributed import DistributedSampler
    from torchvision import datasets, transforms

    torch.set_num_threads(1)
    norm = transforms.Normalize(mean=(0.485, 0.456, 0.406),
                                std=(0.229, 0.224, 0.225))
    train = args.split == "train"
    if train:
        t = transforms.Compose([transforms.RandomResizedCrop(224),
                                transforms.RandomHorizontalFlip(),
                                transforms.ToTensor(), norm])
    else:
        t = transforms.Compose([transforms.Resize(256),
                                transforms.CenterCrop(224),
                                transforms.ToTensor(), norm])
    ds = datasets.ImageFolder(os.path.join(args.data, args.split), t)
    batch = args.global_batch // args.world
    if train:
        sampler = DistributedSampler(ds, num_replicas=args.world,
                                     rank=args.rank, shuffle=True, seed=0)
        loader = DataLoader(ds, batch_size=batch, sampler=sampler,
                            num_workers=args.workers, drop_last=True,
                            persistent_workers=args.workers > 0)
    else:
        loader = DataLoader(Subset(ds, range(args.rank, len(ds), args.world)),
                            batch_size=batch, num_workers=args.workers,
                            drop_last=False)
    # Ready: wait for the parent's go (a byte on stdin).
    print("ready", flush=True)
    sys.stdin.read(1)
    start = time.time()
    images = 0
    epoch = 0
    done = False
    while not done:
        if train:
            sampler.set_epoch(epoch)
        for x, y in loader:
            images += len(y)
            if images >= args.steps * batch:
                done = True
                break
        epoch += 1
        if not train:
            break
    end = time.time()
    print(json.dumps({"start": start, "end": end, "images": images}),
          flush=True)


def torchvision_main(args):
    procs = []
    for r in range(args.world):
        cmd = [sys.executable, os.path.abspath(__file__), "rank", "--data",
               args.data, "--split", args.split, "--world", str(args.world),
               "--rank", str(r), "--workers", str(args.workers),
               "--global-batch", str(args.global_batch), "--steps",
               str(args.steps)]
        env = dict(os.environ, OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen(cmd, stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, text=True,
                                      env=env))
    for p in procs:
        if p.stdout.readline().strip() != "ready":
            for q in procs:
                q.kill()
            sys.exit("imagenet_bench: a torchvision rank failed to start")
    peak = [0, 0]
    stop = threading.Event()

    def monitor():
        me = os.getpid()
        while not stop.is_set():
            st = [status(q) for q in descendants([me])[1:]]
            t = sum(x["threads"] for x in st)
            r = sum(x["rss"] for x in st)
            peak[0], peak[1] = max(peak[0], t), max(peak[1], r)
            time.sleep(0.1)

    mon = threading.Thread(target=monitor, daemon=True)
    mon.start()
    for p in procs:
        p.stdin.write("g")
        p.stdin.flush()
    lines = [p.stdout.readline() for p in procs]
    if not all(lines):
        for p in procs:
            p.kill()
        sys.exit("imagenet_bench: a torchvision rank failed")
    results = [json.loads(line) for line in lines]
    stop.set()
    mon.join()
    for p in procs:
        p.wait()
    span = max(r["end"] for r in results) - min(r["start"] for r in results)
    images = sum(r["images"] for r in results)
    print(json.dumps({
        "pipeline": "torchvision", "split": args.split, "world": args.world,
        "workers": args.workers, "images": images, "seconds": span,
        "images_per_s": images / span, "processes": args.world *
        (1 + args.workers), "threads": peak[0], "rss_bytes": peak[1]}))


def report_main(args):
    rows = [json.loads(line) for line in open(args.file) if line.strip()]
    full = [r for r in rows if r.get("pipeline") == "full_decode"]
    limit = full[0]["images_per_s"] if full else None
    print()
    print(f"{'pipeline':<34}{'split':>6}{'W':>3}{'images/s':>10}"
          f"{'x full':>8}{'threads':>9}{'RSS MiB':>9}")

    def line(name, r, split, w, ips, threads, rss):
        ratio = f"{ips / limit:.2f}" if limit else "-"
        print(f"{name:<34}{split:>6}{w:>3}{ips:>10.1f}{ratio:>8}"
              f"{threads:>9}{rss / 2**20:>9.0f}")

    for r in full:
        line(f"(a) full decode, {r['decoder']} x{r['threads']}", r, "train",
             "-", r["images_per_s"], r["threads"], r["rss_bytes"])
    best = {}
    for r in rows:
        if r.get("pipeline") == "torchvision":
            key = (r["split"], r["world"])
            if key not in best or r["images_per_s"] > best[key]["images_per_s"]:
                best[key] = r
    for r in rows:
        if r.get("pipeline") == "batchd":
            b = r["bench"]
            line(f"(b) batchd, {r['threads']} worker threads", r, r["split"],
                 r["world"], b["examples_per_s"], b["server_threads"],
                 b["server_rss_bytes"])
            peer = best.get((r["split"], r["world"]))
            if peer:
                print(f"{'':<34}{'':>6}{'':>3}  = {b['examples_per_s'] / peer['images_per_s']:.2f}x"
                      f" torchvision (best num_workers={peer['workers']})")
    for r in rows:
        if r.get("pipeline") == "torchvision":
            line(f"(c) torchvision, num_workers={r['workers']}", r, r["split"],
                 r["world"], r["images_per_s"], r["threads"], r["rss_bytes"])
    print()
    print("x full: images/s over (a). batchd threads/RSS: the daemon's, RSS")
    print("without its rings; torchvision: all rank and worker processes, RSS")
    print("summed (shared pages counted in each process).")


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("torchvision", "rank"):
        p = sub.add_parser(name)
        p.add_argument("--data", required=True)
        p.add_argument("--split", default="train")
        p.add_argument("--world", type=int, default=1)
        p.add_argument("--rank", type=int, default=0)
        p.add_argument("--workers", type=int, default=0)
        p.add_argument("--global-batch", type=int, default=64)
        p.add_argument("--steps", type=int, default=20)
    p = sub.add_parser("report")
    p.add_argument("file")
    args = ap.parse_args()
    if args.cmd == "rank":
        rank_main(args)
    elif args.cmd == "torchvision":
        torchvision_main(args)
    else:
        report_main(args)


if __name__ == "__main__":
    main()
