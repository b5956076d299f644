"""Tests of the Python module batchd against a real batchd daemon.

Each test starts its own daemon (BATCHD_BIN) on a unix socket with a unique
shared-memory prefix, and reads the synthetic workload, whose tensors say
which examples they hold: ids (global example id), epochs, positions
(position in the epoch) and payload.

    BATCHD_BIN=<build>/server/batchd PYTHONPATH=<build>/python \\
        /usr/bin/python3 -m pytest tests/python

Run as a script (`test_loader.py worker ...`) this file is one rank of a job,
in a process of its own, as torchrun would start it.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

torch = pytest.importorskip("torch")

import batchd  # noqa: E402  (after the torch check: batches are torch tensors)

EXAMPLES = 1000
GLOBAL_BATCH = 32
STEPS_PER_EPOCH = EXAMPLES // GLOBAL_BATCH  # the remainder is dropped
SYNTHETIC = {"examples": str(EXAMPLES), "payload_bytes": "64"}


def open_loader(server, stream, **kwargs):
    kwargs.setdefault("options", SYNTHETIC)
    kwargs.setdefault("connect_timeout", 10.0)
    return batchd.Loader(stream, kwargs.pop("global_batch_size", GLOBAL_BATCH),
                         server=server.address, **kwargs)


def run_worker(*args, env=None, **popen_kwargs):
    return subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "worker", *map(str, args)],
        env={**os.environ, **(env or {})}, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, **popen_kwargs)


def test_two_ranks_split_every_global_batch(server):
    steps = STEPS_PER_EPOCH + 9  # into the second epoch
    workers = [
        run_worker("pull", server.address, "split", steps,
                   env={"RANK": str(rank), "WORLD_SIZE": "2"})
        for rank in range(2)
    ]
    results = []
    for w in workers:
        out, err = w.communicate(timeout=120)
        assert w.returncode == 0, err
        results.append(json.loads(out))

    for rank, result in enumerate(results):
        info = result["info"]
        assert (info["rank"], info["world_size"]) == (rank, 2)
        assert info["examples_per_epoch"] == EXAMPLES
        assert info["steps_per_epoch"] == STEPS_PER_EPOCH
        assert info["server_pid"] == server.proc.pid
        assert info["segment"].startswith(f"/{server.prefix}.")
        assert result["dtypes"] == {"ids": "torch.int64", "epochs": "torch.int64",
                                    "positions": "torch.int64",
                                    "payload": "torch.uint8"}
        assert result["shapes"] == {"ids": [16], "epochs": [16],
                                    "positions": [16], "payload": [16, 64]}

    ids_of_epoch = {}
    for step in range(steps):
        epoch, offset = divmod(step, STEPS_PER_EPOCH)
        ids = []
        for rank, result in enumerate(results):
            b = result["batches"][step]
            first = offset * GLOBAL_BATCH + rank * GLOBAL_BATCH // 2
            assert (b["step"], b["epoch"], b["position"], b["valid_count"]) == (
                step, epoch, first, 16), f"rank {rank}"
            assert b["positions"] == list(range(first, first + 16)), f"rank {rank}"
            assert b["epochs"] == [epoch] * 16
            ids += b["ids"]
        assert len(set(ids)) == GLOBAL_BATCH, f"step {step}: {sorted(ids)}"
        assert all(0 <= i < EXAMPLES for i in ids)
        seen = ids_of_epoch.setdefault(epoch, set())
        assert seen.isdisjoint(ids), f"step {step} repeats {seen & set(ids)}"
        seen.update(ids)


def test_rank_defaults_to_local_rank(server, monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with open_loader(server, "local-rank") as loader:
        assert (loader.info.rank, loader.info.world_size) == (1, 2)
        batch, info = loader.next_batch()
        assert info.position == GLOBAL_BATCH // 2
        assert batch["positions"].tolist() == list(range(16, 32))


def test_held_tensor_keeps_its_slot(server):
    slots = 4
    with open_loader(server, "held", slots=slots, timeout=2.0) as loader:
        assert loader.info.slots == slots
        batch = next(loader)
        # A view of one tensor is all that is kept: it alone must hold the slot.
        held = batch["payload"][1:]
        expected = held.clone()
        first_ids = batch["ids"].tolist()
        del batch

        # The held slot is the oldest; the server fills the others again and
        # again around it, and never touches it.
        for _ in range(5 * slots):
            batch = next(loader)
            assert set(batch["ids"].tolist()).isdisjoint(first_ids)
            assert torch.equal(held, expected)
            del batch
        assert torch.equal(held, expected)

        del held
        next(loader)
        assert loader.last_batch_info.step == 5 * slots + 1


def test_tensor_outlives_its_loader(server):
    loader = open_loader(server, "outlive")
    batch = next(loader)
    expected = {name: t.clone() for name, t in batch.items()}
    del loader  # unmaps nothing while tensors of its ring live
    for name, t in batch.items():
        assert torch.equal(t, expected[name]), name


def test_eval_stream_is_padded_then_stops(server):
    # 100 examples in global batches of 32: 4 steps, the last with 4 real
    # examples, all in rank 0's half.
    with open_loader(server, "eval", split="validation", world_size=2, rank=0,
                     options={"examples": 100, "payload_bytes": 8}) as loader:
        seen = []
        for batch in loader:
            info = loader.last_batch_info
            seen.append((info.step, info.valid_count))
            first = info.step * GLOBAL_BATCH
            real = list(range(first, min(first + 16, 100)))
            padding = 16 - len(real)
            # Eval streams are in order; padding ids are uint64 all-ones,
            # which read -1 as int64.
            assert batch["ids"].tolist() == real + [-1] * padding
            assert batch["weights"].tolist() == [1.0] * len(real) + [0.0] * padding
        assert seen == [(0, 16), (1, 16), (2, 16), (3, 4)]
        with pytest.raises(StopIteration):
            loader.next_batch()


def test_spec_that_does_not_divide_is_refused(server):
    with pytest.raises(batchd.InvalidArgumentError, match="divisible") as e:
        open_loader(server, "bad", global_batch_size=30, world_size=4, rank=0)
    assert isinstance(e.value, ValueError)
    assert e.value.code == "INVALID_ARGUMENT"


def test_killed_server_is_reported_with_its_pid(server):
    # reconnect=0: no waiting for a daemon that follows (see
    # test_reconnect.py for that).
    loader = open_loader(server, "killed", server_stale_seconds=3.0,
                         reconnect=0)
    next(loader)
    pid = server.proc.pid
    server.kill()
    start = time.monotonic()
    with pytest.raises(batchd.ServerUnavailableError, match=rf"\b{pid}\b") as e:
        # Batches published before the kill are still there to read.
        for _ in range(loader.info.slots + 1):
            next(loader)
    assert time.monotonic() - start < 5
    assert isinstance(e.value, ConnectionError)


def test_stopped_server_is_named_as_exiting(server):
    loader = open_loader(server, "stopped", reconnect=0)
    next(loader)
    pid = server.proc.pid
    server.proc.terminate()  # a clean stop ends every ring first
    assert server.proc.wait(timeout=10) == 0
    with pytest.raises(batchd.ServerUnavailableError,
                       match=rf"batchd \(pid {pid}\) is exiting"):
        for _ in range(loader.info.slots + 1):
            next(loader)


def test_missing_server_is_named(tmp_path):
    address = f"unix://{tmp_path}/no-such.sock"
    with pytest.raises(batchd.Error, match="is batchd running"):
        batchd.Loader("s", GLOBAL_BATCH, server=address, connect_timeout=0.5)


def test_wait_seconds_counts_waits_that_timed_out(server):
    with open_loader(server, "waits", slots=2, timeout=0.5) as loader:
        held = [next(loader), next(loader)]  # every slot: nothing more comes
        before = loader.wait_seconds
        with pytest.raises(batchd.DeadlineExceededError):
            next(loader)
        assert loader.wait_seconds - before >= 0.5
        del held


def test_ctrl_c_interrupts_a_waiting_next(server):
    worker = run_worker("block", server.address, "blocked")
    assert worker.stdout.readline().startswith("waiting"), worker.stderr.read()
    worker.send_signal(signal.SIGINT)
    try:
        _, err = worker.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        worker.kill()
        pytest.fail("next() did not stop on SIGINT")
    assert "KeyboardInterrupt" in err


def test_closed_loader_refuses_next(server):
    loader = open_loader(server, "closed")
    loader.close()
    with pytest.raises(batchd.Error, match="closed"):
        next(loader)


# Issue 27: the checkpoint JSON was read with silent conversions (-1 became
# 2^64-1, 1.5 became 1, true became 1); a state that is not what
# state_dict() writes is refused, naming the field.
@pytest.mark.parametrize("field,value,why", [
    ("next_step", -1, "is negative"),
    ("next_step", 1.5, "is not a whole number"),
    ("next_step", True, "is a boolean"),
    ("next_step", 2**64, "is not a whole number"),
    ("seed", -1, "is negative"),
    ("global_batch_size", 32.0, "is not a whole number"),
    ("world_size", 2**32, "must be at most 4294967295"),
    ("version", 2**32 + 1, "version 4294967297"),
    ("cursor", [0, -1, 0, 1], "'cursor' (its window) is negative"),
    ("cursor", [0, 0, 0.5, 1], "'cursor' (its row) is not a whole number"),
])
def test_a_state_with_numbers_state_dict_never_writes_is_refused(
        server, field, value, why):
    loader = open_loader(server, "state-src", world_size=1, rank=0)
    for _ in range(3):
        loader.next_batch()
    sd = loader.state_dict()
    loader.close()
    assert sd["next_step"] == 3 and sd["cursor"] is None
    # What state_dict() wrote resumes.
    with open_loader(server, "state-ok", world_size=1, rank=0,
                     state=sd) as ok:
        assert ok.next_batch()[1].step == 3
    bad = json.loads(json.dumps(sd))
    bad[field] = value
    with pytest.raises(batchd.InvalidArgumentError) as e:
        open_loader(server, "state-bad", world_size=1, rank=0, state=bad)
    assert why in str(e.value), str(e.value)
    if field != "version":
        assert f"field '{field}'" in str(e.value), str(e.value)
    fresh = open_loader(server, "state-load", world_size=1, rank=0)
    with pytest.raises(batchd.InvalidArgumentError, match=re.escape(why)):
        fresh.load_state_dict(bad)
    fresh.close()


IMAGENET_MEAN = torch.tensor([0.485, 0.456, 0.406]) * 255
IMAGENET_STD = torch.tensor([0.229, 0.224, 0.225]) * 255


def test_normalize_nhwc():
    images = torch.randint(0, 256, (2, 5, 4, 3), dtype=torch.uint8)
    out = batchd.normalize(images)
    assert out.dtype == torch.float32 and out.shape == images.shape
    assert torch.allclose(out, (images.float() - IMAGENET_MEAN) / IMAGENET_STD)
    assert torch.allclose(batchd.normalize(images[0], device="cpu"), out[0])


def test_normalize_nchw():
    images = torch.randint(0, 256, (2, 3, 5, 4), dtype=torch.uint8)
    out = batchd.normalize(images, mean=(0.5, 0.5, 0.5), std=(0.25, 0.5, 1.0),
                           layout="nchw")
    expected = (images.float() - 127.5) / torch.tensor(
        [63.75, 127.5, 255.0]).view(1, 3, 1, 1)
    assert torch.allclose(out, expected)
    assert torch.allclose(batchd.normalize(images[1], layout="nchw"),
                          batchd.normalize(images, layout="nchw")[1])


def test_normalize_refuses_what_it_cannot_mean():
    with pytest.raises(TypeError, match="uint8"):
        batchd.normalize(torch.zeros(1, 2, 2, 3))
    with pytest.raises(ValueError, match="channels"):
        batchd.normalize(torch.zeros(1, 3, 2, 2, dtype=torch.uint8))
    with pytest.raises(ValueError, match="layout"):
        batchd.normalize(torch.zeros(1, 2, 2, 3, dtype=torch.uint8), layout="hwc")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_normalize_on_cuda():
    images = torch.randint(0, 256, (2, 4, 4, 3), dtype=torch.uint8)
    out = batchd.normalize(images, device="cuda")
    assert out.device.type == "cuda"
    assert torch.allclose(out.cpu(), batchd.normalize(images))


# A stand-in for the CUDA runtime: it records what is registered, and says
# rc $FAKE_CUDART_RC (0: success; 100: no device).
FAKE_CUDART = r"""
#include <stdio.h>
#include <stdlib.h>
static void note(const char* what, void* p, size_t n) {
  FILE* f = fopen(getenv("FAKE_CUDART_LOG"), "a");
  fprintf(f, "%s %lu %zu\n", what, (unsigned long)p, n);
  fclose(f);
}
int cudaHostRegister(void* p, size_t n, unsigned flags) {
  note(flags == 0 ? "register" : "register-flags", p, n);
  return atoi(getenv("FAKE_CUDART_RC"));
}
int cudaHostUnregister(void* p) { note("unregister", p, 0); return 0; }
"""

PIN_SCRIPT = """
import ctypes, json, sys
# Loaded as torch loads its CUDA runtime: under a file name of its own.
ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
import batchd
from batchd import algoperf
loader = batchd.Loader("pin", 32, server=sys.argv[2], connect_timeout=10.0,
                       options={"examples": "100", "payload_bytes": "64"})
