"""fastmri's test data, for tests/python/conftest.py (which makes a fixture
of every workloads/<name>/test_data.py): a generated set (make_fastmri.py in
the reference venv, which has h5py; seed 2): knee_singlecoil_train/ of 5
volumes and knee_singlecoil_val/ of 3, 2 or 3 slices each, widths 368, 372
and 369, every second file chunked and compressed. The fixture is its
folder."""

FIXTURE = "fastmri_data"
RETURNS = "folder"      # the set's own folder
PYTHON = "reference"    # h5py (scripts/reference-venv.sh)
# What a plan of every split needs on this set: its test split is what
# validation leaves of the three val volumes (AlgoPerf's validation is the
# first 100).
PLAN_OPTIONS = {"validation_files": "2"}


def make(out, run):
    run("make_fastmri.py", out, "--train", "5", "--val", "3", "--seed", "2")
