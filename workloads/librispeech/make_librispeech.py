#!/usr/bin/env python3
"""Writes a small LibriSpeech set in the layout AlgoPerf's
datasets/librispeech_preprocess.py leaves (numpy only):

    OUT/{subset}.csv                 ",id" then "ROWINDEX,UTTERANCE_ID"
    OUT/{subset}/{utt}_audio.npy     int64 [n], int16 values, n <= 320000
    OUT/{subset}/{utt}_targets.npy   int32 [m], 3 <= id < vocab, EOS (2) last

for the six subsets AlgoPerf reads. Utterance ids are
SPEAKER-CHAPTER-NNNN as LibriSpeech names them; rows are in a shuffled
order (the preprocessing lists directories unsorted). The first utterance
of every subset is at the 320,000-sample cap and the second at 256 tokens,
so both limits are met. Deterministic from --seed.

--stats picks the other lengths and the samples:
  uniform      (the default; the tests' small sets) lengths uniform up to
               --max-audio samples and 256 tokens, samples uniform over
               int16: a mean of ~10 s an utterance.
  librispeech  LibriSpeech's train set as AlgoPerf keeps it (utterances of
               at most 20 s): durations from a histogram of 1 s bins shaped
               like LibriSpeech's (most between 12 and 17 s, a long tail of
               short ones; mean ~12.2 s, ~195,000 samples, ~1.6 MB of int64
               a file), transcripts of ~5 tokens a second, and samples like
               speech (Laplacian around 0, each utterance its own loudness,
               mostly within a few thousand) rather than full-scale noise. For
               benchmarks (bench/librispeech_bench.py), where the per-file
               size sets the work an utterance costs.
"""

import argparse
import os

import numpy as np

SUBSETS = ("train-clean-100", "train-clean-360", "train-other-500",
           "dev-clean", "dev-other", "test-clean")
MAX_AUDIO = 320000
MAX_TARGETS = 256
EOS = 2
RATE = 16000
# Weights of 1 s duration bins [1, 2), [2, 3), ..., [19, 20] s: LibriSpeech's
# train utterances (segmented at up to 35 s, most 12-17 s; AlgoPerf drops
# those over 320,000 samples) approximated; mean ~12.2 s, sd ~4.5 s.
DURATION_BINS = (1.5, 2.5, 3.0, 3.2, 3.4, 3.6, 3.9, 4.2, 4.6, 5.2, 6.0, 7.5,
                 9.5, 11.5, 12.0, 10.0, 6.5, 3.5, 1.5)
TOKENS_PER_SECOND = 5.0  # ~15 characters a second, ~3 per unigram piece


# The lengths (samples, tokens) of a subset's i-th utterance: the first at
# the sample cap, the second at the token cap.

def uniform_lengths(rng, max_audio, i):
    n = max_audio if i == 0 else int(rng.integers(1, max_audio + 1))
    m = MAX_TARGETS if i == 1 else int(rng.integers(1, MAX_TARGETS + 1))
    return n, m


def librispeech_lengths(rng, max_audio, i):
    w = np.asarray(DURATION_BINS)
    seconds = 1 + int(rng.choice(len(w), p=w / w.sum())) + rng.random()
    n = min(int(seconds * RATE), max_audio)
    m = int(round(seconds * TOKENS_PER_SECOND * rng.normal(1.0, 0.15)))
    m = min(max(m, 1), MAX_TARGETS)
    return (max_audio if i == 0 else n), (MAX_TARGETS if i == 1 else m)


def uniform_audio(rng, n):
    return rng.integers(-32768, 32768, size=n, dtype=np.int64)


def speech_audio(rng, n):
    scale = float(np.exp(rng.uniform(np.log(150), np.log(1500))))
    return np.clip(np.rint(rng.laplace(0.0, scale, size=n)), -32768,
                   32767).astype(np.int64)


STATS = {"uniform": (uniform_lengths, uniform_audio),
         "librispeech": (librispeech_lengths, speech_audio)}


def write_subset(out, subset, count, rng, max_audio, vocab,
                 stats="uniform"):
    lengths, samples = STATS[stats]
    os.makedirs(os.path.join(out, subset), exist_ok=True)
    ids = []
    for i in range(count):
        speaker = int(rng.integers(10, 9000))
        ids.append(f"{speaker}-{int(rng.integers(1000, 200000))}-{i:04d}")
    rng.shuffle(ids)
    for i, utt in enumerate(ids):
        n, m = lengths(rng, max_audio, i)
        audio = samples(rng, n)
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
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("out")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--per-subset", type=int, nargs=6,
                   default=[6, 5, 4, 4, 3, 5], metavar="N",
                   help="utterances of each subset, in the order "
                   + ", ".join(SUBSETS))
    p.add_argument("--max-audio", type=int, default=MAX_AUDIO,
                   help="longest utterance, in samples (at most 320000)")
    p.add_argument("--vocab", type=int, default=1024)
    p.add_argument("--stats", choices=sorted(STATS), default="uniform",
                   help="lengths and samples: uniform (small test sets) or "
                   "librispeech (LibriSpeech's, for benchmarks; see above)")
    a = p.parse_args()
    if not 1 <= a.max_audio <= MAX_AUDIO:
        p.error(f"--max-audio must be in [1, {MAX_AUDIO}]")
    rng = np.random.default_rng(a.seed)
    os.makedirs(a.out, exist_ok=True)
    for subset, count in zip(SUBSETS, a.per_subset):
        write_subset(a.out, subset, count, rng, a.max_audio, a.vocab,
                     a.stats)


if __name__ == "__main__":
    main()
