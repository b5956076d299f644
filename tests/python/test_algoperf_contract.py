"""The AlgoPerf contract: what AlgoPerf's PyTorch workloads do with the
batches of an input queue, restated here and run on the batches of
`batchd.algoperf.input_queue` from a real daemon on generated data.

AlgoPerf (github.com/mlcommons/algorithmic-efficiency) cannot be installed
here (it pulls jax and tensorflow), and this project holds none of its
code: `WmtContract` and `ImagenetContract` below are this project's own
statement of how AlgoPerf's evaluation, BLEU and loss code consume a batch
(the shapes, dtypes and keys it reads, and its arithmetic, re-derived);
the AlgoPerf function each part stands for is named beside it, so that a
reader can hold one against the other. A model, a beam search and a BLEU
scorer are not part of the contract: the stand-ins below say what they
do instead. A test fails when the drop-in hands these paths something
AlgoPerf's own pipeline would not:

- WMT: an evaluation caches its iterator per split and draws num_batches
  for the metrics (weighted sums over `weights`), then num_batches more for
  BLEU, whose count of real rows, `weights.sum(0)[0].item()`, is only a
  number of rows (an int) when `weights` is integer; and again at every
  evaluation. eval_train is padded, unpacked eval-style batches. Train
  batches carry `weights`, which the baseline passes to the loss as the
  mask (`batch.get('weights')`).
- ImageNet: an evaluation draws from an iterator that starts again at its
  end, forever; eval_train is the eval transform over `random.Random(seed)`'s
  subset of train; test is ImageNet-v2 from its TFDS layout.
- Both: the runner keeps `batch` while it draws the next, and a submission
  may keep any number of batches.

    BATCHD_BIN=<build>/server/batchd PYTHONPATH=<build>/python \\
        /usr/bin/python3 -m pytest tests/python/test_algoperf_contract.py
"""

import importlib.util
import math
import os
import random
import shutil
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
spm = pytest.importorskip("sentencepiece")
pytest.importorskip("PIL")
torchvision = pytest.importorskip("torchvision")

import torch.nn.functional as F  # noqa: E402
from torchvision import datasets, transforms  # noqa: E402

import batchd  # noqa: E402
import batchd.algoperf  # noqa: E402
from batchd_daemon import Server  # noqa: E402
from helpers import (IMAGENET_TOOL, WMT_TOOLS, make_imagenet,  # noqa: E402
                     make_wmt)

sys.path.insert(0, WMT_TOOLS)
import wmt_data  # noqa: E402

VOCAB = 500
EOS_ID = 2  # SentencePiece's default id, AlgoPerf's WMT end of sentence
V2_DIR = ("imagenet_v2", "matched-frequency", "3.0.0")
# batchd's eval pixels against torchvision's on the same file (as in
# test_imagenet.py): mean absolute difference per channel value.
MAX_MEAN_ABS_DIFF = 2.0


# --- AlgoPerf's contract, restated ---------------------------------------------

