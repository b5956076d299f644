"""The librispeech workload through a daemon and batchd.algoperf: every
split's examples against AlgoPerf's, computed independently by
reference/librispeech_ref.py with numpy in the reference venv (eval splits
in order, train as a multiset over one epoch), the drop-in's keys, dtypes,
shapes, device and repeat, resume from state_dict, and two ranks.

    BATCHD_BIN=<build>/server/batchd PYTHONPATH=<build>/python \\
        /usr/bin/python3 -m pytest tests/python/test_librispeech.py
"""

import shutil

import pytest

from helpers import algoperf_queue, run_reference
from librispeech_digest import utterance_digest

torch = pytest.importorskip("torch")

SEED = 3
EVAL_TRAIN = 10  # of the 16 train utterances
SIZES = {"train": 16, "eval_train": EVAL_TRAIN, "validation": 7, "test": 5}


@pytest.fixture(scope="module")
def reference(librispeech_data):
    """split -> AlgoPerf's examples in order: (digest, audio length, target
    length) per utterance."""
    out = {}
    for split in SIZES:
        lines = run_reference("librispeech_ref.py",
                              librispeech_data / "librispeech", split, SEED,
                              EVAL_TRAIN).split("\n")
        out[split] = [tuple(l.split()) for l in lines if l]
        assert len(out[split]) == SIZES[split], split
    return out


@pytest.fixture
def server(librispeech_data, tmp_path):
    from batchd_daemon import Server
    s = Server(tmp_path)
    shutil.copytree(librispeech_data / "librispeech",
                    s.data / "librispeech")
    yield s
    s.stop()


def queue(server, split, g, **kwargs):
    return algoperf_queue(server, "librispeech", split, g, seed=SEED,
                          num_eval_train_examples=EVAL_TRAIN, **kwargs)


def check_structure(batch, b):
    """AlgoPerf's batch: default_collate of ((audio, audio_paddings),
    (targets, target_paddings)) zipped with the keys inputs and targets."""
    assert set(batch) == {"inputs", "targets"}
    for key, width in (("inputs", 320000), ("targets", 256)):
        assert isinstance(batch[key], list) and len(batch[key]) == 2, key
        for t in batch[key]:
            assert t.dtype == torch.float32, key
            assert tuple(t.shape) == (b, width), key
            assert t.device.type == "cpu"  # no GPU here: the default device


def rows(batch):
    """Each utterance of a batch as the reference describes it."""
    audio_paddings, target_paddings = batch["inputs"][1], batch["targets"][1]
    return [(utterance_digest(batch, i),
             str(int((audio_paddings[i] == 0).sum())),
             str(int((target_paddings[i] == 0).sum())))
            for i in range(audio_paddings.shape[0])]


@pytest.mark.parametrize("split", ["validation", "test", "eval_train"])
def test_eval_splits_are_algoperfs_in_order(server, reference, split):
    g = 4
    q = queue(server, split, g)
    got, sizes = [], []
    for _ in range(-(-SIZES[split] // g)):
        batch = next(q)
        sizes.append(batch["inputs"][0].shape[0])
        check_structure(batch, sizes[-1])
        got += rows(batch)
    assert got == reference[split]
    # The last batch is short, as AlgoPerf's: batchd's padding is cut off.
    assert sizes[-1] == SIZES[split] - g * (len(sizes) - 1)
    # And the queue repeats the pass, as data_utils.cycle does.
    assert rows(next(q)) == reference[split][:g]
    q.close()


def test_train_epoch_is_a_multiset_of_algoperfs(server, reference):
    g = 4
    q = queue(server, "train", g)
    epochs = []
    for _ in range(2):
        got = []
        for _ in range(SIZES["train"] // g):
            batch = next(q)
            check_structure(batch, g)
            got += rows(batch)
        assert sorted(got) == sorted(reference["train"])
        epochs.append(got)
    assert epochs[0] != epochs[1]  # shuffled again
    q.close()


def test_values_are_exact(server, librispeech_data):
    """One utterance's tensors against its files, value by value."""
    import numpy as np
    data = librispeech_data / "librispeech"
    utt = (data / "test-clean.csv").read_text().split("\n")[1].split(",")[1]
    audio = np.load(data / "test-clean" / f"{utt}_audio.npy")
    targets = np.load(data / "test-clean" / f"{utt}_targets.npy")
    q = queue(server, "test", 1)
    batch = next(q)
    n, m = len(audio), len(targets)
    a, ap = batch["inputs"][0][0].numpy(), batch["inputs"][1][0].numpy()
    t, tp = batch["targets"][0][0].numpy(), batch["targets"][1][0].numpy()
    assert (a[:n] == audio.astype(np.float32)).all() and (a[n:] == 0).all()
    assert (ap[:n] == 0).all() and (ap[n:] == 1).all()
    assert (t[:m] == targets.astype(np.float32)).all() and (t[m:] == 0).all()
    assert (tp[:m] == 0).all() and (tp[m:] == 1).all()
    assert t[m - 1] == 2  # EOS
    q.close()


def test_state_dict_resumes_the_same_batches(server):
    q = queue(server, "train", 4, stream="resume-a")
    for _ in range(3):
        next(q)
    state = q.state_dict()
    expected = [rows(next(q)) for _ in range(3)]
    q.close()
    r = queue(server, "train", 4, stream="resume-b", state=state)
    assert [rows(next(r)) for _ in range(3)] == expected
    r.close()


@pytest.mark.parametrize("split", ["train", "validation"])
def test_two_ranks_are_disjoint_and_complete(server, reference, split):
    g = 4
    queues = [queue(server, split, g, world_size=2, rank=r,
                    stream=f"ranks-{split}") for r in range(2)]
    seen = []
    steps = SIZES[split] // g if split == "train" else -(-SIZES[split] // g)
    for _ in range(steps):
        parts = [rows(next(q)) for q in queues]
        assert not set(parts[0]) & set(parts[1])
        seen += parts[0] + parts[1]
    if split == "train":
        assert sorted(seen) == sorted(reference[split])
    else:
        assert seen == reference[split]
    for q in queues:
        q.close()


def test_a_truncated_file_fails_the_stream_naming_it(server):
    data = server.data / "librispeech"
    utt = (data / "dev-other.csv").read_text().split("\n")[1].split(",")[1]
    path = data / "dev-other" / f"{utt}_audio.npy"
    path.write_bytes(path.read_bytes()[:1000])
    q = queue(server, "validation", 7)
    with pytest.raises(Exception) as err:
        next(q)
    log = server.log_path.read_text()
    assert f"{utt}_audio.npy" in str(err.value) + log
    assert "truncated" in str(err.value) + log
