"""Helpers shared by the Python suites that are not fixtures: where the
tree's tools are, the generators of small WMT and ImageNet sets, each
workload's description of its test data (workloads/<name>/test_data.py),
the Python reference of WMT's tokenization, what /proc says of a process,
and running as other users of the node. Fixtures live in conftest.py, the
daemon in batchd_daemon.py; no test module imports another.
"""

import functools
import importlib.util
import os
import subprocess
import sys
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
WORKLOADS = os.path.join(REPO, "workloads")
WMT_TOOLS = os.path.join(WORKLOADS, "wmt", "tools")
IMAGENET_TOOL = os.path.join(WORKLOADS, "imagenet", "make_imagenet.py")
# AlgoPerf's WMT length limit: a pair is kept when both sides, EOS
# included, have at most this many tokens.
MAX_LENGTH = 256
GENERATOR_MODULES = ("numpy", "PIL", "skimage", "sentencepiece")


def _has_modules(python):
    probe = "import " + ", ".join(GENERATOR_MODULES)
    try:
        return subprocess.run([python, "-c", probe],
                              capture_output=True).returncode == 0
    except OSError:
        return False


# gRPC's own threads, by the names it gives them (15 characters at most):
# it starts them for calls as it sees fit, so a test that bounds the
# daemon's threads leaves them out.
GRPC_THREAD_NAMES = ("default-executo", "resolver-execut", "grpc_global_tim",
                     "event_engine", "timer_manager", "nexting_thread",
                     "grpcpp_sync_ser")


def thread_names(pid):
    """{name: count} of the threads of process pid."""
    names = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                name = f.read().strip()
        except OSError:
            continue  # it ended
        names[name] = names.get(name, 0) + 1
    return names


def daemon_threads(pid):
    """The daemon's own threads: all but gRPC's."""
    return sum(n for name, n in thread_names(pid).items()
               if not name.startswith(GRPC_THREAD_NAMES))


def wait_until(condition, seconds, what):
    """Polls condition() until it is true; fails the test naming `what`
    after `seconds`."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {seconds} s: {what}")
        time.sleep(0.02)


def algoperf_queue(server, workload, split, g, **kwargs):
    """batchd.algoperf's input_queue of `workload` on the set of its name in
    server's data root, as rank 0 of 1 unless `kwargs` (more of its
    arguments) say otherwise, with a timeout of 120 s."""
    import batchd.algoperf
    kwargs = {"world_size": 1, "rank": 0, **kwargs}
    return batchd.algoperf.input_queue(workload, split, g, data=workload,
                                       server=server.address, timeout=120,
                                       **kwargs)


def torchrun_or_skip():
    """The torchrun beside this interpreter; skips the calling module where
    torch is older than 2 or has no torchrun there (Debian's torch 1.13
    torchrun fails on Python 3.11)."""
    torch = pytest.importorskip("torch")
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    if (int(torch.__version__.split(".")[0]) < 2
            or not os.access(torchrun, os.X_OK)):
        pytest.skip(f"needs torch >= 2 and its torchrun (torch "
                    f"{torch.__version__}, {torchrun})",
                    allow_module_level=True)
    return torchrun


def step_rows(loader, steps, *keys):
    """[(step, batch[key] as a list for each of `keys`)] of the next `steps`
    batches of a numpy Loader."""
    rows = []
    for _ in range(steps):
        batch, info = loader.next_batch()
        rows.append((info.step, *(batch[key].tolist() for key in keys)))
        del batch
    return rows


@functools.lru_cache(maxsize=None)
def workload_test_data():
    """{workload: its workloads/<name>/test_data.py as a module}, by name:
    what conftest.py makes a fixture of (FIXTURE, RETURNS "folder" or
    "root", PYTHON "this", "generator" or "reference", make(out, run)),
    and what other tests take from it (PLAN_OPTIONS, giant)."""
    found = {}
    for name in sorted(os.listdir(WORKLOADS)):
        path = os.path.join(WORKLOADS, name, "test_data.py")
        if not os.path.isfile(path):
            continue
        spec = importlib.util.spec_from_file_location(
            f"batchd_test_data_{name}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        found[name] = module
    return found


@functools.lru_cache(maxsize=None)
def reference_python():
    """The Python of scripts/reference-venv.sh: AlgoPerf's own packages
    (TensorFlow, datasets/pyarrow, pyfarmhash, h5py, jraph), which compute
    the reference batches the tests compare batchd's with, in their own
    process. Made on first use (about a minute from PyPI), reused after."""
    out = subprocess.run([os.path.join(REPO, "scripts", "reference-venv.sh")],
                         capture_output=True, text=True)
    if out.returncode != 0:
        pytest.fail("scripts/reference-venv.sh failed:\n" + out.stderr[-4000:])
    return os.path.join(out.stdout.strip(), "bin", "python")


def run_reference(script, *args, timeout=600):
    """Runs tests/python/reference/<script> with reference_python() and
    the given arguments; returns its stdout. A failure fails the test with
    the script's stderr."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                        "reference", script)
    out = subprocess.run([reference_python(), path, *map(str, args)],
                         capture_output=True, text=True, timeout=timeout,
                         env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3",
                                  CUDA_VISIBLE_DEVICES=""))
    if out.returncode != 0:
        pytest.fail(f"reference/{script} failed:\n" + out.stderr[-4000:])
    return out.stdout


