#!/usr/bin/python3
"""WMT at full size with the persistent cache: the time from OpenStream to
the first 20 train batches on a never-seen text set (cold: an empty
--cache-dir; the length pass then goes on in the background, and the run
waits for it to end and to store the token ids) and after a daemon restart with the cache (warm), the
steady rows/s of the warm stream (against the memcpy speed of its bytes),
the time to the first batch of a stream resumed at step 100 000 after a
restart (twice: before and after the epochs' row counts are cached), the
daemon's peak RSS (VmHWM) in each run, and the cache's size on disk.

Run `short` measures what a short first job leaves (issue 20's item 3): on
a cold cache, a 20-batch stream that is then closed (its length pass goes
on without it), the daemon left alone until the pass has stored every
length and token id (the pass's duration), then a restart and a resume at
step 100 000: the time to its first batch (target <= 10 s) and the daemon's
peak RSS in both runs (target <= 1 GiB), and whether the restarted daemon
tokenized anything.

The data set is bench/make_wmt_scale.py's (5.9 M pairs, ~2 GB of text, a
long tail of words; generated when missing) with a SentencePiece model
trained by workloads/wmt/tools/train_sentencepiece.py (when missing).

    PYTHONPATH=build/python bench/wmt_cache_bench.py [--build build]
        [--data /tmp/batchd-wmt-scale] [--pairs 5900000] [--threads 2]
        [--vocab 16000] [--batches 20] [--global-batch 128]
        [--steady-batches 300] [--resume-step 100000] [--json FILE]
        [--cache DIR] [--runs cold,warm,resume,resume_counted]
    PYTHONPATH=build/python bench/wmt_cache_bench.py --runs short

--pairs picks a smaller scale (a fresh --data directory per scale).
--cache keeps the cache directory (default: a fresh one, removed after);
with --runs, later runs can be measured again on it alone.
"""

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid

from procstat import status

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def du_bytes(path):
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            total += os.lstat(os.path.join(root, name)).st_blocks * 512
    return total


def prepare(args):
    data = args.data
    marker = os.path.join(data, "pairs")
    have = open(marker).read().strip() if os.path.exists(marker) else ""
    if have != str(args.pairs):
        t = time.monotonic()
        subprocess.run([sys.executable, os.path.join(REPO, "bench",
                                                     "make_wmt_scale.py"),
                        "--out", data, "--pairs", str(args.pairs)],
                       check=True)
        open(marker, "w").write(f"{args.pairs}\n")
        print(f"generated {args.pairs} pairs in {time.monotonic() - t:.0f} s",
              file=sys.stderr)
        model = os.path.join(data, "wmt_sentencepiece_model")
        if os.path.exists(model):
            os.unlink(model)
    model = os.path.join(data, "wmt_sentencepiece_model")
    if not os.path.exists(model):
        t = time.monotonic()
        subprocess.run([sys.executable,
                        os.path.join(REPO, "workloads", "wmt", "tools",
                                     "train_sentencepiece.py"),
                        "--data", data, "--vocab-size", str(args.vocab),
                        "--max-chars", str(args.model_chars)], check=True)
        print(f"trained the model in {time.monotonic() - t:.0f} s",
              file=sys.stderr)


class Daemon:
    def __init__(self, build, data_root, cache_dir, threads, log_path):
        self.dir = tempfile.mkdtemp(prefix="batchd-wmtcache-", dir="/tmp")
        self.address = f"unix://{self.dir}/sock"
        self.log = open(log_path, "a")
        self.proc = subprocess.Popen(
            [os.path.join(build, "server", "batchd"), "--listen",
             self.address, "--data-root", data_root, "--threads",
             str(threads), "--cache-dir", cache_dir, "--shm-prefix",
             f"batchdbench{uuid.uuid4().hex[:8]}"],
            stdout=self.log, stderr=subprocess.STDOUT)
        path = os.path.join(self.dir, "sock")
        deadline = time.monotonic() + 60
        while True:
            if self.proc.poll() is not None:
                sys.exit(f"batchd exited with {self.proc.returncode}; see "
                         f"{log_path}")
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                try:
                    s.connect(path)
                    break
                except OSError:
                    pass
            if time.monotonic() > deadline:
                sys.exit("batchd does not accept")
            time.sleep(0.05)

    def stop(self):
        hwm = status(self.proc.pid)["hwm"] // 1024  # KiB
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=60)
        shutil.rmtree(self.dir, ignore_errors=True)
        return hwm


