"""criteo1tb's test data, for tests/python/conftest.py (which makes a
fixture of every workloads/<name>/test_data.py): a generated set
(make_criteo1tb.py, seed 4): train days 0, 1 and 22 of two files each,
600 + 400 lines a day (3000 lines, several 64 KiB blocks a file); day 23's
36 files of 40 lines. The fixture is its folder."""

FIXTURE = "criteo_data"
RETURNS = "folder"   # the set's own folder
PYTHON = "this"      # the generator needs the standard library only


def make(out, run):
    run("make_criteo1tb.py", "--out", out, "--lines", "600", "--day23-lines",
        "40", "--seed", "4")


def giant(folder, size):
    """Makes `folder` a set whose validation split's indexing reads one file
    of `size` bytes (sparse: nothing on disk), for tests of indexing that
    must stop or be refused; returns (the file, relative to folder, and the
    split)."""
    import os
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "day_23_19"), "wb") as f:
        f.truncate(size)  # holes
    return "day_23_19", "validation"
