"""The AlgoPerf drop-in: batches with the keys, dtypes, shapes and device
that AlgoPerf's PyTorch imagenet_resnet and wmt workloads hand the runner,
written out here from their documentation, not taken from batchd's code.

    BATCHD_BIN=<build>/server/batchd PYTHONPATH=<build>/python \\
        /usr/bin/python3 -m pytest tests/python/test_algoperf.py
"""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("sentencepiece")
pytest.importorskip("PIL")

import batchd.algoperf  # noqa: E402

# AlgoPerf's documented batches (per rank; B = global batch / world size).
IMAGENET_TRAIN = {"inputs": (torch.float32, ("B", 3, 224, 224)),
                  "targets": (torch.int64, ("B",))}
IMAGENET_EVAL = dict(IMAGENET_TRAIN, weights=(torch.float32, ("B",)))
# WMT: every array int64, as wmt_pytorch/workload.py's torch.as_tensor(value,
# dtype=torch.int64); train batches carry weights = targets > 0 as well.
WMT_TRAIN = {k: (torch.int64, ("B", 256)) for k in (
    "inputs", "targets", "inputs_position", "inputs_segmentation",
    "targets_position", "targets_segmentation", "weights")}
WMT_EVAL = {"inputs": (torch.int64, ("B", 256)),
            "targets": (torch.int64, ("B", 256)),
            "weights": (torch.int64, ("B", 256))}


@pytest.fixture
def server(algoperf_server):  # conftest.py: the small ImageNet and WMT sets
    return algoperf_server


def check(batch, expected, b):
    assert set(batch) == set(expected)
    for name, (dtype, shape) in expected.items():
        t = batch[name]
        assert t.dtype == dtype, name
        assert tuple(t.shape) == tuple(b if d == "B" else d for d in shape), name
        assert t.device.type == "cpu"  # no GPU here: the default device


@pytest.mark.parametrize("workload,split,expected,g", [
    ("imagenet", "train", IMAGENET_TRAIN, 4),
    ("imagenet", "validation", IMAGENET_EVAL, 4),
    ("wmt", "train", WMT_TRAIN, 8),
    ("wmt", "validation", WMT_EVAL, 8),
])
def test_batches_have_algoperfs_keys_dtypes_and_shapes(server, workload, split,
                                                       expected, g):
    queues = [batchd.algoperf.input_queue(
        workload, split, g, data=workload, seed=1, world_size=2, rank=r,
        server=server.address, num_batches=2, timeout=120,
        options={"index_threads": 1} if workload == "wmt" else None)
        for r in range(2)]
    for _ in range(2):
        for q in queues:
            check(next(q), expected, g // 2)
    for q in queues:
        with pytest.raises(StopIteration):
            next(q)  # num_batches, as AlgoPerf's runner asks
        q.close()


def test_images_are_normalised_like_torchvision(server):
    q = batchd.algoperf.input_queue("imagenet", "validation", 2,
                                    data="imagenet", world_size=1, rank=0,
                                    server=server.address, num_batches=1,
                                    timeout=120)
    x = next(q)["inputs"]
    # uint8 0..255 through (x/255 - mean)/std: channel 0 spans
    # [-0.485/0.229, (1-0.485)/0.229].
    assert x[:, 0].min() >= -0.485 / 0.229 - 1e-4
    assert x[:, 0].max() <= (1 - 0.485) / 0.229 + 1e-4
    assert x.std() > 0.1  # real pictures, not a constant
    q.close()
