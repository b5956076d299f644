"""batchd: batches from a batchd server as torch, numpy or JAX arrays,
without copying.

One batchd server per node writes every rank's slice of every global batch
into a shared-memory ring; a Loader maps this rank's ring and yields each
batch as a dict of arrays ({"inputs": ..., "targets": ...}), as AlgoPerf's
input queues do:

    loader = batchd.Loader("job42-train", global_batch_size=256,
                           workload="imagenet", data="imagenet/train")
    for epoch in range(90):           # rank, world from RANK, WORLD_SIZE
        for batch in loader:          # one epoch: len(loader) steps
            x = batchd.normalize(batch["inputs"], device="cuda")
            info = loader.last_batch_info  # step, epoch, position, ...

A for loop yields one epoch, as torch's DataLoader does, and the next loop
the next epoch, in its own shuffled order; next(loader) runs on across
epochs, for trainers that count steps.

format= picks the arrays: "torch" (torch tensors, through DLPack; the
default when torch is installed), "numpy" (numpy arrays through the array
interface; the default otherwise) or "jax" (JAX arrays through DLPack). torch
and JAX are optional; `import batchd` needs neither, nor numpy.

The arrays are views of the ring slot: the slot goes back to the server when
the last array of the batch dies, so an array kept past its iteration stays
valid, and the server fills the other slots meanwhile: keeping fewer batches
than the ring has slots never stalls the stream (keeping them all makes
next() raise, naming the kept steps). Writing into them in place changes shared memory (the
server overwrites it once the slot is released). torch tensors and numpy
arrays are always views. JAX arrays are views on the CPU where XLA can take
the buffer (uint8, int32 and float32, whose tensors the ring aligns to 256
bytes); JAX copies 64-bit tensors unless jax_enable_x64 is set, since it
narrows them to 32 bits by default, and a copy does not hold the slot.

dtypes: uint8, int32, int64 and float32 map to the dtype of the same name;
uint64 tensors (e.g. the synthetic workload's ids) are uint64 in numpy and
JAX (uint32 in JAX without x64) and int64 holding the same bits in torch,
which has no uint64: values below 2**63 read the same, and an all-ones value
(the id of an eval padding row) reads -1.
"""

import importlib.util
import json
from typing import NamedTuple, Tuple

from ._batchd import (
    DeadlineExceededError,
    Error,
    InvalidArgumentError,
    ServerUnavailableError,
    StreamClosedError,
)
from . import _batchd

# The release, from the project's one version line (CMake's project VERSION),
# compiled into the extension: it is the same as `batchd --version`'s.
__version__ = _batchd.__version__

__all__ = [
    "FORMATS",
    "BatchInfo",
    "Cursor",
    "DeadlineExceededError",
    "Error",
    "InvalidArgumentError",
    "Loader",
    "ServerUnavailableError",
    "StreamClosedError",
    "StreamInfo",
    "normalize",
]

FORMATS = ("torch", "numpy", "jax")

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


class StreamInfo(NamedTuple):
    """This rank's view of the stream, as the server opened it."""

    segment: str  # POSIX shared-memory name of this rank's ring
    server_pid: int
    rank: int
    world_size: int
    examples_per_epoch: int
    # 0 where epochs differ in length (packed rows, as wmt's train split;
    # each batch says its epoch's, BatchInfo.epoch_steps)
    steps_per_epoch: int
    start_step: int  # the step this rank's ring began at
    slots: int  # ring slots: keep fewer batches than this alive at once
    slot_bytes: int
    cursor_resume: bool  # batches carry packing cursors (wmt train)


class Cursor(NamedTuple):
    """Where a batch's rows sit in its epoch (row-packing streams, wmt
    train): this rank's first row as (epoch, window, row in the window), and
    the global step of the batch. Any rank's cursor names the batch:
    Loader(start_step=cursor.step + 1, start_cursor=cursor) resumes right
    after it without replaying earlier epochs (state_dict() does this for
    you). For other streams it is (epoch, step in the epoch, 0, step)."""

    epoch: int
    window: int
    row: int
    step: int


class BatchInfo(NamedTuple):
    """Metadata of one batch (this rank's slice of one global batch)."""

    step: int  # global batch number, counted over epochs
    epoch: int
    position: int  # position in its epoch of this rank's first example
    valid_count: int  # real rows; the rest is padding (last eval batch)
    cursor: Cursor  # where the batch sits (see Cursor)
    # Global steps in the batch's epoch; 0 where the daemon did not know
    # them yet (an epoch of packed rows it was still counting).
    epoch_steps: int = 0
    last_in_epoch: bool = False  # known to be its epoch's last batch


