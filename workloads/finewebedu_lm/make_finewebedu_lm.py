#!/usr/bin/env python3
"""Writes a small finewebedu_lm data set in AlgoPerf's layout.

OUT/train and OUT/val are Hugging Face `Dataset.save_to_disk` folders
(data-XXXXX-of-NNNNN.arrow Arrow IPC stream files, dataset_info.json,
state.json) of one column `input_ids`, list<int32>, rows of 2,049 token ids
below 50,257, deterministic from --seed. Needs the `datasets` package (the
layout is its own): run it with the Python of scripts/reference-venv.sh.

Which of AlgoPerf's set's statistics it follows (AlgoPerf's
datasets/dataset_setup.py): the layout, the column's type and the row
length (every row 2,049 tokens: documents of GPT-2 tokens, ~1,000 tokens
on average and heavy-tailed, each ending in EOS 50256, concatenated and
cut into rows) exactly; not the ids, which are uniform here, nor where the
EOS tokens fall: the pipeline cuts a flat stream of fixed-width int32
tokens into windows and never looks at a value, so neither changes its
work. The real train split is ~4.4 M rows in shards of at most 500 MB
(--train-rows, --shards; bench/lm_scale.py makes a ~1 G-token set).

  make_finewebedu_lm.py OUT --train-rows 40 --val-rows 12 --shards 2
"""
import os
import sys

import numpy as np
import datasets

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), "common"))
import generator_cli  # noqa: E402

ROW = 2049
VOCAB = 50257


def write(path, rows, shards, rng):
    ids = rng.integers(0, VOCAB, size=(rows, ROW), dtype=np.int32)
    features = datasets.Features(
        {"input_ids": datasets.Sequence(datasets.Value("int32"))})
    ds = datasets.Dataset.from_dict({"input_ids": [r.tolist() for r in ids]},
                                    features=features)
    ds.save_to_disk(path, num_shards=shards)


def main():
    a = generator_cli.parser(__doc__, train_rows=40, val_rows=12, shards=2,
                             seed=0).parse_args()
    rng = np.random.default_rng(a.seed)
    os.makedirs(a.out, exist_ok=True)
    write(os.path.join(a.out, "train"), a.train_rows, a.shards, rng)
    write(os.path.join(a.out, "val"), a.val_rows, min(a.shards, a.val_rows),
          rng)


if __name__ == "__main__":
    main()