def batches_to_cover(num_examples, batch_size):
    """An evaluation of num_examples draws this many batches (both
    workloads' _eval_model_on_split): enough to hold them all, the last one
    padded."""
    return -(-num_examples // batch_size)


def rounded_eval_train_examples(num_validation_examples, eval_batch_size):
    """Both workloads' default num_eval_train_examples: the validation size
    rounded up to a whole number of eval batches."""
    return batches_to_cover(num_validation_examples,
                            eval_batch_size) * eval_batch_size


class ExactMatchBleu:
    """Stand-in for the corpus BLEU scorer: it keeps the sentences it was
    given, so that a test can read them, and scores 100 x the share of
    predictions equal to their reference."""

    def __init__(self):
        self.predictions, self.references = None, None

    def score(self, predictions, references):
        self.predictions, self.references = list(predictions), list(references)
        same = sum(p == r for p, r in zip(predictions, references))
        return 100.0 * same / max(1, len(predictions))


class WmtContract:
    """How AlgoPerf's WMT workload (PyTorch) consumes a queue:

    - An evaluation of a split (`_eval_model_on_split`) draws
      n = ceil(num_examples / global_batch_size) batches from an iterator it
      builds on the first evaluation of that split (num_batches = n,
      repeat_final_dataset = True) and keeps for every later one.
    - Metrics (`eval_step`): per position, the prediction is the argmax of
      the logits; the correct predictions and the cross-entropy (no label
      smoothing) are summed over positions, each weighted by `weights`, and
      so is `weights` itself, the divisor; the results (`_normalize_eval_
      metrics`) are each sum over all batches divided by the summed weights.
    - BLEU (`translate_and_calculate_bleu`): n more batches from the same
      iterator. A batch's real rows are its first `weights.sum(0)[0].item()`
      (every row when it has no `weights`), a count that AlgoPerf hands to
      range(), so it must come out an int. Each such row of targets and of
      predictions is cut after its first EOS (a row without one keeps its
      first token only: AlgoPerf takes argmax of `row == EOS` + 1) and
      detokenized; the corpus score compares the two lists.
    - Training loss (`loss_fn` -> `compute_weighted_cross_entropy`): the
      cross-entropy of every position, with the given label smoothing, set
      to 0 where the mask is 0, summed; `n_valid_examples` is the mask's sum
      (without a mask, every position counts).
    """

    def __init__(self, server, data_dir, num_validation_examples,
                 eval_batch_size):
        self.server = server
        self.queues = {}
        self.bleu = ExactMatchBleu()
        self.sp = spm.SentencePieceProcessor(
            model_file=os.path.join(data_dir, "wmt_sentencepiece_model"))
        self.num_eval_train_examples = rounded_eval_train_examples(
            num_validation_examples, eval_batch_size)

    def open_queue(self, split, data_dir, global_batch_size, seed,
                   num_batches):
        """The drop-in, where AlgoPerf builds its input queue."""
        return batchd.algoperf.input_queue(
            "wmt", split, global_batch_size, data=data_dir, seed=seed,
            num_batches=num_batches, repeat_final_dataset=True,
            num_eval_train_examples=self.num_eval_train_examples,
            world_size=1, rank=0, server=self.server.address, timeout=60,
            options={"index_threads": 1})

    @staticmethod
    def model(batch):
        """Stand-in model: predicts every real target token and gets every
        padding position wrong (token 1), so that a padding position that
        counted would lower the accuracy below 1."""
        t = batch["targets"]
        wanted = torch.where(t > 0, t, torch.ones_like(t))
        return F.one_hot(wanted, VOCAB).float() * 20.0

    @staticmethod
    def translate(batch):
        """Stand-in beam search: predicts the targets."""
        return batch["targets"]

    def training_loss(self, targets, logits, mask=None, label_smoothing=0.0):
        if logits.dim() != targets.dim() + 1:
            raise ValueError(f"logits {tuple(logits.shape)} do not match "
                             f"targets {tuple(targets.shape)}")
        per_position = F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
            reduction="none", label_smoothing=label_smoothing,
        ).reshape(targets.shape)
        if mask is None:
            mask = torch.ones_like(targets)
        per_position = per_position.masked_fill(mask == 0, 0.0)
        return {"summed": per_position.sum(), "n_valid_examples": mask.sum(),
                "per_example": per_position}

    def detokenize(self, row):
        ids = [int(t) for t in row]
        end = ids.index(EOS_ID) + 1 if EOS_ID in ids else 1
        return self.sp.decode(ids[:end])

    def evaluate(self, split, num_examples, global_batch_size, seed,
                 data_dir):
        n = batches_to_cover(num_examples, global_batch_size)
        if split not in self.queues:
            self.queues[split] = self.open_queue(split, data_dir,
                                                 global_batch_size, seed, n)
        queue = self.queues[split]
        correct, loss, weight = 0.0, 0.0, 0.0
        for _ in range(n):
            batch = next(queue)
            targets, weights = batch["targets"], batch["weights"]
            logits = self.model(batch)
            loss += float(self.training_loss(targets, logits, weights)["summed"])
            hits = logits.argmax(-1) == targets
            correct += (hits * weights).sum().item()
            weight += weights.sum().item()
        results = {"loss": loss / weight, "accuracy": correct / weight}

        references, predictions = [], []
        for _ in range(n):
            batch = next(queue)
            predicted = self.translate(batch)
            weights = batch.get("weights")
            real_rows = (len(predicted) if weights is None
                         else weights.sum(0)[0].item())
            for i in range(real_rows):  # a float count raises here
                references.append(self.detokenize(batch["targets"][i]))
                predictions.append(self.detokenize(predicted[i]))
        results["bleu"] = self.bleu.score(predictions, references)
        return results


