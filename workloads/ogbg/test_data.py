"""ogbg's test data, for tests/python/conftest.py (which makes a fixture of
every workloads/<name>/test_data.py): a root with ogbg/ogbg_molpcba/0.1.3/
(make_ogbg.py: 240 train graphs in 8 shards, 60 validation, 50 test)."""

FIXTURE = "ogbg_data"
RETURNS = "root"        # a root holding ogbg/
PYTHON = "generator"    # numpy


def make(out, run):
    run("make_ogbg.py", out, "--train", 240, "--validation", 60, "--test", 50,
        "--seed", 7)
# Options of a train stream of packed rows whose epochs differ in length,
# for tests of epochs (tests/python/test_epochs.py): rows of 4 graph slots.
PACKED_OPTIONS = {"graphs_per_row": 4}
