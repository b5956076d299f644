"""AlgoPerf drop-in: the input queues of AlgoPerf's PyTorch workloads,
served by one batchd per node instead of one pipeline per rank (or one on
rank 0 whose batches are broadcast to the others).

In a workload's `_build_input_queue`, return

    batchd.algoperf.input_queue("imagenet", split, global_batch_size,
                                data="imagenet", seed=int(data_rng[0]),
                                num_batches=num_batches,
                                repeat_final_dataset=repeat_final_dataset)

and each rank gets its slice of every global batch, as AlgoPerf's PyTorch
workloads (algoperf/workloads/<name>/*_pytorch/workload.py,
`_build_input_queue`) hand them to the runner. `WORKLOADS` maps each name
input_queue takes to its module (each module of this package names the
daemon's workload it serves, WORKLOAD), whose docstring says what that
queue yields, when it repeats, which of AlgoPerf's workloads use it, and
where it deliberately differs from AlgoPerf; the README's AlgoPerf table
lists them.

Splits: "train", "eval_train", "validation" (or "val"), "test", where the
workload has them.

- A pass ends at the end of the split or after ``num_batches`` batches;
  an evaluation queue then starts the same pass again (the same batches,
  in the same order) where AlgoPerf's repeats (it caches each eval
  iterator in `_eval_iters` and keeps drawing from it across evaluations),
  and raises StopIteration otherwise. Train runs on until num_batches, if
  given.
- eval_train is AlgoPerf's, not the train stream: the evaluation transform
  over the examples AlgoPerf evaluates.

Ranks: rank r gets the r-th contiguous slice of every global batch.
B = global_batch_size / world size; tensors are on ``device`` (default
cuda:LOCAL_RANK when CUDA is there, else the CPU; a workload whose AlgoPerf
queue stays on the host says so). No tensor handed out is a view of the
ring: on the CPU every tensor is a copy, so a runner may keep any number of
batches; on CUDA the ring is registered as pinned memory once, the
host-to-device copy is asynchronous straight from shared memory and the
slot is held only until its copy has finished.
"""

import collections
import importlib
import os
import pkgutil

from .. import Loader, _batchd

_STATE_FORMAT = "batchd.algoperf_queue"
_SPLITS = {"train": "train", "eval_train": "eval_train",
           "validation": "validation", "val": "validation", "test": "test"}
_opened = collections.Counter()

# The names input_queue takes, each with its module: WORKLOAD (the daemon's
# workload), NUM_EVAL_TRAIN_EXAMPLES (AlgoPerf's, or None) and
# convert(host, split, move, torch) (the batch AlgoPerf's queue yields, from
# the ring's tensors; move(t, dtype) puts a ring tensor on the queue's
# device); and optionally DEVICE, options(split, opts) (the stream's option
# defaults; without it, none), repeats(split, num_batches,
# repeat_final_dataset) (whether a pass starts again at its end; without
# it, _repeats: AlgoPerf's usual rule) and rows(global_batch_size, opts,
# world_size, saved_options) (the stream's global batch, where its items
# are rows of several examples; it may set option defaults from the world
# size, or from `saved_options`, the options of the state the queue resumes
# from, else None).
def _drop_in_modules():
    """{WORKLOAD: module} of this package's modules, by workload name."""
    found = {}
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f".{info.name}", __name__)
        if hasattr(module, "WORKLOAD"):
            found[module.WORKLOAD] = module
    return dict(sorted(found.items()))


WORKLOADS = _drop_in_modules()


def _repeats(split, num_batches, repeat_final_dataset):
    """AlgoPerf's usual rule, for the modules without repeats(): an
    evaluation queue repeats as ``take(num_batches).repeat()`` when
    repeat_final_dataset is set; train never ends a pass."""
    return split != "train" and repeat_final_dataset


def _default_device(torch):
    if torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return torch.device("cpu")


def _register_pinned(loader):
    """Registers the ring's mapping as pinned memory, through the C++
    client's Loader::RegisterPinned (the libtorch adapter's too); whether
    it worked (not where there is no CUDA runtime, driver or device: the
    copies then stay synchronous)."""
    return loader._register_pinned()


def _unregister_pinned(loader):
    """Undoes _register_pinned before the mapping goes: a later mapping at
    the same address could not be registered otherwise. A failure is
    ignored: registration is only a speed-up."""
    loader._unregister_pinned()


