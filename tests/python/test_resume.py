"""Checkpoints as PyTorch users write them: Loader.state_dict() after some
steps, then Loader(..., state=sd) or load_state_dict(sd), gives exactly the
batches of an uninterrupted run, byte for byte, for every workload and
split, inside an epoch and across an epoch boundary, from any rank's state,
at the same and at another world size. Specs that disagree with the state,
and cursors after their start step, are refused naming the field.

    BATCHD_BIN=<build>/server/batchd PYTHONPATH=<build>/python \\
        /usr/bin/python3 -m pytest tests/python/test_resume.py
"""

import json
import uuid

import numpy as np
import pytest

import batchd

SPECS = {
    "synthetic-train": dict(workload="synthetic", split="train",
                            global_batch_size=8,
                            options={"examples": 40, "payload_bytes": 16}),
    "synthetic-eval": dict(workload="synthetic", split="validation",
                           global_batch_size=8,
                           options={"examples": 44, "payload_bytes": 16}),
    "imagenet-train": dict(workload="imagenet", data="imagenet",
                           split="train", global_batch_size=4),
    "imagenet-eval": dict(workload="imagenet", data="imagenet",
                          split="validation", global_batch_size=4),
    "wmt-train": dict(workload="wmt", data="wmt", split="train",
                      global_batch_size=8, options={"index_threads": 1}),
    "wmt-eval": dict(workload="wmt", data="wmt", split="validation",
                     global_batch_size=8, options={"index_threads": 1}),
}
STEPS = {"synthetic-train": 12, "synthetic-eval": 6, "imagenet-train": 14,
         "imagenet-eval": 3, "wmt-train": 30, "wmt-eval": 11}


def open_rank(daemon, name, spec, world, rank, **kw):
    spec = dict(spec)
    return batchd.Loader(name, spec.pop("global_batch_size"), format="numpy",
                         world_size=world, rank=rank, seed=17,
                         server=daemon.address, connect_timeout=30.0,
                         timeout=120.0, **spec, **kw)


def read_global(loaders, steps):
    """`steps` global batches (each tensor's bytes, ranks in order) and the
    BatchInfo of rank 0's part of each."""
    batches, infos = [], []
    for _ in range(steps):
        parts = [loader.next_batch() for loader in loaders]
        batches.append({k: b"".join(np.ascontiguousarray(p[0][k]).tobytes()
                                    for p in parts)
                        for k in parts[0][0]})
        infos.append(parts[0][1])
    return batches, infos


def stream_name():
    return f"resume-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
def references(shared_data, tmp_path_factory):
    """The uninterrupted run of every spec at world size 2, and where its
    resume points lie: inside the first epoch and at the first step of the
    next (train), or inside the one pass (eval)."""
    from batchd_daemon import Daemon
    daemon = Daemon(shared_data, tmp_path_factory.mktemp("ref") / "log")
    out = {}
    try:
        for key, spec in SPECS.items():
            name = stream_name()
            loaders = [open_rank(daemon, name, spec, 2, r) for r in range(2)]
            batches, infos = read_global(loaders, STEPS[key])
            for loader in loaders:
                loader.close()
            points = [2]
            if spec["split"] == "train":
                crossing = [s for s in range(1, len(infos))
                            if infos[s].epoch != infos[0].epoch]
                assert crossing, f"{key}: {STEPS[key]} steps stay in an epoch"
                points.append(crossing[0])
            out[key] = (batches, points)
    finally:
        daemon.stop()
    return out


@pytest.mark.parametrize("key", list(SPECS))
@pytest.mark.parametrize("worlds,state_rank", [((2, 2), 0), ((2, 2), 1),
                                                ((4, 2), 0), ((4, 2), 1)])
def test_a_state_dict_resumes_exactly(shared_daemon, references, key, worlds,
                                      state_rank):
    spec = SPECS[key]
    batches, points = references[key]
    before, after = worlds
    for point in points:
        name = stream_name()
        loaders = [open_rank(shared_daemon, name, spec, before, r)
                   for r in range(before)]
        read_global(loaders, point)
        states = [loader.state_dict() for loader in loaders]
        for loader in loaders:
            loader.close()
        # Every rank's state is the same, small and JSON as it is.
        assert all(s == states[0] for s in states), states
        sd = json.loads(json.dumps(states[state_rank]))
        assert sd["next_step"] == point
        assert (sd["cursor"] is not None) == (key == "wmt-train")

        # Resumed (at another world size for 4 -> 2) through the
        # constructor, or through load_state_dict before the first batch,
        # as every rank of a job does alike.
        name = stream_name()
        if state_rank == 0:
            resumed = [open_rank(shared_daemon, name, spec, after, r,
                                 state=sd) for r in range(after)]
        else:
            resumed = [open_rank(shared_daemon, name, spec, after, r)
                       for r in range(after)]
            for loader in resumed:
                loader.load_state_dict(sd)
        got, infos = read_global(resumed, len(batches) - point)
        assert [i.step for i in infos] == list(range(point, len(batches)))
        for step, (want, have) in enumerate(zip(batches[point:], got), point):
            assert have == want, f"{key}: step {step} differs after resume"
        if spec["split"] != "train":
            with pytest.raises(StopIteration):
                next(resumed[0])
        for loader in resumed:
            loader.close()