def _default_format():
    # find_spec looks for torch without importing it (seconds, and memory).
    try:
        have_torch = importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):  # a blocked or half-imported torch
        have_torch = False
    return "torch" if have_torch else "numpy"


def _converter(format):
    """(function from SlotView to array, whether uint64 goes out as int64),
    importing the framework of `format` now, so that a missing one is an
    ImportError before the stream opens."""
    if format == "torch":
        try:
            from torch.utils.dlpack import from_dlpack
        except ImportError as e:
            raise ImportError(
                'batchd format="torch" needs torch: pip install torch, or '
                'pass format="numpy"') from e
        return from_dlpack, True
    if format == "numpy":
        try:
            import numpy
        except ImportError as e:
            raise ImportError(
                'batchd format="numpy" needs numpy: pip install numpy') from e
        # The array interface (any numpy): the array's .base is the view,
        # which holds the slot.
        return numpy.asarray, False
    if format == "jax":
        try:
            import jax.dlpack
        except ImportError as e:
            raise ImportError(
                'batchd format="jax" needs jax: pip install "jax[cpu]" (or '
                "a CUDA build)") from e

        def from_dlpack(view):
            try:
                return jax.dlpack.from_dlpack(view)
            except TypeError:  # a JAX that takes only capsules
                return jax.dlpack.from_dlpack(view.__dlpack__())

        return from_dlpack, False
    error = InvalidArgumentError(
        f"format must be one of {', '.join(map(repr, FORMATS))}, not {format!r}")
    error.code = "INVALID_ARGUMENT"
    raise error