class ImagenetContract:
    """How AlgoPerf's ImageNet ResNet workload (PyTorch) consumes a queue:

    - An evaluation of a split (`_eval_model_on_split`) draws
      n = ceil(num_examples / global_batch_size) batches from an iterator
      it builds on the first evaluation of that split and keeps; only the
      test split's is built to cache and repeat (ImageNet-v2); the others
      start again at their end (`data_utils.cycle`). The data seed is the
      first word of the evaluation's rng.
    - Per batch (`_compute_metrics`): the prediction is the argmax of the
      logits; the correct predictions and the cross-entropy (no label
      smoothing) are summed over the rows, each weighted by `weights` (by 1
      when the batch has none). Each total over all batches is divided by
      num_examples, not by the summed weights.
    """

    def __init__(self, server, num_validation_examples, eval_batch_size):
        self.server = server
        self.queues = {}
        self.num_eval_train_examples = rounded_eval_train_examples(
            num_validation_examples, eval_batch_size)

    def open_queue(self, split, data_dir, global_batch_size, seed):
        """The drop-in, where AlgoPerf builds its dataset (test: data_dir
        is the TFDS data_dir holding imagenet_v2/)."""
        return batchd.algoperf.input_queue(
            "imagenet", split, global_batch_size, data=data_dir, seed=seed,
            repeat_final_dataset=split == "test",
            num_eval_train_examples=self.num_eval_train_examples,
            world_size=1, rank=0, server=self.server.address, timeout=60)

    @staticmethod
    def model(batch):
        """Stand-in model: always says class 0; its accuracy is the share of
        class-0 examples, which a counted padding row (label 0) would
        raise."""
        logits = torch.zeros(batch["inputs"].shape[0], 3)
        logits[:, 0] = 2.0
        return logits

    def evaluate(self, split, num_examples, global_batch_size, seed,
                 data_dir):
        if split not in self.queues:
            self.queues[split] = self.open_queue(split, data_dir,
                                                 global_batch_size, seed)
        totals = {"accuracy": 0.0, "loss": 0.0}
        for _ in range(batches_to_cover(num_examples, global_batch_size)):
            batch = next(self.queues[split])
            logits, labels = self.model(batch), batch["targets"]
            weights = batch.get("weights")
            if weights is None:
                weights = torch.ones(len(logits))
            hits = (logits.argmax(1) == labels).float()
            losses = F.cross_entropy(logits, labels, reduction="none")
            totals["accuracy"] += float((hits * weights).sum())
            totals["loss"] += float((losses * weights).sum())
        return {k: v / num_examples for k, v in totals.items()}


# --- data and daemon ----------------------------------------------------------

