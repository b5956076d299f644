"""A caller reads through batchd only what it could read itself (issue 27,
break 5), with real daemons and real uids:

- user B can open no stream on user A's 0700 directory, on a 0600 file in
  a directory B may list, nor through a link A made into that directory;
  A can, and root can;
- Plan and OpenStream answer a path B cannot reach exactly as a missing
  one;
- a TCP caller reads only what any local user may read, unless the daemon
  runs with --tcp-admin;
- a daemon of another uid (which cannot take a caller's uid) checks mode
  bits and POSIX ACLs to the same effect;
- the symlink oracle: B's own link into a directory B cannot search (an
  absolute one, then `..` back out) answers byte for byte alike whether the
  name it guesses exists, is missing or lies outside the root, through Plan
  and OpenStream, from a daemon as root and as a service uid; and an
  ImageFolder class that is such a link lists alike.

Run as root (setuid to uids of no user):

    BATCHD_BIN=<build>/server/batchd PYTHONPATH=<build>/python \\
        /usr/bin/python3 -m pytest tests/python/test_read_access.py
"""

import contextlib
import os
import shutil
import socket
import struct
import subprocess
import tempfile
import time
import uuid

import pytest

pytest.importorskip("numpy")

from batchd_daemon import binary, daemon_fixture, free_port  # noqa: E402
from helpers import as_user, chown_tree, last_line, needs_root  # noqa: E402
from helpers import python_as, require_python_as  # noqa: E402

# Uids and a group of no user on the test machine.
GROUP = 47410
USER_A = 47411
USER_B = 47412
DAEMON_UID = 47413

pytestmark = needs_root

# Opens one stream and reads a batch; prints "OK" or "ERR <message>".
OPEN = r'''
import sys
import uuid
import batchd
server, workload, data = sys.argv[1:4]
name = "none"
extra = {"server_uid": int(sys.argv[4])} if len(sys.argv) > 4 else {}
try:
    name = uuid.uuid4().hex[:16]
    loader = batchd.Loader(name, 4, workload=workload, data=data,
                           split="train", world_size=1, rank=0, seed=1,
                           slots=2, format="numpy", server=server,
                           connect_timeout=30.0, timeout=60.0,
                           options={"index_threads": 1} if workload == "wmt"
                           else {}, **extra)
    next(loader)
    print("OK")
except batchd.Error as e:
    print("ERR", " ".join(str(e).replace(name, "NAME").split()))
'''


def set_acl(path, entries):
    """Writes the access ACL [(tag, perm, id)] as Linux stores it."""
    raw = struct.pack("<I", 2) + b"".join(
        struct.pack("<HHI", tag, perm, ident) for tag, perm, ident in entries)
    os.setxattr(path, "system.posix_acl_access", raw)


@pytest.fixture(scope="module")
def tree(shared_data):
    """A data root (0755) with:
    a/       A's, 0700: wmt/ and imagenet/ (A's files)
    open/    A's, 0755: wmt/ whose files are A's 0600, imagenet/ (shards
             only) whose shards are A's 0600
    links/   A's, 0755: rel -> ../a/wmt, abs -> <root>/a/wmt
    pub/     root's, 0755 and 0644 all the way: wmt/
    grp/     root:GROUP 0750: wmt/ (readable by GROUP, not by others)
    acl/     A's, 0700 with ACL entries r-x for B and for DAEMON_UID: wmt/
    """
    root = tempfile.mkdtemp(prefix="batchd-access-", dir="/tmp")
    os.chmod(root, 0o755)
    wmt, imagenet = shared_data / "wmt", shared_data / "imagenet"
    os.mkdir(os.path.join(root, "a"))
    shutil.copytree(wmt, os.path.join(root, "a", "wmt"))
    shutil.copytree(imagenet, os.path.join(root, "a", "imagenet"))
    chown_tree(os.path.join(root, "a"), USER_A, USER_A)
    os.chmod(os.path.join(root, "a"), 0o700)

    os.mkdir(os.path.join(root, "open"))
    shutil.copytree(wmt, os.path.join(root, "open", "wmt"))
    shutil.copytree(imagenet / "tfds", os.path.join(root, "open", "imagenet"))
    chown_tree(os.path.join(root, "open"), USER_A, USER_A, 0o755, 0o600)

    links = os.path.join(root, "links")
    os.mkdir(links)
    os.symlink("../a/wmt", os.path.join(links, "rel"))
    os.symlink(os.path.join(root, "a", "wmt"), os.path.join(links, "abs"))
    for p in (links, os.path.join(links, "rel"), os.path.join(links, "abs")):
        os.lchown(p, USER_A, USER_A)

    os.mkdir(os.path.join(root, "pub"))
    shutil.copytree(wmt, os.path.join(root, "pub", "wmt"))
    chown_tree(os.path.join(root, "pub"), 0, 0, 0o755, 0o644)

    os.mkdir(os.path.join(root, "grp"))
    shutil.copytree(wmt, os.path.join(root, "grp", "wmt"))
    chown_tree(os.path.join(root, "grp"), 0, GROUP, 0o750, 0o640)

    os.mkdir(os.path.join(root, "acl"))
    shutil.copytree(wmt, os.path.join(root, "acl", "wmt"))
    chown_tree(os.path.join(root, "acl"), USER_A, USER_A, 0o755, 0o644)
    os.chmod(os.path.join(root, "acl"), 0o700)
    # user::rwx, user:B:r-x, user:DAEMON_UID:r-x, group::---, mask::r-x,
    # other::---
    set_acl(os.path.join(root, "acl"), [(0x01, 7, 0xFFFFFFFF),
                                        (0x02, 5, USER_B),
                                        (0x02, 5, DAEMON_UID),
                                        (0x04, 0, 0xFFFFFFFF),
                                        (0x10, 5, 0xFFFFFFFF),
                                        (0x20, 0, 0xFFFFFFFF)])
    yield root
    shutil.rmtree(root)


