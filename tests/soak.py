#!/usr/bin/python3
"""Soak test: one batchd daemon, several synthetic streams, many client
processes that are killed (kill -9), stopped (SIGSTOP, SIGCONT) and
restarted at random; every batch delivered is checked against an
independent implementation of the sampler and of the synthetic payload.

    BATCHD_BIN=build/server/batchd PYTHONPATH=build/python \\
        /usr/bin/python3 tests/soak.py --seconds 60

With --kill-daemon it is the other way round (tests/soak_restart.py): the
clients live for the whole run and the daemon is killed and restarted.

Streams (synthetic workload, payload bytes derived from the example):
  train-w4   train split, 4 ranks, 1000 examples, G = 24 (the remainder of
             each epoch dropped), 68-byte payloads (a tail that is not a
             whole word)
  train-w2   train split, 2 ranks, 333 examples, G = 10, 2 slots
  eval-w3    validation split, 3 ranks, 100 examples, G = 9: one pass of
             12 batches, the last padded; each rank starts it again at step
             0 when it ends

The reference (tests/soak_reference.py) is written from docs/design.md's
determinism contract and workloads/sampler.h's description, not by calling
the C++ code.

Each client checks every batch it gets and reports its step; the driver
checks that every rank's steps come exactly once and in order across kills
and restarts (no step lost or delivered twice), that the daemon stays up,
and that its threads do not grow: batchd's own threads (by name) must be as
many at the end as after the warm-up, gRPC's pools may start at most two
more, and the fewest threads of the last quarter may exceed the most of the
first quarter by at most those two. It prints batches checked, errors,
kills, stops, restarts, and the daemon's RSS and threads at start and end;
it exits 1 on any failure. A client killed mid-step is restarted at the
first step it had not reported (re-attach with start_step).
"""

import argparse
import glob
import os
import random
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid

from soak_reference import Reference, check_batch

STREAMS = {
    "train-w4": dict(split="train", world_size=4, global_batch_size=24,
                     examples=1000, payload_bytes=68, seed=7, slots=0),
    "train-w2": dict(split="train", world_size=2, global_batch_size=10,
                     examples=333, payload_bytes=64, seed=12345, slots=2),
    "eval-w3": dict(split="validation", world_size=3, global_batch_size=9,
                    examples=100, payload_bytes=16, seed=3, slots=0),
}


# --- a client process --------------------------------------------------------

def client_main(args):
    """One rank: opens the stream at --start-step, checks up to --steps
    batches, prints `ok STEP` for each (flushed), `end STEP` after the last
    batch of an eval stream, `error ...` and exit 1 on a wrong batch."""
    import batchd
    spec = STREAMS[args.stream]
    ref = Reference(spec, args.rank)
    import numpy as np
    # numpy, not torch: importing torch costs a soak client seconds.
    loader = batchd.Loader(
        args.stream, spec["global_batch_size"], workload="synthetic",
        split=spec["split"], world_size=spec["world_size"], rank=args.rank,
        seed=spec["seed"], start_step=args.start_step, slots=spec["slots"],
        options={"examples": spec["examples"],
                 "payload_bytes": spec["payload_bytes"]},
        server=args.server, timeout=60.0, connect_timeout=60.0,
        format="numpy")
    step = args.start_step
    out = sys.stdout
    for _ in range(args.steps):
        try:
            views, info = loader.next_batch()
        except StopIteration:
            out.write(f"end {step}\n")
            out.flush()
            break
        batch = {name: np.array(view, copy=True)
                 for name, view in views.items()}
        del views  # releases the slot: the arrays are copies
        errors = check_batch(ref, step, info, batch)
        if errors:
            out.write("error " + "; ".join(errors[:3]) + "\n")
            out.flush()
            sys.exit(1)
        out.write(f"ok {step}\n")
        out.flush()
        step += 1
    loader.close()


# --- the driver ----------------------------------------------------------------

# Thread names (as /proc shows them, 15 characters) of gRPC's pools, and
# how many threads more than at the start they may have.
GRPC_THREADS = ("grpc", "default-executo", "resolver-execut",
                "global-executo")
