"""The fastmri workload through a daemon and batchd.algoperf: every split's
slices against AlgoPerf's transform computed independently by
reference/fastmri_ref.py with TensorFlow and h5py in the reference venv
(eval splits in order, with TF's own stateless uniforms for the mask; train
as a multiset over one epoch), the drop-in's keys, dtypes, shapes, weights
and repeat, resume from state_dict, two ranks, and damaged volumes.

    BATCHD_BIN=<build>/server/batchd PYTHONPATH=<build>/python \\
        /usr/bin/python3 -m pytest tests/python/test_fastmri.py
"""

import shutil

import numpy as np
import pytest

from helpers import algoperf_queue, run_reference

torch = pytest.importorskip("torch")

SEED = 3
VALIDATION_FILES = 2  # of the 3 val volumes: test has the third
EVAL_TRAIN = 7
OPTIONS = {"validation_files": VALIDATION_FILES}
# Largest difference allowed between batchd's and TF's normalised values.
# Both are float32 FFTs of the same 640 x width array by different
# algorithms (FFTW's, TF's): each output carries a rounding error of a few
# float32 ulps (1.2e-7) of the image's scale times log2(640 x width) ~ 18,
# ~1e-6 of the largest magnitude, which division by the std (a few times
# smaller) makes a few 1e-6; the largest difference seen is 1.9e-6 (inputs)
# and 7e-7 (targets). 2e-5 leaves a margin of ten, and stays four orders
# below the effect of one column more or less in the mask (~0.1).
TOLERANCE = 2e-5


@pytest.fixture(scope="module")
def reference(fastmri_data, tmp_path_factory):
    """split -> AlgoPerf's slices in order (arrays of fastmri_ref.py)."""
    out = {}
    tmp = tmp_path_factory.mktemp("fastmri-ref")
    for split in ("train", "eval_train", "validation", "test"):
        sub = "train" if split in ("train", "eval_train") else "val"
        files = sorted((fastmri_data / f"knee_singlecoil_{sub}").glob("*.h5"))
        path = tmp / f"{split}.npz"
        run_reference("fastmri_ref.py", path, split, SEED, VALIDATION_FILES,
                      EVAL_TRAIN, *files)
        out[split] = dict(np.load(path))
    assert len(out["eval_train"]["mean"]) == EVAL_TRAIN
    return out


@pytest.fixture
def server(fastmri_data, tmp_path):
    from batchd_daemon import Server
    s = Server(tmp_path)
    shutil.copytree(fastmri_data, s.data / "fastmri")
    yield s
    s.stop()


def queue(server, split, g, **kwargs):
    return algoperf_queue(server, "fastmri", split, g, seed=SEED,
                          options=OPTIONS, num_eval_train_examples=EVAL_TRAIN,
                          **kwargs)


def check_structure(batch, b, split):
    keys = {"inputs", "targets", "mean", "std", "volume_max"}
    if split != "train":
        keys.add("weights")
    assert set(batch) == keys
    for key in ("inputs", "targets"):
        assert batch[key].dtype == torch.float32
        assert tuple(batch[key].shape) == (b, 320, 320)
    for key in ("mean", "std", "volume_max"):
        assert batch[key].dtype == torch.float32
        assert tuple(batch[key].shape) == (b,)
    if split != "train":
        assert batch["weights"].dtype == torch.float64
        assert tuple(batch["weights"].shape) == (b,)
    assert batch["inputs"].device.type == "cpu"  # no GPU here


def assert_row_is(batch, i, ref, j):
    """Row i of a batch is reference slice j."""
    for key in ("inputs", "targets"):
        diff = np.abs(batch[key][i].numpy() - ref[key][j]).max()
        assert diff <= TOLERANCE, (key, j, diff)
    for key in ("mean", "std"):
        assert batch[key][i].item() == pytest.approx(float(ref[key][j]),
                                                     rel=2e-6), (key, j)
    assert batch["volume_max"][i].item() == ref["volume_max"][j]


