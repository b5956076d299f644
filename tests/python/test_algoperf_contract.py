"""The AlgoPerf contract: AlgoPerf's own consumption code, run on the batches
of `batchd.algoperf.input_queue` from a real daemon on generated data.

AlgoPerf (github.com/mlcommons/algorithmic-efficiency) cannot be installed
here (it pulls jax and tensorflow), so the code paths that consume input
queues are copied below verbatim from its source, each under a comment
naming its file and function; only what needs a model, jax or a tokenizer
is stubbed, and the stubs say so. A test fails when the drop-in hands these
paths something AlgoPerf's own pipeline would not:

- WMT: `_eval_model_on_split` caches its iterator and draws num_batches for
  the metrics (`eval_step` needs integer `weights`), then num_batches more
  for `translate_and_calculate_bleu`, whose `range(weights.sum(0)[0].item())`
  needs integer weights; and again at every evaluation. eval_train is
  padded, unpacked eval-style batches. Train batches carry `weights`, which
  the baseline's `update_params` passes to `loss_fn` as `batch.get('weights')`.
- ImageNet: `_eval_model_on_split` draws from `data_utils.cycle` forever;
  eval_train is the eval transform over `random.Random(seed)`'s subset of
  train; test is ImageNet-v2 from its TFDS layout.
- Both: the runner keeps `batch` while it draws the next, and a submission
  may keep any number of batches.

    BATCHD_BIN=<build>/server/batchd PYTHONPATH=<build>/python \\
        /usr/bin/python3 -m pytest tests/python/test_algoperf_contract.py
"""

import enum
import importlib.util
import math
import os
import random
import shutil
import subprocess
import sys
from typing import Any, Dict, Optional, Tuple

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

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WMT_TOOLS = os.path.join(REPO, "workloads", "wmt", "tools")
IMAGENET_TOOL = os.path.join(REPO, "workloads", "imagenet", "make_imagenet.py")
sys.path.insert(0, WMT_TOOLS)
import wmt_data  # noqa: E402

VOCAB = 500
V2_DIR = ("imagenet_v2", "matched-frequency", "3.0.0")
# batchd's eval pixels against torchvision's on the same file (as in
# test_imagenet.py): mean absolute difference per channel value.
MAX_MEAN_ABS_DIFF = 2.0


# --- stand-ins for what AlgoPerf imports (not AlgoPerf's code) ---------------

class ForwardPassMode(enum.Enum):  # algoperf/spec.py
    TRAIN = 0
    EVAL = 1


class spec:  # noqa: N801  (the module name AlgoPerf's code refers to)
    ForwardPassMode = ForwardPassMode
    Tensor = torch.Tensor
    ParameterContainer = Any
    ModelAuxiliaryState = Any
    RandomState = Any


class decode:  # noqa: N801  algoperf/workloads/wmt/wmt_pytorch/decode.py
    EOS_ID = 2


class prng:  # noqa: N801  algoperf/random_utils.py; the data rng passes on
    @staticmethod
    def split(rng, num):
        return [rng] * num


class bleu:  # noqa: N801  stub: keeps what it was given, scores exact matches
    last = None

    @staticmethod
    def corpus_bleu(predictions, references):
        bleu.last = (list(predictions), list(references[0]))
        same = sum(p == r for p, r in zip(predictions, references[0]))

        class Score:
            score = 100.0 * same / max(1, len(predictions))
        return Score()


USE_PYTORCH_DDP, RANK, DEVICE, N_GPUS = False, 0, torch.device("cpu"), 1
DP = None


class SentencePieceDetokenizer:
    """The part of tf-text's SentencepieceTokenizer `_decode_tokens` uses."""

    def __init__(self, path):
        self.sp = spm.SentencePieceProcessor(model_file=path)

    def detokenize(self, ids):
        text = self.sp.decode([int(i) for i in ids])

        class T:
            def numpy(self):
                return text.encode("utf-8")
        return T()


# --- AlgoPerf's WMT workload --------------------------------------------------