def test_resuming_right_after_any_ranks_cursor(shared_daemon, references):
    """The form users write by hand: start_step = step + 1 and that batch's
    cursor (here rank 1's), without replaying earlier epochs."""
    spec = SPECS["wmt-train"]
    batches, points = references["wmt-train"]
    name = stream_name()
    loaders = [open_rank(shared_daemon, name, spec, 2, r) for r in range(2)]
    for _ in range(points[1]):
        for loader in loaders:
            loader.next_batch()
    cursor = loaders[1].last_batch_info.cursor
    assert cursor.step == points[1] - 1
    for loader in loaders:
        loader.close()
    name = stream_name()
    resumed = [open_rank(shared_daemon, name, spec, 2, r,
                         start_step=cursor.step + 1, start_cursor=cursor)
               for r in range(2)]
    got, _ = read_global(resumed, len(batches) - points[1])
    assert got == batches[points[1]:]


def test_states_and_cursors_that_do_not_fit_are_refused(shared_daemon):
    spec = SPECS["wmt-train"]
    name = stream_name()
    loader = open_rank(shared_daemon, name, spec, 2, 0)
    partner = open_rank(shared_daemon, name, spec, 2, 1)
    for _ in range(3):
        loader.next_batch()
        partner.next_batch()
    sd = loader.state_dict()
    cursor = loader.last_batch_info.cursor
    loader.close()
    partner.close()

    for field, change in (("seed", dict(seed=18)),
                          ("global_batch_size", dict(global_batch_size=16)),
                          ("split", dict(split="validation")),
                          ("options", dict(options={"index_threads": 2}))):
        s = dict(spec, **{k: v for k, v in change.items() if k != "seed"})
        kw = {"seed": change["seed"]} if "seed" in change else {}
        with pytest.raises(batchd.InvalidArgumentError, match=field):
            if kw:
                batchd.Loader(stream_name(), s.pop("global_batch_size"),
                              format="numpy", world_size=2, rank=0,
                              server=shared_daemon.address, state=sd, **s,
                              **kw)
            else:
                open_rank(shared_daemon, stream_name(), s, 2, 0, state=sd)
    with pytest.raises(batchd.InvalidArgumentError, match="either"):
        open_rank(shared_daemon, stream_name(), spec, 2, 0, state=sd,
                  start_step=3)
    # A world size that does not divide the global batch.
    with pytest.raises(batchd.InvalidArgumentError, match="divisible"):
        open_rank(shared_daemon, stream_name(), spec, 3, 0, state=sd)
    # A cursor of a batch after the start step.
    with pytest.raises(batchd.InvalidArgumentError, match="cursor of step 2"):
        open_rank(shared_daemon, stream_name(), spec, 2, 0, start_step=1,
                  start_cursor=cursor)
    # Not a state at all.
    with pytest.raises(batchd.InvalidArgumentError, match="not a batchd"):
        open_rank(shared_daemon, stream_name(), spec, 2, 0,
                  state={"next_step": 3})
    # load_state_dict after a batch was taken.
    name = stream_name()
    loaders = [open_rank(shared_daemon, name, spec, 2, r) for r in range(2)]
    loaders[0].next_batch()
    with pytest.raises(batchd.Error, match="has not returned a batch"):
        loaders[0].load_state_dict(sd)


@pytest.mark.parametrize("workload,data,options", [
    ("imagenet", "imagenet", {}), ("wmt", "wmt", {"index_threads": 1})])
def test_an_algoperf_queue_resumes_exactly(shared_daemon, workload, data,
                                           options):
    pytest.importorskip("torch")
    from batchd import algoperf

    def queue(stream, **kw):
        return algoperf.input_queue(workload, "train", 4, data=data, seed=5,
                                    world_size=2, rank=1, device="cpu",
                                    server=shared_daemon.address,
                                    stream=stream, options=options,
                                    timeout=120, **kw)

    def partner(stream, **kw):  # rank 0, so that the stream flows
        return algoperf.input_queue(workload, "train", 4, data=data, seed=5,
                                    world_size=2, rank=0, device="cpu",
                                    server=shared_daemon.address,
                                    stream=stream, options=options,
                                    timeout=120, **kw)

    def take(q, n):
        return [{k: v.clone() for k, v in next(q).items()} for _ in range(n)]

    name = stream_name()
    ref, other = queue(name), partner(name)
    want = take(ref, 9)
    ref.close()
    other.close()

    name = stream_name()
    first, other = queue(name), partner(name)
    take(first, 4)
    sd = json.loads(json.dumps(first.state_dict()))
    first.close()
    other.close()

    name = stream_name()
    resumed, other = queue(name, state=sd), partner(name, state=sd)
    got = take(resumed, 5)
    resumed.close()
    other.close()
    for step, (w, g) in enumerate(zip(want[4:], got), 4):
        assert w.keys() == g.keys()
        for k in w:
            assert torch_equal(w[k], g[k]), f"{workload} step {step} {k}"


def torch_equal(a, b):
    import torch
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
