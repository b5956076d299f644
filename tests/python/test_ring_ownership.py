"""Whose ring a trainer maps, and who else may touch it (issue 27, breaks
1 and 2), with real daemons and real uids:

- over TCP (no peer to ask) a ring must belong to root, the trainer's uid
  or server_uid, and every reconnect must find the uid of the first ring:
  another user's batchd that takes the port while the daemon restarts
  feeds the trainer nothing, and the error is final and names both uids;
- a ring is its client's uid's alone: with --shm-group, a member of the
  group can neither read nor write another member's ring (0600 and a
  POSIX ACL entry for the owner only), and a daemon of another uid (a
  sidecar) still gives each trainer its ring.

Run as root (setuid to nobody and to uids of no user):

    BATCHD_BIN=<build>/server/batchd PYTHONPATH=<build>/python \\
        /usr/bin/python3 -m pytest tests/python/test_ring_ownership.py
"""

import errno
import glob
import os
import socket
import struct
import subprocess
import tempfile
import time
import uuid

import pytest

pytest.importorskip("numpy")

import batchd  # noqa: E402
from batchd_daemon import Daemon, binary, free_port  # noqa: E402
from helpers import needs_root, python_as, require_python_as  # noqa: E402
from helpers import wait_until  # noqa: E402

NOBODY = 65534
# Uids and a group of no user on the test machine: setuid/setgid accept
# any number, and nothing else owns files under them.
GROUP = 47300
MEMBER_A = 47301
MEMBER_B = 47302

pytestmark = needs_root


def accepts(port):
    with socket.socket() as s:
        try:
            s.connect(("127.0.0.1", port))
            return True
        except OSError:
            return False


class TcpDaemon:
    """batchd on tcp://127.0.0.1:`port` as `user` (None: this process's),
    serving `data`, with a shm prefix of its own."""

    def __init__(self, port, data, log_path, user=None):
        self.port = port
        self.prefix = f"batchdown{uuid.uuid4().hex[:12]}"
        self.log_path = log_path
        log = open(log_path, "w")
        self.proc = subprocess.Popen(
            [binary("batchd"), "--listen", f"tcp://127.0.0.1:{port}",
             "--data-root", str(data), "--shm-prefix", self.prefix,
             "--threads", "1", "--cache-dir", ""],
            stdout=log, stderr=subprocess.STDOUT, user=user, group=user,
            extra_groups=[] if user is not None else None)
        wait_until(lambda: accepts(port) or self.proc.poll() is not None, 30,
                   f"batchd accepts on port {port}")
        if self.proc.poll() is not None:
            pytest.fail(f"batchd exited: {open(log_path).read()}")

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        remove_segments(self.prefix)


def remove_segments(prefix):
    """A killed daemon leaves its rings; the prefix is this test's alone."""
    for path in glob.glob(f"/dev/shm/{prefix}.*"):
        os.unlink(path)


def tcp_loader(port, name, **kw):
    return batchd.Loader(name, 4, world_size=1, rank=0, slots=2,
                         format="numpy", server=f"tcp://127.0.0.1:{port}",
                         options={"examples": "100000",
                                  "payload_bytes": "64"},
                         connect_timeout=20.0, timeout=20.0, **kw)


def read_until_error(loader, most=50):
    """The error next() raises once the batches the dead daemon had
    published are read (a trainer fed by the new daemon never gets one)."""
    for _ in range(most):
        try:
            next(loader)
        except batchd.Error as e:
            return e
    pytest.fail(f"{most} batches read and no error: the trainer was fed "
                "by the daemon on the port")


def data_dir(tmp_path, name, owner=None):
    """A data root other uids may reach (pytest's own tree is root's
    alone, 0700)."""
    d = tempfile.mkdtemp(prefix=f"batchd-{name}-", dir="/tmp")
    os.chmod(d, 0o755)
    if owner is not None:
        os.chown(d, owner, owner)
    return d


# ------------------------------------------------ 1: a squatted TCP port

