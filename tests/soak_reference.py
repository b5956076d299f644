"""The independent reference of the soak tests (tests/soak.py,
tests/soak_restart.py): what every rank of a stream must receive, written
from docs/design.md's determinism contract and workloads/sampler.h's
description, not by calling the C++ code.

The epoch permutation is a 6-round balanced Feistel network over the
smallest even-bit power of two >= n with cycle walking, round keys
Mix64(Mix64(seed ^ "batchd\\0\\0") ^ Mix64(epoch) ^ r << 56) and round
function Mix64(right ^ key) & mask (Mix64 = SplitMix64's finaliser);
global batch s of a training stream is epoch s // (n // G), positions
(s % (n // G)) * G + r * G / W ... + G / W - 1 for rank r of W; an eval
stream is one pass in order, the last batch padded (id 2^64 - 1, weight
0, zero payload). The payload of a synthetic example (seed, epoch,
position, id) is the arithmetic sequence of 64-bit words starting at
Mix64(seed ^ Mix64(id)) ^ w0 with step w1 | 1, where w0, w1 are the first
words of Philox4x32-10 keyed by Mix64(seed) at counter (position, epoch, 0)
(workloads/counter_rng.h, workloads/synthetic.cc).

An ImageFolder tree lists its examples as torchvision does: class
directories in sorted order (class index = rank in that order), the image
files of each sorted; example id i is the i-th file, and its `targets` value
is its class.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "python", "reference"))
from counter_rng import M32, M64  # noqa: E402
from counter_rng import philox4x32_10 as philox4x32  # noqa: E402
from counter_rng import splitmix64_finaliser as mix64  # noqa: E402


class Feistel:
    """The epoch permutation of [0, n) for (seed, epoch)."""

    ROUNDS = 6

    def __init__(self, n, seed, epoch):
        self.n = n
        bits = 0
        while bits < 64 and (1 << bits) < n:
            bits += 1
        bits += bits % 2
        self.half = bits // 2
        self.mask = (1 << self.half) - 1
        base = mix64(seed ^ 0x6261746368640000) ^ mix64(epoch)
        self.keys = [mix64(base ^ (r << 56)) for r in range(self.ROUNDS)]

    def _encrypt(self, x):
        left, right = x >> self.half, x & self.mask
        for k in self.keys:
            left, right = right, left ^ (mix64(right ^ k) & self.mask)
        return (left << self.half) | right

    def __call__(self, position):
        x = position
        while True:
            x = self._encrypt(x)
            if x < self.n:
                return x


def payload(seed, epoch, position, example_id, nbytes):
    w = philox4x32((position & M32, (position >> 32) & M32, epoch & M32, 0),
                   mix64(seed))
    first = (w[0] << 32) | w[1]
    step = ((w[2] << 32) | w[3]) | 1
    x = mix64(seed ^ mix64(example_id)) ^ first
    out = bytearray()
    while len(out) + 8 <= nbytes:
        out += x.to_bytes(8, "little")
        x = (x + step) & M64
    i = len(out)
    while i < nbytes:
        out.append((x >> (8 * (i % 8))) & 0xFF)
        i += 1
    return bytes(out)


class Reference:
    """What rank `rank` of stream `spec` must receive at each step."""

    def __init__(self, spec, rank):
        self.spec = spec
        self.rank = rank
        self.n = spec["examples"]
        self.g = spec["global_batch_size"]
        self.per_rank = self.g // spec["world_size"]
        self.train = spec["split"] == "train"
        self.steps_per_epoch = (self.n // self.g if self.train
                                else -(-self.n // self.g))
        self._perms = {}

    def batch(self, step):
        """[(epoch, position, id or None)] of the rank's slice of `step`."""
        if self.train:
            epoch, in_epoch = divmod(step, self.steps_per_epoch)
        else:
            epoch, in_epoch = 0, step
        first = in_epoch * self.g + self.rank * self.per_rank
        out = []
        for p in range(first, first + self.per_rank):
            if self.train:
                perm = self._perms.get(epoch)
                if perm is None:
                    perm = self._perms[epoch] = Feistel(self.n,
                                                        self.spec["seed"], epoch)
                    if len(self._perms) > 4:
                        del self._perms[min(self._perms)]
                out.append((epoch, p, perm(p)))
            else:
                out.append((epoch, p, p if p < self.n else None))
        return out


