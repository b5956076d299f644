"""finewebedu_lm's windows computed with the packages AlgoPerf uses:
`datasets.load_from_disk` of a save_to_disk folder, its rows in order as
one flat token stream (numpy), cut into 1,025-token windows, the last
partial window dropped; inputs the first 1,024 tokens, targets the last.

  lm_ref.py OUT.npz SPLIT_FOLDER
"""
import sys

import datasets
import numpy as np


def main():
    out, folder = sys.argv[1:3]
    ds = datasets.load_from_disk(folder).with_format("numpy")
    rows = [np.asarray(r, dtype=np.int64) for r in ds["input_ids"]]
    flat = np.concatenate(rows) if rows else np.zeros(0, np.int64)
    n = len(flat) // 1025
    w = flat[:n * 1025].reshape(n, 1025)
    np.savez(out, inputs=w[:, :1024].astype(np.int32), targets=w[:, 1:])


if __name__ == "__main__":
    main()