def test_another_users_batchd_on_the_port_of_a_restart_feeds_nothing(
        tmp_path):
    port = free_port()
    mine = TcpDaemon(port, data_dir(tmp_path, "mine"), tmp_path / "a.log")
    squatter = None
    try:
        loader = tcp_loader(port, "train")
        assert next(loader)
        mine.kill()  # the daemon crashes; the trainer will reconnect
        # Another user's batchd takes the port first, with its own data.
        squatter = TcpDaemon(port, data_dir(tmp_path, "theirs", NOBODY),
                             tmp_path / "b.log", user=NOBODY)
        e = read_until_error(loader)
        assert e.code == "PERMISSION_DENIED", e
        # Both owners named: the ring found and the one the trainer had.
        assert f"belongs to uid {NOBODY}" in str(e), e
        assert "not to uid 0" in str(e), e
        # Final: no batch of the squatter's comes later either.
        with pytest.raises(batchd.Error):
            next(loader)
    finally:
        mine.kill()
        if squatter is not None:
            squatter.kill()


def test_a_tcp_ring_of_an_untrusted_owner_is_refused_at_the_first_open(
        tmp_path):
    port = free_port()
    theirs = TcpDaemon(port, data_dir(tmp_path, "theirs", NOBODY),
                       tmp_path / "b.log", user=NOBODY)
    try:
        # Neither root nor this process's uid, and no server_uid: refused,
        # at once (not retried for connect_timeout).
        start = time.monotonic()
        with pytest.raises(batchd.Error) as e:
            tcp_loader(port, "train")
        assert e.value.code == "PERMISSION_DENIED", e.value
        assert f"belongs to uid {NOBODY}, not to uid 0" in str(e.value)
        assert time.monotonic() - start < 15
        # Named as the daemon's uid, it is trusted.
        # (Another stream: the refused client's seat waits out
        # --attach-timeout-seconds.)
        loader = tcp_loader(port, "named", server_uid=NOBODY)
        assert next(loader) is not None
    finally:
        theirs.kill()


def test_a_reconnect_must_find_the_ring_owner_of_the_first_attach(tmp_path):
    # server_uid admits nobody's rings too; the first ring was root's, so
    # after the restart only root's are taken.
    port = free_port()
    mine = TcpDaemon(port, data_dir(tmp_path, "mine"), tmp_path / "a.log")
    squatter = None
    try:
        loader = tcp_loader(port, "train", server_uid=NOBODY)
        next(loader)
        mine.kill()
        squatter = TcpDaemon(port, data_dir(tmp_path, "theirs", NOBODY),
                             tmp_path / "b.log", user=NOBODY)
        e = read_until_error(loader)
        assert e.code == "PERMISSION_DENIED", e
        assert f"belongs to uid {NOBODY}, not to uid 0" in str(e)
    finally:
        mine.kill()
        if squatter is not None:
            squatter.kill()


# ------------------------------------------- 2: a ring is its owner's alone

READER = r"""
import sys, batchd
loader = batchd.Loader("mine", 4, world_size=1, rank=0, slots=2,
                       format="numpy", server=sys.argv[1],
                       options={"examples": "100000", "payload_bytes": "64"},
                       connect_timeout=20.0, timeout=20.0)
next(loader)
print(loader.info.segment, flush=True)
for line in sys.stdin:
    n = 0
    for _ in range(int(line)):
        next(loader)
        n += 1
    print("read", n, flush=True)
"""

TOUCH = r"""
import errno, os, sys
for flags in (os.O_RDWR, os.O_RDONLY):
    try:
        os.close(os.open(sys.argv[1], flags))
        print("opened", flush=True)
    except OSError as e:
        print(errno.errorcode[e.errno], flush=True)
"""