def _load_make_imagenet():
    spec_ = importlib.util.spec_from_file_location("make_imagenet", IMAGENET_TOOL)
    module = importlib.util.module_from_spec(spec_)
    spec_.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("contract")
    # 2 classes: train 12 (6 each), val 6 (3 each).
    make_imagenet(root / "imagenet", "--classes", 2, "--per-class", 6,
                  "--val-per-class", 3, "--no-odd", "--no-tfrecord")
    # ImageNet-v2 as TFDS writes it: 7 images of 3 classes in two shards,
    # labels out of order so that the order is checked.
    mk = _load_make_imagenet()
    colour, gray = mk.load_photos()
    classes = [f"n{1440764 + 37 * c:08d}" for c in range(3)]
    items = mk.build_split("val", classes, 3, 11, colour, gray, False)[:7]
    random.Random(5).shuffle(items)
    v2 = root / "imagenet_v2_tfds" / os.path.join(*V2_DIR)
    v2.mkdir(parents=True)
    for s, part in enumerate((items[:4], items[4:])):
        mk.write_tfrecord(
            str(v2 / f"imagenet_v2-test.tfrecord-{s:05d}-of-00002"),
            [mk.serialize_example(img, label, name)
             for _, name, img, label in part])
    (root / "v2_labels.txt").write_text(
        " ".join(str(label) for *_, label in items))

    make_wmt(root / "wmt", train=200, validation=20, test=10, shards=2,
             seed=3, vocab_size=VOCAB)
    return root


@pytest.fixture
def server(data, tmp_path):
    s = Server(tmp_path)
    for name in ("imagenet", "imagenet_v2_tfds", "wmt"):
        shutil.copytree(data / name, tmp_path / "data" / name)
    yield s
    s.stop()


def kept_pairs(data, split):
    """(de, en) text of the pairs AlgoPerf keeps (both sides <= 256 tokens
    with EOS), in file order."""
    sp = spm.SentencePieceProcessor(
        model_file=str(data / "wmt" / "wmt_sentencepiece_model"))
    out = []
    for de, en in wmt_data.read_pairs(str(data / "wmt"), split):
        de, en = de.decode("utf-8"), en.decode("utf-8")
        if max(len(sp.encode(de)), len(sp.encode(en))) + 1 <= 256:
            out.append((de, en))
    return out


def detok(data, texts):
    """What `_decode_tokens` makes of a sentence: its pieces decoded."""
    sp = spm.SentencePieceProcessor(
        model_file=str(data / "wmt" / "wmt_sentencepiece_model"))
    return [sp.decode(sp.encode(t)) for t in texts]


def same_batches(a, b):
    return all(x.keys() == y.keys() and
               all(torch.equal(x[k], y[k]) for k in x) for x, y in zip(a, b))


# --- WMT ----------------------------------------------------------------------

def test_wmt_evaluation_runs_algoperfs_eval_and_bleu_twice(server, data):
    """An evaluation: num_batches for the metrics, num_batches more for BLEU
    (range(weights.sum(0)[0].item())), from one cached iterator, at every
    evaluation."""
    w = WmtContract(server, str(data / "wmt"), num_validation_examples=20,
                    eval_batch_size=8)
    expected = detok(data, [en for _, en in kept_pairs(data, "validation")])
    assert len(expected) >= 15
    for evaluation in range(2):
        results = w.evaluate("validation", num_examples=20,
                             global_batch_size=8, seed=7, data_dir="wmt")
        # Every real target token right, padding not counted.
        assert results["accuracy"] == 1.0, evaluation
        predictions, references = w.bleu.predictions, w.bleu.references
        assert references == expected, evaluation
        assert predictions == references
        assert results["bleu"] == 100.0
    # 2 evaluations x (metrics + BLEU) x 3 batches: 4 passes of the split,
    # the queue started again 3 times.
    assert w.queues["validation"].passes == 3