class AlgoPerfWmt:
    """BaseWmtWorkload + WmtWorkload (PyTorch) with the input queue from
    batchd; methods marked VERBATIM are AlgoPerf's code unchanged."""

    def __init__(self, server, data_dir, num_validation_examples,
                 eval_batch_size):
        self.server = server
        self._eval_iters = {}
        self._tokenizer = SentencePieceDetokenizer(
            os.path.join(data_dir, "wmt_sentencepiece_model"))
        self.num_validation_examples = num_validation_examples
        self.eval_batch_size = eval_batch_size

    # VERBATIM algoperf/workloads/wmt/workload.py, num_eval_train_examples
    @property
    def num_eval_train_examples(self) -> int:
        # Round up from num_validation_examples (which is the default for
        # num_eval_train_examples) to the next multiple of eval_batch_size, so that
        # we don't have to extract the correctly sized subset of the training data.
        rounded_up_multiple = math.ceil(
          self.num_validation_examples / self.eval_batch_size
        )
        return rounded_up_multiple * self.eval_batch_size

    # The drop-in, in place of BaseWmtWorkload._build_input_queue.
    def _build_input_queue(self, data_rng, split, data_dir, global_batch_size,
                           num_batches=None, repeat_final_dataset=False):
        return batchd.algoperf.input_queue(
            "wmt", split, global_batch_size, data=data_dir,
            seed=int(data_rng[0]), num_batches=num_batches,
            repeat_final_dataset=repeat_final_dataset,
            num_eval_train_examples=self.num_eval_train_examples,
            world_size=1, rank=0, server=self.server.address, timeout=60,
            options={"index_threads": 1})

    # Stub: a "model" that predicts every real target token and gets every
    # padding position wrong (token 1), so a padding position that counted
    # would lower the accuracy below 1.
    def model_fn(self, params, augmented_and_preprocessed_input_batch,
                 model_state, mode, rng, update_batch_norm):
        t = augmented_and_preprocessed_input_batch["targets"]
        wanted = torch.where(t > 0, t, torch.ones_like(t))
        return F.one_hot(wanted, VOCAB).float() * 20.0, None

    # Stub of predict_step (beam search): predicts the targets.
    def predict_step(self, inputs, params, eos_id, max_decode_len):
        return self._current_targets

    # VERBATIM algoperf/workloads/wmt/wmt_pytorch/workload.py,
    # WmtWorkload.compute_weighted_cross_entropy
    def compute_weighted_cross_entropy(
      self,
      logits: spec.Tensor,
      targets: spec.Tensor,
      weights: Optional[spec.Tensor] = None,
      label_smoothing: float = 0.1,
    ) -> Dict[str, spec.Tensor]:  # differentiable
        """Compute weighted cross entropy and entropy for log probs and targets.

        Args:
         logits: [batch, length, num_classes] float array.
         targets: categorical targets [batch, length] int array.
         weights: None or array of shape [batch, length].
         label_smoothing: label smoothing constant, used to determine the on and off
           values.

        Returns:
          {'summed': scalar summed loss, 'n_valid_examples': scalar number of
          valid examples in batch, 'per_example': 1-d array of per-example losses}
        """
        if logits.ndim != targets.ndim + 1:
          raise ValueError(
            f'Incorrect shapes. Got shape {logits.shape} logits and '
            f'{targets.shape} targets.'
          )

        loss_fn = torch.nn.CrossEntropyLoss(
          reduction='none', label_smoothing=label_smoothing
        )
        if N_GPUS > 1 and not USE_PYTORCH_DDP:
          loss_fn = DP(loss_fn)

        # PyTorch loss functions expect the class dim directly after the batch dim.
        per_example_losses = loss_fn(logits.transpose(-2, -1), targets)
        if weights is None:
          weights = torch.ones_like(targets)
        per_example_losses = torch.where(
          weights.to(torch.bool), per_example_losses, 0.0
        )
        summed_loss = per_example_losses.sum()
        n_valid_examples = weights.sum()
        return {
          'summed': summed_loss,
          'n_valid_examples': n_valid_examples,
          'per_example': per_example_losses,
        }

    # VERBATIM algoperf/workloads/wmt/workload.py, BaseWmtWorkload.loss_fn
    def loss_fn(
      self,
      label_batch: spec.Tensor,  # Dense or one-hot labels.
      logits_batch: spec.Tensor,
      mask_batch: Optional[spec.Tensor] = None,
      label_smoothing: float = 0.0,
    ) -> Dict[str, spec.Tensor]:  # differentiable
        """Evaluate the (masked) loss function at (label_batch, logits_batch).

        Return {'summed': scalar summed loss, 'n_valid_examples': scalar number of
        valid examples in batch, 'per_example': 1-d array of per-example losses}
        (not synced across devices).
        """
        return self.compute_weighted_cross_entropy(
          logits_batch,
          label_batch,
          weights=mask_batch,
          label_smoothing=label_smoothing,
        )

    # VERBATIM algoperf/workloads/wmt/workload.py,
    # BaseWmtWorkload.compute_weighted_accuracy
    def compute_weighted_accuracy(
      self, logits: spec.Tensor, targets: spec.Tensor, weights: spec.Tensor
    ) -> Tuple[spec.Tensor, spec.Tensor]:
        """Compute weighted accuracy for log probs and targets.

        Args:
          logits: [batch, length, num_classes] float array.
          targets: categorical targets [batch, length] int array.
          weights: array of shape [batch, length]

        Returns:
          Tuple of scalar summed accuracy and batch normalizing factor.
        """
        if logits.ndim != targets.ndim + 1:
          raise ValueError(
            f'Incorrect shapes. Got shape {logits.shape} logits and '
            f'{targets.shape} targets.'
          )
        accuracy = (logits.argmax(-1) == targets) * weights
        normalizing_factor = weights.sum()
        return accuracy.sum(), normalizing_factor

    # VERBATIM algoperf/workloads/wmt/workload.py, BaseWmtWorkload._decode_tokens
    def _decode_tokens(self, toks: spec.Tensor) -> spec.Tensor:
        if isinstance(toks, torch.Tensor):
          toks = toks.cpu().numpy()
        valid_toks = toks[: np.argmax(toks == decode.EOS_ID) + 1].astype(np.int32)
        return self._tokenizer.detokenize(valid_toks).numpy().decode('utf-8')

    # VERBATIM algoperf/workloads/wmt/wmt_pytorch/workload.py,
    # WmtWorkload.eval_step
    def eval_step(
      self, params: spec.ParameterContainer, batch: Dict[str, spec.Tensor]
    ) -> Dict[str, spec.Tensor]:
        """Calculate evaluation metrics on a batch."""
        targets = batch['targets']
        weights = batch['weights']
        logits, _ = self.model_fn(
          params,
          batch,
          mode=spec.ForwardPassMode.EVAL,
          model_state=None,
          rng=None,
          update_batch_norm=False,
        )
        summed_loss = self.compute_weighted_cross_entropy(
          logits, targets, weights, 0.0
        )['summed']
        acc_sum, weight_sum = self.compute_weighted_accuracy(
          logits, targets, weights
        )
        return {
          'loss': summed_loss,
          'accuracy': acc_sum,
          'denominator': weight_sum,
        }

    # algoperf/workloads/wmt/wmt_pytorch/workload.py,
    # WmtWorkload._normalize_eval_metrics, without DDP and with a dict
    # comprehension for jax.tree.map.
    def _normalize_eval_metrics(self, num_examples, total_metrics):
        del num_examples
        total_metrics = {k: v.item() for k, v in total_metrics.items()}
        eval_denominator = total_metrics.pop('denominator')
        return {k: float(x / eval_denominator) for k, x in total_metrics.items()}

    # VERBATIM algoperf/workloads/wmt/wmt_pytorch/workload.py,
    # WmtWorkload.translate_and_calculate_bleu (one line added: the stub
    # predict_step reads the batch's targets)
    def translate_and_calculate_bleu(
      self,
      params: spec.ParameterContainer,
      ds_iter: Any,  # (tf.data.Dataset in AlgoPerf's annotation)
      num_batches: int,
      max_predict_length: int,
    ):
        """Translates the `ds_iter` and calculates the BLEU score."""
        # (logging.info('Translating evaluation dataset.') left out)
        references, predictions = [], []
        for _ in range(num_batches):
          pred_batch = next(ds_iter)
          inputs = pred_batch['inputs']
          targets = pred_batch['targets']
          self._current_targets = targets  # (the added line)
          predicted = self.predict_step(
            inputs, params, decode.EOS_ID, max_predict_length
          )

          # Find actual batch size, ignoring the potential padding.
          weights = pred_batch.get('weights')
          if weights is not None:
            actual_batch_size = weights.sum(0)[0].item()
          else:
            actual_batch_size = len(predicted)
          # Iterate through non-padding examples of batch.
          for idx in range(actual_batch_size):
            references.append(self._decode_tokens(targets[idx]))
            predictions.append(self._decode_tokens(predicted[idx]))

        # Calculate BLEU score for translated eval corpus against reference.
        bleu_score = bleu.corpus_bleu(predictions, [references]).score
        return bleu_score

    # VERBATIM algoperf/workloads/wmt/workload.py,
    # BaseWmtWorkload._eval_model_on_split
    def _eval_model_on_split(
      self,
      split: str,
      num_examples: int,
      global_batch_size: int,
      params: spec.ParameterContainer,
      model_state: spec.ModelAuxiliaryState,
      rng: spec.RandomState,
      data_dir: str,
      global_step: int = 0,
    ) -> Dict[str, float]:
        """Run a full evaluation of the model."""
        del model_state
        del global_step
        num_batches = int(math.ceil(num_examples / global_batch_size))
        if split not in self._eval_iters:
          # These iterators will repeat indefinitely.
          self._eval_iters[split] = self._build_input_queue(
            rng,
            split,
            data_dir,
            global_batch_size,
            num_batches,
            repeat_final_dataset=True,
          )

        eval_metrics = {}
        for _ in range(num_batches):
          eval_batch = next(self._eval_iters[split])
          metrics = self.eval_step(params, eval_batch)
          for metric_name, metric_value in metrics.items():
            if metric_name not in eval_metrics:
              eval_metrics[metric_name] = 0.0
            eval_metrics[metric_name] += metric_value
        eval_results = self._normalize_eval_metrics(num_examples, eval_metrics)

        eval_results['bleu'] = self.translate_and_calculate_bleu(
          params=params,
          ds_iter=self._eval_iters[split],
          num_batches=num_batches,
          max_predict_length=256,
        )

        return eval_results


