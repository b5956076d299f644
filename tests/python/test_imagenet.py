"""The imagenet workload against torchvision, end to end through a daemon.

Data sets come from workloads/imagenet/make_imagenet.py (a few dozen
ImageNet-like JPEGs); each test module run generates them once. Pixel checks
use torchvision's own transforms (PIL) on the same files: batchd's eval
output and its train output with the crop box and flip forced (the
debug_fixed_crop test hook, accepted only by a daemon started with
BATCHD_TEST_HOOKS=1) must be within a mean absolute difference of 2 per
channel value of torchvision's, image by image.

    BATCHD_BIN=<build>/server/batchd PYTHONPATH=<build>/python \\
        /usr/bin/python3 -m pytest tests/python/test_imagenet.py
"""

import glob
import json
import math
import os
import shutil
import subprocess

import pytest

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")
torchvision = pytest.importorskip("torchvision")
PIL = pytest.importorskip("PIL")
pytest.importorskip("skimage")  # the generator's photos

from torchvision import datasets, transforms  # noqa: E402

import batchd  # noqa: E402
from batchd_daemon import Daemon as Server, daemon_fixture  # noqa: E402

MAX_MEAN_ABS_DIFF = 2.0


def build_dir():
    binary = os.environ.get("BATCHD_BIN")
    if not binary:
        pytest.fail("set BATCHD_BIN to the batchd daemon (<build>/server/batchd)")
    return os.path.dirname(os.path.dirname(os.path.abspath(binary)))


@pytest.fixture(scope="module")
def data_root(imagenet_clean_and_odd):  # conftest.py
    return imagenet_clean_and_odd


server = daemon_fixture("data_root")
hook_server = daemon_fixture("data_root", hooks=True)


def loader(server, stream, data, split, global_batch_size, **kw):
    kw.setdefault("connect_timeout", 10.0)
    kw.setdefault("timeout", 60.0)
    return batchd.Loader(stream, global_batch_size, workload="imagenet",
                         data=data, split=split, server=server.address, **kw)


def take(ld, steps=None):
    """[(inputs uint8 numpy, targets, weights or None)] copied out of the ring."""
    out = []
    while steps is None or len(out) < steps:
        try:
            batch = next(ld)  # across epochs: a for loop yields one epoch
        except StopIteration:
            break
        out.append((batch["inputs"].numpy().copy(),
                    batch["targets"].numpy().copy(),
                    batch["weights"].numpy().copy() if "weights" in batch else None))
    return out


def pil_eval(path):
    t = transforms.Compose([transforms.Resize(256), transforms.CenterCrop(224)])
    return np.asarray(t(datasets.folder.pil_loader(path)))


def mean_abs_diff(a, b):
    return float(np.abs(a.astype(np.int16) - b.astype(np.int16)).mean())


def test_eval_matches_torchvision_in_order(server, data_root):
    ref = datasets.ImageFolder(str(data_root / "clean" / "val"))
    with loader(server, "val", "clean", "val", 5) as ld:
        batches = take(ld)
    # 12 images in global batches of 5: 5 + 5 + 2 real, 3 padding.
    assert [len(b[1]) for b in batches] == [5, 5, 5]
    inputs = np.concatenate([b[0] for b in batches])
    targets = np.concatenate([b[1] for b in batches])
    weights = np.concatenate([b[2] for b in batches])
    assert weights.tolist() == [1.0] * 12 + [0.0] * 3
    assert not inputs[12:].any() and targets[12:].tolist() == [0] * 3
    assert targets[:12].tolist() == [label for _, label in ref.samples]
    diffs = [mean_abs_diff(inputs[i], pil_eval(path))
             for i, (path, _) in enumerate(ref.samples)]
    print(f"eval: max over images of the mean abs diff {max(diffs):.3f}")
    assert max(diffs) <= MAX_MEAN_ABS_DIFF, diffs


