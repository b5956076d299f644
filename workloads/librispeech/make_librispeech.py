#!/usr/bin/env python3
"""Writes a small LibriSpeech set in the layout AlgoPerf's
datasets/librispeech_preprocess.py leaves (numpy only):

    OUT/{subset}.csv                 ",id" then "ROWINDEX,UTTERANCE_ID"
    OUT/{subset}/{utt}_audio.npy     int64 [n], int16 values, n <= 320000
    OUT/{subset}/{utt}_targets.npy   int32 [m], 3 <= id < vocab, EOS (2) last

for the six subsets AlgoPerf reads. Utterance ids are
SPEAKER-CHAPTER-NNNN as LibriSpeech names them; rows are in a shuffled
order (the preprocessing lists directories unsorted). Lengths are random,
with the first utterance of every subset at the 320,000-sample cap and
the second at 256 tokens, so both limits are met. Deterministic from
--seed.
"""

import argparse
import os

import numpy as np

SUBSETS = ("train-clean-100", "train-clean-360", "train-other-500",
           "dev-clean", "dev-other", "test-clean")
MAX_AUDIO = 320000
MAX_TARGETS = 256
EOS = 2


def write_subset(out, subset, count, rng, max_audio, vocab):
    os.makedirs(os.path.join(out, subset), exist_ok=True)
    ids = []
    for i in range(count):
        speaker = int(rng.integers(10, 9000))
        ids.append(f"{speaker}-{int(rng.integers(1000, 200000))}-{i:04d}")
    rng.shuffle(ids)
    for i, utt in enumerate(ids):
        n = max_audio if i == 0 else int(rng.integers(1, max_audio + 1))
        m = MAX_TARGETS if i == 1 else int(rng.integers(1, MAX_TARGETS + 1))
        audio = rng.integers(-32768, 32768, size=n, dtype=np.int64)
        if n > 1:
            audio[:2] = (-32768, 32767)  # both ends of int16
        targets = rng.integers(3, vocab, size=m, dtype=np.int32)
        targets[-1] = EOS
        base = os.path.join(out, subset, utt)
        np.save(base + "_audio.npy", audio)
        np.save(base + "_targets.npy", targets)
    with open(os.path.join(out, subset + ".csv"), "w") as f:
        f.write(",id\n")
        for i, utt in enumerate(ids):
            f.write(f"{i},{utt}\n")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--per-subset", type=int, nargs=6,
                   default=[6, 5, 4, 4, 3, 5], metavar="N",
                   help="utterances of each subset, in the order "
                   + ", ".join(SUBSETS))
    p.add_argument("--max-audio", type=int, default=MAX_AUDIO,
                   help="longest utterance, in samples (at most 320000)")
    p.add_argument("--vocab", type=int, default=1024)
    a = p.parse_args()
    if not 1 <= a.max_audio <= MAX_AUDIO:
        p.error(f"--max-audio must be in [1, {MAX_AUDIO}]")
    rng = np.random.default_rng(a.seed)
    os.makedirs(a.out, exist_ok=True)
    for subset, count in zip(SUBSETS, a.per_subset):
        write_subset(a.out, subset, count, rng, a.max_audio, a.vocab)


if __name__ == "__main__":
    main()
