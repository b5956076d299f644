#!/usr/bin/python3
"""Daemon-restart soak: the daemon is killed (kill -9, sometimes SIGTERM)
at random every few seconds and restarted at once on the same socket, data
root, shared-memory prefix and cache directory, as systemd's
Restart=always would, under long-lived client processes, each one rank of
a 2-rank stream. No client may see an exception, lose or repeat a step, or
get a batch other than an undisturbed run's.

    BATCHD_BIN=build/server/batchd PYTHONPATH=build/python \\
        /usr/bin/python3 tests/soak.py --kill-daemon --seconds 60

Streams (2 ranks each; data generated into the run's directory with the
generators the pytest fixtures use: 4 classes x 6 ImageNet-like JPEGs for
train and x 3 for val, 300 WMT-like pairs and a 600-piece SentencePiece
model):
  syn-train       synthetic, train, 333 examples, G = 10
  syn-eval        synthetic, validation, 95 examples, G = 10: one pass of
                  10 batches, the last padded; each rank opens a new Loader
                  and starts the pass again when it ends
  imagenet-train  imagenet (ImageFolder), train, G = 8, with_ids
  imagenet-eval   imagenet, val, G = 8, with_ids: passes as syn-eval
  wmt-train       wmt (TFDS shards), train, G = 4 packed rows

How each batch is checked:
  - synthetic: every row against the independent reference
    (tests/soak_reference.py: sampler and payload);
  - imagenet: ids against the independent sampler, targets against the
    classes of the sorted file listing (as torchvision lists it), and every
    tensor byte for byte against the same stream of a reference daemon that
    is never killed;
  - wmt: every tensor byte for byte, and the batch's step, epoch, position
    and cursor, against the reference daemon.
A client that gets an exception, a wrong batch or a step out of order fails
the soak; so does one without a batch for --stall-seconds, a daemon that
exits by itself, a SIGTERM that takes more than 30 s, and segments left in
/dev/shm at the end (each new daemon removes those of the dead one).

Figures: restarts (kill -9 / SIGTERM), batches checked per workload; the
stall per restart (for each rank and restart: the gap between the last
batch before and the first after, and what loader.reconnects adds), as
median, p95 and max; the daemon's start after each restart (time until its
socket accepts, and until each workload's first batch from it); the time
SIGTERM takes. Clients pace themselves to --step-ms per step, as a trainer's
compute would, so that the stall measures the restart, not the CPU.
"""

import argparse
import os
import random
import select
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid

from soak_reference import (Reference, check_batch, check_ids_and_targets,
                            image_folder_classes)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

STREAMS = {
    "syn-train": dict(workload="synthetic", split="train", batch=10, seed=12345,
                      options={"examples": 333, "payload_bytes": 64}),
    "syn-eval": dict(workload="synthetic", split="validation", batch=10,
                     seed=3, options={"examples": 95, "payload_bytes": 16}),
    "imagenet-train": dict(workload="imagenet", data="imagenet", split="train",
                           batch=8, seed=5, options={"with_ids": 1}),
    "imagenet-eval": dict(workload="imagenet", data="imagenet", split="val",
                          batch=8, seed=0, options={"with_ids": 1}),
    "wmt-train": dict(workload="wmt", data="wmt", split="train", batch=4,
                      seed=11, options={"index_threads": 1}),
}
WORLD = 2
SIGTERM_SECONDS = 30


# --- a client process --------------------------------------------------------

def open_loader(spec, name, rank, server, reconnect):
    import batchd
    return batchd.Loader(
        name, spec["batch"], workload=spec["workload"],
        data=spec.get("data", ""), split=spec["split"], world_size=WORLD,
        rank=rank, seed=spec["seed"], options=spec["options"], server=server,
        reconnect=reconnect, connect_timeout=reconnect, timeout=None,
        stall_timeout=reconnect, format="numpy")


