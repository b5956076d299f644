#!/usr/bin/python3
"""A sweep on one node: jobs of one spec (ImageNet train, global batch G,
the same seed) side by side on one daemon, against the same job alone, in
alternating rounds on the same daemon and cores.

    sweep_bench.py [--build DIR] [--data DIR] [--classes C] [--per-class P]
                   [--threads T] [--global-batch G] [--steps S]
                   [--rounds R] [--worlds 2,2,2,1] [--no-eight]
                   [--no-stopped] [--json FILE]

Makes DIR (workloads/imagenet/make_imagenet.py, ImageFolder, C classes of
P train images; default 20 x 100) unless it is there, reads its files once
(page cache), starts one daemon (--threads T, default 2) and runs, each
round, in this order:
- lone: `batchctl bench --jobs 1` at each world size of --worlds, S timed
  steps a job;
- sweep: `batchctl bench --jobs N --world-size W1,...,WN` (--worlds), all
  jobs started together, S timed steps each;
- eight: `--jobs 8 --world-size 1` (unless --no-eight);
- stopped: the sweep's jobs but the last, with and without a job of the
  same spec stopped (SIGSTOP) after its first batches, for as long as the
  others run (unless --no-stopped).
Every run prints its JSON line (batchctl bench --json: each job's rate
and fills made and shared, the daemon's CPU seconds over the run). The
summary gives medians over the rounds:
- each sweep job's rate over the lone job's at its world size (the goal:
  >= 0.8), and the daemon's CPU for all N jobs over its CPU for the lone
  job at the first world size, the same steps a job (goal: <= 1.5);
- the same for eight single-rank jobs;
- the others' rate beside a stopped job over their rate without it (goal:
  >= 0.95).
Timings need a quiet machine: each figure is a ratio of runs made side by
side, and the rounds alternate so that drift hits both sides alike.
"""

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A job of the spec that takes a few batches and then waits, to be stopped.
STOPPED = r'''
import sys
import batchd
address, name = sys.argv[1], sys.argv[2]
g, seed = int(sys.argv[3]), int(sys.argv[4])
loader = batchd.Loader(name, g, format="numpy", workload="imagenet",
                       data="imagenet", split="train", world_size=1, rank=0,
                       seed=seed, server=address, connect_timeout=60.0)
for _ in range(3):
    next(loader)
print("ready", flush=True)
sys.stdin.readline()
'''


