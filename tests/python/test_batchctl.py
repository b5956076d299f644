"""Tests of batchctl, the operator CLI, against a real batchd daemon.

Each test starts its own daemon (BATCHD_BIN) on a unix socket with a unique
shared-memory prefix; batchctl is the one beside it. Ranks attach with the
Python module, as trainers do.

    BATCHD_BIN=<build>/server/batchd PYTHONPATH=<build>/python \\
        /usr/bin/python3 -m pytest tests/python/test_batchctl.py
"""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
import uuid

import pytest

torch = pytest.importorskip("torch")

import batchd  # noqa: E402  (after the torch check: batches are torch tensors)
from batchd_daemon import Server as Daemon, binary  # noqa: E402

MIB = 1 << 20
SYNTHETIC = {"examples": "1000", "payload_bytes": "4096"}


@pytest.fixture
def daemon(tmp_path):
    d = Daemon(tmp_path)
    yield d
    d.stop()


def batchctl(daemon, *args, timeout=60, **kwargs):
    """Runs batchctl against `daemon` (None: no --server); CompletedProcess."""
    server = [] if daemon is None else ["--server", daemon.address]
    cmd = [binary("batchctl"), *map(str, args)]
    # --server after the command's own arguments: flags may come anywhere.
    return subprocess.run(cmd + server, capture_output=True, text=True,
                          timeout=timeout, **kwargs)


