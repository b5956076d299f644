"""AlgoPerf drop-in: the input queues of AlgoPerf's PyTorch `imagenet_resnet`
and `wmt` workloads, served by batchd instead of one pipeline per rank.

In a workload's `_build_input_queue`, return

    batchd.algoperf.input_queue("imagenet", split, global_batch_size,
                                data="imagenet", seed=int(data_rng[0]),
                                num_batches=num_batches,
                                repeat_final_dataset=repeat_final_dataset)

and each rank gets its slice of every global batch, as AlgoPerf's PyTorch
workloads (algoperf/workloads/{imagenet_resnet,wmt}/*_pytorch/workload.py,
`_build_input_queue` / `_build_dataset`) hand them to the runner:

- imagenet: ``inputs`` float32 [B, 3, 224, 224] normalised with ImageNet's
  mean and std, ``targets`` int64 [B]. Evaluation splits add ``weights``
  float32 [B], 1 on real examples and 0 on the padding of the last global
  batch. AlgoPerf yields no ``weights`` on validation and eval_train (its
  per-rank DistributedEvalSampler leaves the last batches uneven instead)
  and float ``weights`` only on the padded last batch of test; its eval
  loop reads them with ``batch.get('weights')``, where a weight of 1 counts
  as no weight, so the metrics are the same and every rank gets equally
  shaped batches (uneven ones hang DDP collectives). This is deliberate.
- wmt: int64 [B, 256] everywhere, as AlgoPerf's PyTorch workload casts
  every array with ``torch.as_tensor(value, dtype=torch.int64)``:
  train ``inputs``, ``inputs_position``, ``inputs_segmentation``,
  ``targets``, ``targets_position``, ``targets_segmentation`` and
  ``weights`` = ``targets > 0`` (BaseWmtWorkload._build_input_queue adds
  ``np.where(batch['targets'] > 0, 1, 0)`` to train batches too, and the
  baseline submissions mask the loss with ``batch.get('weights')``);
  evaluation splits ``inputs``, ``targets``, ``weights`` = ``targets > 0``
  and 0 on padding rows (``logical_and`` of the padding mask with
  ``targets > 0``), integer so that ``translate_and_calculate_bleu``'s
  ``range(weights.sum(0)[0].item())`` works. Its odd ``weights.sum(0)[0]``
  (the rows whose first target token is not padding) counts the real rows
  because every kept pair has at least EOS.

Splits: "train", "eval_train", "validation" (or "val"), "test".

- Evaluation queues repeat as AlgoPerf's do: AlgoPerf caches each eval
  iterator in `_eval_iters` and keeps drawing from it across evaluations.
  WMT builds it with ``ds.take(num_batches).repeat()``
  (``repeat_final_dataset=True``) and draws 2 x num_batches per evaluation
  (metrics, then BLEU); ImageNet wraps its loader in ``data_utils.cycle``
  (test: ``itertools.cycle``) and ignores num_batches. Here a pass ends at
  the end of the split or after ``num_batches`` batches; then the queue
  starts the same pass again (the same batches, in the same order) when
  ``repeat_final_dataset`` is true, or for imagenet when num_batches is
  None, as AlgoPerf does; otherwise it raises StopIteration (WMT's
  ``take(num_batches)`` without repeat; an imagenet queue given num_batches
  stops likewise, where AlgoPerf's ignores the argument). Train runs on
  until num_batches, if given.
  Like AlgoPerf's ``take(num_batches).repeat()``, a split shorter than
  num_batches (its length filter drops pairs, while AlgoPerf counts
  num_batches from the unfiltered size) starts again early: the metrics
  loop then reads into the next pass and the BLEU loop starts mid-pass, as
  in AlgoPerf.
- eval_train is AlgoPerf's, not the train stream: the evaluation transform
  and padded batches with ``weights``.
  imagenet: Resize(256) + CenterCrop(224) over the very subset AlgoPerf
  draws, ``random.Random(seed).shuffle(list(range(N)))[:num_eval_train_
  examples]`` (N = the train split's size; AlgoPerf hard-codes 1,281,167,
  the real size), in that order; pass ``seed=int(data_rng[0])`` of the
  data_rng AlgoPerf's `_eval_model_on_split` derives.
  wmt: the first num_eval_train_examples length-filtered train pairs in
  file order, padded one pair per row like validation. AlgoPerf draws them
  through ``shuffle(1024, seed)`` over the same file order and reshuffles on
  every repeat, so each of its passes holds a different draw of about the
  first num_eval_train_examples + 1023 pairs; batchd's passes are the same
  fixed set every time (deliberately: repeated evaluations then measure
  the same examples).
- test: imagenet = ImageNet-v2 (AlgoPerf loads TFDS
  ``imagenet_v2/matched-frequency:3.0.0``): point ``data`` at the TFDS
  data_dir (AlgoPerf's imagenet_v2_data_dir), which holds
  ``imagenet_v2/matched-frequency/3.0.0/imagenet_v2-test.tfrecord-*``; a
  ``test`` folder or ``*-test.tfrecord-*`` shards there are used first.
  batchd decodes it with the same Resize(256) + CenterCrop(224) as
  validation; AlgoPerf's TF pipeline resizes ImageNet-v2 its own way.

Ranks: rank r gets the r-th contiguous slice of every global batch, as
AlgoPerf's WMT does (``tensor[0]`` of the batch reshaped to [W, B, 256]);
AlgoPerf's ImageNet samplers stride instead (``indices[r::W]``), which
changes which rank sees an example, not the sums its metrics all-reduce.

B = global_batch_size / world size; tensors are on ``device`` (default
cuda:LOCAL_RANK when CUDA is there, else the CPU). Images travel as uint8
and are normalised on the device (4x less shared-memory traffic than
float32). No tensor handed out is a view of the ring: on the CPU every
tensor is a copy, so a runner may keep any number of batches; on CUDA the
ring is registered as pinned memory once, the host-to-device copy is
asynchronous straight from shared memory and the slot is held only until
its copy has finished.
"""

