"""The table of every workload's tensors (docs/data.md, "What a batch
holds", which the README links) is what the daemon reports: for each
workload and split, the same tensor names, dtypes and shapes, no more and
no fewer, so that the table cannot drift from the code. The workloads are
the daemon's (batchd --help), their splits and options what `batchctl
plan` reports of each, and their data what each workload's folder
describes (workloads/<name>/test_data.py): nothing here restates a
workload. A workload's page (docs/<name>.md) lists its options as the
daemon declares them. And the README stays a first-time user's page:
short, the two commands on its first screen, every page it links there.

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
from helpers import REPO as ROOT, workload_test_data

GLOBAL_BATCH = 8


def daemon_workloads():
    """The workloads `batchd --help` lists (the daemon's table), in order:
    the lines of its "Workloads" section indented by two spaces."""
    out = subprocess.run([binary("batchd"), "--help"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    section = out.stdout.split("\nWorkloads", 1)[1].split("\n\n", 1)[0]
    names = re.findall(r"^  ([a-z0-9_]+)  ", section, re.M)
    assert names, out.stdout
    return names


def batch_table():
    """{(workload, splits cell): {tensor: (dtype, shape cells)}} from
    docs/data.md; a row's splits are "all" or a list of them, its shape's
    symbols (B, an option's name) read against what the daemon reports."""
    text = open(os.path.join(ROOT, "docs", "data.md")).read()
    section = text.split("## What a batch holds", 1)[1].split("\n#", 1)[0]
    rows = [line for line in section.splitlines()
            if line.startswith("| ") and not line.startswith("| workload")]
    table = []
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        workload, splits, names, dtype, shape = cells[:5]
        table.append((workload, splits, re.findall(r"`([a-z_]+)`", names),
                      dtype, shape.strip("[]").split(", ")))
    return table


@pytest.fixture(scope="module")
def daemon(request, shared_data, tmp_path_factory):
    # The shared data with an imagenet test split (a copy of val), and each
    # workload's own set, so that every split has data.
    root = tmp_path_factory.mktemp("readme")
    for name in ("imagenet", "wmt"):
        shutil.copytree(shared_data / name, root / name, symlinks=True)
    shutil.copytree(root / "imagenet" / "val", root / "imagenet" / "test")
    for name, data in workload_test_data().items():
        made = request.getfixturevalue(data.FIXTURE)
        shutil.copytree(made / name if data.RETURNS == "root" else made,
                        root / name, symlinks=True)
    d = Daemon(root, root / "batchd.log")
    d.root = root
    yield d
    d.stop()


def reported(daemon, workload, split):
    """batchctl plan --json of `workload`'s `split` on its data (none where
    the data root holds no folder of its name)."""
    data = workload if os.path.isdir(daemon.root / workload) else ""
    test_data = workload_test_data().get(workload)
    options = getattr(test_data, "PLAN_OPTIONS", {})
    out = subprocess.run(
        [binary("batchctl"), "plan", "--server", daemon.address, "--json",
         "--workload", workload, "--data", data, "--split", split,
         "--global-batch-size", str(GLOBAL_BATCH),
         *[f"--option={k}={v}" for k, v in options.items()]],
        capture_output=True, text=True, timeout=120)
    assert out.returncode in (0, 3), out.stderr
    return json.loads(out.stdout)


def test_the_batch_table_is_what_the_daemon_reports(daemon):
    plans = {}
    for workload in daemon_workloads():
        splits = reported(daemon, workload, "train")["splits"]
        assert splits and splits[0] == "train", (workload, splits)
        for split in splits:
            plans[workload, split] = reported(daemon, workload, split)
    want = {}
    for workload, splits, names, dtype, shape in batch_table():
        assert workload in daemon_workloads(), f"{workload}: not the daemon's"
        for split in ([s for w, s in plans if w == workload] if splits == "all"
                      else [s.strip() for s in splits.split(",")]):
            assert (workload, split) in plans, (workload, split)
            # Symbols: B, or an option's value in this plan.
            symbols = {"B": GLOBAL_BATCH, **{
                o["key"]: o["value"] for o in plans[workload, split]["options"]}}
            dims = [int(symbols[d]) if d in symbols else int(d)
                    for d in shape]
            entry = want.setdefault((workload, split), {})
            for name in names:
                assert name not in entry, f"{workload} {split} {name} twice"
                entry[name] = (dtype, dims)
    # Every split of every workload has its rows, and they are the daemon's.
    assert set(want) == set(plans)
    for (workload, split), tensors in sorted(want.items()):
        got = {t["name"]: (t["dtype"], t["shape"])
               for t in plans[workload, split]["tensors"]}
        assert got == tensors, (workload, split)


def option_table(page):
    """{option: (default, bounds)} of a page's "## Options" table."""
    text = open(page).read()
    if "\n## Options\n" not in text:
        return None
    section = text.split("\n## Options\n", 1)[1].split("\n#", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    table = {}
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        table[cells[0].strip("`")] = (cells[1], cells[2])
    return table


def test_each_workload_page_lists_its_options_as_the_daemon_declares(daemon):
    """docs/<workload>.md's options table: every option the daemon reports
    for the workload, with its default and bounds, and no other."""
    pages = 0
    for workload in daemon_workloads():
        page = os.path.join(ROOT, "docs", f"{workload}.md")
        if not os.path.exists(page):
            continue
        pages += 1
        table = option_table(page)
        assert table is not None, f"{page} has no ## Options table"
        declared = {o["key"]: (o["default_value"], o["bounds"])
                    for o in reported(daemon, workload, "train")["options"]}
        assert table == declared, page
    assert pages > 0


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
    # AlgoPerf's nine workload names: two of its data sets feed two models
    # each, through one pipeline.
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