def status_bytes(pid, field):
    """A size of /proc/<pid>/status ("VmHWM", "VmRSS"), in bytes; 0 where
    the process has none."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def cpu_seconds(pid):
    """User and system CPU time process pid has used, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# ------------------------------------------------------------ other users
#
# The suites of what one user can do to another run as root and make their
# clients, daemons and files those of uids of no user on the test machine:
# setuid and setgid take any number, and nothing else owns files under
# them.

needs_root = pytest.mark.skipif(os.geteuid() != 0,
                                reason="needs root to become other users")


def as_user(uid, groups=()):
    """subprocess's keyword arguments for a child of `uid` (None: this
    process's), with uid's own gid and of the supplementary groups only
    `groups`, and this environment with its PYTHONPATH (batchd's module)."""
    env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    if uid is None:
        return dict(env=env)
    return dict(user=uid, group=uid, extra_groups=list(groups), env=env)


def become(uid):
    """Makes this (forked) process uid for good: its own gid, no
    supplementary groups."""
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)


def chown_tree(path, uid, gid=None, dir_mode=None, file_mode=None):
    """Gives path and everything under it to uid and gid (default: uid's
    own); dir_mode and file_mode, where given, become every directory's
    and every file's mode."""
    gid = uid if gid is None else gid
    for top, _, files in os.walk(path):
        os.chown(top, uid, gid)
        if dir_mode is not None:
            os.chmod(top, dir_mode)
        for name in files:
            file = os.path.join(top, name)
            os.chown(file, uid, gid)
            if file_mode is not None:
                os.chmod(file, file_mode)


@functools.lru_cache(maxsize=None)
def _runs_as(uid):
    try:
        return subprocess.run([sys.executable, "-c", "import batchd"],
                              capture_output=True, timeout=60,
                              **as_user(uid)).returncode == 0
    except OSError:
        return False


def require_python_as(uid):
    """Skips the test where uid cannot run this interpreter with batchd
    (a venv whose Python lives under /root, which other uids cannot
    enter); Debian's Python, which the main suite runs under, can."""
    if uid is not None and not _runs_as(uid):
        pytest.skip(f"uid {uid} cannot run {sys.executable} with batchd")


def python_as(uid, script, *args, groups=(), **popen):
    """The Popen of this interpreter running the Python source `script`
    with `args` as uid (as_user; None: this process's uid), its stdin,
    stdout and stderr text pipes, unless `popen` (more Popen arguments: a
    primary group other than uid's, ...) says otherwise. The test skips
    where uid cannot run it (require_python_as)."""
    require_python_as(uid)
    popen = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE,
             "stderr": subprocess.PIPE, **as_user(uid, groups), **popen}
    return subprocess.Popen([sys.executable, "-c", script, *map(str, args)],
                            text=True, **popen)


