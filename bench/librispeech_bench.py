#!/usr/bin/env python3
"""The librispeech workload side by side with AlgoPerf's PyTorch pipeline on
the same generated files and the same cores, at W = 1 and W = 8 ranks:

  algoperf  W rank processes (the torch venv's Python), each a
            torch.utils.data.DataLoader over a Dataset that does what
            AlgoPerf's LibriSpeechDataset does (np.load of both .npy files,
            pad audio to 320,000 and targets to 256 with their paddings, all
            float32), batch b, DistributedSampler(shuffle=True), drop_last,
            num_workers=4, pin_memory=True (ignored without CUDA): 4 W
            worker processes.
  batchd    one daemon (--threads = the cores) and W rank processes
            (Debian's Python with build/python) reading the ring: `ring` takes
            each rank's batch as the ring holds it (int16 samples and
            lengths: what a GPU node's host copies to the device, where
            batchd.algoperf widens it); `dropin` takes batchd.algoperf's
            queue with device="cpu" (widened on the host: AlgoPerf's float32
            tensors exactly).

The data: --train generated utterances with LibriSpeech's lengths (mean
~12.2 s, at most AlgoPerf's 20 s; make_librispeech.py --stats librispeech).

Every rank takes --warmup batches, then the timed ones, within one pass
over its share of train (the defaults: 2,048 utterances, 1,536 timed; each
rank's DataLoader ends its workers at the end of a pass and starts new ones,
which the full data set does only every ~33,000 utterances); the figures are for
the timed window only: utterances/s (all ranks), CPU-seconds of every
process of the pipeline in the window (daemon + ranks, or ranks + workers;
from /proc), utterances per CPU-second ("per core": other load on the
machine does not skew it), and, while the ranks run, threads, processes,
RSS and PSS of the pipeline's processes. Runs alternate between the sides
--repeat times; the table prints medians.

    /usr/bin/python3 bench/librispeech_bench.py [--build build]
        [--torch-python /var/cache/batchd-ci/venv-torch-3.12/bin/python]
"""

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from procstat import cpu_seconds, descendants, pss, status

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


# --- the rank processes -----------------------------------------------------

def algoperf_loader(data, b, world, rank, seed):
    """AlgoPerf's librispeech input queue per rank, re-written from its
    documented behaviour (input_pipeline.LibriSpeechDataset and
    _build_input_queue)."""
    import csv

    import numpy as np
    import torch

    class Dataset(torch.utils.data.Dataset):
        def __init__(self, subsets):
            self.ids = []
            for subset in subsets:
                with open(f"{data}/{subset}.csv", newline="") as f:
                    rows = list(csv.reader(f))
                self.ids += [f"{subset}/{r[1]}" for r in rows[1:]]

        def __len__(self):
            return len(self.ids)

        def __getitem__(self, i):
            audio = np.load(f"{data}/{self.ids[i]}_audio.npy")
            targets = np.load(f"{data}/{self.ids[i]}_targets.npy")
            audio_paddings = np.pad(np.zeros_like(audio, dtype=np.float32),
                                    (0, 320000 - audio.shape[0]),
                                    constant_values=1.0)
            audio = np.pad(audio, (0, 320000 - audio.shape[0]),
                           constant_values=0.0)
            target_paddings = np.pad(np.zeros_like(targets, dtype=np.float32),
                                     (0, 256 - targets.shape[0]),
                                     constant_values=1.0)
            targets = np.pad(targets, (0, 256 - targets.shape[0]),
                             constant_values=0)
            return ((audio.astype(np.float32), audio_paddings),
                    (targets.astype(np.float32), target_paddings))

    ds = Dataset(["train-clean-100", "train-clean-360", "train-other-500"])
    sampler = torch.utils.data.distributed.DistributedSampler(
        ds, num_replicas=world, rank=rank, shuffle=True, seed=seed)
    loader = torch.utils.data.DataLoader(ds, batch_size=b, sampler=sampler,
                                         num_workers=4, pin_memory=True,
                                         drop_last=True)
    epoch = 0
    while True:
        sampler.set_epoch(epoch)
        for inputs, targets in loader:
            yield {"inputs": inputs, "targets": targets}
        epoch += 1


def batchd_batches(mode, server, b, world, rank, seed):
    import batchd
    import batchd.algoperf
    if mode == "dropin":
        q = batchd.algoperf.input_queue(
            "librispeech", "train", b * world, data="librispeech", seed=seed,
            world_size=world, rank=rank, server=server, device="cpu",
            stream="bench", timeout=600)
        while True:
            yield next(q)
    loader = batchd.Loader("bench", b * world, workload="librispeech",
                           data="librispeech", split="train",
                           world_size=world, rank=rank, seed=seed,
                           server=server, timeout=600)
    while True:
        host, _ = loader.next_batch()
        yield host