def open_loader(daemon, args, name, start_step=0):
    import batchd
    return batchd.Loader(
        name, args.global_batch, workload="wmt",
        data=os.path.basename(args.data), split="train", seed=0,
        start_step=start_step, server=daemon.address, format="numpy",
        options={"source": "text"}, connect_timeout=600.0, timeout=3600.0)


def first_batches(daemon, args, name, steady=0):
    """Seconds to the first batch and to the first args.batches; with
    `steady`, also the rows/s of the next `steady` batches."""
    t0 = time.monotonic()
    loader = open_loader(daemon, args, name)
    first = None
    for i in range(args.batches):
        batch = next(loader)
        if i == 0:
            first = time.monotonic() - t0
        del batch
    total = time.monotonic() - t0
    rows_per_s = None
    if steady:
        t1 = time.monotonic()
        for _ in range(steady):
            batch = next(loader)
            rows = len(batch["inputs"])
            del batch
        rows_per_s = steady * rows / (time.monotonic() - t1)
    loader.close()
    return first, total, rows_per_s


def resume_seconds(daemon, args, name):
    t0 = time.monotonic()
    loader = open_loader(daemon, args, name, start_step=args.resume_step)
    info = loader.next_batch()[1]
    took = time.monotonic() - t0
    loader.close()
    assert info.step == args.resume_step, info.step
    return took


def close_stream(daemon, args, name):
    subprocess.run([os.path.join(args.build, "server", "batchctl"), "close",
                    name, "--server", daemon.address], check=True,
                   capture_output=True)


def log_since(log_path, offset):
    with open(log_path) as f:
        f.seek(offset)
        return f.read()


def short_then_resume(args, cache, log):
    """A 20-batch stream on a cold cache, closed; the pass left to end; a
    restart and a resume at args.resume_step."""
    if os.path.exists(cache) and os.listdir(cache):
        sys.exit(f"run short wants a cold cache, and {cache} holds entries: "
                 "run it alone (--runs short) on a fresh --cache")
    offset = os.path.getsize(log) if os.path.exists(log) else 0
    daemon = Daemon(args.build, os.path.dirname(args.data), cache,
                    args.threads, log)
    t0 = time.monotonic()
    first, total, _ = first_batches(daemon, args, "wmtcache-short")
    close_stream(daemon, args, "wmtcache-short")
    closed = time.monotonic() - t0
    lengths = wait_for_log(log, offset, t0, "wmt_lengths")
    tokens = wait_for_log(log, offset, t0, "wmt_tokens")
    epochs = wait_for_log(log, offset, t0, "wmt_epochs_counted")
    hwm = daemon.stop()
    r = {"first_batch_s": round(first, 2),
         f"first_{args.batches}_batches_s": round(total, 2),
         "stream_closed_s": round(closed, 2),
         "pass_lengths_done_s": round(lengths, 1),
         "pass_token_ids_stored_s": round(tokens, 1),
         "pass_epochs_counted_s": round(epochs, 1),
         "daemon_vmhwm_mib": round(hwm / 1024, 1)}
    offset = os.path.getsize(log)
    daemon = Daemon(args.build, os.path.dirname(args.data), cache,
                    args.threads, log)
    took = resume_seconds(daemon, args, "wmtcache-short-resume")
    hwm = daemon.stop()
    ends = re.findall(r"event=wmt_lengths pairs=\d+ tokenized=(\d+) "
                      r"first_windows=(\d+) from=(\S+)",
                      log_since(log, offset))
    r["resume"] = {"step": args.resume_step, "first_batch_s": round(took, 2),
                   "daemon_vmhwm_mib": round(hwm / 1024, 1),
                   "lengths": [{"tokenized": int(a), "first_windows": int(b),
                                "from": c} for a, b, c in ends]}
    return r