def test_eval_nchw_is_nhwc_transposed(server):
    with loader(server, "hwc", "clean", "val", 4) as ld:
        hwc = take(ld, 1)[0][0]
    with loader(server, "chw", "clean", "val", 4, options={"layout": "nchw"}) as ld:
        chw = take(ld, 1)[0][0]
    assert chw.shape == (4, 3, 224, 224)
    assert np.array_equal(hwc.transpose(0, 3, 1, 2), chw)


@pytest.mark.parametrize("box,flip", [((30, 20, 200, 150), 1),    # upsampled
                                      ((10, 5, 460, 320), 0),     # DCT 6/8
                                      ((0, 0, 333, 333), 1)])     # DCT 6/8
def test_train_with_forced_crop_matches_torchvision(hook_server, data_root, box,
                                                    flip):
    x, y, w, h = box
    ref = datasets.ImageFolder(str(data_root / "clean" / "train"))
    expected = []
    for path, _ in ref.samples:
        img = datasets.folder.pil_loader(path)
        # The hook clips the box to each image, as this does.
        bw, bh = min(w, img.width - x), min(h, img.height - y)
        out = transforms.functional.resized_crop(img, y, x, bh, bw, [224, 224])
        if flip:
            out = transforms.functional.hflip(out)
        expected.append(np.asarray(out))
    n = len(ref.samples)
    with loader(hook_server, "fixed", "clean", "train", 4,
                options={"debug_fixed_crop": f"{x},{y},{w},{h},{flip}"}) as ld:
        batches = take(ld, n // 4)  # one epoch, in the shuffled order
    seen = set()
    worst = 0.0
    for inputs, targets, _ in batches:
        for img, target in zip(inputs, targets):
            diffs = [mean_abs_diff(img, e) for e in expected]
            i = int(np.argmin(diffs))
            worst = max(worst, diffs[i])
            assert diffs[i] <= MAX_MEAN_ABS_DIFF, (i, diffs[i])
            assert ref.samples[i][1] == target
            seen.add(i)
    print(f"train box {box} flip {flip}: max mean abs diff {worst:.3f}")
    assert seen == set(range(n))  # an epoch is a permutation


def test_fixed_crop_needs_the_hook_environment(server):
    with pytest.raises(batchd.Error, match="BATCHD_TEST_HOOKS"):
        loader(server, "nohook", "clean", "train", 4,
               options={"debug_fixed_crop": "0,0,10,10,0"})


def test_crop_sampling_matches_torchvision_in_distribution():
    tool = os.path.join(build_dir(), "workloads", "imagenet", "imagenet_tool")
    if not os.path.exists(tool):
        pytest.skip(f"{tool} is not built")
    width, height, n = 500, 375, 20000
    out = subprocess.run([tool, "crops", "--width", str(width), "--height",
                          str(height), "--count", str(n), "--seed", "3"],
                         check=True, capture_output=True, text=True).stdout
    ours = np.array([list(map(int, line.split())) for line in out.splitlines()])
    torch.manual_seed(0)
    img = torch.zeros(3, height, width)
    rrc = transforms.RandomResizedCrop(224)
    theirs = np.array([transforms.RandomResizedCrop.get_params(img, rrc.scale,
                                                               rrc.ratio)
                       for _ in range(n)])  # (i, j, h, w)
    ours_w, ours_h = ours[:, 2], ours[:, 3]
    their_w, their_h = theirs[:, 3], theirs[:, 2]

    def cells(w, h):
        a = np.minimum(7, (8 * (w * h) / (width * height)).astype(int))
        lr = np.log(w / h)
        lo, hi = math.log(3 / 4) - 0.01, math.log(4 / 3) + 0.01
        b = np.clip(((lr - lo) / (hi - lo) * 8).astype(int), 0, 7)
        return np.bincount(a * 8 + b, minlength=64)

    c1, c2 = cells(ours_w, ours_h), cells(their_w, their_h)
    keep = (c1 + c2) >= 10
    # Two-sample chi-square with equal sample sizes.
    chi2 = float((((c1 - c2) ** 2)[keep] / (c1 + c2)[keep]).sum())
    dof = int(keep.sum()) - 1
    assert chi2 < dof + 6 * math.sqrt(2 * dof) + 20, (chi2, dof)
    # Positions: x / (W - w) uniform, as torch.randint gives.
    fx = ours[:, 0] / np.maximum(1, width - ours_w)
    hist = np.histogram(fx[width - ours_w >= 100], bins=10, range=(0, 1))[0]
    e = hist.sum() / 10
    assert float(((hist - e) ** 2 / e).sum()) < 40
    assert abs(ours[:, 4].mean() - 0.5) < 0.02  # flips


def test_imagefolder_order_matches_torchvision(server, data_root):
    # Class and file names that sort differently by case, by "-" vs "/",
    # nested folders, a non-image and a PNG: torchvision's rules.
    src = sorted(glob.glob(str(data_root / "clean" / "train" / "*" / "*.JPEG")))
    tree = data_root / "order" / "val"
    layout = ["B/x.JPEG", "B/X.jpeg", "a/z.JPEG", "a/sub/a.JPEG",
              "a/sub-x/b.jpg", "a/a.Jpg", "a-b/q.JPEG", "a_b/q.JPEG",
              "a_b/r.png", "a_b/notes.txt"]
    for i, rel in enumerate(layout):
        p = tree / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if rel.endswith(".png"):
            PIL.Image.open(src[i]).save(p, "PNG")
        else:
            shutil.copy(src[i], p)
    ref = datasets.ImageFolder(str(tree))
    with loader(server, "order", "order", "val", 3) as ld:
        batches = take(ld)
    inputs = np.concatenate([b[0] for b in batches])
    targets = np.concatenate([b[1] for b in batches])
    n = len(ref.samples)
    assert targets[:n].tolist() == [label for _, label in ref.samples]
    for i, (path, _) in enumerate(ref.samples):
        assert mean_abs_diff(inputs[i], pil_eval(path)) <= MAX_MEAN_ABS_DIFF, path


def test_large_images_decode_at_a_dct_scale_within_the_bound(server,
                                                             data_root):
    # 1200 x 900 and 900 x 1200: eval decodes them at DCT scale 4/8 (the
    # shorter side 450 >= 1.25 x 256), which low-passes unlike PIL.
    src = sorted(glob.glob(str(data_root / "clean" / "train" / "*" / "*.JPEG")))
    tree = data_root / "large" / "val" / "c"
    tree.mkdir(parents=True)
    for i, size in enumerate([(1200, 900), (900, 1200), (1600, 1200)]):
        img = PIL.Image.open(src[i]).convert("RGB").resize(size, PIL.Image.BICUBIC)
        img.save(tree / f"{i}.JPEG", quality=90)
    ref = datasets.ImageFolder(str(tree.parent))
    with loader(server, "large", "large", "val", 3) as ld:
        (inputs, _, _), = take(ld)
    diffs = [mean_abs_diff(inputs[i], pil_eval(path))
             for i, (path, _) in enumerate(ref.samples)]
    print(f"large images, DCT-scaled eval: mean abs diffs {diffs}")
    assert max(diffs) <= MAX_MEAN_ABS_DIFF


def test_tfrecord_shards_give_the_imagefolder_batches(server):
    with loader(server, "folder", "clean", "val", 4) as ld:
        folder = take(ld)
    with loader(server, "shards", "clean/tfds", "validation", 4) as ld:
        shards = take(ld)
    assert len(folder) == len(shards) == 3
    for a, b in zip(folder, shards):
        assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])


