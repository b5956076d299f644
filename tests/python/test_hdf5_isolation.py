"""A fastMRI volume one user writes reads nothing of another's and stalls
no one else (issue 35, breaks H1, H2 and W1), with a root daemon, a data
root owned by root, and two real uids: an attacker and a victim whose
directory is 0700 with a 0600 secret in it.

- H1: the attacker's volumes whose reconstruction_esc is HDF5 external
  storage naming the victim's secret, a virtual dataset over the victim's
  volume, or an external link to it, are refused naming the file; with the
  checks skipped (a test hook), the helper's confinement still reads
  nothing of the secret into any batch;
- H2: a FIFO as a volume's external storage is refused at once; a volume
  that hangs libhdf5 (a test hook standing in for a crafted file) holds
  only the attacker's helper: the victim's running train stream keeps
  getting batches and the victim's new OpenStream answers while the
  attacker's call is still inside its helper, which is killed at the
  call's timeout with an error naming the file;
- W1: no helper is left a zombie of the daemon.

Run as root (setuid to uids of no user), with h5py:

    BATCHD_BIN=<build>/server/batchd PYTHONPATH=<build>/python \\
        /usr/bin/python3 -m pytest tests/python/test_hdf5_isolation.py
"""

import os
import platform
import shutil
import subprocess
import sys
import tempfile

import pytest

np = pytest.importorskip("numpy")
h5py = pytest.importorskip("h5py")

from batchd_daemon import daemon_fixture  # noqa: E402
from helpers import REPO, chown_tree, needs_root, python_as  # noqa: E402
from helpers import wait_until  # noqa: E402

ATTACKER = 47421
VICTIM = 47422
GENERATOR = os.path.join(REPO, "workloads", "fastmri", "make_fastmri.py")
SECRET = (b"victim's private line: only uid %d may read this\n" % VICTIM)
TARGET_BYTES = 320 * 320 * 4

pytestmark = needs_root

# Opens a stream and reads up to `batches` batches; prints "OK <n>" or
# "ERR <n> <message>" (n: batches received), and "BATCH" as each comes.
CLIENT = r'''
import sys
import uuid
import batchd
server, data, split, batches = sys.argv[1], sys.argv[2], sys.argv[3], \
    int(sys.argv[4])
n = 0
try:
    loader = batchd.Loader(uuid.uuid4().hex[:16], 1, workload="fastmri",
                           data=data, split=split, world_size=1, rank=0,
                           seed=1, slots=2, format="numpy", server=server,
                           connect_timeout=60.0, timeout=60.0)
    while batches < 0 or n < batches:
        batch = next(loader)
        n += 1
        print("BATCH", flush=True)
    print("OK", n, flush=True)
except StopIteration:
    print("OK", n, flush=True)
except batchd.Error as e:
    print("ERR", n, " ".join(str(e).split()), flush=True)
'''


def client(uid, server, data, split="validation", batches=1):
    return python_as(uid, CLIENT, server, data, split, batches, stdin=None)


def result(proc):
    """("OK"|"ERR", batches, message) of a finished client."""
    out, err = proc.communicate(timeout=180)
    last = [line for line in out.splitlines() if not line == "BATCH"]
    assert last, err
    word, n, *rest = last[-1].split(" ", 2)
    return word, int(n), rest[0] if rest else ""


def write_volume(path, reconstruction):
    """A one-slice volume whose reconstruction_esc `reconstruction(f)`
    makes; its k-space is the volume's own."""
    with h5py.File(path, "w") as f:
        f.create_dataset("kspace", data=np.full((1, 640, 368), 1e-4 + 1e-4j,
                                                np.complex64))
        reconstruction(f)
        f.attrs["max"] = 1.0