import collections
import os

from . import Loader, normalize

_STATE_FORMAT = "batchd.algoperf_queue"
_SPLITS = {"train": "train", "eval_train": "eval_train",
           "validation": "validation", "val": "validation", "test": "test"}
_opened = collections.Counter()

# AlgoPerf's num_eval_train_examples: its validation set size rounded up to a
# multiple of its eval batch size.
NUM_EVAL_TRAIN_EXAMPLES = {"imagenet": 50176, "wmt": 3072}

IMAGENET_KEYS = ("inputs", "targets")
WMT_TRAIN_KEYS = ("inputs", "inputs_position", "inputs_segmentation",
                  "targets", "targets_position", "targets_segmentation",
                  "weights")
WMT_EVAL_KEYS = ("inputs", "targets", "weights")


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
        ``ds.repeat()``; imagenet evaluation queues also repeat when
        num_batches is None (AlgoPerf's ``data_utils.cycle``).
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
        if self.split == "eval_train":
            opts.setdefault("eval_train_examples",
                            num_eval_train_examples or
                            NUM_EVAL_TRAIN_EXAMPLES[workload])
        if stream is None:
            # Every rank opens its queues in the same order, so a counter
            # gives all ranks the same name for the same queue.
            key = (workload, split, seed)
            stream = f"algoperf-{workload}-{split}-{seed}-{_opened[key]}"
            _opened[key] += 1
        self._open_args = dict(
            stream=stream, global_batch_size=global_batch_size,
            workload=workload, data=data, split=self.split,
            world_size=world_size, rank=rank, seed=seed,
            start_step=start_step, server=server, options=opts,
            timeout=timeout)
        self.num_batches = num_batches
        self.repeat = not self.train and (
            repeat_final_dataset or
            (workload == "imagenet" and num_batches is None))
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

        def move(t, dtype):
            return t.to(self.device, dtype, non_blocking=non_blocking,
                        copy=copy)

        out = {}
        if self.workload == "imagenet":
            images = host["inputs"].to(self.device, non_blocking=non_blocking)
            out["inputs"] = normalize(images, layout="nchw")
            out["targets"] = move(host["targets"], torch.int64)
            if "weights" in host:
                out["weights"] = move(host["weights"], torch.float32)
        else:
            names = WMT_TRAIN_KEYS[:-1] if self.train else WMT_EVAL_KEYS[:-1]
            for name in names:
                out[name] = move(host[name], torch.int64)
            # AlgoPerf: weights = np.where(targets > 0, 1, 0), and-ed with
            # the padding mask where the batch has one; int64 once in torch.
            real = out["targets"] > 0
            if "weights" in host:
                real &= move(host["weights"], torch.float32) > 0
            out["weights"] = real.to(torch.int64)
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
