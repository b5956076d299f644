#!/usr/bin/python3
"""Trains a SentencePiece model for the wmt workload the way AlgoPerf does
(algorithmic_efficiency/workloads/wmt/tokenizer.py): the train split's pairs
in order, German line then English line, until at least --max-chars bytes
(10^7) have been written; then a unigram model, character_coverage 1.0,
SentencePiece's default ids (unk 0, bos 1, eos 2). AlgoPerf's model has
32 000 pieces; a tiny generated set wants 1 000 - 2 000.

    train_sentencepiece.py --data DIR [--vocab-size 32000]
                           [--output DIR/wmt_sentencepiece_model]
"""

import argparse
import os
import shutil
import sys
import tempfile

import sentencepiece as spm

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wmt_data  # noqa: E402


def dump_chars(data, split, max_chars, path):
    count = 0
    with open(path, "wb") as out:
        for de, en in wmt_data.read_pairs(data, split):
            if count >= max_chars:
                break
            for line in (de, en):
                out.write(line + b"\n")
                count += len(line) + 1
    return count


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--split", default="train")
    ap.add_argument("--vocab-size", type=int, default=32000)
    ap.add_argument("--max-chars", type=int, default=10**7)
    ap.add_argument("--output")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args()
    output = args.output or os.path.join(args.data, "wmt_sentencepiece_model")
    with tempfile.TemporaryDirectory(prefix="wmt-spm-") as tmp:
        corpus = os.path.join(tmp, "chars.txt")
        chars = dump_chars(args.data, args.split, args.max_chars, corpus)
        prefix = os.path.join(tmp, "model")
        spm.SentencePieceTrainer.Train(
            f"--input={corpus} --vocab_size={args.vocab_size} "
            f"--character_coverage=1.0 --model_prefix={prefix} "
            f"--model_type=unigram --num_threads={args.threads} "
            "--minloglevel=1")
        shutil.copyfile(prefix + ".model", output)
    print(f"train_sentencepiece: {args.vocab_size} pieces from {chars} "
          f"characters -> {output}")


if __name__ == "__main__":
    main()