@pytest.fixture(scope="module")
def tree():
    """root (root's, 0755):
    victim/    the victim's, 0700: secret (0600, the secret repeated to a
               target's bytes), fastmri/ (train: 3 volumes, every second
               chunked; val: 1)
    attacker/  the attacker's, 0755: ext/, vds/, elink/, fifo/, hang/,
               unchecked/, each a fastmri root whose one val volume is
               what its name says
    """
    root = tempfile.mkdtemp(prefix="batchd-hdf5-", dir="/tmp")
    os.chmod(root, 0o755)
    victim = os.path.join(root, "victim")
    os.mkdir(victim)
    secret = os.path.join(victim, "secret")
    with open(secret, "wb") as f:
        f.write((SECRET * (TARGET_BYTES // len(SECRET) + 1))[:TARGET_BYTES])
    subprocess.run([sys.executable, GENERATOR, os.path.join(victim, "fastmri"),
                    "--train", "3", "--val", "1", "--slices", "2", "2",
                    "--seed", "3"], check=True, capture_output=True)
    chown_tree(victim, VICTIM, file_mode=0o600)
    os.chmod(victim, 0o700)
    val = os.path.join(victim, "fastmri", "knee_singlecoil_val")
    victim_volume = os.path.join(val, os.listdir(val)[0])

    attacker = os.path.join(root, "attacker")
    volumes = {
        "ext": lambda f: f.create_dataset(
            "reconstruction_esc", shape=(1, 320, 320), dtype="<f4",
            external=[(secret, 0, TARGET_BYTES)]),
        "unchecked": lambda f: f.create_dataset(
            "reconstruction_esc", shape=(1, 320, 320), dtype="<f4",
            external=[(secret, 0, TARGET_BYTES)]),
        "fifo": lambda f: f.create_dataset(
            "reconstruction_esc", shape=(1, 320, 320), dtype="<f4",
            external=[(os.path.join(attacker, "fifo", "pipe"), 0,
                       TARGET_BYTES)]),
        "vds": lambda f: f.create_virtual_dataset(
            "reconstruction_esc", vds_layout(victim_volume)),
        "elink": lambda f: f.__setitem__(
            "reconstruction_esc",
            h5py.ExternalLink(victim_volume, "/reconstruction_esc")),
        "hang": lambda f: f.create_dataset(
            "reconstruction_esc", data=np.ones((1, 320, 320), np.float32)),
    }
    names = {"hang": "batchd-test-hdf5-hang.h5",
             "unchecked": "batchd-test-hdf5-unchecked.h5"}
    for kind, make in volumes.items():
        d = os.path.join(attacker, kind, "knee_singlecoil_val")
        os.makedirs(d)
        write_volume(os.path.join(d, names.get(kind, "file1000001.h5")), make)
    os.mkfifo(os.path.join(attacker, "fifo", "pipe"))
    chown_tree(attacker, ATTACKER, file_mode=0o644)
    yield root
    shutil.rmtree(root)


def vds_layout(source):
    layout = h5py.VirtualLayout(shape=(1, 320, 320), dtype="<f4")
    layout[:] = h5py.VirtualSource(source, "reconstruction_esc",
                                   shape=(2, 320, 320))[0:1]
    return layout


daemon = daemon_fixture("tree", hooks=True, open_to_all=True)


def zombies_of(daemon_pid):
    out = []
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == daemon_pid and fields[0] == "Z":
            out.append(int(pid))
    return out


def in_pause(pid):
    """Whether the helper's main thread is in pause(2), the hang hook."""
    number = {"x86_64": 34, "aarch64": 73}[platform.machine()]  # pause, ppoll
    try:
        with open(f"/proc/{pid}/syscall") as f:
            return f.read().split()[0] == str(number)
    except (OSError, IndexError):
        return False


def test_volumes_that_name_other_files_are_refused(daemon):
    refusals = {"ext": "HDF5 external storage",
                "vds": "is a virtual dataset",
                "elink": "an external link",
                "fifo": "HDF5 external storage"}
    for kind, says in refusals.items():
        word, n, message = result(client(ATTACKER, daemon.address,
                                         f"attacker/{kind}"))
        assert (word, n) == ("ERR", 0), (kind, message)
        assert "file1000001.h5" in message and says in message, message
    # The victim reads its own.
    assert result(client(VICTIM, daemon.address, "victim/fastmri"))[:2] == \
        ("OK", 1)
    assert not zombies_of(daemon.proc.pid)


def test_the_helper_reads_nothing_the_checks_would_refuse(daemon):
    # The checks skipped (a test hook): the volume is indexed, and libhdf5
    # in the attacker's helper tries the victim's secret itself. The helper
    # can open nothing (and runs as the attacker): no batch holds it.
    word, n, message = result(client(ATTACKER, daemon.address,
                                     "attacker/unchecked", batches=-1))
    assert (word, n) == ("ERR", 0), message
    assert "batchd-test-hdf5-unchecked.h5" in message, message
    helpers = daemon.hdf5_helpers()
    assert helpers and set(helpers.values()) == {ATTACKER}, helpers


def test_a_hung_volume_stalls_only_its_owner(daemon):
    victim = client(VICTIM, daemon.address, "victim/fastmri", split="train",
                    batches=-1)
    batches = [0]

    def victim_batches(k):
        """Waits until the victim's stream has given k more batches."""
        want = batches[0] + k
        while batches[0] < want:
            line = victim.stdout.readline()
            assert line, victim.stderr.read()
            batches[0] += line.strip() == "BATCH"
        return True

    try:
        victim_batches(2)
        victims = set(daemon.hdf5_helpers())
        attacker = client(ATTACKER, daemon.address, "attacker/hang")
        # The attacker's OpenStream is inside its helper, which hangs.
        hung = []

        def attacker_hangs():
            hung[:] = [pid for pid, uid in
                       daemon.hdf5_helpers().items()
                       if uid == ATTACKER and in_pause(pid)]
            return bool(hung)
        wait_until(attacker_hangs, 60, "the attacker's helper hangs")
        assert not set(hung) & victims
        # Meanwhile the victim's stream goes on, and its new stream opens.
        victim_batches(3)
        assert result(client(VICTIM, daemon.address, "victim/fastmri"))[:2] \
            == ("OK", 1)
        # ... while the attacker's call is still in its helper: nothing of
        # the victim's waited for it.
        assert in_pause(hung[0]) and attacker.poll() is None
        word, n, message = result(attacker)
        assert (word, n) == ("ERR", 0), message
        assert "batchd-test-hdf5-hang.h5" in message, message
        assert "did not answer within 20 s" in message, message
        victim_batches(1)
    finally:
        victim.kill()
        victim.communicate()
    # The hung helper was killed and reaped; none is a zombie.
    assert hung[0] not in daemon.hdf5_helpers()
    assert not zombies_of(daemon.proc.pid)
