"""AlgoPerf's LibriSpeech examples, computed with numpy the way its
LibriSpeechDataset (librispeech_conformer/input_pipeline.py) does: the
subsets' CSVs read with csv.reader (header skipped, column 1), each
utterance's audio padded with 0 to 320,000 and its paddings 1 there,
targets padded with 0 to 256 and their paddings 1 there, all four cast to
float32; eval_train is random.Random(seed).shuffle of the train indices,
the first N of them.

    librispeech_ref.py DATA SPLIT SEED EVAL_TRAIN_EXAMPLES

prints one line per example of the split, in its order: the sha256 of the
four float32 arrays' bytes (audio, audio_paddings, targets,
target_paddings), then the audio and target lengths.
"""

import csv
import hashlib
import random
import sys

import numpy as np

SUBSETS = {
    "train": ["train-clean-100", "train-clean-360", "train-other-500"],
    "eval_train": ["train-clean-100", "train-clean-360", "train-other-500"],
    "validation": ["dev-clean", "dev-other"],
    "test": ["test-clean"],
}


def example(data, example_id):
    audio = np.load(f"{data}/{example_id}_audio.npy")
    targets = np.load(f"{data}/{example_id}_targets.npy")
    assert audio.dtype == np.int64 and targets.dtype == np.int32
    audio_paddings = np.pad(np.zeros_like(audio, dtype=np.float32),
                            (0, 320000 - audio.shape[0]), constant_values=1.0)
    padded_audio = np.pad(audio, (0, 320000 - audio.shape[0]),
                          constant_values=0.0)
    target_paddings = np.pad(np.zeros_like(targets, dtype=np.float32),
                             (0, 256 - targets.shape[0]), constant_values=1.0)
    padded_targets = np.pad(targets, (0, 256 - targets.shape[0]),
                            constant_values=0)
    arrays = [a.astype(np.float32) for a in (padded_audio, audio_paddings,
                                             padded_targets, target_paddings)]
    digest = hashlib.sha256()
    for a in arrays:
        digest.update(np.ascontiguousarray(a).tobytes())
    return f"{digest.hexdigest()} {audio.shape[0]} {targets.shape[0]}"


def main():
    data, split, seed, eval_train = sys.argv[1], sys.argv[2], int(
        sys.argv[3]), int(sys.argv[4])
    ids = []
    for subset in SUBSETS[split]:
        with open(f"{data}/{subset}.csv", newline="") as f:
            rows = list(csv.reader(f))
        ids += [f"{subset}/{row[1]}" for row in rows[1:]]
    if split == "eval_train":
        indices = list(range(len(ids)))
        random.Random(seed).shuffle(indices)
        ids = [ids[i] for i in indices[:eval_train]]
    for example_id in ids:
        print(example(data, example_id))


if __name__ == "__main__":
    main()