class Checker:
    """What is wrong with one batch of a stream's rank (empty: correct)."""

    def __init__(self, spec, rank, data_root):
        self.spec = spec
        self.workload = spec["workload"]
        ref_spec = dict(split=spec["split"], world_size=WORLD,
                        global_batch_size=spec["batch"], seed=spec["seed"],
                        **spec["options"])
        self.classes = None
        if self.workload == "imagenet":
            split_dir = os.path.join(data_root, spec["data"], spec["split"])
            self.classes = image_folder_classes(split_dir)
            ref_spec["examples"] = len(self.classes)
        self.ref = (Reference(ref_spec, rank)
                    if self.workload != "wmt" else None)

    def __call__(self, step, info, batch, ref_batch, ref_info):
        import numpy as np
        errors = []
        if self.workload == "synthetic":
            errors += check_batch(self.ref, step, info, batch)
        elif self.workload == "imagenet":
            ids, targets = batch["ids"].tolist(), batch["targets"].tolist()
            errors += check_ids_and_targets(self.ref, step, info, ids,
                                            targets, self.classes)
            for i in range(info.valid_count, len(ids)):
                if ids[i] != -1 or batch["weights"][i] != 0:
                    errors.append(f"step {step} row {i}: padding row with id "
                                  f"{ids[i]}, weight {batch['weights'][i]}")
        elif info.step != step:
            errors.append(f"step {info.step} delivered where {step} was due")
        if ref_batch is None:
            return errors
        if tuple(ref_info) != tuple(info):
            errors.append(f"step {step}: batch info {tuple(info)}, the "
                          f"reference daemon's {tuple(ref_info)}")
        if set(batch) != set(ref_batch):
            return errors + [f"step {step}: tensors {sorted(batch)}, the "
                             f"reference daemon's {sorted(ref_batch)}"]
        for name, array in batch.items():
            want = ref_batch[name]
            if (array.dtype != want.dtype or array.shape != want.shape or
                    not np.array_equal(array, want)):
                errors.append(f"step {step}: tensor {name} {array.dtype}"
                              f"{list(array.shape)} differs from the "
                              f"reference daemon's {want.dtype}"
                              f"{list(want.shape)}")
        return errors


def stop_asked():
    """True once the driver wrote to or closed our stdin."""
    return bool(select.select([sys.stdin], [], [], 0)[0])


def client_main(args):
    """One rank of a stream, until the driver closes stdin. Prints (flushed)
    `ok STEP PID TIME` for every batch checked (PID: the daemon it came
    from, TIME: time.monotonic()), `stall STEP GAP REOPENS REOPEN_SECONDS`
    for the first batch from a new daemon, `end STEP` after an eval pass,
    `done REOPENS` at the end; `error ...` and exit 1 on a wrong batch. An
    exception is not caught: it fails the soak."""
    spec = STREAMS[args.stream]
    check = Checker(spec, args.rank, args.data_root)
    with_ref = spec["workload"] != "synthetic"
    out = sys.stdout
    step_seconds = args.step_ms / 1000.0
    last_pid = last_time = None
    total_reopens = 0

    def open_both():
        soak = open_loader(spec, args.stream, args.rank, args.server,
                           args.reconnect)
        ref = (open_loader(spec, args.stream, args.rank, args.reference, 30.0)
               if with_ref else None)
        return soak, ref

    loader, ref_loader = open_both()
    seen = (0, 0.0)
    step = 0
    while not stop_asked():
        try:
            batch, info = loader.next_batch()
        except StopIteration:
            if check.ref is not None and step != check.ref.steps_per_epoch:
                out.write(f"error the pass ended after {step} steps, not "
                          f"{check.ref.steps_per_epoch}\n")
                out.flush()
                sys.exit(1)
            if ref_loader is not None:
                try:
                    ref_loader.next_batch()
                    out.write(f"error step {step}: the pass ended where the "
                              f"reference daemon's goes on\n")
                    out.flush()
                    sys.exit(1)
                except StopIteration:
                    pass
                ref_loader.close()
            out.write(f"end {step}\n")
            out.flush()
            total_reopens += loader.reconnects[0]
            loader.close()
            loader, ref_loader = open_both()
            seen, step = (0, 0.0), 0
            continue
        now = time.monotonic()
        pid = loader.info.server_pid
        ref_batch, ref_info = (ref_loader.next_batch() if ref_loader
                               else (None, None))
        errors = check(step, info, batch, ref_batch, ref_info)
        del batch, ref_batch  # give both slots back
        if errors:
            out.write("error " + "; ".join(errors[:3]) + "\n")
            out.flush()
            sys.exit(1)
        reopened = loader.reconnects
        if last_pid is not None and pid != last_pid:
            out.write(f"stall {step} {now - last_time:.6f} "
                      f"{reopened[0] - seen[0]} "
                      f"{reopened[1] - seen[1]:.6f}\n")
        seen = reopened
        out.write(f"ok {step} {pid} {now:.6f}\n")
        out.flush()
        last_pid, last_time = pid, now
        step += 1
        # The trainer's compute: what is left of the step after the check.
        pause = step_seconds - (time.monotonic() - now)
        if pause > 0:
            time.sleep(pause)
    total_reopens += loader.reconnects[0]
    out.write(f"done {total_reopens}\n")
    out.flush()
    loader.close()
    if ref_loader is not None:
        ref_loader.close()