def run(argv, **kw):
    return subprocess.run(argv, check=True, capture_output=True, text=True,
                          **kw)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--data", default=os.path.join(
        os.environ.get("TMPDIR", "/tmp"), "batchd-sweep-bench"))
    ap.add_argument("--classes", type=int, default=20)
    ap.add_argument("--per-class", type=int, default=100)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--global-batch", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--worlds", default="2,2,2,1")
    ap.add_argument("--no-eight", action="store_true")
    ap.add_argument("--no-stopped", action="store_true")
    ap.add_argument("--json", help="also write every run's JSON line here")
    args = ap.parse_args()

    batchd = os.path.join(args.build, "server", "batchd")
    batchctl = os.path.join(args.build, "server", "batchctl")
    for b in (batchd, batchctl):
        if not os.access(b, os.X_OK):
            sys.exit(f"sweep_bench: {b} is missing; build it first")
    worlds = [int(w) for w in args.worlds.split(",")]
    data = os.path.join(args.data, "imagenet")
    if not os.path.isdir(os.path.join(data, "train")):
        print(f"sweep_bench: generating {args.classes} x {args.per_class} "
              f"images in {data} ...", file=sys.stderr)
        run(["/usr/bin/python3",
             os.path.join(REPO, "workloads", "imagenet", "make_imagenet.py"),
             data, "--classes", str(args.classes), "--per-class",
             str(args.per_class), "--val-per-class", "1", "--no-tfrecord",
             "--no-truncated"])
    for top, _, files in os.walk(os.path.join(data, "train")):
        for f in files:
            with open(os.path.join(top, f), "rb") as fh:
                fh.read()

    work = tempfile.mkdtemp(prefix="batchd-sweep-bench.", dir="/tmp")
    address = f"unix://{work}/sock"
    log = open(os.path.join(work, "batchd.log"), "w")
    daemon = subprocess.Popen(
        [batchd, "--listen", address, "--data-root", args.data, "--threads",
         str(args.threads), "--shm-prefix", f"sweepbench{os.getpid()}",
         "--cache-dir", os.path.join(work, "cache")],
        stdout=log, stderr=subprocess.STDOUT)
    out = open(args.json, "w") if args.json else None
    runs = {}

    def bench(kind, jobs, world_sizes, rnd):
        r = run([batchctl, "bench", "--server", address, "--json",
                 "--stream", f"sweep-{kind}-{rnd}", "--workload", "imagenet",
                 "--data", "imagenet", "--global-batch-size",
                 str(args.global_batch), "--seed", str(args.seed), "--steps",
                 str(args.steps), "--jobs", str(jobs), "--world-size",
                 ",".join(map(str, world_sizes)), "--timeout", "300"])
        result = json.loads(r.stdout)
        result["run"] = kind
        result["round"] = rnd
        line = json.dumps(result)
        print(line, flush=True)
        if out:
            print(line, file=out, flush=True)
        runs.setdefault(kind, []).append(result)
        return result

    try:
        for _ in range(100):
            if subprocess.run([batchctl, "status", "--server", address,
                               "--timeout", "1"],
                              capture_output=True).returncode == 0:
                break
            time.sleep(0.1)
        others = worlds[:-1] or worlds
        lone_worlds = sorted(set(worlds) | (set() if args.no_eight else {1}))
        for rnd in range(args.rounds):
            for w in lone_worlds:
                bench(f"lone{w}", 1, [w], rnd)
            bench("sweep", len(worlds), worlds, rnd)
            if not args.no_eight:
                bench("eight", 8, [1] * 8, rnd)
            if not args.no_stopped:
                bench("without", len(others), others, rnd)
                env = dict(os.environ, PYTHONPATH=os.path.join(args.build,
                                                              "python"))
                stopped = subprocess.Popen(
                    ["/usr/bin/python3", "-c", STOPPED, address,
                     f"sweep-stopped-{rnd}", str(args.global_batch),
                     str(args.seed)],
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                    env=env)
                try:
                    if stopped.stdout.readline().strip() != "ready":
                        sys.exit("sweep_bench: the stopped job failed")
                    os.kill(stopped.pid, signal.SIGSTOP)
                    bench("stopped", len(others), others, rnd)
                finally:
                    stopped.kill()
                    stopped.wait()
                run([batchctl, "close", "--server", address,
                     f"sweep-stopped-{rnd}"])
    finally:
        daemon.terminate()
        daemon.wait()
        log.close()
        subprocess.run(["rm", "-rf", work])

    def med(xs):
        return statistics.median(xs) if xs else float("nan")

    def rate(result, job=0):
        return result["jobs"][job]["examples_per_s"]

    lone = {w: [rate(r) for r in runs[f"lone{w}"]] for w in lone_worlds}
    lone_cpu = [r["server_cpu_seconds"] or float("nan")
                for r in runs[f"lone{worlds[0]}"]]
    print(f"\nsweep_bench: {args.threads} daemon threads, global batch "
          f"{args.global_batch}, {args.steps} steps a job, "
          f"{args.rounds} rounds (medians)", file=sys.stderr)
    for kind, ws in (("sweep", worlds), ("eight", [1] * 8)):
        if kind not in runs:
            continue
        ratios = []
        for j, w in enumerate(ws):
            per_round = [rate(r, j) / lone_rate for r, lone_rate in
                         zip(runs[kind], lone[w])]
            ratios.append(med(per_round))
        cpu = med([r["server_cpu_seconds"] / c for r, c in
                   zip(runs[kind], lone_cpu if kind == "sweep" else
                       [r["server_cpu_seconds"] for r in runs["lone1"]])])
        shared = med([sum(j["fills_shared"] for j in r["jobs"]) /
                      max(1, sum(j["fills_shared"] + j["fills_made"]
                                 for j in r["jobs"])) for r in runs[kind]])
        print(f"  {kind}: {len(ws)} jobs at W = {','.join(map(str, ws))}: "
              f"rate / lone = {', '.join(f'{x:.2f}' for x in ratios)} "
              f"(goal >= 0.8); daemon CPU / lone job's = {cpu:.2f} "
              f"(goal <= 1.5); fills shared {100 * shared:.0f}%",
              file=sys.stderr)
    if "stopped" in runs:
        ratios = [med([r["jobs"][j]["examples_per_s"] /
                       w["jobs"][j]["examples_per_s"]
                       for r, w in zip(runs["stopped"], runs["without"])])
                  for j in range(len(others))]
        print(f"  beside a stopped job: rate / without it = "
              f"{', '.join(f'{x:.2f}' for x in ratios)} (goal >= 0.95)",
              file=sys.stderr)
    print("  lone rates: " + ", ".join(
        f"W={w} {med(v):.1f} examples/s" for w, v in sorted(lone.items())),
        file=sys.stderr)


if __name__ == "__main__":
    main()