class InputQueue:
    """An iterator of AlgoPerf-shaped batches for one rank; see the module.

    num_batches: batches per pass (AlgoPerf's num_batches); None: the whole
        split.
    repeat_final_dataset: start the pass again at its end, as AlgoPerf's
        ``ds.repeat()``; some evaluation queues repeat without it, as
        AlgoPerf's do (the workload's module says which).
    num_eval_train_examples: size of eval_train; default AlgoPerf's.
    state: a state_dict() of a queue of the same arguments: the queue
        resumes exactly where that one was (see state_dict).
    """

    def __init__(self, workload, split, global_batch_size, *, data="",
                 seed=0, start_step=0, world_size=None, rank=None,
                 device=None, server=None, stream=None, num_batches=None,
                 repeat_final_dataset=False, num_eval_train_examples=None,
                 options=None, timeout=None, state=None):
        import torch
        self._torch = torch
        if workload not in WORKLOADS:
            raise ValueError(f"workload {workload!r}: one of "
                             f"{', '.join(sorted(WORKLOADS))}")
        self._adapter = adapter = WORKLOADS[workload]
        if split not in _SPLITS:
            raise ValueError(f"split {split!r}: one of {sorted(_SPLITS)}")
        self.workload = workload
        self.split = _SPLITS[split]
        self.train = split == "train"
        if device is None:
            # DEVICE: where AlgoPerf's queue leaves the tensors, if not on
            # the rank's GPU (its model_fn moves them).
            device = getattr(adapter, "DEVICE", None) or _default_device(torch)
        self.device = torch.device(device)
        opts = dict(options or {})
        if hasattr(adapter, "options"):
            adapter.options(self.split, opts)
        eval_train_examples = (num_eval_train_examples or
                               adapter.NUM_EVAL_TRAIN_EXAMPLES)
        if self.split == "eval_train" and eval_train_examples:
            opts.setdefault("eval_train_examples", eval_train_examples)
        if stream is None:
            # Every rank opens its queues in the same order, so a counter
            # gives all ranks the same name for the same queue.
            key = (workload, split, seed)
            stream = f"algoperf-{workload}-{split}-{seed}-{_opened[key]}"
            _opened[key] += 1
        if hasattr(adapter, "rows"):
            saved = None
            if state is not None:
                saved = self._take_state(state)["options"]
            if world_size is None:
                world_size = _batchd._default_world_size()
            global_batch_size = adapter.rows(global_batch_size, opts,
                                             world_size, saved)
        self._open_args = dict(
            stream=stream, global_batch_size=global_batch_size,
            workload=adapter.WORKLOAD, data=data, split=self.split,
            world_size=world_size, rank=rank, seed=seed,
            start_step=start_step, server=server, options=opts,
            timeout=timeout)
        self.num_batches = num_batches
        repeats = getattr(adapter, "repeats", _repeats)
        self.repeat = repeats(self.split, num_batches, repeat_final_dataset)
        self.passes = 0  # completed passes of a repeating queue
        self._served = 0  # batches of the current pass
        # Host batches whose asynchronous copies may still be reading them.
        self._in_flight = collections.deque()
        loader_state = None
        if state is not None:
            loader_state = self._take_state(state)
        self._open(loader_state)

    def _take_state(self, state):
        if not isinstance(state, dict) or state.get("format") != _STATE_FORMAT:
            raise ValueError("not a batchd.algoperf queue state (a dict from "
                             "InputQueue.state_dict())")
        if state.get("version") != 1:
            raise ValueError(f"batchd.algoperf queue state of version "
                             f"{state.get('version')}; this reads version 1")
        self.passes = int(state["passes"])
        self._served = int(state["served"])
        return state["loader"]

    def state_dict(self):
        """Where this rank's queue resumes: a small JSON-serialisable dict,
        the same on every rank (the Loader's state_dict() and the pass this
        queue is in). Save it with the model; pass it back as
        ``input_queue(..., state=sd)`` (or load_state_dict before the first
        batch) to get exactly the batches an uninterrupted run would have,
        at any world size that divides the global batch."""
        return {"format": _STATE_FORMAT, "version": 1,
                "loader": self.loader.state_dict(), "passes": self.passes,
                "served": self._served}

    def load_state_dict(self, state):
        """Moves the queue to `state` (from state_dict()) before its first
        batch."""
        loader_state = self._take_state(state)
        self.loader.load_state_dict(loader_state)

    def _open(self, state=None):
        args = self._open_args
        if state is not None:
            args = dict(args, start_step=0, state=state)
        self.loader = Loader(**args)
        self._pinned = (self.device.type == "cuda" and
                        _register_pinned(self.loader))

    def _close_loader(self):
        # Every copy from the ring has finished, and nothing handed out
        # views it: the registration can go, then the mapping.
        self._retire_copies(keep=0)
        if self._pinned:
            _unregister_pinned(self.loader)
            self._pinned = False
        self.loader.close()

    def _restart(self):
        """Starts the pass again. The rank re-attaches to its stream at the
        first step: the server keeps the stream (and its index) and gives it
        a fresh ring, so every pass serves the same batches."""
        self._close_loader()
        self._open()
        self.passes += 1
        self._served = 0

    def __iter__(self):
        return self

    def _retire_copies(self, keep):
        while len(self._in_flight) > keep:
            event, _host = self._in_flight.popleft()
            event.synchronize()  # the slot goes back once its copy is done

    def _next_host(self):
        if self.num_batches is not None and self._served >= self.num_batches:
            if not self.repeat:
                raise StopIteration
            self._restart()
        try:
            return self.loader.next_batch()
        except StopIteration:
            if not self.repeat or self._served == 0:
                raise
        self._restart()
        return self.loader.next_batch()

    def __next__(self):
        torch = self._torch
        host, info = self._next_host()
        non_blocking = self._pinned
        # On the CPU, .to() returns the ring's own tensor when nothing
        # changes; copy=True makes every tensor handed out own its memory, so
        # the slot goes back as soon as `host` dies.
        copy = self.device.type == "cpu"

        def move(t, dtype, copy=copy):
            return t.to(self.device, dtype, non_blocking=non_blocking,
                        copy=copy)

        out = self._adapter.convert(host, self.split, move, torch)
        if non_blocking:
            event = torch.cuda.Event()
            event.record()
            self._in_flight.append((event, host))
            self._retire_copies(keep=max(0, self.loader.info.slots - 2))
        self._served += 1
        self.last_batch_info = info
        return out

    def close(self):
        self._close_loader()


def input_queue(workload, split, global_batch_size, **kwargs):
    """What AlgoPerf's `_build_input_queue` returns; see InputQueue."""
    return InputQueue(workload, split, global_batch_size, **kwargs)