def test_wmt_eval_iterator_repeats_the_same_batches(server):
    # AlgoPerf's WMT dataset (input_pipeline.py, get_wmt_dataset) keeps the
    # first num_batches batches when num_batches is given, and then, when
    # repeat_final_dataset is set, repeats what it kept forever.
    q = batchd.algoperf.input_queue(
        "wmt", "validation", 8, data="wmt", seed=1, world_size=1, rank=0,
        server=server.address, num_batches=2, repeat_final_dataset=True,
        timeout=60, options={"index_threads": 1})
    first = [next(q) for _ in range(2)]
    again = [next(q) for _ in range(4)]
    assert same_batches(first, again[:2]) and same_batches(first, again[2:])
    assert not torch.equal(first[0]["targets"], first[1]["targets"])
    q.close()
    # num_batches past the split's end (AlgoPerf counts it from the
    # unfiltered size): take() ends early and repeat() starts over.
    q = batchd.algoperf.input_queue(
        "wmt", "validation", 8, data="wmt", seed=1, world_size=1, rank=0,
        server=server.address, num_batches=4, repeat_final_dataset=True,
        timeout=60, options={"index_threads": 1})
    drawn = [next(q) for _ in range(4)]  # the split holds 3 batches
    assert same_batches(drawn[3:], first[:1])
    assert int(drawn[2]["weights"][:, 0].sum()) < 8  # the padded last batch
    q.close()
    # Without repeat_final_dataset, take(num_batches) ends.
    q = batchd.algoperf.input_queue(
        "wmt", "test", 8, data="wmt", world_size=1, rank=0,
        server=server.address, num_batches=1, timeout=60,
        options={"index_threads": 1})
    next(q)
    with pytest.raises(StopIteration):
        next(q)
    q.close()


def test_wmt_eval_weights_are_integer_and_mask_padding(server, data):
    # AlgoPerf's WMT input queue (workload.py, _build_input_queue) replaces
    # `weights` by 1 where targets > 0 and 0 elsewhere, and-ed with the
    # padding mask where the batch had one; its PyTorch workload then hands
    # every array out as an int64 tensor on the device.
    q = batchd.algoperf.input_queue(
        "wmt", "validation", 8, data="wmt", world_size=2, rank=1,
        server=server.address, timeout=60, options={"index_threads": 1})
    other = batchd.algoperf.input_queue(
        "wmt", "validation", 8, data="wmt", world_size=2, rank=0,
        server=server.address, timeout=60, options={"index_threads": 1})
    rows = 0
    for a, b in zip(q, other):
        for batch in (a, b):
            assert list(batch) == ["inputs", "targets", "weights"]
            assert {t.dtype for t in batch.values()} == {torch.int64}
            assert all(t.shape == (4, 256) for t in batch.values())
            assert torch.equal(batch["weights"],
                               (batch["targets"] > 0).to(torch.int64))
            rows += len(range(batch["weights"].sum(0)[0].item()))
    q.close()
    other.close()
    # translate_and_calculate_bleu's count: the kept pairs, padding excluded.
    assert rows == len(kept_pairs(data, "validation"))


def test_wmt_train_batches_carry_weights_for_loss_masking(server, data):
    """The baselines' update_params (e.g. external_tuning's
    pytorch_nadamw_full_budget.py) call the workload's loss with the
    batch's targets as labels and `batch.get('weights')` as the mask, then
    divide the summed loss by n_valid_examples."""
    w = WmtContract(server, str(data / "wmt"), 20, 8)
    q = batchd.algoperf.input_queue(
        "wmt", "train", 8, data="wmt", seed=2, world_size=1, rank=0,
        server=server.address, timeout=60, options={"index_threads": 1})
    batch = next(q)
    # Keys of wmt_pytorch/workload.py's train batches, in its order, int64.
    assert list(batch) == ["inputs", "inputs_position", "inputs_segmentation",
                           "targets", "targets_position",
                           "targets_segmentation", "weights"]
    assert {t.dtype for t in batch.values()} == {torch.int64}
    assert all(t.shape == (8, 256) for t in batch.values())
    padding = int((batch["targets"] == 0).sum())
    assert padding > 0  # a packed batch still has padding to mask
    logits = torch.zeros(8, 256, VOCAB)  # uniform: log(VOCAB) per position
    loss_dict = w.training_loss(batch["targets"], logits,
                                mask=batch.get("weights"), label_smoothing=0.0)
    n_valid = int((batch["targets"] > 0).sum())
    assert int(loss_dict["n_valid_examples"]) == n_valid
    assert float(loss_dict["summed"]) == pytest.approx(
        n_valid * math.log(VOCAB), rel=1e-5)
    q.close()