# --- the driver ----------------------------------------------------------------

def quantiles(values):
    """'median X s, p95 Y s, max Z s (n N)' of a list of seconds."""
    if not values:
        return "none"
    v = sorted(values)

    def q(f):
        return v[min(len(v) - 1, int(f * (len(v) - 1) + 0.5))]
    return (f"median {q(0.5):.3f} s, p95 {q(0.95):.3f} s, max {v[-1]:.3f} s "
            f"(n {len(v)})")


def describe(segment):
    """A left-over segment: its name, size, age and what its header says
    (shm_layout.h: magic at 0, layout_version at 8, server_pid at 44,
    client_pid at 256)."""
    path = f"/dev/shm/{segment}"
    try:
        st = os.stat(path)
        with open(path, "rb") as f:
            head = f.read(260)
    except OSError as e:
        return f"{segment} ({e})"
    field = lambda at, n: int.from_bytes(head[at:at + n], "little")  # noqa
    return (f"{segment} ({st.st_size} bytes, {time.time() - st.st_mtime:.0f} "
            f"s old, magic {head[:8]!r}, layout {field(8, 4)}, server pid "
            f"{field(44, 4)}, client pid {field(256, 4)})")


def generate_data(root):
    """The data sets of tests/python/conftest.py's shared_data fixture."""
    py = sys.executable
    tools = os.path.join(ROOT, "workloads", "wmt", "tools")
    for argv in (
            [os.path.join(ROOT, "workloads", "imagenet", "make_imagenet.py"),
             f"{root}/imagenet", "--classes", "4", "--per-class", "6",
             "--val-per-class", "3", "--no-odd", "--no-tfrecord"],
            [os.path.join(tools, "generate_wmt.py"), "--out", f"{root}/wmt",
             "--train", "300", "--validation", "90", "--test", "10",
             "--shards", "2", "--seed", "5"],
            [os.path.join(tools, "train_sentencepiece.py"), "--data",
             f"{root}/wmt", "--vocab-size", "600", "--threads", "1"]):
        subprocess.run([py, *argv], check=True, capture_output=True)


class Daemon:
    """One batchd process, restarted on the same flags."""

    def __init__(self, opts, directory, name):
        self.dir = directory
        self.sock = f"{directory}/{name}.sock"
        self.address = f"unix://{self.sock}"
        self.prefix = f"batchdsoak{uuid.uuid4().hex[:10]}"
        self.log_path = f"{directory}/{name}.log"
        self.log = open(self.log_path, "a")
        self.argv = [opts.batchd, "--listen", self.address, "--data-root",
                     f"{directory}/data", "--shm-prefix", self.prefix,
                     "--threads", str(opts.threads), "--cache-dir",
                     f"{directory}/{name}-cache"]
        self.proc = None
        self.started = 0.0

    def start(self):
        """Starts it; returns the seconds until its socket accepted."""
        self.started = time.monotonic()
        self.proc = subprocess.Popen(self.argv, stdout=self.log,
                                     stderr=subprocess.STDOUT)
        deadline = self.started + 60
        while time.monotonic() < deadline and self.proc.poll() is None:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                try:
                    s.connect(self.sock)
                    return time.monotonic() - self.started
                except OSError:
                    time.sleep(0.002)
        self.log.flush()
        sys.exit(f"soak: batchd did not start: "
                 f"{open(self.log_path).read()[-2000:]}")

    def stop(self, sig):
        """Sends `sig` and reaps it (the pid is then really gone); returns
        the seconds it took to exit, None past SIGTERM_SECONDS."""
        t = time.monotonic()
        self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout=SIGTERM_SECONDS)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None
        return time.monotonic() - t


class Client:
    def __init__(self, stream, rank):
        self.stream, self.rank = stream, rank
        self.workload = STREAMS[stream]["workload"]
        self.next_step = 0
        self.proc = None
        self.buf = b""
        self.last_progress = time.monotonic()
        self.last_pid = None
        self.last_when = 0.0
        self.done = False
        self.failed = False  # its exit was reported
        self.reopens = None