# --- AlgoPerf's ImageNet workload ---------------------------------------------

class AlgoPerfImagenet:
    """ImagenetResNetWorkload (PyTorch) with the input queue from batchd;
    methods marked VERBATIM are AlgoPerf's code unchanged."""

    def __init__(self, server, num_validation_examples, eval_batch_size):
        self.server = server
        self._eval_iters = {}
        self.num_validation_examples = num_validation_examples
        self.eval_batch_size = eval_batch_size

    # VERBATIM algoperf/workloads/imagenet_resnet/workload.py,
    # num_eval_train_examples
    @property
    def num_eval_train_examples(self) -> int:
        # Round up from num_validation_examples (which is the default for
        # num_eval_train_examples) to the next multiple of eval_batch_size, so that
        # we don't have to extract the correctly sized subset of the training data.
        rounded_up_multiple = math.ceil(
          self.num_validation_examples / self.eval_batch_size
        )
        return rounded_up_multiple * self.eval_batch_size

    # The drop-in, in place of ImagenetResNetWorkload._build_dataset (test:
    # data_dir is the TFDS data_dir holding imagenet_v2/).
    def _build_input_queue(self, data_rng, split, data_dir, global_batch_size,
                           cache=None, repeat_final_dataset=None,
                           num_batches=None):
        return batchd.algoperf.input_queue(
            "imagenet", split, global_batch_size, data=data_dir,
            seed=int(data_rng[0]), num_batches=num_batches,
            repeat_final_dataset=bool(repeat_final_dataset),
            num_eval_train_examples=self.num_eval_train_examples,
            world_size=1, rank=0, server=self.server.address, timeout=60)

    # Stub: a "model" that always says class 0; its accuracy is the share of
    # class-0 examples, which a counted padding row (label 0) would raise.
    def model_fn(self, params, augmented_and_preprocessed_input_batch,
                 model_state, mode, rng, update_batch_norm):
        b = augmented_and_preprocessed_input_batch["inputs"].shape[0]
        logits = torch.zeros(b, 3)
        logits[:, 0] = 2.0
        return logits, None

    # VERBATIM algoperf/workloads/imagenet_resnet/imagenet_pytorch/workload.py,
    # ImagenetResNetWorkload.loss_fn
    def loss_fn(
      self,
      label_batch: spec.Tensor,  # Dense or one-hot labels.
      logits_batch: spec.Tensor,
      mask_batch: Optional[spec.Tensor] = None,
      label_smoothing: float = 0.0,
    ) -> Dict[str, spec.Tensor]:  # differentiable
        """Evaluate the (masked) loss function at (label_batch, logits_batch).

        Return {'summed': scalar summed loss, 'n_valid_examples': scalar number of
        valid examples in batch, 'per_example': 1-d array of per-example losses}
        (not synced across devices).
        """
        per_example_losses = F.cross_entropy(
          logits_batch,
          label_batch,
          reduction='none',
          label_smoothing=label_smoothing,
        )
        # `mask_batch` is assumed to be shape [batch].
        if mask_batch is not None:
          per_example_losses *= mask_batch
          n_valid_examples = mask_batch.sum()
        else:
          n_valid_examples = len(per_example_losses)
        summed_loss = per_example_losses.sum()
        return {
          'summed': summed_loss,
          'n_valid_examples': torch.as_tensor(n_valid_examples, device=DEVICE),
          'per_example': per_example_losses,
        }

    # VERBATIM algoperf/workloads/imagenet_resnet/imagenet_pytorch/workload.py,
    # ImagenetResNetWorkload._compute_metrics
    def _compute_metrics(
      self, logits: spec.Tensor, labels: spec.Tensor, weights: spec.Tensor
    ) -> Dict[str, spec.Tensor]:
        """Return the mean accuracy and loss as a dict."""
        if weights is None:
          weights = torch.ones(len(logits), device=DEVICE)
        predicted = torch.argmax(logits, 1)
        # Not accuracy, but nr. of correct predictions.
        accuracy = ((predicted == labels) * weights).sum()
        summed_loss = self.loss_fn(labels, logits, weights)['summed']
        return {'accuracy': accuracy, 'loss': summed_loss}

    # VERBATIM algoperf/workloads/imagenet_resnet/imagenet_pytorch/workload.py,
    # ImagenetResNetWorkload._eval_model_on_split
    def _eval_model_on_split(
      self,
      split: str,
      num_examples: int,
      global_batch_size: int,
      params: spec.ParameterContainer,
      model_state: spec.ModelAuxiliaryState,
      rng: spec.RandomState,
      data_dir: str,
      global_step: int = 0,
    ) -> Dict[str, float]:
        """Run a full evaluation of the model."""
        del global_step
        data_rng, model_rng = prng.split(rng, 2)
        if split not in self._eval_iters:
          is_test = split == 'test'
          # These iterators repeat indefinitely.
          self._eval_iters[split] = self._build_input_queue(
            data_rng,
            split=split,
            global_batch_size=global_batch_size,
            data_dir=data_dir,
            cache=is_test,
            repeat_final_dataset=is_test,
          )

        total_metrics = {
          'accuracy': torch.tensor(0.0, device=DEVICE),
          'loss': torch.tensor(0.0, device=DEVICE),
        }
        num_batches = int(math.ceil(num_examples / global_batch_size))
        for _ in range(num_batches):
          batch = next(self._eval_iters[split])
          logits, _ = self.model_fn(
            params,
            batch,
            model_state,
            spec.ForwardPassMode.EVAL,
            model_rng,
            update_batch_norm=False,
          )
          weights = batch.get('weights')
          batch_metrics = self._compute_metrics(logits, batch['targets'], weights)
          total_metrics = {
            k: v + batch_metrics[k] for k, v in total_metrics.items()
          }
        if USE_PYTORCH_DDP:
          for metric in total_metrics.values():
            dist.all_reduce(metric)  # noqa: F821
        return {k: float(v.item() / num_examples) for k, v in total_metrics.items()}


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
    subprocess.run([sys.executable, IMAGENET_TOOL, str(root / "imagenet"),
                    "--classes", "2", "--per-class", "6", "--val-per-class",
                    "3", "--no-odd", "--no-tfrecord"],
                   check=True, capture_output=True)
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

    subprocess.run([sys.executable, os.path.join(WMT_TOOLS, "generate_wmt.py"),
                    "--out", str(root / "wmt"), "--train", "200",
                    "--validation", "20", "--test", "10", "--shards", "2",
                    "--seed", "3"], check=True, capture_output=True)
    subprocess.run([sys.executable, os.path.join(WMT_TOOLS, "train_sentencepiece.py"),
                    "--data", str(root / "wmt"), "--vocab-size", str(VOCAB),
                    "--threads", "1"], check=True, capture_output=True)
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
    """_eval_model_on_split: num_batches for eval_step, num_batches more for
    translate_and_calculate_bleu (range(weights.sum(0)[0].item())), from one
    cached iterator, at every evaluation."""
    w = AlgoPerfWmt(server, str(data / "wmt"), num_validation_examples=20,
                    eval_batch_size=8)
    expected = detok(data, [en for _, en in kept_pairs(data, "validation")])
    assert len(expected) >= 15
    for evaluation in range(2):
        results = w._eval_model_on_split(
            "validation", num_examples=20, global_batch_size=8, params=None,
            model_state=None, rng=[7, 1], data_dir="wmt")
        # Every real target token right, padding not counted.
        assert results["accuracy"] == 1.0, evaluation
        predictions, references = bleu.last
        assert references == expected, evaluation
        assert predictions == references
        assert results["bleu"] == 100.0
    # 2 evaluations x (metrics + BLEU) x 3 batches: 4 passes of the split,
    # the queue started again 3 times.
    assert w._eval_iters["validation"].passes == 3