def test_wmt_eval_train_is_padded_eval_batches_of_train(server, data):
    """eval_train through an evaluation: the metrics read batch['weights'];
    the rows are train pairs, one per row, not packed."""
    w = WmtContract(server, str(data / "wmt"), num_validation_examples=20,
                    eval_batch_size=8)
    n = w.num_eval_train_examples  # 24
    results = w.evaluate("eval_train", num_examples=n, global_batch_size=8,
                         seed=3, data_dir="wmt")
    assert results["accuracy"] == 1.0
    references = w.bleu.references
    # The first n kept train pairs, in file order (see batchd.algoperf).
    assert references == detok(data, [en for _, en in
                                       kept_pairs(data, "train")[:n]])
    q = w.queues["eval_train"]
    batch = next(q)  # a third pass starts: the same first batch
    assert list(batch) == ["inputs", "targets", "weights"]
    assert {t.dtype for t in batch.values()} == {torch.int64}
    # One pair per row: EOS once per row, nothing after it.
    for row in batch["targets"]:
        eos = (row == 2).nonzero().flatten().tolist()
        assert len(eos) == 1 and not row[eos[0] + 1:].any()


# --- ImageNet -----------------------------------------------------------------

def test_imagenet_evaluation_cycles_and_masks_padding(server, data):
    """An evaluation draws ceil(num_examples / global_batch_size) batches
    from a cached iterator that, at its end, starts again from the first
    batch (AlgoPerf's data_utils.cycle)."""
    w = ImagenetContract(server, num_validation_examples=6, eval_batch_size=4)
    labels = [y for _, y in datasets.ImageFolder(
        str(data / "imagenet" / "val")).samples]
    share = labels.count(0) / len(labels)
    ce = float(F.cross_entropy(torch.tensor([[2.0, 0, 0]]), torch.tensor([0])))
    ce_other = float(F.cross_entropy(torch.tensor([[2.0, 0, 0]]),
                                     torch.tensor([1])))
    for evaluation in range(3):
        r = w.evaluate("validation", num_examples=6, global_batch_size=4,
                       seed=0, data_dir="imagenet")
        assert r["accuracy"] == pytest.approx(share), evaluation
        assert r["loss"] == pytest.approx(
            share * ce + (1 - share) * ce_other, rel=1e-5), evaluation
    q = w.queues["validation"]
    assert q.passes == 2
    a = [next(q) for _ in range(2)]
    b = [next(q) for _ in range(2)]
    assert same_batches(a, b)


def test_imagenet_eval_train_is_algoperfs_seeded_subset(server, data):
    # AlgoPerf's PyTorch ImageNet dataset for eval_train: the train ids
    # 0..N-1 shuffled by random.Random(first word of the data rng), the
    # first num_eval_train_examples of them, in that order, under the eval
    # transform (Resize(256), CenterCrop(224)).
    ref = datasets.ImageFolder(str(data / "imagenet" / "train"))
    w = ImagenetContract(server, num_validation_examples=6, eval_batch_size=4)
    n = w.num_eval_train_examples  # 8 of 12
    seed = 12345
    indices = list(range(len(ref.samples)))
    random.Random(seed).shuffle(indices)
    subset = indices[:n]
    labels = [ref.samples[i][1] for i in subset]
    r = w.evaluate("eval_train", num_examples=n, global_batch_size=4,
                   seed=seed, data_dir="imagenet")
    assert r["accuracy"] == pytest.approx(labels.count(0) / n)
    q = w.queues["eval_train"]
    batches = [next(q) for _ in range(2)]  # the second pass: the same subset
    assert [int(y) for b in batches for y in b["targets"]] == labels
    for b in batches:
        assert b["inputs"].shape == (4, 3, 224, 224)
        assert b["inputs"].dtype == torch.float32
        assert b["weights"].tolist() == [1.0] * 4
    # Pixels: the eval transform of each file, not a random crop.
    mean = torch.tensor(batchd.IMAGENET_MEAN).view(3, 1, 1) * 255
    std = torch.tensor(batchd.IMAGENET_STD).view(3, 1, 1) * 255
    t = transforms.Compose([transforms.Resize(256), transforms.CenterCrop(224)])
    x = torch.cat([b["inputs"] for b in batches])
    for k, i in enumerate(subset):
        want = torch.from_numpy(np.array(
            t(datasets.folder.pil_loader(ref.samples[i][0])))).permute(2, 0, 1)
        got = (x[k] * std + mean).round()
        assert float((got - want.float()).abs().mean()) <= MAX_MEAN_ABS_DIFF


