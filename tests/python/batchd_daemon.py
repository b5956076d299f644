"""A batchd daemon for one test: its own socket, data root and shared-memory
prefix, so that tests never meet each other or a daemon of the machine.
The daemon is BATCHD_BIN (<build>/server/batchd); batchctl is beside it.
"""

import glob
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
import uuid

import pytest


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def metrics(port):
    """{name{labels}: value} of the Prometheus endpoint."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics",
                                  timeout=10).read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, value = line.rsplit(" ", 1)
            out[key] = float(value)
    return out


def binary(name):
    """A program of the build tree, found beside BATCHD_BIN."""
    daemon = os.environ.get("BATCHD_BIN")
    if not daemon:
        pytest.fail("set BATCHD_BIN to the batchd daemon (<build>/server/batchd)")
    return os.path.join(os.path.dirname(daemon), name)


class Daemon:
    """Starts batchd serving `data_root`, logging to `log_path`, and waits
    until its socket accepts. `hooks` sets BATCHD_TEST_HOOKS=1 for it;
    `args` are more flags; `preexec` runs in the child before batchd is
    executed (limits, another user, a cgroup). Its --cache-dir is a fresh
    directory of its own unless `args` names one."""

    def __init__(self, data_root, log_path, threads=2, hooks=False, args=(),
                 preexec=None, open_to_all=False):
        """open_to_all: every uid may call it (its socket 0666, in a 0755
        directory), as the tests of other users' reach want it."""
        # Not under pytest's tmp_path: a socket path must fit in 108 bytes.
        self.dir = tempfile.mkdtemp(prefix="batchd-test-", dir="/tmp")
        if open_to_all:
            os.chmod(self.dir, 0o755)
            args = ("--socket-mode", "0666", *args)
        self.address = f"unix://{self.dir}/sock"
        self.prefix = f"batchdtest{uuid.uuid4().hex[:12]}"
        self.log_path = log_path
        self.log = open(log_path, "w")
        env = dict(os.environ)
        env.pop("BATCHD_TEST_HOOKS", None)
        if "--cache-dir" not in args:
            args = (*args, "--cache-dir", os.path.join(self.dir, "cache"))
        if hooks:
            env["BATCHD_TEST_HOOKS"] = "1"
        self._argv = [binary("batchd"), "--listen", self.address,
                      "--data-root", str(data_root), "--shm-prefix",
                      self.prefix, "--threads", str(threads), *args]
        self._env = env
        self._preexec = preexec
        self._start()

    def _start(self):
        self.proc = subprocess.Popen(self._argv, stdout=self.log,
                                     stderr=subprocess.STDOUT, env=self._env,
                                     preexec_fn=self._preexec)
        self._wait_until_accepting(os.path.join(self.dir, "sock"))
        # The metrics endpoint starts after the socket: wait for it too.
        if "--metrics-listen" in self._argv:
            host, _, port = self._argv[
                self._argv.index("--metrics-listen") + 1].rpartition(":")
            self._wait_until_accepting((host.strip("[]"), int(port)))

    def restart(self, kill=True):
        """Stops the daemon (SIGKILL, or SIGTERM with kill=False) and starts
        it again with the same socket, flags and cache, as systemd would."""
        if kill:
            self.kill()
        else:
            self.proc.terminate()
            self.proc.wait(timeout=30)
        self._start()

    def start(self):
        """Starts it again after kill(), on the same socket, flags and
        cache."""
        self._start()

    def _wait_until_accepting(self, path):
        deadline = time.monotonic() + 30
        while True:
            if self.proc.poll() is not None:
                pytest.fail(f"batchd exited with {self.proc.returncode}: "
                            f"{open(self.log_path).read()}")
            family = socket.AF_UNIX if isinstance(path, str) else (
                socket.AF_INET6 if ":" in path[0] else socket.AF_INET)
            with socket.socket(family, socket.SOCK_STREAM) as s:
                try:
                    s.connect(path)
                    return
                except OSError:
                    pass
            if time.monotonic() > deadline:
                pytest.fail(f"batchd does not accept on {path}: "
                            f"{open(self.log_path).read()}")
            time.sleep(0.02)

    def hdf5_helpers(self, live=False):
        """{pid: uid} of the daemon's HDF5 helpers (live=True: zombies
        left out)."""
        out = {}
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open(f"/proc/{pid}/status") as f:
                    status = dict(line.split(":", 1) for line in f
                                  if ":" in line)
            except OSError:
                continue
            if (status.get("Name", "").strip() == "batchd-hdf5" and
                    int(status["PPid"]) == self.proc.pid and
                    not (live and status["State"].strip().startswith("Z"))):
                out[int(pid)] = int(status["Uid"].split()[0])
        return out

    def segments(self):
        return sorted(glob.glob(f"/dev/shm/{self.prefix}.*"))

    def status(self):
        out = subprocess.run([binary("batchctl"), "status", "--json",
                              "--server", self.address],
                             check=True, capture_output=True, text=True)
        return json.loads(out.stdout)

    def kill(self):
        """SIGKILL, and reap it: the pid is then really gone."""
        self.proc.kill()
        self.proc.wait()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
        self.log.close()
        # A killed daemon cannot unlink its rings; the prefix is ours alone.
        for path in self.segments():
            os.unlink(path)
        shutil.rmtree(self.dir, ignore_errors=True)


class Server(Daemon):
    """A daemon whose data root, `data`, is tmp_path/data (made empty
    here), logging to tmp_path/batchd.log; `kwargs` as Daemon's."""

    def __init__(self, tmp_path, **kwargs):
        self.data = tmp_path / "data"
        self.data.mkdir()
        super().__init__(self.data, tmp_path / "batchd.log", **kwargs)


def daemon_fixture(root, **kwargs):
    """A pytest fixture: a Daemon (`kwargs` as Daemon's) of the test's own
    serving the data root the fixture named `root` gives, logging to
    tmp_path/batchd.log, stopped after the test."""
    @pytest.fixture
    def daemon(request, tmp_path):
        d = Daemon(request.getfixturevalue(root), tmp_path / "batchd.log",
                   **kwargs)
        yield d
        d.stop()
    return daemon