class Loader(_batchd.Loader):
    """One rank's stream of batches from a batchd server.

    Loader(stream, global_batch_size, *, format=None, workload="synthetic",
           data="", split="train", world_size=None, rank=None, seed=0,
           start_step=0, start_cursor=None, state=None, slots=0,
           options=None, server=None, server_uid=None, timeout=None,
           stall_timeout=300.0, reconnect=60.0, server_stale_seconds=3.0,
           connect_timeout=30.0, owner=None)

    Opens (or joins) `stream` on the server; every rank of a job passes the
    same spec (workload, data, split, global_batch_size, world_size, seed,
    start_step, slots, options), and the server refuses a spec that differs,
    naming the field.

    stream: name of the stream, [A-Za-z0-9_-]{1,64}: unique per owner (the
        uid that opened it), so two users' streams of one name are two
        streams.
    format: "torch", "numpy" or "jax", what batches are made of; default
        "torch" when torch is installed, else "numpy". See the module's
        documentation for when JAX copies.
    global_batch_size: examples per global batch, divisible by world_size.
    workload, data, split: what to read; `data` is relative to the server's
        --data-root. "train" runs epoch after epoch, each in its own
        shuffled order; eval splits are one pass in order (one epoch),
        after which iteration stops.
    world_size, rank: default from the environment as torchrun sets it:
        WORLD_SIZE (else 1) and RANK (else LOCAL_RANK, else 0).
    seed, start_step: the global order and where to start (resume).
    start_cursor: a batch's Cursor (last_batch_info.cursor, any rank's), for
        row-packing streams (wmt train): the stream finds that batch without
        replaying the token lengths of earlier epochs and begins at
        start_step (>= cursor.step). A plain (epoch, window, row) is taken
        as rank 0's cursor of the batch at start_step.
    state: a state_dict() to resume from (instead of start_step and
        start_cursor); the spec arguments must match it (stream name and
        world size may differ).
    slots: ring slots per rank; 0 takes the server's default (4). Keep
        fewer batches than this alive at once.
    options: workload options; values are passed as str(value).
    server: "unix:///path/sock" or "tcp://host:port"; default $BATCHD_SERVER,
        else unix:///run/batchd/batchd.sock.
    server_uid: the uid batchd runs as; checked against the process serving
        the socket (SO_PEERCRED) and the owner of the ring. Default
        $BATCHD_SERVER_UID, else root, this process's uid, or the owner of
        the socket's directory when only that owner may write it.
    timeout: longest wait in seconds for one batch while the server is alive
        (DeadlineExceededError after it); None: no such bound.
    stall_timeout: next() raises DeadlineExceededError when no batch came
        for this long and the server reported no progress meanwhile (a
        stream being indexed is waited for while indexing goes on); None
        waits for ever.
    reconnect: when the daemon stops or restarts, next() keeps reopening the
        stream on the same address for this many seconds and resumes at this
        rank's next step, with exactly the batches it would have had;
        0 or None raises ServerUnavailableError at once.
    server_stale_seconds: a server heartbeat older than this means stopped.
    connect_timeout: how long opening the stream is tried: a daemon that is
        not there yet, is exiting, or stops meanwhile (a restart) is tried
        again until then. A stream the daemon is still preparing (a first
        open that lists, indexes or counts its data) is waited for beyond
        it, while the preparation progresses (within stall_timeout); what
        is being prepared is written to stderr.
    owner: None, your own stream named `stream` (opened when missing); a
        uid, that uid's existing stream, which the server lets only its
        administrators join (others get batchd.Error, code
        "PERMISSION_DENIED").

    Batches are dicts {name: array of `format`}; the metadata of the batch
    last returned is `last_batch_info` (a BatchInfo), and next_batch()
    returns both at once. Epochs as torch's DataLoader has them: a for
    loop (iter(loader)) yields one epoch, the rest of the epoch in
    progress if one is (after a resume, or a loop left early), else the
    next; len(loader) is an epoch's steps (see __len__). next(loader) and
    next_batch() run on across epochs, for trainers that count steps (a
    train stream never ends). state_dict() / load_state_dict() checkpoint the
    position as torchdata's StatefulDataLoader does. Errors are subclasses
    of batchd.Error (itself a RuntimeError): ServerUnavailableError (also a
    ConnectionError), DeadlineExceededError (a TimeoutError; also when
    every slot holds a batch that is kept alive), InvalidArgumentError (a
    ValueError), StreamClosedError. next() waits without holding the GIL and
    stops for Ctrl-C. One thread at a time should iterate a Loader. A
    forked child must not use its parent's Loader (next() raises there, and
    the child leaves the parent's stream alone); it may open its own.
    """

    last_batch_info = None

    def __init__(self, stream, global_batch_size, *, format=None,
                 workload="synthetic", data="", split="train",
                 world_size=None, rank=None, seed=0, start_step=0,
                 start_cursor=None, state=None, slots=0, options=None,
                 server=None, server_uid=None, timeout=None,
                 stall_timeout=300.0, reconnect=60.0,
                 server_stale_seconds=3.0, connect_timeout=30.0, owner=None):
        format = _default_format() if format is None else format
        self._convert, self._uint64_as_int64 = _converter(format)
        self.format = format
        super().__init__(
            stream=stream, global_batch_size=global_batch_size,
            workload=workload, data=data, split=split, world_size=world_size,
            rank=rank, seed=seed, start_step=start_step,
            start_cursor=start_cursor,
            state=None if state is None else _state_json(state),
            slots=slots, options=options, server=server,
            server_uid=server_uid, timeout=timeout,
            stall_timeout=stall_timeout, reconnect=reconnect,
            server_stale_seconds=server_stale_seconds,
            connect_timeout=connect_timeout, owner=owner)

    def __iter__(self):
        """One epoch, as torch's DataLoader iterates: the rest of the epoch
        in progress (after a resume or a loop left early, its remaining
        batches), else the next epoch, which the daemon shuffles anew (train)
        or the evaluation pass. An epoch ends at its last batch, which the
        daemon marks (BatchInfo.last_in_epoch); where it could not (an epoch
        of packed rows still being counted when the batch was made), the
        loop ends on seeing the next epoch's first batch, which the next
        loop (or next()) then begins with."""
        return self._one_epoch()

    def _one_epoch(self):
        while True:
            try:
                taken = [self._take(in_epoch=True)]
            except StopIteration:
                return
            last = taken[0][1].last_in_epoch
            # Handed over, not kept: the batch's slot goes back as soon as
            # the caller drops it, while this generator waits.
            yield taken.pop()[0]
            if last:
                return

    def __bool__(self):
        """A Loader is true while it exists: `if loader:` asks whether there
        is one, not whether its epoch has steps (without this, Python would
        ask __len__, which may not know yet)."""
        return True

    def __len__(self):
        """Global steps in one epoch of the stream's split at its global
        batch, as the daemon counts them: train, examples // batch (the
        remainder is dropped); an evaluation split, its one pass, its last
        batch padded (ceil). A stream of packed rows (the train split of a
        workload that packs examples into rows, as wmt does) has epochs of
        different lengths, which the daemon counts as the stream reaches
        them: len is then the length of the epoch in progress, and
        TypeError, saying why, where the daemon has not said it (before the
        epoch's first batch). A loop after a resume mid-epoch yields fewer:
        the rest of the epoch."""
        return self._epoch_steps()

    def __next__(self):
        return self.next_batch()[0]

    def next_batch(self):
        """Returns (dict of arrays, BatchInfo) of the next batch, across
        epochs (a train stream never ends).

        Raises StopIteration after the last batch of an eval stream.
        """
        return self._take(in_epoch=False)

    def _take(self, in_epoch):
        views, meta = self._next(self._uint64_as_int64, in_epoch)
        convert = self._convert
        batch = {name: convert(view) for name, view in views}
        step, epoch, position, valid_count, cursor, epoch_steps, last = meta
        self.last_batch_info = BatchInfo(step, epoch, position, valid_count,
                                         Cursor(*cursor), epoch_steps, last)
        return batch, self.last_batch_info

    def state_dict(self):
        """Where this rank resumes: a small JSON-serialisable dict (the spec
        fields that decide the batches, the next step, and for packed rows
        the cursor of the last batch). Every rank's state resumes the whole
        job, at any world size that divides the global batch. Taken
        mid-epoch, the next loop yields the rest of that epoch; taken after
        an epoch's last batch, the next loop yields the next epoch:

            torch.save({"model": ..., "loader": loader.state_dict()}, path)
            ...
            loader = batchd.Loader(stream, G, ..., state=ckpt["loader"])
        """
        return json.loads(self._state_json())

    def load_state_dict(self, state_dict):
        """Moves this rank to `state_dict` (from state_dict()) before its
        first batch; every rank does the same. Raises InvalidArgumentError
        naming the field when the state was saved for another spec."""
        self._load_state_json(_state_json(state_dict))

    @property
    def reconnects(self):
        """(times the stream was reopened on a restarted daemon, seconds
        next() spent on those reopenings)."""
        return self._reconnects()

    @property
    def info(self):
        """This rank's StreamInfo (segment, server pid, rank, world size, ...)."""
        return StreamInfo(**self._info())

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()
        return False


