"""AlgoPerf's own pipelines beside batchd: the Python of the reference venv
(scripts/reference-venv.sh: TensorFlow, h5py, pyarrow, datasets, jraph),
where the benches run them, and one run of such a pipeline."""

import json
import os
import subprocess
import sys

# BATCHD_REF_PYTHON: another venv's python (default: CI's for Python 3.12).
REF_PYTHON = os.environ.get("BATCHD_REF_PYTHON",
                            "/var/cache/batchd-ci/venv-ref-3.12/bin/python")


def quiet_env():
    """The environment a pipeline runs in: TensorFlow's log off, no GPU."""
    return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")


def run_pipeline(*args, cores=None):
    """Runs REF_PYTHON with args (a script and its arguments, or "-c",
    code and its arguments), on `cores` (a taskset CPU list) if given, and
    returns the last line it printed, a JSON object. A failed run raises,
    after copying the end of its stderr to ours."""
    cmd = [REF_PYTHON, *args]
    if cores is not None:
        cmd = ["taskset", "-c", cores, *cmd]
    out = subprocess.run(cmd, capture_output=True, text=True, env=quiet_env())
    if out.returncode:
        sys.stderr.write(out.stderr[-4000:])
        raise RuntimeError(f"the AlgoPerf pipeline exited {out.returncode}")
    return json.loads(out.stdout.strip().splitlines()[-1])
