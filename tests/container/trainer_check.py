"""A trainer stand-in for the container and wheel checks: it needs only
Python 3, numpy and the installed batchd wheel (no torch, none of batchd's
C++ libraries), so it runs in a bare container beside a batchd sidecar or a
daemon on the host (scripts/container-check.sh, tests/container/wheel_check.sh).

    trainer_check.py epoch   --stream S [--world-size W] [--global-batch-size G] [--examples N]
    trainer_check.py hold    --stream S --ready FILE --result FILE
    trainer_check.py too-big --stream S --world-size W --global-batch-size G --payload-bytes B
    trainer_check.py no-rings
    trainer_check.py cxx-outputs --outputs F0 F1 --global-batch-size G --examples N

epoch: W rank processes each read one epoch of a synthetic stream; every
  step's slices must be disjoint, hold the positions the determinism
  contract gives each rank, and the epoch must visit every example once.
hold: opens a stream, keeps one batch and reads on, writing FILE once the
  ring is mapped; when the server goes away it writes to the result file
  the error it saw (after the daemon's SIGTERM, ServerUnavailableError
  once 5 s of reopening found no daemon).
too-big: opens a stream whose rings do not fit this /dev/shm: the error
  must name the bytes needed and free and the --shm-size remedy.
no-rings: no batchd ring is left in /dev/shm.
cxx-outputs --outputs F0 F1 ...: the same checks as epoch over the outputs
  of C++ ranks (tests/consumer_main.cc), one file a rank.
Exit status 0 when the check holds; the reason on stderr otherwise.
"""

import argparse
import json
import os
import subprocess
import sys
import time

import batchd

SYNTHETIC_PAYLOAD = 16


def fail(msg):
    print("trainer_check: FAILED: " + msg, file=sys.stderr, flush=True)
    sys.exit(1)


def open_loader(args, rank, world_size, **extra):
    return batchd.Loader(
        args.stream, args.global_batch_size, format="numpy",
        workload="synthetic", world_size=world_size, rank=rank, seed=args.seed,
        options={"examples": args.examples, "payload_bytes": args.payload_bytes},
        timeout=120, **extra)


def run_rank(args):
    """One rank: one epoch's batches as JSON lines on stdout."""
    loader = open_loader(args, args.rank, args.world_size)
    steps = args.examples // args.global_batch_size
    for _ in range(steps):
        batch, info = loader.next_batch()
        print(json.dumps({"step": info.step, "epoch": info.epoch,
                          "ids": batch["ids"].tolist(),
                          "positions": batch["positions"].tolist(),
                          "epochs": batch["epochs"].tolist()}), flush=True)
        del batch
    loader.close()


def check_epoch(args):
    w, g, n = args.world_size, args.global_batch_size, args.examples
    if g % w or n % g:
        fail(f"pick G divisible by W and N by G (W={w} G={g} N={n})")
    procs = [subprocess.Popen(
        [sys.executable, __file__, "rank", "--rank", str(r),
         "--world-size", str(w), "--stream", args.stream,
         "--global-batch-size", str(g), "--examples", str(n),
         "--seed", str(args.seed)],
        stdout=subprocess.PIPE, text=True) for r in range(w)]
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    for r, p in enumerate(procs):
        if p.returncode != 0:
            fail(f"rank {r} exited with {p.returncode}")
    per_rank = [[json.loads(line) for line in out.splitlines()] for out in outputs]
    verify(per_rank, w, g, n)
    print(f"trainer_check: epoch ok: {w} ranks, {n // g} steps of {g}, "
          f"{n} examples each once, slices disjoint", flush=True)


