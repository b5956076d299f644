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
from helpers import as_user, needs_root  # noqa: E402

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


def test_plan_reports_the_workloads_splits_and_options(daemon):
    """What plan says of the workload is its entry, as batchd --help prints
    it, with this spec's values."""
    r = batchctl(daemon, "plan", "--global-batch-size", 8, "--option",
                 "examples=1000", "--json")
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    help_text = subprocess.run([binary("batchd"), "--help"],
                               capture_output=True, text=True,
                               timeout=60).stdout
    # synthetic's lines: up to the next workload's.
    section = help_text.split("\n  synthetic ", 1)[1].split("\n  imagenet")[0]
    splits = re.search(r"splits: (.*)", section).group(1).split(", ")
    assert plan["splits"] == splits
    declared = dict(re.findall(r"^      (\w+)=(\S+ \(.*?\))", section, re.M))
    assert {o["key"]: f"{o['default_value']} ({o['bounds']})"
            for o in plan["options"]} == declared
    values = {o["key"]: o["value"] for o in plan["options"]}
    assert values["examples"] == "1000"  # given
    assert values["payload_bytes"] == declared["payload_bytes"].split()[0]
    text = batchctl(daemon, "plan", "--global-batch-size", 8).stdout
    assert f"splits: {', '.join(splits)}\n" in text
    default, bounds = declared["examples"].split(" ", 1)
    assert re.search(rf"^  examples +{default} +{default} +"
                     rf"{re.escape(bounds[1:-1])}$", text, re.M), text


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


# ---------------------------------------------------------------- global flags


def run_batchctl(*args, timeout=120):
    return subprocess.run([binary("batchctl"), *map(str, args)],
                          capture_output=True, text=True, timeout=timeout)


# What differs between two runs of one command: clocks, rates, the
# daemon's own figures, generated names.
# Sampled while a run goes on (server_ring_bytes: the most a status poll saw,
# 0 when a short run ends before the first poll sees its rings).
VOLATILE = {"uptime_seconds", "rss_bytes", "threads", "time", "seconds",
            "shm_free_bytes", "stream", "closed", "server_rss_bytes",
            "server_threads", "server_ring_bytes"}


def stable(value):
    """`value` without the fields that differ from run to run."""
    if isinstance(value, dict):
        return {k: stable(v) for k, v in value.items()
                if k not in VOLATILE and not k.endswith(
                    ("_seconds", "_per_second", "_per_s", "_fraction"))}
    if isinstance(value, list):
        return [stable(v) for v in value]
    return value


SPEC = ["--global-batch-size", 8, "--world-size", 2, "--option",
        "examples=100", "--option", "payload_bytes=64"]


def test_global_flags_go_before_or_after_every_command(tmp_path):
    """`batchctl --server X --json --timeout S CMD ...` is `batchctl CMD ...
    --server X --json --timeout S`, for every command."""
    commands = {"status": [], "version": [], "plan": SPEC,
                "bench": [*SPEC, "--steps", 3], "close": None}
    (tmp_path / "d").mkdir()
    d = Daemon(tmp_path / "d")
    try:
        for command, args in commands.items():
            results = []
            for before in (True, False):
                if command == "close":
                    name = f"closing{int(before)}"
                    loader = open_loader(d, name)
                    args = [name]
                glob = ["--server", d.address, "--json", "--timeout", 30]
                argv = ([*glob, command, *args] if before
                        else [command, *args, *glob])
                r = run_batchctl(*argv)
                assert r.returncode == 0, (argv, r.stderr)
                results.append(stable(json.loads(r.stdout)))
                if command == "close":
                    assert json.loads(r.stdout)["closed"] == name
                    loader.close()
            assert results[0] == results[1], command
        # Given on both sides, the one after the command wins.
        r = run_batchctl("--server", f"unix://{tmp_path}/none.sock", "status",
                         "--server", d.address)
        assert r.returncode == 0, r.stderr
        # Only global flags may come first.
        r = run_batchctl("--watch", "status", "--server", d.address)
        assert r.returncode == 2 and "not a global flag" in r.stderr
        # Help asks no daemon, whatever global flags precede it.
        r = run_batchctl("--server", d.address, "--json", "help", "close")
        assert r.returncode == 0 and "--owner UID" in r.stdout, r.stderr
    finally:
        d.stop()
    # drain and shutdown end their daemon: one daemon per order.
    for command in ("drain", "shutdown"):
        results = []
        for before in (True, False):
            root = tmp_path / f"{command}{int(before)}"
            root.mkdir()
            d = Daemon(root)
            try:
                glob = ["--server", d.address, "--json", "--timeout", 30]
                argv = [*glob, command] if before else [command, *glob]
                r = run_batchctl(*argv)
                assert r.returncode == 0, (argv, r.stderr)
                out = json.loads(r.stdout.splitlines()[0])
                assert out.pop("pid") == d.proc.pid
                assert out.pop("server") == d.address
                results.append(stable(out))
                assert d.proc.wait(timeout=30) == 0
            finally:
                d.stop()
        assert results[0] == results[1], command


