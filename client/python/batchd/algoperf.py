"""AlgoPerf drop-in: the input queues of AlgoPerf's PyTorch `imagenet_resnet`
and `wmt` workloads, served by batchd instead of one pipeline per rank.

In a workload's `_build_input_queue`, return

    batchd.algoperf.input_queue("imagenet", split, global_batch_size,
                                data="imagenet", seed=int(data_rng[0]))

and each rank gets its slice of every global batch, as AlgoPerf's PyTorch
workloads hand them to the runner:

- imagenet: ``inputs`` float32 [B, 3, 224, 224] normalised with ImageNet's
  mean and std, ``targets`` int64 [B]; evaluation splits add ``weights``
  float32 [B] (0 on the padding of the last global batch, which AlgoPerf's
  per-rank sampler leaves uneven instead).
- wmt: int64 [B, 256] ``inputs``, ``targets``, ``inputs_position``,
  ``inputs_segmentation``, ``targets_position``, ``targets_segmentation``
  (train) or ``inputs``, ``targets``, ``weights`` (evaluation splits).

B = global_batch_size / world size; tensors are on ``device`` (default
cuda:LOCAL_RANK when CUDA is there, else the CPU). Images travel as uint8
and are normalised on the device (4x less shared-memory traffic than
float32). On CUDA the ring is registered as pinned memory once, so the
host-to-device copy is asynchronous straight from shared memory; the slot is
held until its copy has finished.
"""

import collections
import os

from . import Loader, normalize

_SPLITS = {"train": "train", "eval_train": "train", "validation": "validation",
           "val": "validation", "test": "test"}
_opened = collections.Counter()

IMAGENET_KEYS = ("inputs", "targets")
WMT_TRAIN_KEYS = ("inputs", "targets", "inputs_position",
                  "inputs_segmentation", "targets_position",
                  "targets_segmentation")
WMT_EVAL_KEYS = ("inputs", "targets", "weights")


def _default_device(torch):
    if torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return torch.device("cpu")


def _register_pinned(torch, loader):
    """Registers the ring's mapping with CUDA; False where that fails."""
    try:
        address, size = loader._mapping()
        rc = torch.cuda.cudart().cudaHostRegister(address, size, 0)
        return int(getattr(rc, "value", rc)) == 0
    except Exception:  # an old torch or no CUDA runtime: copies stay sync
        return False


class InputQueue:
    """An iterator of AlgoPerf-shaped batches for one rank."""

    def __init__(self, workload, split, global_batch_size, *, data="",
                 seed=0, start_step=0, world_size=None, rank=None,
                 device=None, server=None, stream=None, num_batches=None,
                 options=None, timeout=None):
        import torch
        self._torch = torch
        if workload not in ("imagenet", "wmt"):
            raise ValueError(f"workload {workload!r}: imagenet or wmt")
        if split not in _SPLITS:
            raise ValueError(f"split {split!r}: one of {sorted(_SPLITS)}")
        self.workload = workload
        self.split = _SPLITS[split]
        self.train = split == "train"
        self.device = torch.device(device) if device is not None else \
            _default_device(torch)
        opts = dict(options or {})
        if workload == "imagenet":
            opts.setdefault("layout", "nchw")
        if stream is None:
            # Every rank opens its queues in the same order, so a counter
            # gives all ranks the same name for the same queue.
            key = (workload, split, seed)
            stream = f"algoperf-{workload}-{split}-{seed}-{_opened[key]}"
            _opened[key] += 1
        self.loader = Loader(stream, global_batch_size, workload=workload,
                             data=data, split=self.split,
                             world_size=world_size, rank=rank, seed=seed,
                             start_step=start_step, server=server,
                             options=opts, timeout=timeout)
        self.num_batches = num_batches
        self._served = 0
        self._pinned = (self.device.type == "cuda" and
                        _register_pinned(torch, self.loader))
        # Host batches whose asynchronous copies may still be reading them.
        self._in_flight = collections.deque()

    def __iter__(self):
        return self

    def _retire_copies(self, keep):
        while len(self._in_flight) > keep:
            event, _host = self._in_flight.popleft()
            event.synchronize()  # the slot goes back once its copy is done

    def __next__(self):
        if self.num_batches is not None and self._served >= self.num_batches:
            raise StopIteration
        torch = self._torch
        host = next(self.loader)
        non_blocking = self._pinned
        out = {}
        if self.workload == "imagenet":
            images = host["inputs"].to(self.device, non_blocking=non_blocking)
            out["inputs"] = normalize(images, layout="nchw")
            out["targets"] = host["targets"].to(self.device, torch.int64,
                                                non_blocking=non_blocking)
            if "weights" in host:
                out["weights"] = host["weights"].to(self.device, torch.float32,
                                                    non_blocking=non_blocking)
        else:
            for name, t in host.items():
                dtype = torch.float32 if name == "weights" else torch.int64
                out[name] = t.to(self.device, dtype, non_blocking=non_blocking)
        if non_blocking:
            event = torch.cuda.Event()
            event.record()
            self._in_flight.append((event, host))
            self._retire_copies(keep=max(0, self.loader.info.slots - 2))
        self._served += 1
        return out

    def close(self):
        self._retire_copies(keep=0)
        self.loader.close()


def input_queue(workload, split, global_batch_size, **kwargs):
    """What AlgoPerf's `_build_input_queue` returns; see InputQueue."""
    return InputQueue(workload, split, global_batch_size, **kwargs)