def status(daemon):
    r = batchctl(daemon, "status", "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def open_loader(daemon, stream, **kwargs):
    kwargs.setdefault("options", SYNTHETIC)
    kwargs.setdefault("connect_timeout", 10.0)
    return batchd.Loader(stream, kwargs.pop("global_batch_size", 32),
                         server=daemon.address, **kwargs)


def shm_size_for(total):
    """The documented rule: total + 10% + 64 MiB, rounded up to a MiB."""
    with_headroom = total + (total + 9) // 10 + 64 * MIB
    return -(-with_headroom // MIB)  # MiB


class Consumer:
    """Takes batches from a loader on a thread until stopped; the ring then
    fills and the server stops producing."""

    def __init__(self, loader):
        self.loader = loader
        self.taken = 0
        self.error = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        try:
            while not self._stop.is_set():
                next(self.loader)
                self.taken += 1
                time.sleep(0.002)
        except Exception as e:  # reported by stop()
            self.error = e

    def stop(self):
        self._stop.set()
        self._thread.join(timeout=10)
        assert self.error is None, self.error


# ---------------------------------------------------------------- help


def test_help_names_every_command_and_exit_code():
    r = subprocess.run([binary("batchctl"), "--help"], capture_output=True,
                       text=True)
    assert r.returncode == 0
    for command in ("status", "close", "drain", "shutdown", "plan", "version",
                    "bench"):
        assert re.search(rf"^  {command}\b", r.stdout, re.M), command
        h = subprocess.run([binary("batchctl"), "help", command],
                           capture_output=True, text=True)
        assert h.returncode == 0, command
        assert "Exit codes: 0" in h.stdout, command
        assert h.stdout == subprocess.run(
            [binary("batchctl"), command, "--help"], capture_output=True,
            text=True).stdout
    assert "3 (plan only)" in r.stdout
    assert subprocess.run([binary("batchctl"), "frobnicate"],
                          capture_output=True).returncode == 2


# ---------------------------------------------------------------- version


def test_version_prints_both_versions(daemon):
    r = batchctl(daemon, "version")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert re.fullmatch(r"batchctl \d+\.\d+\.\d+ \(shared-memory layout "
                        r"version \d+\)", lines[0])
    m = re.fullmatch(r"batchd (\S+) at (\S+) \(pid (\d+), up .*\)", lines[1])
    assert m, lines
    assert m.group(1) == status(daemon)["version"]
    assert (m.group(2), int(m.group(3))) == (daemon.address, daemon.proc.pid)

    r = batchctl(daemon, "version", "--json")
    assert r.returncode == 0, r.stderr
    v = json.loads(r.stdout)
    assert v["batchctl"]["version"] == lines[0].split()[1]
    assert v["server"]["pid"] == daemon.proc.pid


def test_version_without_a_daemon_still_prints_its_own(tmp_path):
    r = subprocess.run(
        [binary("batchctl"), "version", "--server",
         f"unix://{tmp_path}/none.sock", "--timeout", "1"],
        capture_output=True, text=True)
    assert r.returncode == 1
    assert r.stdout.startswith("batchctl ")
    assert "is batchd running" in r.stderr
    # --version never asks a daemon.
    v = subprocess.run([binary("batchctl"), "--version"], capture_output=True,
                       text=True)
    assert v.returncode == 0 and v.stdout == r.stdout


# ---------------------------------------------------------------- plan


def test_plan_equals_the_rings_openstream_creates(daemon):
    spec = ["--global-batch-size", 32, "--world-size", 2, "--slots", 3,
            "--seed", 7, "--option", "examples=1000",
            "--option", "payload_bytes=4096"]
    r = batchctl(daemon, "plan", *spec, "--json")
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    assert (plan["ranks"], plan["slots"]) == (2, 3)
    assert plan["total_bytes"] == 2 * plan["segment_bytes"]
    assert plan["segment_bytes"] >= 3 * plan["slot_bytes"]
    assert plan["shm_free_bytes"] > 0 and plan["fits"]
    mib = shm_size_for(plan["total_bytes"])
    assert plan["shm_size_bytes"] == mib * MIB
    assert plan["docker_shm_size"] == f"{mib}m"
    assert plan["kubernetes_size_limit"] == f"{mib}Mi"
    assert {t["name"]: t["shape"] for t in plan["tensors"]}["payload"] == [
        16, 4096]
    assert status(daemon)["streams"] == []  # nothing was created

    loaders = [open_loader(daemon, "planned", world_size=2, rank=rank, slots=3,
                           seed=7) for rank in range(2)]
    for loader in loaders:
        info = loader.info
        assert (info.slots, info.slot_bytes) == (plan["slots"],
                                                 plan["slot_bytes"])
        assert os.stat(f"/dev/shm{info.segment}").st_size == \
            plan["segment_bytes"]
    assert status(daemon)["ring_bytes"] == plan["total_bytes"]
    for loader in loaders:
        loader.close()

    text = batchctl(daemon, "plan", *spec)
    assert text.returncode == 0, text.stderr
    assert f"one rank's ring:  {plan['segment_bytes']} bytes" in text.stdout
    assert f"this node's rings: {plan['total_bytes']} bytes" in text.stdout
    assert f"docker run --shm-size={mib}m" in text.stdout
    assert f"sizeLimit: {mib}Mi" in text.stdout

    # One node of several: its ranks only.
    local = json.loads(batchctl(daemon, "plan", *spec, "--local-ranks", 1,
                                "--json").stdout)
    assert local["total_bytes"] == plan["segment_bytes"]


def test_plan_exits_3_when_shm_is_too_small(daemon):
    free = os.statvfs("/dev/shm").f_bavail * os.statvfs("/dev/shm").f_frsize
    # Four slots of `batch` examples of 256 MiB: more than is free.
    payload = 256 * MIB
    batch = free // (4 * payload) + 1
    r = batchctl(daemon, "plan", "--global-batch-size", batch, "--slots", 4,
                 "--option", f"examples={batch}", "--option",
                 f"payload_bytes={payload}", "--json")
    assert r.returncode == 3, r.stderr
    plan = json.loads(r.stdout)
    assert not plan["fits"] and plan["total_bytes"] > plan["shm_free_bytes"]
    assert "rings need" in r.stderr


def test_plan_usage_and_spec_errors(daemon):
    r = batchctl(daemon, "plan", "--world-size", 2)
    assert r.returncode == 2 and "--global-batch-size" in r.stderr
    r = batchctl(daemon, "plan", "--global-batch-size", 30, "--world-size", 4)
    assert r.returncode == 2 and "divisible" in r.stderr
    r = batchctl(daemon, "plan", "--global-batch-size", 8, "--option", "x")
    assert r.returncode == 2 and "KEY=VALUE" in r.stderr
    # The server refuses what it cannot serve, naming it.
    r = batchctl(daemon, "plan", "--global-batch-size", 8,
                 "--workload", "no-such-workload")
    assert r.returncode == 1 and "no-such-workload" in r.stderr


# ---------------------------------------------------------------- close


def test_close_removes_the_stream_and_its_rings(daemon):
    loaders = [open_loader(daemon, "doomed", world_size=2, rank=rank)
               for rank in range(2)]
    keep = open_loader(daemon, "kept")
    next(loaders[0])
    assert len(daemon.segments()) == 3

    r = batchctl(daemon, "close", "doomed")
    assert r.returncode == 0, r.stderr
    assert [os.path.basename(s) for s in daemon.segments()] == [
        keep.info.segment[1:]]
    assert [s["spec"]["name"] for s in status(daemon)["streams"]] == ["kept"]
    with pytest.raises(batchd.StreamClosedError):
        for _ in range(loaders[0].info.slots + 1):
            next(loaders[0])
    next(keep)

    r = batchctl(daemon, "close", "doomed")
    assert r.returncode == 1 and "no stream named 'doomed'" in r.stderr
    assert batchctl(daemon, "close").returncode == 2
    assert batchctl(daemon, "close", "a", "b").returncode == 2
    for loader in loaders + [keep]:
        loader.close()


def test_names_that_start_with_a_dash_are_refused_and_close_takes_dash_dash(daemon):
    """A stream name never reads as a flag: the daemon refuses names that
    start with '-', and after "--" batchctl takes any word as the name."""
    for name in ("--dashed", "-single"):
        with pytest.raises(batchd.Error, match="name"):
            open_loader(daemon, name)
    r = batchctl(daemon, "close", "--dashed")
    assert r.returncode == 2 and "unknown flag '--dashed'" in r.stderr
    # Flags before "--"; everything after it is the name, looked up as such.
    loader = open_loader(daemon, "plain")
    r = subprocess.run([binary("batchctl"), "close", "--server",
                        daemon.address, "--", "--dashed"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "unknown flag" not in r.stderr, r.stderr
    assert "--dashed" in r.stderr
    r = subprocess.run([binary("batchctl"), "close", "--server",
                        daemon.address, "--", "plain"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "closed stream plain" in r.stdout
    assert status(daemon)["streams"] == []
    loader.close()


# ---------------------------------------------------------------- drain


def test_drain_refuses_new_streams_and_exits_after_the_last_loader(daemon):
    loader = open_loader(daemon, "running")
    next(loader)

    r = batchctl(daemon, "drain")
    assert r.returncode == 0, r.stderr
    assert f"pid {daemon.proc.pid}" in r.stdout
    assert "1 rank(s) attached" in r.stdout
    assert status(daemon)["draining"]
    assert "DRAINING" in batchctl(daemon, "status").stdout

    with pytest.raises(batchd.Error, match="draining"):
        open_loader(daemon, "newcomer")
    # The running job goes on.
    for _ in range(10):
        next(loader)
    assert daemon.proc.poll() is None

    waiter = subprocess.Popen(
        [binary("batchctl"), "drain", "--wait", "30", "--server",
         daemon.address], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    time.sleep(0.5)
    assert waiter.poll() is None  # a rank is still attached
    loader.close()
    assert daemon.proc.wait(timeout=15) == 0
    out, err = waiter.communicate(timeout=15)
    assert waiter.returncode == 0, err
    assert f"batchd (pid {daemon.proc.pid}) exited" in out
    assert daemon.segments() == []


def test_drain_wait_gives_up_in_time(daemon):
    loader = open_loader(daemon, "long")
    start = time.monotonic()
    r = batchctl(daemon, "drain", "--wait", "1")
    assert r.returncode == 1
    assert time.monotonic() - start < 10
    assert "still draining with 1 rank(s) attached" in r.stderr
    loader.close()


# ---------------------------------------------------------------- status


def test_status_watch_shows_current_rates_until_ctrl_c(daemon):
    loader = open_loader(daemon, "watched", slots=4)
    consumer = Consumer(loader)
    watch = subprocess.Popen(
        [binary("batchctl"), "status", "--watch", "0.5", "--server",
         daemon.address], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    time.sleep(2.2)
    watch.send_signal(signal.SIGINT)
    out, err = watch.communicate(timeout=10)
    consumer.stop()
    assert watch.returncode == 0, err

    frames = out.split("Every 0.5 s: ")[1:]
    assert len(frames) >= 3, out
    assert "(current rates from the next frame on)" in frames[0]
    rates = [float(m.group(1)) for f in frames[1:] for m in re.finditer(
        r"([\d.]+) examples/s .* over the last [\d.]+ s", f)]
    assert len(rates) == len(frames) - 1, out
    assert max(rates) > 0
    assert "EXAMPLES/S" in frames[1]
    loader.close()


def test_status_watch_rates_are_current_not_lifetime(daemon):
    """Once the consumer stops, the ring fills and production stops: the
    current rate falls to 0 while the average since open stays above."""
    loader = open_loader(daemon, "paused", slots=2)
    consumer = Consumer(loader)
    watch = subprocess.Popen(
        [binary("batchctl"), "status", "--json", "--watch", "0.3", "--server",
         daemon.address], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    time.sleep(1.5)
    consumer.stop()
    time.sleep(2.0)
    watch.send_signal(signal.SIGINT)
    out, err = watch.communicate(timeout=10)
    assert watch.returncode == 0, err

    frames = [json.loads(line) for line in out.splitlines()]
    assert frames[0]["interval_seconds"] is None and frames[0]["rates"] == []
    current = []
    for f in frames[1:]:
        assert 0.2 < f["interval_seconds"] < 5
        (r,) = f["rates"]
        assert r["stream"] == "paused"
        (rank,) = r["ranks"]
        assert rank["examples_per_second"] == r["examples_per_second"]
        current.append((r["examples_per_second"],
                        f["status"]["streams"][0]["examples_per_second"]))
    assert any(now > 0 for now, _ in current), current
    now, lifetime = current[-1]
    assert now == 0 and lifetime > 0, current
    loader.close()


def test_status_watch_without_a_daemon_fails_at_once(tmp_path):
    r = subprocess.run(
        [binary("batchctl"), "status", "--watch", "1", "--timeout", "1",
         "--server", f"unix://{tmp_path}/none.sock"],
        capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and "is batchd running" in r.stderr


def test_status_watch_usage():
    for bad in ("0", "-1", "soon"):
        r = subprocess.run([binary("batchctl"), "status", "--watch=" + bad],
                           capture_output=True, text=True)
        assert r.returncode == 2, bad


# ---------------------------------------------------------------- TLS


def test_tls_daemon_needs_the_roots_and_a_client_certificate(tmp_path):
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl is not installed")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    # Self-signed: the daemon's certificate, its clients' roots, and the
    # certificate batchctl presents.
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes",
         "-keyout", key, "-out", cert, "-days", "2", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
        check=True, capture_output=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    address = f"tcp://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [binary("batchd"), "--listen", address, "--tls-cert", cert,
         "--tls-key", key, "--tls-client-ca", cert, "--data-root", tmp_path,
         "--shm-prefix", f"batchctltls{uuid.uuid4().hex[:8]}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        def version(*tls, env=None):
            return subprocess.run(
                [binary("batchctl"), "version", "--server", address,
                 "--timeout", "2", *map(str, tls)], capture_output=True,
                text=True, timeout=30, env={**os.environ, **(env or {})})

        deadline = time.monotonic() + 30
        while version("--tls-ca", cert, "--tls-cert", cert,
                      "--tls-key", key).returncode != 0:
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        r = version()
        assert r.returncode == 1 and "--tls-ca" in r.stderr
        assert version("--tls-ca", cert).returncode == 1  # no client cert
        r = version(env={"BATCHD_TLS_CA": str(cert),
                         "BATCHD_TLS_CERT": str(cert),
                         "BATCHD_TLS_KEY": str(key)})
        assert r.returncode == 0, r.stderr
        assert f"pid {proc.pid}" in r.stdout
        assert version("--tls-cert", cert).returncode == 2
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_tls_flags_are_refused_for_a_unix_socket(daemon, tmp_path):
    r = batchctl(daemon, "status", "--tls-ca", tmp_path / "ca.pem")
    assert r.returncode == 2 and "tcp://" in r.stderr
    # The environment's TLS settings do not apply to a unix socket.
    r = batchctl(daemon, "status",
                 env={**os.environ, "BATCHD_TLS_CA": "/nonexistent"})
    assert r.returncode == 0, r.stderr


# ---------------------------------------------------------------- the rest


def test_bench_and_shutdown_still_work(daemon):
    r = batchctl(daemon, "bench", "--global-batch-size", 8, "--world-size", 2,
                 "--steps", 5, "--option", "examples=100",
                 "--option", "payload_bytes=64", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["examples"] == 2 * 5 * 4
    assert status(daemon)["streams"] == []  # bench closes its stream

    r = batchctl(daemon, "shutdown")
    assert r.returncode == 0, r.stderr
    assert daemon.proc.wait(timeout=10) == 0
