"""A Python program that ends while a batchd Loader is still in use exits
0: with a daemon thread iterating the Loader, with one reopening the stream
of a daemon that was killed, and with a Loader never closed (whose ring the
daemon then frees).

CPython ends a thread that takes the GIL while the interpreter exits by
unwinding it (pthread_exit); that unwinding aborts the process ("terminate
called without an active exception") when it begins in a destructor, such
as pybind11's gil_scoped_release, which takes the GIL back in its own.

    BATCHD_BIN=<build>/server/batchd PYTHONPATH=<build>/python \\
        /usr/bin/python3 -m pytest tests/python/test_exit.py
"""

import subprocess
import sys
import textwrap
import time

import pytest

PROGRAM = textwrap.dedent("""
    import sys, threading
    import batchd
    server, how = sys.argv[1], sys.argv[2]
    loader = batchd.Loader("exit-" + how, 8, format="numpy", server=server,
                           options={"examples": 1000, "payload_bytes": 64},
                           timeout=60.0, reconnect=60.0)
    loader.next_batch()
    if how != "never-closed":
        def consume():
            for _ in loader:  # for ever; or reopening a killed daemon's stream
                pass
        threading.Thread(target=consume, daemon=True).start()
    print("ready", flush=True)
    sys.stdin.readline()  # the test says when to end
""")


def run_until(server, how, before_exit=None):
    """Runs PROGRAM; once it is ready, runs before_exit(lines) (which may
    read more of its output), then lets it end. (exit status, output)."""
    proc = subprocess.Popen([sys.executable, "-c", PROGRAM, server.address, how],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if line.strip() == "ready":
                break
        assert lines and lines[-1].strip() == "ready", "".join(lines)
        if before_exit is not None:
            before_exit(proc, lines)
        rest, _ = proc.communicate("\n", timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, "".join(lines) + rest


@pytest.mark.parametrize("run", range(5))
def test_a_daemon_thread_in_next_at_exit(server, run):
    code, out = run_until(server, "thread")
    assert code == 0, out
    assert "terminate called" not in out, out


def test_a_daemon_thread_reopening_a_killed_daemons_stream_at_exit(server):
    def kill_and_wait_for_reopening(proc, lines):
        server.kill()
        for line in proc.stdout:
            lines.append(line)
            if "reopening it at step" in line:
                return
        pytest.fail("the Loader did not start reopening: " + "".join(lines))

    code, out = run_until(server, "reopening", kill_and_wait_for_reopening)
    assert code == 0, out
    assert "terminate called" not in out, out


def test_a_loader_never_closed(server):
    code, out = run_until(server, "never-closed")
    assert code == 0, out
    # The client is gone: the daemon frees its ring.
    deadline = time.monotonic() + 120
    while server.segments() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert server.segments() == []