def run_rank(a):
    import warnings
    warnings.filterwarnings("ignore")  # pin_memory without CUDA
    if a.side == "algoperf":
        batches = algoperf_loader(a.data, a.b, a.world, a.rank, a.seed)
    else:
        batches = batchd_batches(a.side, a.server, a.b, a.world, a.rank,
                                 a.seed)
    for _ in range(a.warmup):
        next(batches)
    with open(f"{a.sync}/warm{a.rank}", "w") as f:
        f.write(str(time.monotonic()))
    while not os.path.exists(f"{a.sync}/go"):
        if os.path.exists(f"{a.sync}/stop"):  # the bench was interrupted
            os._exit(1)
        time.sleep(0.005)
    for _ in range(a.steps):
        batch = next(batches)
        del batch
    with open(f"{a.sync}/done{a.rank}", "w") as f:
        f.write(str(time.monotonic()))
    while not os.path.exists(f"{a.sync}/stop"):
        time.sleep(0.01)
    os._exit(0)  # the DataLoader's workers go with their parent


# --- measuring processes ----------------------------------------------------

def footprint(pids):
    """processes, threads, RSS, PSS and anonymous RSS (MiB) of pids (RSS
    counts shared pages, the rings' and the workers' copy-on-write ones,
    once per process; PSS shares them out)."""
    st = [(status(p), pss(p)) for p in pids]
    st = [(x, y) for x, y in st if x["threads"] > 0]
    return {"procs": len(st),
            "threads": sum(x["threads"] for x, _ in st),
            "rss_mib": sum(x["rss"] for x, _ in st) / 2 ** 20,
            "pss_mib": sum(y for _, y in st) / 2 ** 20,
            "anon_mib": sum(x["anon"] for x, _ in st) / 2 ** 20}


def start_daemon(a, root, sock, log):
    cmd = [os.path.join(a.build, "server", "batchd"), "--listen",
           f"unix://{sock}", "--data-root", root, "--threads",
           str(os.cpu_count()), "--shm-prefix", f"lsbench{os.getpid()}",
           *a.daemon_arg]
    proc = subprocess.Popen(cmd, stdout=log, stderr=log,
                            start_new_session=True)
    deadline = time.monotonic() + 60
    while not os.path.exists(sock):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("batchd did not start; see its log")
        time.sleep(0.05)
    return proc