def run_train(data_root, tmp_path, threads, world, steps, name):
    """The first `steps` global batches of a train stream as W ranks see them,
    the ranks' slices concatenated."""
    s = Server(data_root, tmp_path / f"{name}.log", threads=threads)
    try:
        lds = [loader(s, name, "odd", "train", 8, world_size=world, rank=r,
                      seed=11)
               for r in range(world)]
        per_rank = [take(ld, steps) for ld in lds]
        for ld in lds:
            ld.close()
        return [(np.concatenate([per_rank[r][k][0] for r in range(world)]),
                 np.concatenate([per_rank[r][k][1] for r in range(world)]))
                for k in range(steps)]
    finally:
        s.stop()


def test_train_batches_identical_across_threads_and_world_sizes(data_root,
                                                                tmp_path):
    steps = 7  # 3 steps an epoch: into the third epoch
    base = run_train(data_root, tmp_path, 1, 1, steps, "t1w1")
    for threads, world in ((2, 1), (1, 2), (2, 2)):
        other = run_train(data_root, tmp_path, threads, world, steps,
                          f"t{threads}w{world}")
        for k in range(steps):
            assert np.array_equal(base[k][0], other[k][0]), (threads, world, k)
            assert np.array_equal(base[k][1], other[k][1]), (threads, world, k)
    # Epochs differ: new order, new crops.
    assert not np.array_equal(base[0][0], base[3][0])


