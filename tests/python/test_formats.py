"""Tests of the Python package's batch formats (torch, numpy, jax), its
version and the protocol check, against a real batchd daemon.

They run wherever the package is importable: in Debian's Python with torch
and numpy (PYTHONPATH=<build>/python), and in a venv of another Python where
`pip install .` put the package, with numpy alone and then with jax
(scripts/test.sh does both). A test needing a framework that is absent is
skipped; the numpy ones need nothing but numpy.

    BATCHD_BIN=<build>/server/batchd PYTHONPATH=<build>/python \\
        /usr/bin/python3 -m pytest tests/python/test_formats.py
"""

import gc
import importlib.util
import mmap
import os
import re
import subprocess
import sys

import pytest

np = pytest.importorskip("numpy")

import batchd  # noqa: E402
from batchd_daemon import Daemon, Server, binary  # noqa: E402
from helpers import REPO  # noqa: E402

EXAMPLES = 1000
GLOBAL_BATCH = 32
SYNTHETIC = {"examples": str(EXAMPLES), "payload_bytes": "64"}
STEPS = 5


def available(module):
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


HAVE_TORCH = available("torch")
HAVE_JAX = available("jax")
FORMATS = ["numpy"] + (["torch"] if HAVE_TORCH else []) + (["jax"] if HAVE_JAX else [])


@pytest.fixture
def jax_x64():
    """JAX with 64-bit types, so that int64/uint64 tensors keep their bytes;
    restored after the test."""
    jax = pytest.importorskip("jax")
    before = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    yield jax
    jax.config.update("jax_enable_x64", before)


def open_loader(server, stream, format, **kwargs):
    kwargs.setdefault("options", SYNTHETIC)
    kwargs.setdefault("connect_timeout", 10.0)
    kwargs.setdefault("seed", 7)
    return batchd.Loader(stream, kwargs.pop("global_batch_size", GLOBAL_BATCH),
                         format=format, server=server.address, **kwargs)


def as_numpy(array):
    """A numpy copy of a torch tensor, numpy array or JAX array."""
    if type(array).__module__.startswith("torch"):
        return array.numpy().copy()
    return np.array(array, copy=True)


def read_batches(server, stream, format, steps=STEPS, **kwargs):
    """[{name: (dtype name, shape, bytes)}] of the first `steps` batches."""
    out = []
    with open_loader(server, stream, format, **kwargs) as loader:
        assert loader.format == format
        for _ in range(steps):
            batch = next(loader)
            out.append({name: (str(a.dtype).replace("torch.", ""),
                               tuple(a.shape), as_numpy(a).tobytes())
                        for name, a in batch.items()})
    return out


def ring_released(loader):
    """How many batches the client has given back (RingHeader `released`,
    offset 192, ring/shm_layout.h): each one's slot is free for the
    server to write again."""
    with open("/dev/shm" + loader.info.segment, "rb") as f:
        with mmap.mmap(f.fileno(), 4096, prot=mmap.PROT_READ) as m:
            return int.from_bytes(m[192:200], "little")


def test_numpy_arrays_hold_the_synthetic_examples(server):
    batches = read_batches(server, "np", "numpy", steps=1)
    with open_loader(server, "np2", "numpy") as loader:
        batch, info = loader.next_batch()
        assert all(type(a) is np.ndarray for a in batch.values())
        assert batch["ids"].dtype == np.uint64  # numpy has uint64: no int64
        assert batch["payload"].dtype == np.uint8
        assert batch["payload"].shape == (GLOBAL_BATCH, 64)
        assert batch["positions"].tolist() == list(range(GLOBAL_BATCH))
        assert batch["epochs"].tolist() == [0] * GLOBAL_BATCH
        assert sorted(batch["ids"].tolist()) == sorted(set(batch["ids"].tolist()))
        assert info.step == 0
        # Same spec, other stream: the same bytes.
        assert batch["ids"].tobytes() == batches[0]["ids"][2]
        # A view of shared memory, not a copy.
        assert not batch["payload"].flags.owndata
        assert batch["payload"].base is not None


@pytest.mark.skipif(not HAVE_TORCH, reason="torch is not installed")
def test_numpy_gives_the_same_bytes_as_torch(server):
    torch_batches = read_batches(server, "t", "torch")
    numpy_batches = read_batches(server, "n", "numpy")
    for step, (t, n) in enumerate(zip(torch_batches, numpy_batches)):
        assert t.keys() == n.keys()
        for name in t:
            assert t[name][1:] == n[name][1:], f"step {step} {name}"
        # uint64 ids are int64 in torch, uint64 in numpy: the same bits.
        assert (t["ids"][0], n["ids"][0]) == ("int64", "uint64")