def wait_for_log(log_path, offset, t0, event, limit=7200):
    """Seconds from t0 until the daemon logs `event`."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        with open(log_path) as f:
            f.seek(offset)
            if f"event={event} " in f.read():
                return time.monotonic() - t0
        time.sleep(0.5)
    sys.exit(f"batchd did not log {event}")


def memcpy_rows_per_s(row_bytes):
    import numpy as np
    src = np.ones(64 << 20, dtype=np.uint8)
    dst = np.empty_like(src)
    best = 0.0
    for _ in range(5):
        t = time.monotonic()
        np.copyto(dst, src)
        best = max(best, src.nbytes / (time.monotonic() - t))
    return best / row_bytes


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--data", default="/tmp/batchd-wmt-scale")
    ap.add_argument("--pairs", type=int, default=5_900_000)
    ap.add_argument("--threads", type=int, default=2)
    # 10^7 characters of this text support ~23 000 pieces, not 32 000.
    ap.add_argument("--vocab", type=int, default=16000)
    ap.add_argument("--model-chars", type=int, default=10**7)
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--global-batch", type=int, default=128)
    ap.add_argument("--steady-batches", type=int, default=300)
    ap.add_argument("--resume-step", type=int, default=100_000)
    ap.add_argument("--json")
    ap.add_argument("--cache", help="cache directory to use and keep")
    ap.add_argument("--runs", default="cold,warm,resume,resume_counted")
    args = ap.parse_args()
    args.data = os.path.abspath(args.data)
    prepare(args)
    text_bytes = sum(os.path.getsize(os.path.join(args.data, f"train.{l}"))
                     for l in ("de", "en"))
    runs = args.runs.split(",")
    if args.cache:
        cache = os.path.abspath(args.cache)
    else:
        cache = tempfile.mkdtemp(prefix="batchd-wmtcache-dir-", dir="/tmp")
        os.rmdir(cache)  # batchd creates it, mode 0700
    log = os.path.join(tempfile.gettempdir(), "wmt_cache_bench.log")
    results = {"pairs": args.pairs, "text_bytes": text_bytes,
               "threads": args.threads, "global_batch": args.global_batch,
               "batches": args.batches}
    try:
        for run in [r for r in ("cold", "warm") if r in runs]:
            offset = os.path.getsize(log) if os.path.exists(log) else 0
            daemon = Daemon(args.build, os.path.dirname(args.data), cache,
                            args.threads, log)
            t0 = time.monotonic()
            first, total, rows_per_s = first_batches(
                daemon, args, f"wmtcache-{run}",
                steady=args.steady_batches if run == "warm" else 0)
            r = {"first_batch_s": round(first, 2),
                 f"first_{args.batches}_batches_s": round(total, 2)}
            if run == "cold":
                # The pass goes on in the background: first every pair's
                # length is known, then the token ids are stored.
                r["lengths_done_s"] = round(
                    wait_for_log(log, offset, t0, "wmt_lengths"), 1)
                r["token_ids_stored_s"] = round(
                    wait_for_log(log, offset, t0, "wmt_tokens"), 1)
            else:
                r["steady_rows_per_s"] = round(rows_per_s)
            hwm = daemon.stop()
            r["daemon_vmhwm_mib"] = round(hwm / 1024, 1)
            results[run] = r
            print(f"{run}: {r}", file=sys.stderr)
        # Resume far ahead after a restart: first with the row counts of
        # the epochs before the step still to count (from the cached
        # lengths), then again with them cached too.
        for run in [r for r in ("resume", "resume_counted") if r in runs]:
            daemon = Daemon(args.build, os.path.dirname(args.data), cache,
                            args.threads, log)
            took = resume_seconds(daemon, args, f"wmtcache-{run}")
            hwm = daemon.stop()
            results[run] = {"step": args.resume_step,
                            "first_batch_s": round(took, 2),
                            "daemon_vmhwm_mib": round(hwm / 1024, 1)}
            print(f"{run}: {results[run]}", file=sys.stderr)
        if "short" in runs:
            results["short"] = short_then_resume(args, cache, log)
            print(f"short: {results['short']}", file=sys.stderr)
        row_bytes = 6 * 256 * 4  # six int32 tensors of max_length 256
        results["memcpy_rows_per_s"] = round(memcpy_rows_per_s(row_bytes))
        results["cache_bytes"] = du_bytes(cache)
        results["cache_files"] = sorted(os.listdir(cache))
    finally:
        if not args.cache:
            shutil.rmtree(cache, ignore_errors=True)
    print(json.dumps(results, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