def odd_files(data_root):
    """odd/train's grayscale, CMYK, PNG-named-.JPEG and truncated files."""
    files = [p for p, _ in datasets.ImageFolder(
        str(data_root / "odd" / "train")).samples]
    n = len(files)
    return {"gray": files[0], "cmyk": files[n // 4], "png": files[n // 2],
            "truncated": files[3 * n // 4]}


def test_odd_files_match_torchvision(server, data_root):
    odd = odd_files(data_root)
    assert PIL.Image.open(odd["gray"]).mode == "L"
    assert PIL.Image.open(odd["cmyk"]).mode == "CMYK"
    assert PIL.Image.open(odd["png"]).format == "PNG"
    tree = data_root / "oddval" / "val" / "c"
    tree.mkdir(parents=True)
    for kind in ("gray", "cmyk", "png"):
        shutil.copy(odd[kind], tree / f"{kind}.JPEG")
    ref = datasets.ImageFolder(str(tree.parent))
    with loader(server, "oddval", "oddval", "val", 3) as ld:
        (inputs, _, _), = take(ld)
    for i, (path, _) in enumerate(ref.samples):
        d = mean_abs_diff(inputs[i], pil_eval(path))
        print(f"{os.path.basename(path)}: mean abs diff {d:.3f}")
        assert d <= MAX_MEAN_ABS_DIFF, path


def test_odd_train_stream_runs(server):
    with loader(server, "odd", "odd", "train", 8) as ld:
        batches = take(ld, 6)  # two epochs
    assert all(b[0].shape == (8, 224, 224, 3) for b in batches)


def test_decode_errors_substitute_or_fail(server, data_root):
    odd = odd_files(data_root)
    tree = data_root / "broken" / "val" / "c"
    tree.mkdir(parents=True)
    shutil.copy(odd["gray"], tree / "a.JPEG")
    shutil.copy(odd["truncated"], tree / "b.JPEG")
    (tree / "c.JPEG").write_bytes(b"not a JPEG at all")
    with pytest.raises(PIL.UnidentifiedImageError):
        datasets.ImageFolder(str(tree.parent))[2]
    with loader(server, "sub", "broken", "val", 3) as ld:
        (inputs, targets, weights), = take(ld)
        status = server.status()
    assert weights.tolist() == [1.0, 1.0, 1.0]
    # Both broken files were replaced by the only good one.
    assert np.array_equal(inputs[1], inputs[0])
    assert np.array_equal(inputs[2], inputs[0])
    text = json.dumps(status)
    assert '"decode_errors": 0' not in text, text
    log = open(server.log_path).read()
    assert "b.JPEG" in log and "c.JPEG" in log and "truncated" in log
    with pytest.raises(batchd.Error):
        with loader(server, "fail", "broken", "val", 3,
                    options={"on_decode_error": "fail"}) as ld:
            take(ld)