@pytest.mark.skipif(not HAVE_JAX, reason="jax is not installed")
def test_jax_gives_the_same_bytes_as_numpy(server, jax_x64):
    jax = jax_x64
    numpy_batches = read_batches(server, "n", "numpy")
    jax_batches = read_batches(server, "j", "jax")
    for step, (n, j) in enumerate(zip(numpy_batches, jax_batches)):
        assert n == j, f"step {step}"
    with open_loader(server, "j2", "jax") as loader:
        batch = next(loader)
        assert all(isinstance(a, jax.Array) for a in batch.values())


@pytest.mark.skipif(not HAVE_JAX, reason="jax is not installed")
def test_jax_without_x64_narrows_64_bit_tensors(server):
    import jax

    if jax.config.jax_enable_x64:
        pytest.skip("jax_enable_x64 is set in this process")
    numpy_batches = read_batches(server, "n", "numpy", steps=1)
    with open_loader(server, "j", "jax") as loader:
        batch = next(loader)
        # The synthetic workload's ids, epochs and positions are uint64.
        assert str(batch["ids"].dtype) == "uint32"
        assert np.asarray(batch["positions"]).tolist() == list(range(GLOBAL_BATCH))
        ids = np.frombuffer(numpy_batches[0]["ids"][2], np.uint64)
        assert np.asarray(batch["ids"]).tolist() == ids.tolist()
        assert np.asarray(batch["payload"]).tobytes() == numpy_batches[0]["payload"][2]
        # A narrowed array is a copy: keeping it does not hold the slot.
        kept = batch["ids"]
        del batch
        gc.collect()
        assert ring_released(loader) == 1
        assert np.asarray(kept).tolist() == ids.tolist()


def _keep(batch, format):
    """A part of one array of `batch` (JAX has no views: a slice is a copy,
    so there the whole uint8 payload, which JAX maps without a copy)."""
    return batch["payload"] if format == "jax" else batch["payload"][1:]


@pytest.mark.parametrize("format", FORMATS)
def test_kept_arrays_hold_their_slots_and_never_stall_the_stream(server,
                                                                 format):
    slots = 3
    with open_loader(server, f"held-{format}", format, slots=slots,
                     timeout=2) as loader:
        assert ring_released(loader) == 0
        # slots - 1 batches kept, through a view of a part of one array.
        kept = []
        for _ in range(slots - 1):
            batch = next(loader)
            kept.append(_keep(batch, format))
            del batch
        expected = [as_numpy(k).tobytes() for k in kept]
        gc.collect()
        assert ring_released(loader) == 0  # both slots are still held

        # The stream flows through the slot left: the kept views do not
        # stall it, and each batch dropped is given back at once.
        for step in range(slots - 1, slots - 1 + 20):
            b = next(loader)
            assert loader.last_batch_info.step == step
            del b
            gc.collect()
        assert ring_released(loader) == 20
        assert [as_numpy(k).tobytes() for k in kept] == expected

        # Keeping the last slot too leaves nothing to write into: the wait
        # fails within its timeout, naming the kept steps.
        last = next(loader)
        with pytest.raises(batchd.DeadlineExceededError,
                           match=r"steps 0, 1 and 22"):
            next(loader)
        del last, kept
        gc.collect()
        assert ring_released(loader) == 23
        next(loader)
        assert loader.last_batch_info.step == 23


def test_numpy_view_of_a_view_holds_the_slot(server):
    with open_loader(server, "chain", "numpy", slots=2) as loader:
        batch = next(loader)
        view = batch["payload"].reshape(-1)[64:128].view(np.uint32)
        del batch
        gc.collect()
        assert ring_released(loader) == 0
        del view
        gc.collect()
        assert ring_released(loader) == 1