def check_batch(ref, step, info, batch):
    """A list of what is wrong with one delivered batch (empty: correct).
    `batch`: numpy arrays by tensor name."""
    errors = []
    expected = ref.batch(step)
    ids = [int(v) & M64 for v in batch["ids"].tolist()]
    epochs = [int(v) & M64 for v in batch["epochs"].tolist()]
    positions = [int(v) & M64 for v in batch["positions"].tolist()]
    pay = batch["payload"]
    nbytes = ref.spec["payload_bytes"]
    if info.step != step:
        errors.append(f"step {info.step} delivered where {step} was due")
    if len(ids) != len(expected) or pay.shape != (len(expected), nbytes):
        return errors + [f"step {step}: {len(ids)} rows, payload {pay.shape}"]
    valid = sum(1 for e in expected if e[2] is not None)
    if info.valid_count != valid:
        errors.append(f"step {step}: valid_count {info.valid_count}, "
                      f"expected {valid}")
    if info.epoch != expected[0][0] or info.position != expected[0][1]:
        errors.append(f"step {step}: batch info epoch {info.epoch} position "
                      f"{info.position}, expected {expected[0][:2]}")
    weights = batch["weights"].tolist() if "weights" in batch else None
    for i, (epoch, position, example_id) in enumerate(expected):
        want_id = M64 if example_id is None else example_id
        if (ids[i], epochs[i], positions[i]) != (want_id, epoch, position):
            errors.append(
                f"step {step} row {i}: (id, epoch, position) = "
                f"({ids[i]}, {epochs[i]}, {positions[i]}), expected "
                f"({want_id}, {epoch}, {position})")
            continue
        want = (bytes(nbytes) if example_id is None else
                payload(ref.spec["seed"], epoch, position, example_id, nbytes))
        if pay[i].tobytes() != want:
            errors.append(f"step {step} row {i}: payload of example "
                          f"{example_id} differs")
        if weights is not None and weights[i] != (0.0 if example_id is None
                                                  else 1.0):
            errors.append(f"step {step} row {i}: weight {weights[i]}")
    return errors



IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif",
                    ".tiff", ".webp")


def image_folder_classes(split_dir):
    """The class index of every example id of an ImageFolder split, in the
    listing order torchvision's ImageFolder gives (and batchd's sampler
    numbers)."""
    classes = sorted(e.name for e in os.scandir(split_dir) if e.is_dir())
    out = []
    for index, name in enumerate(classes):
        for root, _, files in sorted(os.walk(os.path.join(split_dir, name),
                                             followlinks=True)):
            out += [index for f in sorted(files)
                    if f.lower().endswith(IMAGE_EXTENSIONS)]
    return out


def check_ids_and_targets(ref, step, info, ids, targets, classes):
    """What is wrong with the ids and targets of an imagenet batch (empty:
    correct): ids must be the sampler's, targets their classes."""
    errors = []
    expected = ref.batch(step)
    if info.step != step:
        errors.append(f"step {info.step} delivered where {step} was due")
    if len(ids) != len(expected) or len(targets) != len(expected):
        return errors + [f"step {step}: {len(ids)} ids, {len(targets)} "
                         f"targets, expected {len(expected)}"]
    if info.epoch != expected[0][0] or info.position != expected[0][1]:
        errors.append(f"step {step}: batch info epoch {info.epoch} position "
                      f"{info.position}, expected {expected[0][:2]}")
    for i, (epoch, position, example_id) in enumerate(expected):
        if example_id is None:  # an eval padding row
            continue
        if ids[i] != example_id:
            errors.append(f"step {step} row {i}: id {ids[i]}, expected "
                          f"{example_id} (epoch {epoch}, position "
                          f"{position})")
        elif targets[i] != classes[example_id]:
            errors.append(f"step {step} row {i}: target {targets[i]} of "
                          f"example {example_id}, expected "
                          f"{classes[example_id]}")
    return errors
