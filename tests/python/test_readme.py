"""The table of every workload's tensors (docs/data.md, "What a batch
holds", which the README links) is what the daemon reports: for each
workload and split, the same tensor names, dtypes and shapes, no more and
no fewer, so that the table cannot drift from the code. And the README
stays a first-time user's page: short, the two commands on its first
screen, every page it links there.

The quick start's Python runs as printed, against a daemon of its own.

    BATCHD_BIN=<build>/server/batchd PYTHONPATH=<build>/python \\
        /usr/bin/python3 -m pytest tests/python/test_readme.py
"""

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from batchd_daemon import Daemon, binary
from helpers import REPO as ROOT
SPLITS = {"synthetic": ["train", "validation", "test"],
          "imagenet": ["train", "validation", "eval_train", "test"],
          "wmt": ["train", "validation", "eval_train", "test"],
          "criteo1tb": ["train", "validation", "eval_train", "test"],
          "librispeech": ["train", "validation", "eval_train", "test"],
          "ogbg": ["train", "validation", "eval_train", "test"],
          "finewebedu_lm": ["train", "validation", "eval_train"],
          "fastmri": ["train", "validation", "eval_train", "test"]}
# The generated sets are small: fastmri's test split needs a cut of the
# three val volumes (AlgoPerf's is the first 100).
OPTIONS = {"fastmri": ["validation_files=2"]}
GLOBAL_BATCH = 8
SYMBOLS = {"B": GLOBAL_BATCH, "payload_bytes": 1024}  # the defaults


def batch_table():
    """{(workload, split): {tensor: (dtype, shape)}} from docs/data.md."""
    text = open(os.path.join(ROOT, "docs", "data.md")).read()
    section = text.split("## What a batch holds", 1)[1].split("\n#", 1)[0]
    rows = [line for line in section.splitlines()
            if line.startswith("| ") and not line.startswith("| workload")]
    table = {}
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        workload, splits, names, dtype, shape = cells[:5]
        dims = [SYMBOLS[d] if d in SYMBOLS else int(d)
                for d in shape.strip("[]").split(", ")]
        for split in (SPLITS[workload] if splits == "all"
                      else [s.strip() for s in splits.split(",")]):
            entry = table.setdefault((workload, split), {})
            for name in re.findall(r"`([a-z_]+)`", names):
                assert name not in entry, f"{workload} {split} {name} twice"
                entry[name] = (dtype, dims)
    return table


@pytest.fixture(scope="module")
def daemon(shared_data, criteo_data, librispeech_data, ogbg_data,
           lm_data, fastmri_data, tmp_path_factory):
    # The shared data with an imagenet test split (a copy of val), so that
    # every split has data.
    root = tmp_path_factory.mktemp("readme")
    for name in ("imagenet", "wmt"):
        shutil.copytree(shared_data / name, root / name, symlinks=True)
    shutil.copytree(librispeech_data / "librispeech", root / "librispeech")
    shutil.copytree(root / "imagenet" / "val", root / "imagenet" / "test")
    shutil.copytree(criteo_data, root / "criteo1tb")
    shutil.copytree(ogbg_data / "ogbg", root / "ogbg")
    shutil.copytree(lm_data, root / "finewebedu_lm")
    shutil.copytree(fastmri_data, root / "fastmri")
    d = Daemon(root, root / "batchd.log")
    yield d
    d.stop()


def reported(daemon, workload, split):
    data = "" if workload == "synthetic" else workload
    out = subprocess.run(
        [binary("batchctl"), "plan", "--server", daemon.address, "--json",
         "--workload", workload, "--data", data, "--split", split,
         "--global-batch-size", str(GLOBAL_BATCH),
         *[f"--option={o}" for o in OPTIONS.get(workload, [])]],
        capture_output=True, text=True, timeout=120)
    assert out.returncode in (0, 3), out.stderr
    return {t["name"]: (t["dtype"], t["shape"])
            for t in json.loads(out.stdout)["tensors"]}


def test_the_batch_table_is_what_the_daemon_reports(daemon):
    table = batch_table()
    assert set(table) == {(w, s) for w, splits in SPLITS.items()
                          for s in splits}
    for (workload, split), want in sorted(table.items()):
        assert reported(daemon, workload, split) == want, (workload, split)


# The README is read first: at most this many lines, and the two commands
# (CI and tooling run them by this text) within its first screen.
MAX_README_LINES = 250
FIRST_SCREEN_LINES = 40
COMMANDS = ("scripts/demo.sh", "scripts/test.sh")


def readme_lines():
    return open(os.path.join(ROOT, "README.md")).read().splitlines()


def test_the_readme_is_short():
    lines = readme_lines()
    assert len(lines) <= MAX_README_LINES, (
        f"README.md has {len(lines)} lines, more than {MAX_README_LINES}: "
        "move details to docs/ (install.md, testing.md, design.md, ...)")


def test_the_two_commands_are_on_the_first_screen():
    first = readme_lines()[:FIRST_SCREEN_LINES]
    # Each as a command of its own: an indented code line that starts with it.
    commands = [line.strip().split()[0] for line in first
                if line.startswith("    ") and line.strip()]
    for command in COMMANDS:
        assert command in commands, (
            f"{command} is not a command line in README.md's first "
            f"{FIRST_SCREEN_LINES} lines")


def test_the_pages_the_readme_links_exist():
    text = "\n".join(readme_lines())
    links = re.findall(r"\]\(([^)#]+)\)", text)
    assert links
    for link in links:
        assert os.path.exists(os.path.join(ROOT, link)), link


def test_the_algoperf_table_names_every_drop_in_workload():
    """Each row of the README's AlgoPerf table names an input_queue
    workload, and every workload the drop-in serves has a row."""
    import batchd.algoperf
    text = "\n".join(readme_lines())
    section = text.split("## Workloads and AlgoPerf", 1)[1].split("\n#", 1)[0]
    rows = [line for line in section.splitlines()
            if line.startswith("| `")]
    named = {re.findall(r"`([a-z0-9_]+)`", row.split("|")[2])[0]
             for row in rows}
    assert named == set(batchd.algoperf.WORKLOADS)
    algoperf = {n for row in rows
                for n in re.findall(r"`([a-z0-9_]+)`", row.split("|")[1])}
    # AlgoPerf's nine workload names: ImageNet's two models share a
    # pipeline, and so do LibriSpeech's.
    assert len(algoperf) == 9


def quick_start():
    """The first Python block of the README's quick start."""
    text = "\n".join(readme_lines())
    section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.S)[0]


def test_the_quick_start_runs_as_printed(tmp_path):
    """The snippet, unchanged, with the daemon named by $BATCHD_SERVER as
    it says; then what its comments claim: len is an epoch's global
    batches, and the two loops were two whole epochs."""
    (tmp_path / "data").mkdir()
    d = Daemon(tmp_path / "data", tmp_path / "batchd.log")
    check = ("\ninfo = loader.last_batch_info\n"
             "assert (info.step, info.epoch) == (193, 1), info\n"
             "assert info.last_in_epoch and info.epoch_steps == 97, info\n")
    try:
        out = subprocess.run(
            [sys.executable, "-c", quick_start() + check],
            env={**os.environ, "BATCHD_SERVER": d.address},
            capture_output=True, text=True, timeout=300)
    finally:
        d.stop()
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "97"
    assert lines[1].startswith("BatchInfo(step=193, epoch=1,"), lines[1]