GRPC_SLACK = 2


def thread_names(pid):
    """{thread name: count} of a process, to say which threads grew."""
    names = {}
    for task in glob.glob(f"/proc/{pid}/task/*/comm"):
        try:
            with open(task) as f:
                name = f.read().strip()
        except OSError:
            continue
        names[name] = names.get(name, 0) + 1
    return names


def daemon_figures(pid):
    rss = threads = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024
            elif line.startswith("Threads:"):
                threads = int(line.split()[1])
    return rss, threads


class Client:
    def __init__(self, stream, rank):
        self.stream, self.rank = stream, rank
        self.spec = STREAMS[stream]
        self.next_step = 0  # the first step not yet reported
        self.proc = None
        self.buf = b""
        self.stopped_until = None
        self.last_progress = time.monotonic()
        self.passes = 0


class Soak:
    def __init__(self, opts):
        self.opts = opts
        self.rng = random.Random(opts.seed)
        self.counts = dict(batches=0, errors=0, kills=0, stops=0, restarts=0,
                           exits=0, eval_passes=0)
        self.failures = []
        self.start_names = self.end_names = {}
        self.sel = selectors.DefaultSelector()
        self.dir = tempfile.mkdtemp(prefix="batchd-soak-", dir="/tmp")
        self.address = f"unix://{self.dir}/sock"
        self.prefix = f"batchdsoak{uuid.uuid4().hex[:10]}"
        os.mkdir(f"{self.dir}/data")
        self.log = open(f"{self.dir}/batchd.log", "w")
        self.daemon = subprocess.Popen(
            [opts.batchd, "--listen", self.address, "--data-root",
             f"{self.dir}/data", "--shm-prefix", self.prefix, "--threads",
             str(opts.threads)], stdout=self.log, stderr=subprocess.STDOUT)
        self.clients = [Client(name, r) for name, spec in STREAMS.items()
                        for r in range(spec["world_size"])]

    def fail(self, what):
        self.failures.append(what)
        print(f"soak: FAIL: {what}", flush=True)

    def start(self, c):
        steps = self.rng.randint(20, 400)
        c.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "client", "--stream",
             c.stream, "--rank", str(c.rank), "--start-step",
             str(c.next_step), "--steps", str(steps), "--server",
             self.address], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        os.set_blocking(c.proc.stdout.fileno(), False)
        self.sel.register(c.proc.stdout, selectors.EVENT_READ, c)
        c.buf = b""
        c.stopped_until = None
        c.last_progress = time.monotonic()

    def consume(self, c, data):
        c.buf += data
        *lines, c.buf = c.buf.split(b"\n")
        for line in lines:
            word, _, rest = line.decode().partition(" ")
            if word == "ok":
                step = int(rest)
                if step != c.next_step:
                    self.fail(f"{c.stream} rank {c.rank}: step {step} "
                              f"reported where {c.next_step} was due "
                              f"(lost or repeated)")
                c.next_step = step + 1
                c.last_progress = time.monotonic()
                self.counts["batches"] += 1
            elif word == "end":
                ref_steps = -(-c.spec["examples"] //
                              c.spec["global_batch_size"])
                if int(rest) != ref_steps:
                    self.fail(f"{c.stream} rank {c.rank}: pass ended at "
                              f"step {rest}, expected {ref_steps}")
                c.next_step = 0  # the next client starts the pass again
                c.passes += 1
                self.counts["eval_passes"] += 1
            elif word == "error":
                self.counts["errors"] += 1
                self.fail(f"{c.stream} rank {c.rank}: {rest}")

    def drain(self, c):
        """Reads what a finished client wrote and reaps it."""
        self.sel.unregister(c.proc.stdout)
        os.set_blocking(c.proc.stdout.fileno(), True)
        self.consume(c, c.proc.stdout.read())
        err = c.proc.stderr.read().decode(errors="replace")
        c.proc.wait()
        rc = c.proc.returncode
        c.proc.stdout.close()
        c.proc.stderr.close()
        c.proc = None
        return rc, err

    def poll_io(self, timeout):
        for key, _ in self.sel.select(timeout):
            c = key.data
            try:
                data = os.read(key.fileobj.fileno(), 65536)
            except BlockingIOError:
                continue
            if data:
                self.consume(c, data)

    def step_clients(self, now):
        for c in self.clients:
            if c.proc is None:
                continue
            if c.stopped_until is not None and now >= c.stopped_until:
                os.kill(c.proc.pid, signal.SIGCONT)
                c.stopped_until = None
                c.last_progress = now
            if c.proc.poll() is not None:
                rc, err = self.drain(c)
                if rc != 0:
                    self.fail(f"{c.stream} rank {c.rank}: client exited "
                              f"with {rc}: {err.strip()[-400:]}")
                self.counts["exits"] += 1
                self.start(c)
                self.counts["restarts"] += 1
            elif (c.stopped_until is None and
                  now - c.last_progress > self.opts.stall_seconds):
                self.fail(f"{c.stream} rank {c.rank}: no batch for "
                          f"{self.opts.stall_seconds} s at step {c.next_step}")
                c.last_progress = now

    def disturb(self):
        live = [c for c in self.clients
                if c.proc is not None and c.stopped_until is None]
        if not live:
            return
        c = self.rng.choice(live)
        if self.rng.random() < 0.6:
            os.kill(c.proc.pid, signal.SIGKILL)
            self.drain(c)  # reaped: the daemon sees the pid gone
            self.counts["kills"] += 1
            self.start(c)
            self.counts["restarts"] += 1
        else:
            # Below the daemon's --client-stale-seconds (10 s): a stopped
            # client keeps its ring and resumes where it was.
            os.kill(c.proc.pid, signal.SIGSTOP)
            c.stopped_until = time.monotonic() + self.rng.uniform(0.1, 3.0)
            self.counts["stops"] += 1

    def run(self):
        opts = self.opts
        self.wait_for_socket()
        for c in self.clients:
            self.start(c)
        begin = time.monotonic()
        end = begin + opts.seconds
        # Threads: gRPC starts and ends threads with the calls in flight,
        # so one sample can be a passing peak. A leak shows as a floor that
        # rises: the fewest threads of the last quarter of the run above the
        # most of the first.
        warmup_end = begin + opts.seconds / 4
        final_start = end - opts.seconds / 4
        start_figures = None
        max_warm_threads = 0
        min_final_threads = None
        next_disturb = begin + 2.0
        while time.monotonic() < end:
            self.poll_io(0.05)
            now = time.monotonic()
            if self.daemon.poll() is not None:
                self.fail(f"batchd exited with {self.daemon.returncode}")
                break
            self.step_clients(now)
            rss, threads = daemon_figures(self.daemon.pid)
            if now < warmup_end:
                max_warm_threads = max(max_warm_threads, threads)
            elif start_figures is None:
                start_figures = (rss, max_warm_threads)
                self.start_names = thread_names(self.daemon.pid)
            if now >= final_start:
                min_final_threads = threads if min_final_threads is None \
                    else min(min_final_threads, threads)
            if now >= next_disturb:
                self.disturb()
                next_disturb = now + self.rng.uniform(0.2, opts.disturb_every)
        # Let stopped clients go, and the last reports arrive.
        for c in self.clients:
            if c.proc is not None and c.stopped_until is not None:
                os.kill(c.proc.pid, signal.SIGCONT)
                c.stopped_until = None
        self.poll_io(0.5)
        if self.daemon.poll() is None:
            end_figures = daemon_figures(self.daemon.pid)
            self.end_names = thread_names(self.daemon.pid)
        else:
            end_figures = (0, 0)
        if start_figures is None:
            start_figures = (end_figures[0], max_warm_threads)
        self.min_final_threads = min_final_threads
        for c in self.clients:
            if c.proc is not None:
                c.proc.kill()
                self.drain(c)
        self.stop_daemon()
        self.report(start_figures, end_figures)

    def wait_for_socket(self):
        import socket
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.daemon.poll() is not None:
                break
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                try:
                    s.connect(f"{self.dir}/sock")
                    return
                except OSError:
                    time.sleep(0.05)
        self.log.flush()
        sys.exit(f"soak: batchd did not start: "
                 f"{open(self.dir + '/batchd.log').read()[-2000:]}")

    def stop_daemon(self):
        if self.daemon.poll() is None:
            self.daemon.send_signal(signal.SIGTERM)
            try:
                self.daemon.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.fail("batchd did not stop within 30 s of SIGTERM")
                self.daemon.kill()
                self.daemon.wait()
            if self.daemon.returncode != 0:
                self.fail(f"batchd exited with {self.daemon.returncode} "
                          f"after SIGTERM")
        left = glob.glob(f"/dev/shm/{self.prefix}.*")
        if left:
            self.fail(f"{len(left)} segments left in /dev/shm: {left[:3]}")
            for path in left:
                os.unlink(path)

    def report(self, start, end):
        c = self.counts
        mib = 1 << 20
        print(f"soak: {self.opts.seconds:.0f} s, {len(self.clients)} clients "
              f"on {len(STREAMS)} streams: {c['batches']} batches checked, "
              f"{c['errors']} errors, {c['kills']} kills, {c['stops']} stops, "
              f"{c['restarts']} restarts ({c['exits']} clean exits), "
              f"{c['eval_passes']} eval rank passes")
        print(f"soak: batchd RSS {start[0] / mib:.1f} MiB -> "
              f"{end[0] / mib:.1f} MiB, threads {start[1]} -> {end[1]} "
              f"(most in the first quarter {start[1]}, fewest in the last "
              f"{self.min_final_threads})")
        # gRPC's own pools (timer manager, executors) start a thread or two
        # on demand within their bounds; batchd's threads must stay as they
        # were.
        grown = {n: f"{self.start_names.get(n, 0)} -> {k}"
                 for n, k in self.end_names.items()
                 if k > self.start_names.get(n, 0) +
                 (GRPC_SLACK if n.startswith(GRPC_THREADS) else 0)}
        if grown or (self.min_final_threads is not None and
                     self.min_final_threads > start[1] + GRPC_SLACK):
            self.fail(f"batchd threads grew: at least "
                      f"{self.min_final_threads} in the last quarter, at "
                      f"most {start[1]} in the first; by name: {grown}")
        if c["batches"] == 0:
            self.fail("no batch was delivered")
        self.log.close()
        if self.failures:
            print(f"soak: FAILED ({len(self.failures)} failures); daemon log "
                  f"kept in {self.dir}/batchd.log")
            sys.exit(1)
        shutil.rmtree(self.dir, ignore_errors=True)
        print("soak: passed")