@pytest.mark.parametrize("split", ["validation", "test", "eval_train"])
def test_eval_splits_are_algoperfs_in_order(server, reference, split):
    ref = reference[split]
    n = len(ref["mean"])
    g = 4
    q = queue(server, split, g, repeat_final_dataset=True)
    steps = -(-n // g)
    for step in range(steps):
        batch = next(q)
        check_structure(batch, g, split)
        real = min(g, n - step * g)
        for i in range(real):
            assert_row_is(batch, i, ref, step * g + i)
        # AlgoPerf pads the last batch with zero rows of weight 0.
        assert batch["weights"].tolist() == [1.0] * real + [0.0] * (g - real)
        for i in range(real, g):
            for key in ("inputs", "targets", "mean", "std", "volume_max"):
                assert not batch[key][i].any(), key
    # repeat_final_dataset: the same pass again.
    again = next(q)
    for i in range(min(g, n)):
        assert_row_is(again, i, ref, i)
    q.close()


def test_eval_masks_are_tfs_and_train_masks_are_seeded(reference):
    """The reference's eval masks come from TF's stateless uniform with
    AlgoPerf's seed (0, 0): 97 of 368 columns (AlgoPerf's figure); train
    masks vary from slice to slice with acceleration 4."""
    val = reference["validation"]
    for mask, width in zip(val["masks"], val["widths"]):
        if width == 368:
            assert mask.sum() == 97
    train = reference["train"]
    assert len({m.tobytes() for m in train["masks"]}) == len(train["masks"])
    kept = sum(int(m.sum()) for m in train["masks"])
    assert 0.2 < kept / train["widths"].sum() < 0.35


def test_train_epoch_is_a_multiset_of_the_reference(server, reference):
    ref = reference["train"]
    n = len(ref["mean"])
    g = 2
    q = queue(server, "train", g)
    orders = []
    for _ in range(2):
        order = []
        for _ in range(n // g):
            batch = next(q)
            check_structure(batch, g, "train")
            for i in range(g):
                # Which reference slice this is: the nearest, which must be
                # within the tolerance.
                diffs = np.abs(ref["inputs"] -
                               batch["inputs"][i].numpy()).max(axis=(1, 2))
                j = int(diffs.argmin())
                assert_row_is(batch, i, ref, j)
                order.append(j)
        assert len(set(order)) == len(order) == (n // g) * g
        orders.append(order)
    assert orders[0] != orders[1]  # shuffled again
    q.close()


def test_state_dict_resumes_the_same_batches(server):
    q = queue(server, "train", 2, stream="resume-a")
    for _ in range(2):
        next(q)
    state = q.state_dict()
    expected = [next(q)["inputs"] for _ in range(3)]
    q.close()
    r = queue(server, "train", 2, stream="resume-b", state=state)
    for want in expected:
        assert torch.equal(next(r)["inputs"], want)
    r.close()


@pytest.mark.parametrize("split", ["train", "validation"])
def test_two_ranks_are_disjoint_and_complete(server, reference, split):
    g = 4
    ref = reference[split]
    n = len(ref["mean"])
    one = queue(server, split, g, stream=f"one-{split}")
    two = [queue(server, split, g, world_size=2, rank=r,
                 stream=f"two-{split}") for r in range(2)]
    steps = n // g if split == "train" else -(-n // g)
    for _ in range(steps):
        whole = next(one)
        halves = [next(q) for q in two]
        for key in whole:
            joined = torch.cat([h[key] for h in halves])
            assert torch.equal(joined, whole[key]), key
    for q in [one] + two:
        q.close()


def test_a_truncated_volume_refuses_the_stream_naming_it(server):
    val = server.data / "fastmri" / "knee_singlecoil_val"
    victim = sorted(val.glob("*.h5"))[0]
    victim.write_bytes(victim.read_bytes()[:200000])
    with pytest.raises(Exception) as err:
        next(queue(server, "validation", 2))
    log = server.log_path.read_text()
    assert victim.name in str(err.value) + log


def test_a_file_that_is_not_hdf5_refuses_the_stream_naming_it(server):
    train = server.data / "fastmri" / "knee_singlecoil_train"
    (train / "file9999999.h5").write_bytes(b"\x00" * 4096)
    with pytest.raises(Exception) as err:
        next(queue(server, "train", 2))
    text = str(err.value) + server.log_path.read_text()
    assert "file9999999.h5" in text
    assert "not an HDF5 file" in text
