"""One daemon serves every job of a node, so what one user's storage or
connections do must not stop the others (issue 22, breaks 3, 4 and 8):

- a mount that stops answering stalls only the stream that reads it; that
  stream fails after --read-stall-seconds with the file in its close
  reason, and SIGTERM still stops the daemon within 15 s, rings unlinked;
- 1,200 idle connections of one user neither close another user's
  stream nor keep new OpenStreams out, and are closed after
  --connection-idle-seconds (the daemon under the 1,024 file descriptors
  of systemd's default);
- peers that send their /metrics requests slowly do not keep a scrape out;
- an idle daemon holds no read-ahead I/O threads.

    BATCHD_BIN=<build>/server/batchd PYTHONPATH=<build>/python \\
        /usr/bin/python3 -m pytest tests/python/test_reliability.py
"""

import os
import resource
import select
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time

import pytest

pytest.importorskip("numpy")
pytest.importorskip("PIL")
pytest.importorskip("skimage")  # the generator's photos

import batchd  # noqa: E402
from batchd_daemon import Daemon, Server, free_port, metrics  # noqa: E402
from helpers import (become, daemon_threads, make_imagenet,  # noqa: E402
                     thread_names, wait_until)

NOBODY = 65534


def build_program(name):
    """A program of the build tree's tests/ (beside server/)."""
    daemon = os.environ.get("BATCHD_BIN", "")
    return os.path.join(os.path.dirname(os.path.dirname(daemon)), "tests", name)


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    """A small ImageFolder tree: 2 classes x 16 train images."""
    root = tmp_path_factory.mktemp("images")
    make_imagenet(root, "--classes", 2, "--per-class", 16, "--no-tfrecord",
                  "--no-odd")
    return root


def imagenet(daemon, name, data, timeout=60.0):
    return batchd.Loader(name, 4, workload="imagenet", data=data,
                         split="train", world_size=1, rank=0, seed=1,
                         slots=2, format="numpy", server=daemon.address,
                         connect_timeout=30.0, timeout=timeout)


# ------------------------------------------------------ 3: stalled mount