def acl_entries(path):
    """[(tag, perm, id)] of the file's POSIX access ACL ([] without)."""
    try:
        raw = os.getxattr(path, "system.posix_acl_access")
    except OSError as e:
        if e.errno == errno.ENODATA:
            return []
        raise
    assert struct.unpack_from("<I", raw)[0] == 2
    return [struct.unpack_from("<HHI", raw, 4 + 8 * i)
            for i in range((len(raw) - 4) // 8)]


def test_a_member_of_the_shm_group_cannot_touch_another_members_ring(
        tmp_path):
    require_python_as(MEMBER_B)
    (tmp_path / "data").mkdir()
    d = Daemon(tmp_path / "data", tmp_path / "batchd.log",
               args=("--socket-mode", "0666", "--shm-group", str(GROUP)))
    os.chmod(d.dir, 0o755)
    b = python_as(MEMBER_B, READER, d.address, groups=[GROUP], group=GROUP)
    try:
        segment = "/dev/shm" + b.stdout.readline().strip()
        assert segment != "/dev/shm", b.stderr.read()
        st = os.stat(segment)
        assert st.st_uid == 0
        # Owner rw, member B's uid rw, nobody else anything (the group
        # bits of the mode are the ACL's mask).
        entries = acl_entries(segment)
        assert (0x02, 6, MEMBER_B) in entries, entries
        assert [e for e in entries if e[0] in (0x02, 0x08)] == [
            (0x02, 6, MEMBER_B)], entries
        assert (0x04, 0, 0xFFFFFFFF) in entries, entries
        assert (0x20, 0, 0xFFFFFFFF) in entries, entries

        # Member A of the same group: neither write nor read.
        a = python_as(MEMBER_A, TOUCH, segment, groups=[GROUP], group=GROUP)
        out, err = a.communicate(timeout=60)
        assert out.split() == ["EACCES", "EACCES"], (out, err)
        # A uid in no group at all: neither.
        n = python_as(NOBODY, TOUCH, segment)
        out, err = n.communicate(timeout=60)
        assert out.split() == ["EACCES", "EACCES"], (out, err)
        # B reads on, undisturbed.
        b.stdin.write("20\n")
        b.stdin.flush()
        assert b.stdout.readline().split() == ["read", "20"], b.stderr.read()
        assert "shm_group_ignored" in open(d.log_path).read()
    finally:
        b.kill()
        b.wait()
        d.stop()


def test_a_daemon_of_another_uid_gives_each_trainer_its_ring_alone(tmp_path):
    # The sidecar: batchd as one uid (nobody here), trainers as others,
    # with no group in common; each trainer names the daemon's uid.
    data = data_dir(tmp_path, "data", NOBODY)
    sock_dir = tempfile.mkdtemp(prefix="batchd-own-", dir="/tmp")
    os.chmod(sock_dir, 0o755)
    os.chown(sock_dir, NOBODY, NOBODY)
    address = f"unix://{sock_dir}/sock"
    prefix = f"batchdown{uuid.uuid4().hex[:12]}"
    log = open(tmp_path / "batchd.log", "w")
    daemon = subprocess.Popen(
        [binary("batchd"), "--listen", address, "--data-root", str(data),
         "--shm-prefix", prefix, "--threads", "1", "--cache-dir", "",
         "--socket-mode", "0666"],
        stdout=log, stderr=subprocess.STDOUT, user=NOBODY, group=NOBODY,
        extra_groups=[])
    readers = []
    try:
        wait_until(lambda: os.path.exists(f"{sock_dir}/sock")
                   or daemon.poll() is not None, 30, "batchd listens")
        assert daemon.poll() is None, open(tmp_path / "batchd.log").read()
        script = READER.replace('world_size=1', f'server_uid={NOBODY}, '
                                                'world_size=1')
        for uid in (MEMBER_A, MEMBER_B):
            readers.append(python_as(uid, script, address))
        segments = []
        for r in readers:
            line = r.stdout.readline().strip()
            assert line, r.stderr.read()
            segments.append("/dev/shm" + line)
        for uid, segment in zip((MEMBER_A, MEMBER_B), segments):
            assert os.stat(segment).st_uid == NOBODY
            assert [e for e in acl_entries(segment) if e[0] == 0x02] == [
                (0x02, 6, uid)]
        # A cannot open B's ring.
        a = python_as(MEMBER_A, TOUCH, segments[1])
        out, err = a.communicate(timeout=60)
        assert out.split() == ["EACCES", "EACCES"], (out, err)
        for r in readers:
            r.stdin.write("5\n")
            r.stdin.flush()
            assert r.stdout.readline().split() == ["read", "5"]
    finally:
        for r in readers:
            r.kill()
            r.wait()
        daemon.kill()
        daemon.wait()
        remove_segments(prefix)