def one_run(a, side, world, root):
    sync = tempfile.mkdtemp(prefix="lsbench-")
    sock = os.path.join(sync, "sock")
    log = open(os.path.join(sync, "batchd.log"), "w")
    daemon = start_daemon(a, root, sock, log) if side != "algoperf" else None
    if side == "algoperf":
        python, env = a.torch_python, dict(os.environ)
        env.pop("PYTHONPATH", None)
    else:
        python = "/usr/bin/python3"
        env = dict(os.environ, PYTHONPATH=os.path.join(a.build, "python"))
    env["OMP_NUM_THREADS"] = "1"
    b = a.global_batch // world
    steps = max(1, a.utterances // (b * world))
    ranks = [subprocess.Popen(
        [python, os.path.abspath(__file__), "--rank-of", side, "--rank",
         str(r), "--world", str(world), "--b", str(b), "--steps",
         str(steps), "--warmup", str(a.warmup), "--sync", sync, "--data",
         os.path.join(root, "librispeech"), "--server", f"unix://{sock}"],
        env=env, start_new_session=True) for r in range(world)]
    try:
        def wait_for(name):
            while not all(os.path.exists(f"{sync}/{name}{r}")
                          for r in range(world)):
                for p in ranks:
                    if p.poll() not in (None, 0):
                        raise RuntimeError(f"{side} rank failed")
                time.sleep(0.01)
        wait_for("warm")
        pids = [p.pid for p in ranks] + ([daemon.pid] if daemon else [])
        every = descendants(pids)
        cpu0, t0 = cpu_seconds(every), time.monotonic()
        daemon0 = cpu_seconds([daemon.pid]) if daemon else 0.0
        open(f"{sync}/go", "w").close()
        fp_ranks = footprint(descendants([p.pid for p in ranks]))
        fp_daemon = footprint([daemon.pid]) if daemon else None
        wait_for("done")
        t1 = time.monotonic()
        cpu1 = cpu_seconds(descendants(pids))
        daemon1 = cpu_seconds([daemon.pid]) if daemon else 0.0
        utt = steps * b * world
        row = {"side": side, "world": world, "utterances": utt,
               "seconds": t1 - t0, "utt_per_s": utt / (t1 - t0),
               "cpu_s": cpu1 - cpu0, "daemon_cpu_s": daemon1 - daemon0, "utt_per_cpu_s": utt / (cpu1 - cpu0),
               "ranks": fp_ranks, "daemon": fp_daemon}
    finally:
        open(f"{sync}/stop", "w").close()
        for p in ranks:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        if daemon:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(timeout=30)
        log.close()
        shutil.rmtree(sync, ignore_errors=True)
    return row


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build", default=os.path.join(REPO, "build"))
    p.add_argument("--torch-python",
                   default="/var/cache/batchd-ci/venv-torch-3.12/bin/python")
    p.add_argument("--data-root", default=os.path.join(
        tempfile.gettempdir(), "batchd-librispeech-bench"))
    p.add_argument("--train", type=int, default=2048,
                   help="train utterances generated (3 subsets)")
    p.add_argument("--utterances", type=int, default=1536,
                   help="timed utterances per run (all ranks)")
    p.add_argument("--global-batch", type=int, default=32,
                   help="global batch (b = this / W per rank)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--worlds", type=int, nargs="+", default=[1, 8])
    p.add_argument("--sides", nargs="+", default=["batchd-ring",
                                                  "batchd-dropin", "algoperf"])
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--daemon-arg", action="append", default=[],
                   help="one more flag for batchd (repeatable), e.g. "
                   "--daemon-arg=--readahead-bytes=0")
    p.add_argument("--json", help="write every run's row here")
    # A rank process (started by the bench itself).
    p.add_argument("--rank-of")
    p.add_argument("--rank", type=int)
    p.add_argument("--world", type=int)
    p.add_argument("--steps", type=int)
    p.add_argument("--b", type=int)
    p.add_argument("--sync")
    p.add_argument("--data")
    p.add_argument("--server")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    if a.rank_of:
        a.side = {"batchd-ring": "ring", "batchd-dropin": "dropin"}.get(
            a.rank_of, a.rank_of)
        run_rank(a)
        return
    data = os.path.join(a.data_root, "librispeech")
    # LibriSpeech's lengths (make_librispeech.py --stats librispeech); a set
    # made before with other statistics is made again.
    stamp = os.path.join(data, f".made-{a.train}-librispeech")
    if not os.path.exists(stamp):
        shutil.rmtree(data, ignore_errors=True)
        third = a.train // 3
        subprocess.run([sys.executable, os.path.join(
            REPO, "workloads", "librispeech", "make_librispeech.py"), data,
            "--seed", "1", "--per-subset", str(a.train - 2 * third),
            str(third), str(third), "2", "2", "2", "--stats", "librispeech"],
            check=True)
        open(stamp, "w").close()
    rows = []
    for rep in range(a.repeat):
        for world in a.worlds:
            for side in a.sides:
                row = one_run(a, side, world, a.data_root)
                rows.append(row)
                print(json.dumps(row), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            for row in rows:
                f.write(json.dumps(row) + "\n")
    print(f"\nmedians of {a.repeat} alternating runs; global batch "
          f"{a.global_batch}; "
          f"{os.cpu_count()} cores")
    print(f"{'side':14} {'W':>2} {'utt/s':>7} {'utt/cpu-s':>9} "
          f"{'procs':>5} {'threads':>7} {'RSS MiB':>8} {'PSS MiB':>8}  "
          f"(daemon: threads, RSS, of it anonymous MiB)")
    per_core = {}
    for world in a.worlds:
        for side in a.sides:
            mine = [r for r in rows if r["side"] == side and r["world"] == world]
            med = lambda f: statistics.median(f(r) for r in mine)  # noqa: E731
            per_core[side, world] = med(lambda r: r["utt_per_cpu_s"])
            d = ""
            if mine[0]["daemon"]:
                d = (f"  ({med(lambda r: r['daemon']['threads']):.0f}, "
                     f"{med(lambda r: r['daemon']['rss_mib']):.0f}, "
                     f"{med(lambda r: r['daemon']['anon_mib']):.0f})")
            print(f"{side:14} {world:>2} {med(lambda r: r['utt_per_s']):7.1f} "
                  f"{per_core[side, world]:9.1f} "
                  f"{med(lambda r: r['ranks']['procs']):5.0f} "
                  f"{med(lambda r: r['ranks']['threads']):7.0f} "
                  f"{med(lambda r: r['ranks']['rss_mib']):8.0f} "
                  f"{med(lambda r: r['ranks']['pss_mib']):8.0f}{d}")
    if "algoperf" in a.sides:
        for world in a.worlds:
            for side in a.sides:
                if side != "algoperf":
                    print(f"per core, W={world}: {side} / algoperf = "
                          f"{per_core[side, world] / per_core['algoperf', world]:.1f}x")


if __name__ == "__main__":
    main()
