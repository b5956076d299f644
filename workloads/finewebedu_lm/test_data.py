"""finewebedu_lm's test data, for tests/python/conftest.py (which makes a
fixture of every workloads/<name>/test_data.py): a generated set
(make_finewebedu_lm.py in the reference venv, which has `datasets`; seed 3):
train/ of 60 rows of 2,049 tokens in 3 shards (119 windows), val/ of 14
rows in 3 shards (27 windows). The fixture is its folder."""

FIXTURE = "lm_data"
RETURNS = "folder"      # the set's own folder
PYTHON = "reference"    # datasets (scripts/reference-venv.sh)


def make(out, run):
    run("make_finewebedu_lm.py", out, "--train-rows", "60", "--val-rows",
        "14", "--shards", "3", "--seed", "3")