def test_wmt_eval_iterator_repeats_the_same_batches(server):
    # algoperf/workloads/wmt/input_pipeline.py, get_wmt_dataset:
    #   if num_batches:
    #     ds = ds.take(num_batches)
    #   if repeat_final_dataset:
    #     ds = ds.repeat()
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
    # algoperf/workloads/wmt/workload.py, BaseWmtWorkload._build_input_queue:
    #   weights = batch.get('weights')
    #   updated_weights = np.where(batch['targets'] > 0, 1, 0)
    #   if weights is not None:
    #     updated_weights = np.logical_and(weights, updated_weights)
    #   batch['weights'] = updated_weights
    # wmt_pytorch/workload.py, _build_input_queue:
    #   tensor = torch.as_tensor(value, dtype=torch.int64, device=DEVICE)
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
    """The baseline's update_params: workload.loss_fn(label_batch=
    batch['targets'], logits_batch=..., mask_batch=batch.get('weights'))
    (algorithms/baselines/external_tuning/pytorch_nadamw_full_budget.py),
    then loss = summed_loss / n_valid_examples."""
    w = AlgoPerfWmt(server, str(data / "wmt"), 20, 8)
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
    loss_dict = w.loss_fn(
        label_batch=batch['targets'],
        logits_batch=logits,
        mask_batch=batch.get('weights'),
        label_smoothing=0.0,
    )
    n_valid = int((batch["targets"] > 0).sum())
    assert int(loss_dict["n_valid_examples"]) == n_valid
    assert float(loss_dict["summed"]) == pytest.approx(
        n_valid * math.log(VOCAB), rel=1e-5)
    q.close()