def open_as(uid, server, workload, data, groups=(), server_uid=None):
    """("OK", "") or ("ERR", the error) of a stream opened by `uid` (None:
    this process, root)."""
    proc = python_as(uid, OPEN, server, workload, data,
                     *([server_uid] if server_uid is not None else []),
                     groups=groups)
    word, _, rest = last_line(proc, timeout=120).partition(" ")
    return word, rest


def plan_as(uid, server, workload, data):
    """batchctl plan's exit status and stderr for `uid`."""
    require_python_as(uid)
    r = subprocess.run([binary("batchctl"), "plan", "--server", server,
                        "--workload", workload, "--data", data,
                        "--global-batch-size", "4"], text=True,
                       capture_output=True, timeout=120, **as_user(uid))
    return r.returncode, r.stderr.strip()


daemon = daemon_fixture("tree", open_to_all=True)


def test_another_uid_opens_no_stream_on_a_private_directory(daemon):
    for workload, data in (("wmt", "a/wmt"), ("imagenet", "a/imagenet")):
        word, err = open_as(USER_B, daemon.address, workload, data)
        assert word == "ERR", f"uid {USER_B} read {data} of 0700 a/"
        assert f"not readable by uid {USER_B}" in err, err
        # The owner still reads it, and root does.
        assert open_as(USER_A, daemon.address, workload, data) == ("OK", "")
        assert open_as(None, daemon.address, workload, data) == ("OK", "")


def test_a_private_file_in_a_listable_directory_is_not_read(daemon):
    for workload, data in (("wmt", "open/wmt"),
                           ("imagenet", "open/imagenet")):
        word, err = open_as(USER_B, daemon.address, workload, data)
        assert word == "ERR", f"uid {USER_B} read the 0600 files of {data}"
        assert open_as(USER_A, daemon.address, workload, data) == ("OK", "")


def test_a_link_into_a_private_directory_reads_nothing(daemon):
    for data in ("links/rel", "links/abs"):
        word, err = open_as(USER_B, daemon.address, "wmt", data)
        assert word == "ERR", f"uid {USER_B} read a/wmt through {data}"
        assert f"not readable by uid {USER_B}" in err, err
        assert open_as(USER_A, daemon.address, "wmt", data) == ("OK", "")


def test_groups_and_acls_grant_what_they_grant(daemon):
    # grp/ is GROUP's: B reads it as a member, not otherwise.
    assert open_as(USER_B, daemon.address, "wmt", "grp/wmt")[0] == "ERR"
    assert open_as(USER_B, daemon.address, "wmt", "grp/wmt",
                   groups=[GROUP]) == ("OK", "")
    # acl/ is A's 0700 with an ACL entry for B.
    assert open_as(USER_B, daemon.address, "wmt", "acl/wmt") == ("OK", "")
    assert open_as(USER_A + 100, daemon.address, "wmt",
                   "acl/wmt")[0] == "ERR"