@pytest.mark.parametrize("format", FORMATS)
def test_errors_are_the_same_types_in_every_format(server, format):
    with pytest.raises(batchd.InvalidArgumentError, match="divisible") as e:
        open_loader(server, f"bad-{format}", format, global_batch_size=30,
                    world_size=4, rank=0)
    assert isinstance(e.value, ValueError)
    assert e.value.code == "INVALID_ARGUMENT"

    with open_loader(server, f"full-{format}", format, slots=2,
                     timeout=0.3) as loader:
        held = [next(loader), next(loader)]
        with pytest.raises(batchd.DeadlineExceededError) as e:
            next(loader)
        assert isinstance(e.value, TimeoutError)
        del held

    with open_loader(server, f"eval-{format}", format, split="validation",
                     options={"examples": 40, "payload_bytes": 8}) as loader:
        assert len(list(loader)) == 2
        with pytest.raises(StopIteration):
            loader.next_batch()

    loader = open_loader(server, f"closed-{format}", format)
    loader.close()
    with pytest.raises(batchd.Error, match="closed"):
        next(loader)


@pytest.mark.parametrize("format", FORMATS)
def test_killed_server_is_the_same_error_in_every_format(tmp_path, format):
    server = Server(tmp_path)
    try:
        loader = open_loader(server, "killed", format, reconnect=0)
        next(loader)
        pid = server.proc.pid
        server.kill()
        with pytest.raises(batchd.ServerUnavailableError, match=rf"\b{pid}\b"):
            for _ in range(loader.info.slots + 1):
                next(loader)
    finally:
        server.stop()


def test_unknown_format_is_refused_before_the_stream_opens(server):
    with pytest.raises(batchd.InvalidArgumentError, match="'tensorflow'") as e:
        open_loader(server, "tf", "tensorflow")
    assert isinstance(e.value, ValueError)
    assert server.status()["streams"] == []


def test_default_format_is_numpy_without_torch(server):
    # A separate interpreter in which torch cannot be imported, as in a venv
    # with numpy alone.
    code = f"""
import importlib.abc, sys
class NoTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError("No module named 'torch'", name=name)
sys.meta_path.insert(0, NoTorch())
import batchd
loader = batchd.Loader("nt", {GLOBAL_BATCH}, server={server.address!r},
                       options={SYNTHETIC!r}, connect_timeout=10.0)
batch = next(loader)
print(loader.format, type(batch["ids"]).__module__, "torch" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["numpy", "numpy", "False"]


@pytest.mark.skipif(not HAVE_TORCH, reason="torch is not installed")
def test_default_format_is_torch_when_installed(server):
    with open_loader(server, "dt", None) as loader:
        assert loader.format == "torch"
        assert type(next(loader)["ids"]).__module__ == "torch"


@pytest.mark.skipif(HAVE_JAX, reason="jax is installed")
def test_missing_framework_is_an_import_error_naming_it(server):
    with pytest.raises(ImportError, match="jax"):
        open_loader(server, "nojax", "jax")


def project_version():
    with open(os.path.join(REPO, "CMakeLists.txt")) as f:
        return re.search(r"project\(batchd VERSION ([0-9.]+)", f.read()).group(1)


def test_versions_agree_with_the_project_version(server):
    version = project_version()
    assert batchd.__version__ == version
    daemon = subprocess.run([binary("batchd"), "--version"], check=True,
                            capture_output=True, text=True).stdout
    assert daemon.split()[:2] == ["batchd", version]
    assert f"protocol {batchd._batchd.PROTOCOL_VERSION}" in daemon
    batchctl = subprocess.run([binary("batchctl"), "--version"], check=True,
                              capture_output=True, text=True).stdout
    assert batchctl.split()[:2] == ["batchctl", version]
    assert server.status()["version"] == version  # GetStatus
    try:
        from importlib.metadata import PackageNotFoundError, version as dist
        assert dist("batchd") == version  # installed by pip
    except PackageNotFoundError:
        pass  # imported from the build tree (PYTHONPATH)


def test_daemon_of_another_protocol_is_refused_naming_both(tmp_path,
                                                           monkeypatch):
    ours = batchd._batchd.PROTOCOL_VERSION
    monkeypatch.setenv("BATCHD_TEST_PROTOCOL_VERSION", str(ours + 41))
    (tmp_path / "data").mkdir()
    daemon = Daemon(tmp_path / "data", tmp_path / "batchd.log", hooks=True)
    try:
        with pytest.raises(batchd.Error) as e:
            open_loader(daemon, "other", "numpy")
        message = str(e.value)
        assert e.value.code == "FAILED_PRECONDITION"
        assert f"speaks protocol {ours} " in message
        assert f"speaks protocol {ours + 41}" in message
        assert message.count(f"batchd {batchd.__version__}") == 2  # both releases
        assert daemon.status()["streams"] == []  # refused before it opened
    finally:
        daemon.stop()