address, size = loader._mapping()
pinned = algoperf._register_pinned(loader)
algoperf._unregister_pinned(loader)
loader.close()
print(json.dumps([pinned, address, size]))
"""


@pytest.mark.parametrize("rc", [0, 100])
def test_algoperf_pins_the_ring_through_the_client_library(server, tmp_path,
                                                           rc):
    """batchd.algoperf registers the ring with the runtime already in the
    process, whatever its file is called, through the C++ client's one
    implementation (Loader::RegisterPinned), and unregisters exactly what
    was registered; a runtime that refuses (no device) leaves it unpinned
    with nothing to undo."""
    source = tmp_path / "fake_cudart.c"
    source.write_text(FAKE_CUDART)
    lib = tmp_path / "libcudart-1a2b3c4d.so.12"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(lib), str(source)],
                   check=True)
    log = tmp_path / "cudart.log"
    p = subprocess.run(
        [sys.executable, "-c", PIN_SCRIPT, str(lib), server.address],
        env={**os.environ, "FAKE_CUDART_LOG": str(log),
             "FAKE_CUDART_RC": str(rc)},
        capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    pinned, address, size = json.loads(p.stdout.splitlines()[-1])
    calls = log.read_text().splitlines()
    assert calls[0] == f"register {address} {size}"
    if rc == 0:
        assert pinned is True
        assert calls[1:] == [f"unregister {address} 0"]
    else:
        assert pinned is False
        assert calls[1:] == []


def _worker(mode, address, stream, *args):
    """One rank of a job (rank and world size from the environment)."""
    if mode == "pull":
        steps = int(args[0])
        loader = batchd.Loader(stream, GLOBAL_BATCH, options=SYNTHETIC,
                               server=address, timeout=60)
        batches = []
        for _ in range(steps):
            batch, info = loader.next_batch()
            batches.append({
                "step": info.step, "epoch": info.epoch,
                "position": info.position, "valid_count": info.valid_count,
                "ids": batch["ids"].tolist(), "epochs": batch["epochs"].tolist(),
                "positions": batch["positions"].tolist(),
            })
        json.dump({
            "info": loader.info._asdict(), "batches": batches,
            "dtypes": {name: str(t.dtype) for name, t in batch.items()},
            "shapes": {name: list(t.shape) for name, t in batch.items()},
        }, sys.stdout)
    elif mode == "block":
        # A shell without job control starts background jobs with SIGINT
        # ignored, and Python keeps an inherited SIG_IGN; a trainer run from a
        # terminal has Python's own handler, which is what this checks.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        loader = batchd.Loader(stream, GLOBAL_BATCH, options=SYNTHETIC,
                               server=address, slots=2)
        # Holding every slot, no batch can come: next() waits for ever.
        held = [next(loader) for _ in range(loader.info.slots)]
        print(f"waiting, holding {len(held)} batches", flush=True)
        next(loader)
    else:
        raise ValueError(mode)


if __name__ == "__main__" and len(sys.argv) > 2 and sys.argv[1] == "worker":
    _worker(*sys.argv[2:])