def test_missing_and_unreachable_paths_answer_alike(daemon, tree):
    # A path behind a directory B cannot search is "missing" to B: Plan and
    # OpenStream say the same, path aside, for both.
    unreachable = ["a/wmt", "a/imagenet", "a/wmt/wmt_sentencepiece_model",
                   "links/rel"]
    missing = ["a/nothing-here", "nothing-here", "pub/nothing-here",
               "links/nothing-here"]
    answers = set()
    for data in unreachable + missing:
        code, err = plan_as(USER_B, daemon.address, "wmt", data)
        assert code == 1, (data, err)
        word, opened = open_as(USER_B, daemon.address, "wmt", data)
        assert word == "ERR", data
        answers.add(("plan", err.replace(data, "PATH")))
        answers.add(("open", opened.replace(data, "PATH")))
    assert len([a for a in answers if a[0] == "plan"]) == 1, answers
    assert len([a for a in answers if a[0] == "open"]) == 1, answers
    # The owner's Plan of the same path works.
    assert plan_as(USER_A, daemon.address, "wmt", "a/wmt")[0] == 0


class TcpDaemon:
    def __init__(self, data, log_path, args=()):
        self.port = free_port()
        self.address = f"tcp://127.0.0.1:{self.port}"
        self.prefix = f"batchdacc{uuid.uuid4().hex[:12]}"
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(
            [binary("batchd"), "--listen", self.address, "--data-root",
             str(data), "--shm-prefix", self.prefix, "--threads", "2",
             "--cache-dir", "", *args],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while self.proc.poll() is None and time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.05)
        pytest.fail(f"batchd does not accept on {self.address}: "
                    f"{open(log_path).read()}")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)


@pytest.mark.parametrize("admin", [False, True])
def test_a_tcp_caller_reads_what_any_local_user_may(tree, tmp_path, admin):
    d = TcpDaemon(tree, tmp_path / "batchd.log",
                  args=("--tcp-admin",) if admin else ())
    try:
        # World-readable all the way: every TCP caller.
        assert open_as(None, d.address, "wmt", "pub/wmt") == ("OK", "")
        for data in ("a/wmt", "grp/wmt", "open/wmt", "links/rel"):
            word, err = open_as(None, d.address, "wmt", data)
            if admin:
                # --tcp-admin: TCP callers are trusted as the daemon.
                assert (word, err) == ("OK", ""), (data, err)
            else:
                assert word == "ERR", f"a TCP caller read {data}"
                assert "not readable by any local user" in err, err
    finally:
        d.stop()


@contextlib.contextmanager
def service_daemon(tree, tmp_path):
    """A daemon running as DAEMON_UID (a member of GROUP) on `tree`, its
    socket open to every uid; yields its address."""
    sock_dir = tempfile.mkdtemp(prefix="batchd-acc-", dir="/tmp")
    os.chmod(sock_dir, 0o755)
    os.chown(sock_dir, DAEMON_UID, DAEMON_UID)
    address = f"unix://{sock_dir}/sock"
    log = open(tmp_path / "batchd.log", "w")
    proc = subprocess.Popen(
        [binary("batchd"), "--listen", address, "--data-root", str(tree),
         "--shm-prefix", f"batchdacc{uuid.uuid4().hex[:12]}", "--threads",
         "1", "--cache-dir", "", "--socket-mode", "0666"],
        stdout=log, stderr=subprocess.STDOUT, user=DAEMON_UID,
        group=DAEMON_UID, extra_groups=[GROUP])
    try:
        deadline = time.monotonic() + 30
        while not os.path.exists(f"{sock_dir}/sock"):
            assert proc.poll() is None and time.monotonic() < deadline, \
                open(tmp_path / "batchd.log").read()
            time.sleep(0.05)
        yield address
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        shutil.rmtree(sock_dir, ignore_errors=True)


def test_a_daemon_of_another_uid_checks_bits_and_acls(tree, tmp_path):
    # The daemon runs as DAEMON_UID, a member of GROUP; it can read pub/,
    # grp/ and acl/ itself. B may read pub/ (world) and acl/ (its ACL
    # entry), grp/ only as a member of GROUP.
    with service_daemon(tree, tmp_path) as address:
        def open_b(data, uid=USER_B, groups=()):
            return open_as(uid, address, "wmt", data, groups=groups,
                           server_uid=DAEMON_UID)
        assert open_b("pub/wmt") == ("OK", "")
        word, err = open_b("grp/wmt")
        assert word == "ERR", f"uid {USER_B} read grp/ through the daemon"
        assert f"not readable by uid {USER_B}" in err, err
        assert open_b("grp/wmt", groups=[GROUP]) == ("OK", "")
        # The ACL's entry for B grants; a uid without one gets nothing.
        assert open_b("acl/wmt") == ("OK", "")
        assert open_b("acl/wmt", uid=USER_A + 100)[0] == "ERR"
        # The daemon's own uid reads what the daemon reads.
        assert open_b("grp/wmt", uid=DAEMON_UID) == ("OK", "")


# ------------------------------------------------------- the symlink oracle

