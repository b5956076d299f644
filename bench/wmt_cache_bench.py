#!/usr/bin/python3
"""WMT at full size with the persistent cache: the time from OpenStream to
the first 20 train batches on a never-seen text set (cold: an empty
--cache-dir) and after a daemon restart with the cache (warm), the daemon's
peak RSS (VmHWM) in each run, and the cache's size on disk.

The data set is bench/make_wmt_scale.py's (5.9 M pairs, ~2 GB of text, a
long tail of words; generated when missing) with a SentencePiece model
trained by workloads/wmt/tools/train_sentencepiece.py (when missing).

    PYTHONPATH=build/python bench/wmt_cache_bench.py [--build build]
        [--data /tmp/batchd-wmt-scale] [--pairs 5900000] [--threads 2]
        [--vocab 16000] [--batches 20] [--global-batch 128] [--json FILE]

--pairs picks a smaller scale (a fresh --data directory per scale).
"""

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def vm_hwm_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


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
        hwm = vm_hwm_kib(self.proc.pid)
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=60)
        shutil.rmtree(self.dir, ignore_errors=True)
        return hwm


def first_batches(daemon, args, name):
    import batchd
    t0 = time.monotonic()
    loader = batchd.Loader(
        name, args.global_batch, workload="wmt",
        data=os.path.basename(args.data), split="train", seed=0,
        server=daemon.address, format="numpy", options={"source": "text"},
        connect_timeout=30.0, timeout=3600.0)
    first = None
    for i in range(args.batches):
        batch = next(loader)
        if i == 0:
            first = time.monotonic() - t0
        del batch
    total = time.monotonic() - t0
    loader.close()
    return first, total


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
    ap.add_argument("--json")
    args = ap.parse_args()
    args.data = os.path.abspath(args.data)
    prepare(args)
    text_bytes = sum(os.path.getsize(os.path.join(args.data, f"train.{l}"))
                     for l in ("de", "en"))
    cache = tempfile.mkdtemp(prefix="batchd-wmtcache-dir-", dir="/tmp")
    os.rmdir(cache)  # batchd creates it, mode 0700
    log = os.path.join(tempfile.gettempdir(), "wmt_cache_bench.log")
    results = {"pairs": args.pairs, "text_bytes": text_bytes,
               "threads": args.threads, "global_batch": args.global_batch,
               "batches": args.batches}
    try:
        for run in ("cold", "warm"):
            daemon = Daemon(args.build, os.path.dirname(args.data), cache,
                            args.threads, log)
            first, total = first_batches(daemon, args, f"wmtcache-{run}")
            hwm = daemon.stop()
            results[run] = {"first_batch_s": round(first, 2),
                            f"first_{args.batches}_batches_s": round(total, 2),
                            "daemon_vmhwm_mib": round(hwm / 1024, 1)}
            print(f"{run}: first batch {first:.1f} s, {args.batches} batches "
                  f"{total:.1f} s, daemon VmHWM {hwm / 1024:.0f} MiB",
                  file=sys.stderr)
        results["cache_bytes"] = du_bytes(cache)
        results["cache_files"] = sorted(os.listdir(cache))
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    print(json.dumps(results, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