def test_wmt_eval_train_is_padded_eval_batches_of_train(server, data):
    """eval_train through _eval_model_on_split: eval_step reads
    batch['weights']; the rows are train pairs, one per row, not packed."""
    w = AlgoPerfWmt(server, str(data / "wmt"), num_validation_examples=20,
                    eval_batch_size=8)
    n = w.num_eval_train_examples  # 24
    results = w._eval_model_on_split(
        "eval_train", num_examples=n, global_batch_size=8, params=None,
        model_state=None, rng=[3, 0], data_dir="wmt")
    assert results["accuracy"] == 1.0
    predictions, references = bleu.last
    # The first n kept train pairs, in file order (see batchd.algoperf).
    assert references == detok(data, [en for _, en in
                                       kept_pairs(data, "train")[:n]])
    q = w._eval_iters["eval_train"]
    batch = next(q)  # a third pass starts: the same first batch
    assert list(batch) == ["inputs", "targets", "weights"]
    assert {t.dtype for t in batch.values()} == {torch.int64}
    # One pair per row: EOS once per row, nothing after it.
    for row in batch["targets"]:
        eos = (row == 2).nonzero().flatten().tolist()
        assert len(eos) == 1 and not row[eos[0] + 1:].any()


# --- ImageNet -----------------------------------------------------------------

