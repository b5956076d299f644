"""Helpers shared by the Python suites that are not fixtures: where the
tree's tools are, the generators of small WMT and ImageNet sets, and the
Python reference of WMT's tokenization. Fixtures live in conftest.py, the
daemon in batchd_daemon.py; no test module imports another.
"""

import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
WMT_TOOLS = os.path.join(REPO, "workloads", "wmt", "tools")
IMAGENET_TOOL = os.path.join(REPO, "workloads", "imagenet", "make_imagenet.py")
# AlgoPerf's WMT length limit: a pair is kept when both sides, EOS
# included, have at most this many tokens.
MAX_LENGTH = 256


def generate_wmt(out, *, train, validation, test, shards, seed):
    """Writes a WMT-like set of sentence pairs (TFDS shards and aligned
    text files) to out with workloads/wmt/tools/generate_wmt.py."""
    subprocess.run([sys.executable, os.path.join(WMT_TOOLS, "generate_wmt.py"),
                    "--out", str(out), "--train", str(train),
                    "--validation", str(validation), "--test", str(test),
                    "--shards", str(shards), "--seed", str(seed)],
                   check=True, capture_output=True)
    return out


def train_sentencepiece(data, *, vocab_size, threads=1):
    """Trains data/wmt_sentencepiece_model on data's train pairs."""
    subprocess.run([sys.executable,
                    os.path.join(WMT_TOOLS, "train_sentencepiece.py"),
                    "--data", str(data), "--vocab-size", str(vocab_size),
                    "--threads", str(threads)],
                   check=True, capture_output=True)


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
    subprocess.run([sys.executable, IMAGENET_TOOL, str(out),
                    *map(str, args)], check=True, capture_output=True)
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