def last_line(proc, timeout):
    """The last line proc printed, once it has ended; the test fails with
    its stderr where it printed none. The timeout only guards the suite."""
    out, err = proc.communicate(timeout=timeout)
    lines = out.strip().splitlines()
    assert lines, err
    return lines[-1]


@functools.lru_cache(maxsize=None)
def generator_python():
    """The interpreter that runs the data generators: this one when it has
    what they import, else Debian's (the generators are scripts, so the
    suite under test need not carry Pillow, scikit-image and SentencePiece
    to be tested against their data). None when neither has them."""
    for python in (sys.executable, "/usr/bin/python3"):
        if _has_modules(python):
            return python
    return None


def run_generator(*args):
    """Runs a generator script (args: its path and flags) under
    generator_python(); the test skips, saying why, where none can."""
    python = generator_python()
    if python is None:
        pytest.skip("no interpreter here has the data generators' "
                    + ", ".join(GENERATOR_MODULES))
    result = subprocess.run([python, *map(str, args)], capture_output=True,
                            text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, args))} failed "
                           f"(exit {result.returncode}):\n{result.stderr}")


def generate_wmt(out, *, train, validation, test, shards, seed):
    """Writes a WMT-like set of sentence pairs (TFDS shards and aligned
    text files) to out with workloads/wmt/tools/generate_wmt.py."""
    run_generator(os.path.join(WMT_TOOLS, "generate_wmt.py"), "--out", out,
                  "--train", train, "--validation", validation, "--test", test,
                  "--shards", shards, "--seed", seed)
    return out


def train_sentencepiece(data, *, vocab_size, threads=1):
    """Trains data/wmt_sentencepiece_model on data's train pairs."""
    run_generator(os.path.join(WMT_TOOLS, "train_sentencepiece.py"),
                  "--data", data, "--vocab-size", vocab_size,
                  "--threads", threads)


def make_wmt(out, *, train, validation, test, shards, seed, vocab_size,
             threads=1):
    """generate_wmt, then train_sentencepiece on what it wrote."""
    generate_wmt(out, train=train, validation=validation, test=test,
                 shards=shards, seed=seed)
    train_sentencepiece(out, vocab_size=vocab_size, threads=threads)
    return out


def make_imagenet(out, *args):
    """Writes a small ImageNet-like set to out with
    workloads/imagenet/make_imagenet.py (args: its flags)."""
    run_generator(IMAGENET_TOOL, out, *args)
    return out


def python_tokens(data, split):
    """AlgoPerf's tokenization and filter, with python3-sentencepiece:
    ([(inputs, targets)] of the kept pairs, the number dropped)."""
    import sentencepiece as spm
    if WMT_TOOLS not in sys.path:
        sys.path.insert(0, WMT_TOOLS)
    import wmt_data
    sp = spm.SentencePieceProcessor(
        model_file=str(data / "wmt_sentencepiece_model"))
    kept, dropped = [], 0
    for de, en in wmt_data.read_pairs(str(data), split):
        inputs = sp.encode(de.decode("utf-8"), add_eos=True)
        targets = sp.encode(en.decode("utf-8"), add_eos=True)
        if max(len(inputs), len(targets)) > MAX_LENGTH:
            dropped += 1
        else:
            kept.append((inputs, targets))
    return kept, dropped


def wmt_dump_path():
    """The wmt_dump tool of the build under test: $WMT_DUMP, else beside
    $BATCHD_BIN's build."""
    path = os.environ.get("WMT_DUMP")
    if not path and os.environ.get("BATCHD_BIN"):
        build = os.path.dirname(os.path.dirname(os.environ["BATCHD_BIN"]))
        path = os.path.join(build, "workloads", "wmt", "wmt_dump")
    if not path or not os.path.exists(path):
        pytest.fail("set WMT_DUMP to <build>/workloads/wmt/wmt_dump "
                    "(or BATCHD_BIN to <build>/server/batchd)")
    return path