@pytest.fixture
def stalled_mount(images, tmp_path):
    """data/stalled: `images` through stall_fs, which stops answering opens
    and reads while `control` exists; data/local: a copy on local disk."""
    fs_bin = build_program("stall_fs")
    if not os.path.exists(fs_bin) or not os.path.exists("/dev/fuse"):
        pytest.skip("needs stall_fs (libfuse3-dev) and /dev/fuse")
    if os.geteuid() != 0:
        pytest.skip("needs root to mount with allow_other")
    data = tmp_path / "data"
    mount = data / "stalled"
    mount.mkdir(parents=True)
    shutil.copytree(images, data / "local")
    control = tmp_path / "stall"
    fs = subprocess.Popen([fs_bin, str(images), str(mount),
                           f"--control={control}", "-f"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wait_until(lambda: os.path.ismount(mount) or fs.poll() is not None, 30,
               "stall_fs mounts")
    if fs.poll() is not None:
        pytest.skip(f"stall_fs cannot mount: {fs.stderr.read().decode()}")
    yield data, control
    # Let every stuck request return, then unmount.
    if control.exists():
        control.unlink()
    subprocess.run(["fusermount3", "-u", str(mount)], capture_output=True)
    try:
        fs.wait(timeout=30)
    except subprocess.TimeoutExpired:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)
        fs.kill()
        fs.wait()


def main_thread_exited(proc):
    """True once the process's main thread has ended (the process may wait,
    a zombie, for threads the kernel still holds) or it is gone."""
    if proc.poll() is not None:
        return True
    try:
        with open(f"/proc/{proc.pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state in ("Z", "X")


def test_a_stalled_mount_stalls_only_its_stream_and_not_sigterm(
        stalled_mount, tmp_path):
    data, control = stalled_mount
    # Two workers: without its fix both end up in the stalled stream's reads.
    # A read-ahead budget far below an epoch (32 images), so that the
    # stalled stream must read its files again rather than copy those it
    # holds.
    d = Daemon(data, tmp_path / "batchd.log", threads=2,
               args=["--read-stall-seconds", "4",
                     "--readahead-bytes", "65536"])
    try:
        a = imagenet(d, "stalled", "stalled")
        b = imagenet(d, "local", "local")
        next(a)
        next(b)
        control.touch()  # the mount stops answering from now on
        stalled_at = time.monotonic()
        a_error = []

        def keep_asking():
            # The stalled stream's client keeps wanting batches, so that its
            # ranks need reads; it ends with the stream's close reason.
            try:
                while True:
                    next(a)
            except batchd.Error as e:
                a_error.append((time.monotonic() - stalled_at, str(e)))

        asker = threading.Thread(target=keep_asking, daemon=True)
        asker.start()
        hit = control.parent / (control.name + ".hit")
        wait_until(hit.exists, 30, "a read of the stalled stream is stuck")

        # The other stream keeps being served while that read is stuck.
        for step in range(1, 41):
            _, info = b.next_batch()
            assert info.step == step
        assert os.path.exists(hit) and control.exists()

        # The stalled stream is failed after the deadline, and says why.
        asker.join(timeout=60)
        assert a_error, "the stalled stream's client never heard why"
        waited, message = a_error[0]
        assert waited >= 4, message
        assert "storage stalled" in message, message
        assert "has not returned for" in message, message
        assert "/stalled/train/" in message, message
        assert "--read-stall-seconds 4" in message, message
        # Still served after that.
        _, info = b.next_batch()
        assert info.step == 41

        # SIGTERM with reads still stuck in the mount: the daemon's main
        # thread exits within 15 s, its rings and socket gone. (A FUSE read
        # the file system has taken cannot be interrupted: the threads in
        # one end, and the process is reaped, once the mount answers.)
        assert control.exists()
        d.proc.send_signal(signal.SIGTERM)
        wait_until(lambda: main_thread_exited(d.proc), 15,
                   "the main thread exits after SIGTERM")
        assert d.segments() == []
        assert not os.path.exists(os.path.join(d.dir, "sock"))
        assert "event=stopped" in open(d.log_path).read()
        control.unlink()
        assert d.proc.wait(timeout=60) == 0
        del a, b
    finally:
        if control.exists():
            control.unlink()
        d.stop()


# ---------------------------------------------- 4: file descriptors

# Run as nobody: opens N connections to the socket and sends nothing; says
# how many connected, then (on a line from the parent) waits until the
# daemon has closed them all and says how many it closed.
IDLE_CONNECTIONS = textwrap.dedent("""
    import select, socket, sys, time
    path, n = sys.argv[1], int(sys.argv[2])
    socks = []
    for _ in range(n):
        # Blocking: a full backlog makes connect wait, not fail.
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(path)
            socks.append(s)
        except OSError:
            s.close()
    print("connected", len(socks), flush=True)
    sys.stdin.readline()
    poller = select.poll()
    by_fd = {s.fileno(): s for s in socks}
    for fd in by_fd:
        poller.register(fd, select.POLLIN | select.POLLHUP)
    closed = 0
    deadline = time.monotonic() + float(sys.argv[3])
    while by_fd and time.monotonic() < deadline:
        for fd, _ in poller.poll(500):
            s = by_fd.pop(fd)
            poller.unregister(fd)
            try:
                gone = s.recv(1) == b""
            except OSError:
                gone = True
            closed += gone
    print("closed", closed, flush=True)
    sys.stdin.readline()
""")


def read_line(proc, seconds):
    """The next line `proc` prints, or "" after `seconds`."""
    ready, _, _ = select.select([proc.stdout], [], [], seconds)
    return proc.stdout.readline() if ready else ""


def as_nobody():
    resource.setrlimit(resource.RLIMIT_NOFILE, (4096, 4096))
    become(NOBODY)


def systemd_fd_limit():
    # systemd's default: soft 1024; the hard limit too, so that the daemon
    # cannot raise it away.
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))