class RestartSoak:
    def __init__(self, opts):
        self.opts = opts
        self.rng = random.Random(opts.seed)
        self.failures = []
        self.batches = {}      # workload -> batches checked
        self.referenced = {}   # workload -> of them, against the reference
        self.stalls = {}       # workload -> [gap seconds]
        self.reopen_seconds = []
        self.gaps = {}         # workload -> [ordinary gap seconds]
        self.accept = []       # a start's seconds until the socket accepted
        self.down = []         # seconds from the signal to the next accepting
        self.first_batch = {}  # workload -> [seconds from the signal]
        self.sigterm = []      # seconds from SIGTERM to exit
        self.kills = self.terms = self.passes = 0
        self.signalled = {}    # daemon pid -> when its predecessor was
        self.first_seen = set()  # (pid, workload) with a first batch
        self.sel = selectors.DefaultSelector()
        self.dir = tempfile.mkdtemp(prefix="batchd-soak-", dir="/tmp")
        os.mkdir(f"{self.dir}/data")
        generate_data(f"{self.dir}/data")
        self.daemon = Daemon(opts, self.dir, "batchd")
        self.reference = Daemon(opts, self.dir, "reference")
        self.clients = [Client(name, r) for name in STREAMS
                        for r in range(WORLD)]

    def fail(self, what):
        self.failures.append(what)
        print(f"soak: FAIL: {what}", flush=True)

    def start_daemon(self):
        self.accept.append(self.daemon.start())

    def start_client(self, c):
        err = open(f"{self.dir}/{c.stream}.{c.rank}.stderr", "w")
        c.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "client", "--stream",
             c.stream, "--rank", str(c.rank), "--server",
             self.daemon.address, "--reference", self.reference.address,
             "--data-root", f"{self.dir}/data", "--step-ms",
             str(self.opts.step_ms), "--reconnect",
             str(self.opts.reconnect)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err)
        err.close()
        os.set_blocking(c.proc.stdout.fileno(), False)
        self.sel.register(c.proc.stdout, selectors.EVENT_READ, c)

    def stderr_tail(self, c):
        with open(f"{self.dir}/{c.stream}.{c.rank}.stderr") as f:
            return f.read()[-1500:].strip()

    def consume(self, c, data):
        c.buf += data
        *lines, c.buf = c.buf.split(b"\n")
        for line in lines:
            word, *rest = line.decode().split(" ")
            if word == "ok":
                self.on_batch(c, int(rest[0]), int(rest[1]), float(rest[2]))
            elif word == "stall":
                self.stalls.setdefault(c.workload, []).append(float(rest[1]))
                if int(rest[2]) > 0:
                    self.reopen_seconds.append(float(rest[3]))
            elif word == "end":
                c.next_step = 0
                self.passes += 1
            elif word == "done":
                c.done, c.reopens = True, int(rest[0])
            elif word == "error":
                self.fail(f"{c.stream} rank {c.rank}: {' '.join(rest)}")

    def on_batch(self, c, step, pid, when):
        if step != c.next_step:
            self.fail(f"{c.stream} rank {c.rank}: step {step} reported "
                      f"where {c.next_step} was due (lost or repeated)")
        c.next_step = step + 1
        c.last_progress = time.monotonic()
        self.batches[c.workload] = self.batches.get(c.workload, 0) + 1
        if c.workload != "synthetic":
            self.referenced[c.workload] = \
                self.referenced.get(c.workload, 0) + 1
        if (pid, c.workload) not in self.first_seen and pid in self.signalled:
            self.first_seen.add((pid, c.workload))
            self.first_batch.setdefault(c.workload, []).append(
                when - self.signalled[pid])
        elif c.last_pid == pid and step > 0:
            self.gaps.setdefault(c.workload, []).append(when - c.last_when)
        c.last_pid, c.last_when = pid, when

    def poll_io(self, timeout):
        for key, _ in self.sel.select(timeout):
            try:
                data = os.read(key.fileobj.fileno(), 65536)
            except BlockingIOError:
                continue
            if data:
                self.consume(key.data, data)

    def check_clients(self, now, daemon_up_since):
        for c in self.clients:
            if c.proc.poll() is not None and not c.done:
                self.poll_io(0)
                self.fail(f"{c.stream} rank {c.rank}: client exited with "
                          f"{c.proc.returncode} at step {c.next_step}: "
                          f"{self.stderr_tail(c)}")
                c.done = c.failed = True
            elif (not c.done and now - max(c.last_progress, daemon_up_since)
                  > self.opts.stall_seconds):
                self.fail(f"{c.stream} rank {c.rank}: no batch for "
                          f"{self.opts.stall_seconds} s at step "
                          f"{c.next_step}: {self.stderr_tail(c)[-500:]}")
                c.last_progress = now

    def restart(self):
        """Kills or stops the daemon, and starts it again at once."""
        signalled = time.monotonic()
        if self.daemon.proc.poll() is not None:
            self.fail(f"batchd exited by itself with "
                      f"{self.daemon.proc.returncode}")
        elif self.rng.random() < self.opts.sigterm_share:
            took = self.daemon.stop(signal.SIGTERM)
            self.terms += 1
            if took is None:
                self.fail(f"batchd did not exit within {SIGTERM_SECONDS} s "
                          f"of SIGTERM")
            else:
                self.sigterm.append(took)
                if self.daemon.proc.returncode != 0:
                    self.fail(f"batchd exited with "
                              f"{self.daemon.proc.returncode} after SIGTERM")
        else:
            self.daemon.stop(signal.SIGKILL)
            self.kills += 1
        self.start_daemon()
        self.down.append(time.monotonic() - signalled)
        self.signalled[self.daemon.proc.pid] = signalled

    def run(self):
        opts = self.opts
        self.reference.start()
        self.start_daemon()
        for c in self.clients:
            self.start_client(c)
        begin = time.monotonic()
        end = begin + opts.seconds
        next_kill = begin + self.rng.uniform(opts.kill_min, opts.kill_max)
        up_since = begin
        while time.monotonic() < end and len(self.failures) < 20:
            self.poll_io(0.05)
            now = time.monotonic()
            if self.reference.proc.poll() is not None:
                self.fail(f"the reference batchd exited with "
                          f"{self.reference.proc.returncode}")
                break
            self.check_clients(now, up_since)
            if now >= next_kill:
                self.restart()
                up_since = time.monotonic()
                # Now and then at once again: while the ranks reopen.
                quick = self.rng.random() < 0.1
                next_kill = up_since + (
                    self.rng.uniform(0.0, 0.3) if quick else
                    self.rng.uniform(opts.kill_min, opts.kill_max))
        self.finish()

    def finish(self):
        """Every rank must get a batch from the last daemon; then the
        clients stop, and both daemons."""
        last = self.daemon.proc.pid
        deadline = time.monotonic() + self.opts.stall_seconds
        while time.monotonic() < deadline:
            waiting = [c for c in self.clients
                       if not c.done and c.last_pid != last]
            if not waiting:
                break
            self.poll_io(0.1)
            self.check_clients(time.monotonic(), 0)
        for c in self.clients:
            if not c.done and c.last_pid != last:
                self.fail(f"{c.stream} rank {c.rank}: no batch from the last "
                          f"daemon (pid {last}) at step {c.next_step}: "
                          f"{self.stderr_tail(c)[-500:]}")
            try:
                c.proc.stdin.close()
            except OSError:
                pass
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and any(
                c.proc.poll() is None for c in self.clients):
            self.poll_io(0.1)
        self.poll_io(0)
        for c in self.clients:
            if c.proc.poll() is None:
                c.proc.kill()
                self.fail(f"{c.stream} rank {c.rank}: did not stop")
            c.proc.wait()
            self.consume(c, c.proc.stdout.read() or b"")
            if c.proc.returncode != 0 and not c.failed:
                self.fail(f"{c.stream} rank {c.rank}: exited with "
                          f"{c.proc.returncode}: {self.stderr_tail(c)}")
            elif c.reopens is not None and c.reopens > self.kills + self.terms:
                self.fail(f"{c.stream} rank {c.rank}: reopened {c.reopens} "
                          f"times for {self.kills + self.terms} restarts")
        for d in (self.daemon, self.reference):
            if d.proc.poll() is not None:
                self.fail(f"{d.log_path}: batchd exited with "
                          f"{d.proc.returncode} before the end")
            elif d.stop(signal.SIGTERM) is None or d.proc.returncode != 0:
                self.fail(f"{d.log_path}: SIGTERM at the end gave "
                          f"{d.proc.returncode}")
            left = [p for p in os.listdir("/dev/shm")
                    if p.startswith(d.prefix + ".")]
            if left:
                self.fail(f"{len(left)} segments of {d.log_path} left in "
                          f"/dev/shm: {'; '.join(map(describe, left[:3]))}")
                for p in left:
                    os.unlink(f"/dev/shm/{p}")
        self.report()

    def report(self):
        restarts = self.kills + self.terms
        checked = ", ".join(f"{w} {n}" for w, n in sorted(self.batches.items()))
        refd = ", ".join(f"{w} {n}" for w, n in sorted(self.referenced.items()))
        print(f"soak: daemon restarts, {self.opts.seconds:.0f} s, "
              f"{len(self.clients)} clients on {len(STREAMS)} streams of "
              f"{WORLD} ranks: {restarts} restarts ({self.kills} kill -9, "
              f"{self.terms} SIGTERM), batches checked: {checked} (of them "
              f"against the reference daemon: {refd}), {self.passes} eval "
              f"rank passes, {len(self.failures)} errors")
        every = [s for v in self.stalls.values() for s in v]
        print(f"soak: stall per restart and rank (last batch before to first "
              f"after): {quantiles(every)}")
        for w in sorted(self.stalls):
            print(f"soak:   {w}: {quantiles(self.stalls[w])}; an ordinary "
                  f"step: {quantiles(self.gaps.get(w, []))}")
        print(f"soak: reopening (loader.reconnects): "
              f"{quantiles(self.reopen_seconds)}")
        print(f"soak: restart, from the signal to the next daemon accepting: "
              f"{quantiles(self.down)}; its start alone: "
              f"{quantiles(self.accept[1:])}")
        for w in sorted(self.first_batch):
            print(f"soak:   from the signal to {w}'s first batch: "
                  f"{quantiles(self.first_batch[w])}")
        print(f"soak: SIGTERM to exit: {quantiles(self.sigterm)}")
        if restarts == 0:
            self.fail("the daemon was never restarted")
        if not every:
            self.fail("no rank saw a restart")
        for d in (self.daemon, self.reference):
            d.log.close()
        if self.failures:
            print(f"soak: FAILED ({len(self.failures)} failures); logs kept "
                  f"in {self.dir}")
            sys.exit(1)
        if self.opts.keep:
            print(f"soak: passed; logs kept in {self.dir}")
            return
        shutil.rmtree(self.dir, ignore_errors=True)
        print("soak: passed")