def test_imagenet_evaluation_cycles_and_masks_padding(server, data):
    """_eval_model_on_split draws ceil(num_examples / global_batch_size)
    batches per evaluation from a cached data_utils.cycle iterator:

        # algoperf/data_utils.py, cycle
        while True:
          try:
            batch = next(iterator)
            ...
          except StopIteration:
            ...
            iterator = iter(iterable)
    """
    w = AlgoPerfImagenet(server, num_validation_examples=6, eval_batch_size=4)
    labels = [y for _, y in datasets.ImageFolder(
        str(data / "imagenet" / "val")).samples]
    share = labels.count(0) / len(labels)
    ce = float(F.cross_entropy(torch.tensor([[2.0, 0, 0]]), torch.tensor([0])))
    ce_other = float(F.cross_entropy(torch.tensor([[2.0, 0, 0]]),
                                     torch.tensor([1])))
    for evaluation in range(3):
        r = w._eval_model_on_split("validation", num_examples=6,
                                   global_batch_size=4, params=None,
                                   model_state=None, rng=[0, 0],
                                   data_dir="imagenet")
        assert r["accuracy"] == pytest.approx(share), evaluation
        assert r["loss"] == pytest.approx(
            share * ce + (1 - share) * ce_other, rel=1e-5), evaluation
    q = w._eval_iters["validation"]
    assert q.passes == 2
    a = [next(q) for _ in range(2)]
    b = [next(q) for _ in range(2)]
    assert same_batches(a, b)