def main():
    if "--kill-daemon" in sys.argv[1:]:
        import soak_restart
        soak_restart.main([a for a in sys.argv[1:] if a != "--kill-daemon"])
        return
    if len(sys.argv) > 1 and sys.argv[1] == "client":
        p = argparse.ArgumentParser()
        p.add_argument("--stream", required=True)
        p.add_argument("--rank", type=int, required=True)
        p.add_argument("--start-step", type=int, required=True)
        p.add_argument("--steps", type=int, required=True)
        p.add_argument("--server", required=True)
        client_main(p.parse_args(sys.argv[2:]))
        return
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kill-daemon", action="store_true",
                   help="the daemon-restart soak instead (tests/soak_restart.py; "
                   "--kill-daemon --help lists its flags)")
    p.add_argument("--seconds", type=float, default=60)
    p.add_argument("--batchd", default=os.environ.get("BATCHD_BIN"),
                   help="the daemon (default $BATCHD_BIN)")
    p.add_argument("--threads", type=int, default=2,
                   help="the daemon's worker threads")
    p.add_argument("--seed", type=int, default=1,
                   help="seed of the kills and stops")
    p.add_argument("--disturb-every", type=float, default=1.5,
                   help="longest pause between two kills or stops, seconds")
    p.add_argument("--stall-seconds", type=float, default=90,
                   help="a running client without a batch this long fails")
    opts = p.parse_args()
    if not opts.batchd:
        sys.exit("soak: set BATCHD_BIN or --batchd to the batchd daemon")
    Soak(opts).run()


if __name__ == "__main__":
    main()