def test_idle_connections_of_one_user_starve_no_one(images, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root to become another user")
    data = tmp_path / "data"
    shutil.copytree(images, data / "local")
    d = Daemon(data, tmp_path / "batchd.log", preexec=systemd_fd_limit,
               args=["--socket-mode", "0666", "--connection-idle-seconds", "5"])
    try:
        os.chmod(d.dir, 0o755)  # nobody may reach the socket
        victim = imagenet(d, "victim", "local")
        next(victim)
        attacker = subprocess.Popen(
            [sys.executable, "-c", IDLE_CONNECTIONS,
             os.path.join(d.dir, "sock"), "1200", "60"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            preexec_fn=as_nobody)
        try:
            line = read_line(attacker, 60).split()
            assert line == ["connected", "1200"], line
            # Another user's running stream keeps going (its reads open a
            # file each), and a new stream opens.
            for step in range(1, 41):
                _, info = victim.next_batch()
                assert info.step == step
            newcomer = imagenet(d, "newcomer", "local")
            _, info = newcomer.next_batch()
            assert info.step == 0
            # The idle connections are all closed: those past the limit of
            # one uid at once, the others after --connection-idle-seconds.
            attacker.stdin.write("\n")
            attacker.stdin.flush()
            line = read_line(attacker, 90).split()
            assert line == ["closed", "1200"], line
            _, info = victim.next_batch()
            assert info.step == 41
            del newcomer
        finally:
            attacker.kill()
            attacker.wait()
        log = open(d.log_path).read()
        assert "event=connection_refused" in log
        assert "--max-connections-per-uid" in log
        del victim
    finally:
        d.stop()


# ----------------------------------------------------- 8: slow metrics

def test_slow_metrics_peers_do_not_keep_a_scrape_out(tmp_path):
    port = free_port()
    d = Server(tmp_path, args=["--metrics-listen", f"127.0.0.1:{port}"])
    slow = []
    try:
        # Requests begun and never finished: each would hold a server
        # thread until its request times out.
        for _ in range(8):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n")
            slow.append(s)
        start = time.monotonic()
        m = metrics(port)
        assert time.monotonic() - start < 5
        assert m["batchd_streams"] == 0
        # ... and the slow ones are cut by the request timeout.
        for s in slow:
            s.settimeout(30)
            try:
                while s.recv(4096):
                    pass
            except OSError:
                pass
        assert time.monotonic() - start < 30
    finally:
        for s in slow:
            s.close()
        d.stop()


# -------------------------------------------------- threads of the daemon

def test_an_idle_daemon_holds_no_readahead_threads(images, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(images, data / "local")
    # The indexing pool's size is fixed, not the host's cores: the count
    # below is then the same on any machine.
    d = Daemon(data, tmp_path / "batchd.log", threads=2,
               args=("--index-threads", "1"))
    try:
        # The daemon's own threads (gRPC's, started for calls as it sees
        # fit, left out: helpers.daemon_threads).
        idle = daemon_threads(d.proc.pid)
        # The 32 read-ahead I/O threads of the default (named batchd-io) are
        # started only when a stream reads, and end once it has gone.
        assert idle < 32, idle
        assert "batchd-io" not in thread_names(d.proc.pid)
        with imagenet(d, "reads", "local") as loader:
            for _ in range(5):
                next(loader)
        # (readahead_test.cc shows them start and end, deterministically.)
        # One more of the daemon's own may have started since the count (the
        # threads it starts in the background at start-up).
        wait_until(lambda: daemon_threads(d.proc.pid) <= idle + 1 and
                   "batchd-io" not in thread_names(d.proc.pid), 60,
                   f"the read-ahead threads end when no stream reads (idle "
                   f"{idle}; {thread_names(d.proc.pid)} after the stream)")
    finally:
        d.stop()