def main(argv):
    if argv and argv[0] == "client":
        p = argparse.ArgumentParser()
        p.add_argument("--stream", required=True, choices=sorted(STREAMS))
        p.add_argument("--rank", type=int, required=True)
        p.add_argument("--server", required=True)
        p.add_argument("--reference", required=True)
        p.add_argument("--data-root", required=True)
        p.add_argument("--step-ms", type=float, required=True)
        p.add_argument("--reconnect", type=float, required=True)
        client_main(p.parse_args(argv[1:]))
        return
    p = argparse.ArgumentParser(
        prog="soak.py --kill-daemon", description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=60)
    p.add_argument("--batchd", default=os.environ.get("BATCHD_BIN"),
                   help="the daemon (default $BATCHD_BIN)")
    p.add_argument("--threads", type=int, default=2,
                   help="each daemon's worker threads")
    p.add_argument("--seed", type=int, default=1,
                   help="seed of the kills' timing and kind")
    p.add_argument("--kill-min", type=float, default=1.0,
                   help="shortest time between two restarts, seconds")
    p.add_argument("--kill-max", type=float, default=5.0,
                   help="longest time between two restarts, seconds")
    p.add_argument("--sigterm-share", type=float, default=0.25,
                   help="share of the restarts made by SIGTERM, not kill -9")
    p.add_argument("--step-ms", type=float, default=20,
                   help="each client's step time (its trainer's compute)")
    p.add_argument("--reconnect", type=float, default=60,
                   help="the clients' reconnect window, seconds")
    p.add_argument("--stall-seconds", type=float, default=90,
                   help="a client without a batch this long fails")
    p.add_argument("--keep", action="store_true",
                   help="keep the logs and data of a run that passed")
    opts = p.parse_args(argv)
    if not opts.batchd:
        sys.exit("soak: set BATCHD_BIN or --batchd to the batchd daemon")
    RestartSoak(opts).run()


if __name__ == "__main__":
    main(sys.argv[1:])