# ---------------------------------------------------------------- owners


def test_status_names_each_streams_owner_and_each_uids_use(daemon):
    loader = open_loader(daemon, "owned")
    next(loader)
    st = status(daemon)
    (stream,) = st["streams"]
    assert (stream["owner_uid"], stream["owner_known"]) == (os.getuid(), True)
    (use,) = st["uids"]
    assert use["uid"] == os.getuid() and use["streams"] == 1
    assert use["ring_bytes"] == st["ring_bytes"] > 0
    assert use["exempt"]  # the daemon's own uid is an administrator
    assert st["max_streams_per_uid"] == 16
    assert st["max_model_bytes_per_uid"] == 1 << 30
    text = batchctl(daemon, "status")
    assert text.returncode == 0, text.stderr
    assert f"stream owned  owner {os.getuid()}  workload" in text.stdout
    assert "owners (quotas per uid: streams 16, rings " in text.stdout
    assert re.search(rf"^  {os.getuid()} +1 +\S+ \S+ +0 B +exempt "
                     r"\(administrator\)$", text.stdout, re.M), text.stdout
    loader.close()


NOBODY = 65534
NOBODY_LOADER = """
import sys, batchd
loader = batchd.Loader("shared", 8, world_size=2, rank=0, format="numpy",
                       options={"examples": "100", "payload_bytes": "64"},
                       server=sys.argv[1], connect_timeout=20.0, timeout=20.0)
next(loader)
print("attached", flush=True)
sys.stdin.readline()
try:
    for _ in range(8):
        next(loader)
    print("read on", flush=True)
except batchd.StreamClosedError:
    print("closed", flush=True)
"""


@needs_root
def test_an_administrator_joins_and_closes_another_uids_stream_by_owner(
        tmp_path):
    d = Daemon(tmp_path, open_to_all=True, args=("--shm-group", str(NOBODY)))
    user = subprocess.Popen(
        ["/usr/bin/python3", "-c", NOBODY_LOADER, d.address],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        **as_user(NOBODY))
    try:
        assert user.stdout.readline().strip() == "attached"
        spec = dict(world_size=2, rank=1, options={"examples": "100",
                                                   "payload_bytes": "64"})
        # Root's `shared` is its own stream ...
        mine = open_loader(d, "shared", global_batch_size=8, **spec)
        owners = sorted(s["owner_uid"] for s in status(d)["streams"])
        assert owners == [os.getuid(), NOBODY]
        # ... and owner= joins the user's.
        joined = open_loader(d, "shared", global_batch_size=8, owner=NOBODY,
                             **spec)
        next(joined)
        (theirs,) = [s for s in status(d)["streams"]
                     if s["owner_uid"] == NOBODY]
        assert [r["attached"] for r in theirs["ranks"]] == [True, True]
        with pytest.raises(ValueError, match="owner"):
            open_loader(d, "shared", owner=-1)

        assert batchctl(d, "close", "shared").returncode == 0  # root's own
        r = batchctl(d, "close", "shared")
        assert r.returncode == 1 and "--owner 65534" in r.stderr, r.stderr
        r = batchctl(d, "close", "shared", "--owner", NOBODY)
        assert r.returncode == 0, r.stderr
        assert "closed stream shared of uid 65534" in r.stdout
        user.stdin.write("\n")
        user.stdin.flush()
        assert user.stdout.readline().strip() == "closed"
        assert status(d)["streams"] == []
        for loader in (mine, joined):
            loader.close()
    finally:
        user.kill()
        user.wait()
        d.stop()