def verify(per_rank, w, g, n):
    """per_rank[r][s]: rank r's batch s ({"step", "ids"}, and "positions",
    "epochs" where the trainer reports them) over one epoch of n examples."""
    steps = n // g
    share = g // w
    seen = set()
    for s in range(steps):
        step_ids = []
        for r in range(w):
            if len(per_rank[r]) <= s:
                fail(f"rank {r} read {len(per_rank[r])} batches, not {steps}")
            b = per_rank[r][s]
            if b["step"] != s or b.get("epoch", 0) != 0:
                fail(f"rank {r}'s batch {s} is step {b['step']} epoch {b.get('epoch')}")
            if len(b["ids"]) != share:
                fail(f"rank {r} step {s}: {len(b['ids'])} examples, not {share}")
            want = list(range(s * g + r * share, s * g + (r + 1) * share))
            if "positions" in b and b["positions"] != want:
                fail(f"rank {r} step {s}: positions {b['positions'][:4]}..., "
                     f"expected {want[0]}..{want[-1]}")
            if "epochs" in b and set(b["epochs"]) != {0}:
                fail(f"rank {r} step {s}: examples of epochs {set(b['epochs'])}")
            step_ids += b["ids"]
        if len(set(step_ids)) != g:
            fail(f"step {s}: the ranks' slices overlap "
                 f"({g - len(set(step_ids))} ids twice)")
        if seen & set(step_ids):
            fail(f"step {s}: ids already seen earlier in the epoch")
        seen |= set(step_ids)
    if seen != set(range(n)):
        fail(f"the epoch visited {len(seen)} of {n} examples")


def cxx_outputs(args):
    """The outputs of C++ ranks (tests/consumer_main.cc: "step S ids I I ..."
    per batch, one file a rank) over one epoch."""
    per_rank = []
    for path in args.outputs:
        batches = []
        with open(path) as f:
            for line in f:
                words = line.split()
                if words[:1] == ["step"] and words[2:3] == ["ids"]:
                    batches.append({"step": int(words[1]),
                                    "ids": [int(x) for x in words[3:]]})
        per_rank.append(batches)
    w, g, n = len(per_rank), args.global_batch_size, args.examples
    verify(per_rank, w, g, n)
    print(f"trainer_check: C++ ranks ok: {w} ranks, {n // g} steps of {g}, "
          f"{n} examples each once, slices disjoint", flush=True)


def hold(args):
    # A stopped daemon is a pause for a trainer: it reopens the stream for
    # `reconnect` seconds, then says the daemon did not come back.
    loader = open_loader(args, 0, 1, slots=4, reconnect=5.0)
    kept, _ = loader.next_batch()  # held until the end: the slot stays mapped
    segment = loader.info.segment
    with open(args.ready, "w") as f:
        f.write(str(segment))
    result = {"kept_step": 0}
    try:
        while True:
            batch = next(loader)
            del batch
            time.sleep(0.02)  # paces the reads; the stop comes from outside
    except batchd.Error as e:
        result.update(error=type(e).__name__, message=str(e))
    except StopIteration:
        result.update(error="StopIteration", message="")
    result["kept_ids_readable"] = len(kept["ids"].tolist())
    with open(args.result + ".tmp", "w") as f:
        json.dump(result, f)
    os.rename(args.result + ".tmp", args.result)
    print("trainer_check: hold ended: " + json.dumps(result), flush=True)


def too_big(args):
    try:
        loader = open_loader(args, 0, args.world_size, slots=args.slots)
        next(loader)
    except batchd.Error as e:
        msg = str(e)
        for part in ("shared memory too small", "needs", "free", "--shm-size"):
            if part not in msg:
                fail(f"the error does not say {part!r}: {msg}")
        print("trainer_check: too-big refused as it should: " + msg, flush=True)
        return
    fail("a stream larger than /dev/shm opened")


def no_rings(args):
    left = sorted(e for e in os.listdir("/dev/shm") if e.startswith(args.prefix + "."))
    if left:
        fail(f"rings left in /dev/shm: {left}")
    print(f"trainer_check: no {args.prefix}.* segment in /dev/shm", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", choices=["epoch", "rank", "hold", "too-big", "no-rings",
                                    "cxx-outputs"])
    p.add_argument("--stream", default="check")
    p.add_argument("--world-size", type=int, default=2)
    p.add_argument("--rank", type=int, default=0)
    p.add_argument("--global-batch-size", type=int, default=64)
    p.add_argument("--examples", type=int, default=1024)
    p.add_argument("--payload-bytes", type=int, default=SYNTHETIC_PAYLOAD)
    p.add_argument("--slots", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ready")
    p.add_argument("--result")
    p.add_argument("--prefix", default="batchd")
    p.add_argument("--outputs", nargs="*", default=[])
    args = p.parse_args()
    {"epoch": check_epoch, "rank": run_rank, "hold": hold,
     "too-big": too_big, "no-rings": no_rings, "cxx-outputs": cxx_outputs}[args.mode](args)


if __name__ == "__main__":
    main()