def retarget(link, target, uid):
    """Points `link` (uid's) at `target`, atomically."""
    tmp = link + ".new"
    os.symlink(target, tmp)
    os.lchown(tmp, uid, uid)
    os.rename(tmp, link)


def oracle_answers(address, tree, victim, server_uid=None):
    """What B learns through its own link b/l pointed into `victim` (a
    directory B cannot search, the daemon can) at a name that exists and
    at one that does not, absolutely and relatively, and out of the root:
    {data path: {target: (Plan's status and error, OpenStream's error)}}."""
    b = os.path.join(tree, "b")
    os.mkdir(b)
    os.chown(b, USER_B, USER_B)
    link = os.path.join(b, "l")
    outside = tempfile.mkdtemp(prefix="batchd-oracle-out-", dir="/tmp")
    os.chmod(outside, 0o755)
    shutil.copytree(os.path.join(tree, "pub", "wmt"),
                    os.path.join(outside, "wmt"))
    targets = {
        "exists": os.path.join(tree, victim, "wmt"),
        "missing": os.path.join(tree, victim, "nothing-here"),
        "exists, relative": os.path.join("..", victim, "wmt"),
        "missing, relative": os.path.join("..", victim, "nothing-here"),
        "outside": os.path.join(outside, "wmt"),
    }
    answers = {}
    try:
        for data in ("b/l/../../..", "b/l/../../pub/wmt", "b/l"):
            answers[data] = {}
            for name, target in targets.items():
                retarget(link, target, USER_B)
                plan = plan_as(USER_B, address, "wmt", data)
                opened = open_as(USER_B, address, "wmt", data,
                                 server_uid=server_uid)
                answers[data][name] = (plan, opened)
    finally:
        shutil.rmtree(b)
        shutil.rmtree(outside)
    return answers


def assert_one_answer(answers):
    for data, by_target in answers.items():
        first = next(iter(by_target.values()))
        for name, answer in by_target.items():
            assert answer == first, (data, name, by_target)
        # Refused, as a path B cannot reach is.
        plan, opened = first
        assert opened[0] == "ERR", (data, first)
        assert f"not readable by uid {USER_B}" in opened[1], (data, first)
        assert plan[0] == 1, (data, first)


def test_a_link_into_a_private_directory_is_no_oracle(daemon, tree):
    # The daemon runs as root: a/ is A's 0700; B guesses a/wmt.
    assert_one_answer(oracle_answers(daemon.address, tree, "a"))


def test_a_link_into_a_private_directory_is_no_oracle_to_a_service_daemon(
        tree, tmp_path):
    # The daemon runs as DAEMON_UID, a member of GROUP: it can search grp/
    # (root:GROUP 0750), B cannot; the daemon checks B by mode bits.
    with service_daemon(tree, tmp_path) as address:
        assert_one_answer(oracle_answers(address, tree, "grp",
                                         server_uid=DAEMON_UID))


def test_a_class_folder_linked_into_a_private_directory_lists_alike(
        daemon, tree, shared_data):
    # B's own ImageFolder tree with one more "class": a link to a class
    # folder of A's 0700 tree that exists, to one that does not, and out of
    # the root. B's stream is the same stream each time (the link is no
    # directory B can reach, so no class), and so is its Plan.
    inet = os.path.join(tree, "b-imagenet")
    shutil.copytree(shared_data / "imagenet", inet)
    chown_tree(inet, USER_B, USER_B)
    train = os.path.join(inet, "train")
    cls = sorted(os.listdir(os.path.join(tree, "a", "imagenet", "train")))[0]
    outside = tempfile.mkdtemp(prefix="batchd-oracle-out-", dir="/tmp")
    os.chmod(outside, 0o755)
    shutil.copytree(os.path.join(train, cls), os.path.join(outside, cls))
    answers = {}
    try:
        for name, target in (
                ("exists", os.path.join(tree, "a", "imagenet", "train", cls)),
                ("missing",
                 os.path.join(tree, "a", "imagenet", "train", "nothing")),
                ("outside", os.path.join(outside, cls))):
            retarget(os.path.join(train, "zzz"), target, USER_B)
            code, err = plan_as(USER_B, daemon.address, "imagenet",
                                "b-imagenet")
            # A plan that works may add how much /dev/shm has free now.
            answers[name] = (
                code if code in (0, 3) else (code, err),
                open_as(USER_B, daemon.address, "imagenet", "b-imagenet"))
    finally:
        shutil.rmtree(inet)
        shutil.rmtree(outside)
    assert answers["exists"] == answers["missing"] == answers["outside"], \
        answers
    assert answers["exists"][1] == ("OK", ""), answers