def _state_json(state):
    if not isinstance(state, dict):
        error = InvalidArgumentError(
            f"a loader state is the dict state_dict() returned, not "
            f"{type(state).__name__}")
        error.code = "INVALID_ARGUMENT"
        raise error
    return json.dumps(state)


def normalize(
    inputs,
    mean=IMAGENET_MEAN,
    std=IMAGENET_STD,
    layout="nhwc",
    device=None,
):
    """Turns uint8 images into float32 (x - 255·mean) / (255·std).

    inputs: a uint8 tensor, [B, H, W, C] or [H, W, C] for layout "nhwc",
        [B, C, H, W] or [C, H, W] for "nchw"; C must equal len(mean).
    device: where to compute; default the tensor's own. The uint8 tensor is
        copied there first: a quarter of the bytes of its float32 form.

    The result keeps `layout`. For a torch model that wants NCHW, an NHWC
    result's .permute(0, 3, 1, 2) is an NCHW view in channels_last memory
    format, which torch's convolutions take as is.
    """
    import torch

    if not isinstance(inputs, torch.Tensor) or inputs.dtype != torch.uint8:
        raise TypeError(f"normalize takes a uint8 tensor, got {_describe(inputs)}")
    if layout not in ("nhwc", "nchw"):
        raise ValueError(f'layout must be "nhwc" or "nchw", not {layout!r}')
    if inputs.dim() not in (3, 4):
        raise ValueError(
            f"normalize takes images of 3 or 4 dimensions, got shape "
            f"{tuple(inputs.shape)}"
        )
    if len(mean) != len(std):
        raise ValueError(f"mean has {len(mean)} values but std has {len(std)}")
    channel_dim = inputs.dim() - 1 if layout == "nhwc" else inputs.dim() - 3
    channels = inputs.shape[channel_dim]
    if channels != len(mean):
        raise ValueError(
            f"{layout} images of shape {tuple(inputs.shape)} have {channels} "
            f"channels but mean has {len(mean)} values"
        )
    device = inputs.device if device is None else torch.device(device)
    # A blocking copy: the source may be a ring slot that is released as soon
    # as the caller drops it, and an asynchronous copy could still read it.
    x = inputs.to(device)
    shape = [1] * x.dim()
    shape[channel_dim] = channels
    mean = torch.tensor(mean, dtype=torch.float32, device=device).mul_(255)
    std = torch.tensor(std, dtype=torch.float32, device=device).mul_(255)
    return x.float().sub_(mean.view(shape)).div_(std.view(shape))


def _describe(value):
    dtype = getattr(value, "dtype", None)
    return f"{type(value).__name__} of dtype {dtype}" if dtype else type(value).__name__