def test_imagenet_eval_train_is_algoperfs_seeded_subset(server, data):
    # algoperf/workloads/imagenet_resnet/imagenet_pytorch/workload.py,
    # _build_dataset:
    #   if split == 'eval_train':
    #     indices = list(range(self.num_train_examples))
    #     random.Random(int(data_rng[0])).shuffle(indices)
    #     dataset = torch.utils.data.Subset(
    #       dataset, indices[: self.num_eval_train_examples]
    #     )
    # with the eval transform: Resize(256), CenterCrop(224).
    ref = datasets.ImageFolder(str(data / "imagenet" / "train"))
    w = AlgoPerfImagenet(server, num_validation_examples=6, eval_batch_size=4)
    n = w.num_eval_train_examples  # 8 of 12
    seed = 12345
    indices = list(range(len(ref.samples)))
    random.Random(seed).shuffle(indices)
    subset = indices[:n]
    labels = [ref.samples[i][1] for i in subset]
    r = w._eval_model_on_split("eval_train", num_examples=n,
                               global_batch_size=4, params=None,
                               model_state=None, rng=[seed, 0],
                               data_dir="imagenet")
    assert r["accuracy"] == pytest.approx(labels.count(0) / n)
    q = w._eval_iters["eval_train"]
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
    # algoperf/workloads/imagenet_resnet/imagenet_v2.py, get_imagenet_v2_iter:
    #   ds = tfds.load('imagenet_v2/matched-frequency:3.0.0', split='test',
    #                  data_dir=data_dir, ...)
    #   return {'inputs': image, 'targets': example['label']}
    # imagenet_pytorch/workload.py: map(imagenet_v2_to_torch,
    #                                   itertools.cycle(np_iter))
    labels = [int(v) for v in (data / "v2_labels.txt").read_text().split()]
    w = AlgoPerfImagenet(server, num_validation_examples=6, eval_batch_size=4)
    r = w._eval_model_on_split("test", num_examples=len(labels),
                               global_batch_size=4, params=None,
                               model_state=None, rng=[0, 0],
                               data_dir="imagenet_v2_tfds")
    assert r["accuracy"] == pytest.approx(labels.count(0) / len(labels))
    q = w._eval_iters["test"]
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
    # submission_runner.py, train_once: the previous step's batch is alive
    # while data_selection draws the next,
    #     batch = data_selection(workload, input_queue, ...)
    #     ... update_params(..., batch=batch, ...)
    # and a submission's data_selection may keep batches of its own.
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
