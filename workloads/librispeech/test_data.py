"""librispeech's test data, for tests/python/conftest.py (which makes a
fixture of every workloads/<name>/test_data.py): a root with librispeech/,
AlgoPerf's pre-processed layout, 6 + 6 + 4 train, 4 + 3 validation and 5
test utterances (make_librispeech.py; each subset's first at 320,000
samples)."""

FIXTURE = "librispeech_data"
RETURNS = "root"        # a root holding librispeech/
PYTHON = "generator"    # numpy


def make(out, run):
    run("make_librispeech.py", out, "--seed", 4, "--per-subset", 6, 6, 4, 4,
        3, 5)