@pytest.mark.parametrize("seed", [0, 7, 2**32 + 3])
def test_eval_train_subset_is_cpythons_shuffle(server, data, seed):
    """The server's subset, by example id, against CPython's random."""
    n = len(datasets.ImageFolder(str(data / "imagenet" / "train")).samples)
    indices = list(range(n))
    random.Random(seed).shuffle(indices)
    with batchd.Loader(f"ids-{seed % 1000}", 5, workload="imagenet",
                       data="imagenet", split="eval_train", world_size=1,
                       rank=0, seed=seed, server=server.address, timeout=60,
                       options={"with_ids": 1, "eval_train_examples": 10,
                                "image_size": 32, "resize_size": 32}) as ld:
        ids = [int(i) for b in ld for i in b["ids"]]
    assert ids == indices[:10]


def test_imagenet_test_is_imagenet_v2_from_tfds(server, data):
    # AlgoPerf's ImageNet test split (imagenet_v2.py) is TFDS's
    # imagenet_v2/matched-frequency:3.0.0 'test' split under data_dir, its
    # `label` as `targets`; the PyTorch workload cycles over it
    # (itertools.cycle) and converts each batch to tensors.
    labels = [int(v) for v in (data / "v2_labels.txt").read_text().split()]
    w = ImagenetContract(server, num_validation_examples=6, eval_batch_size=4)
    r = w.evaluate("test", num_examples=len(labels), global_batch_size=4,
                   seed=0, data_dir="imagenet_v2_tfds")
    assert r["accuracy"] == pytest.approx(labels.count(0) / len(labels))
    q = w.queues["test"]
    batches = [next(q) for _ in range(2)]  # itertools.cycle: again
    got = torch.cat([b["targets"] for b in batches])
    weights = torch.cat([b["weights"] for b in batches])
    assert got[weights > 0].tolist() == labels
    assert batches[0]["inputs"].shape == (4, 3, 224, 224)
    assert batches[0]["targets"].dtype == torch.int64
    assert batches[0]["weights"].dtype == torch.float32


# --- both: keeping batches ----------------------------------------------------

@pytest.mark.parametrize("workload,split", [
    ("imagenet", "train"), ("imagenet", "validation"), ("imagenet", "eval_train"),
    ("wmt", "train"), ("wmt", "validation"), ("wmt", "eval_train")])
def test_a_runner_may_keep_any_number_of_batches(server, workload, split):
    # AlgoPerf's runner (submission_runner.py, train_once) still holds the
    # previous step's batch while the submission's data_selection draws the
    # next, and a submission's data_selection may keep batches of its own.
    options = {"index_threads": 1} if workload == "wmt" else None
    q = batchd.algoperf.input_queue(
        workload, split, 4, data=workload, world_size=1, rank=0,
        server=server.address, timeout=20, options=options,
        num_eval_train_examples=8, repeat_final_dataset=True)
    slots = q.loader.info.slots
    kept, copies = [], []
    for _ in range(3 * slots + 2):
        batch = next(q)  # DeadlineExceededError if kept batches pin slots
        kept.append(batch)
        copies.append({k: v.clone() for k, v in batch.items()})
    assert same_batches(kept, copies)  # nothing overwrote a kept batch
    q.close()
