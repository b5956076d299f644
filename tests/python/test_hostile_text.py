"""Text that another user controls reaches neither the operator's terminal
nor the daemon's log raw (issue 27, break 6 and a weak point): names under
the data root with ESC, OSC 52, CR and LF are escaped by batchctl and in
the log, numbers in a spec's options are digits and nothing else, and a
caller who makes protobuf complain on every request gets rate-limited
key=value lines, not a flood.

    BATCHD_BIN=<build>/server/batchd PYTHONPATH=<build>/python \\
        /usr/bin/python3 -m pytest tests/python/test_hostile_text.py
"""

import json
import os
import re
import subprocess

import pytest

torch = pytest.importorskip("torch")
PIL_Image = pytest.importorskip("PIL.Image")

import batchd  # noqa: E402
from batchd_daemon import Server, binary  # noqa: E402

# A directory name that clears the screen, writes the operator's clipboard
# (OSC 52), rings the bell and forges a status line of its own, with a C1
# CSI and a right-to-left override for good measure.
HOSTILE = ("ds\x1b]52;c;cm0gLXJmIH4K\x07\r\nstream forged  owner 0  "
           "workload x\x1b[2J\x9b31m\u202eevil")
# What a terminal acts on: C0 controls but LF (which ends our lines), DEL,
# and the C1 controls as UTF-8.
RAW_CONTROL = re.compile(rb"[\x00-\x09\x0b-\x1f\x7f]|\xc2[\x80-\x9f]")


def build_program(name):
    """A program of the build tree's tests/ (beside server/)."""
    daemon = os.environ.get("BATCHD_BIN", "")
    return os.path.join(os.path.dirname(os.path.dirname(daemon)), "tests", name)


@pytest.fixture
def server(tmp_path):
    s = Server(tmp_path)
    yield s
    s.stop()


def batchctl(server, *args):
    """batchctl's CompletedProcess, stdout and stderr as bytes."""
    return subprocess.run([binary("batchctl"), *args, "--server",
                           server.address], capture_output=True, timeout=60)


def hostile_tree(root):
    """root/HOSTILE/val/<HOSTILE class>/ with a good JPEG and one that is
    not a JPEG, whose decode error the daemon logs with its path."""
    tree = root / HOSTILE / "val" / ("c\x1b[1;1H\r" + "\x1b]0;pwned\x07")
    tree.mkdir(parents=True)
    PIL_Image.new("RGB", (64, 48), (200, 30, 30)).save(tree / "a.JPEG")
    (tree / "b\x1b[31m\r.JPEG").write_bytes(b"not a JPEG at all")


def test_status_and_the_log_escape_names_from_the_data_tree(server, tmp_path):
    hostile_tree(tmp_path / "data")
    with batchd.Loader("hostile", 2, workload="imagenet", data=HOSTILE,
                       split="val", world_size=1, rank=0,
                       server=server.address, connect_timeout=10.0,
                       timeout=60.0) as ld:
        batch, info = ld.next_batch()
        assert info.step == 0
        text = batchctl(server, "status")
        as_json = batchctl(server, "status", "--json")
    assert text.returncode == 0, text.stderr
    assert not RAW_CONTROL.search(text.stdout), text.stdout
    assert b"\nstream forged" not in text.stdout
    assert b"\\x1b]52;c;cm0gLXJmIH4K\\x07\\r\\nstream forged" in text.stdout
    assert b"\\u009b31m\\u202eevil" in text.stdout
    # JSON: ASCII only, and it reads back as the very name.
    assert as_json.returncode == 0, as_json.stderr
    assert all(0x20 <= b < 0x7f for b in as_json.stdout.rstrip(b"\n"))
    streams = json.loads(as_json.stdout)["streams"]
    assert [s["spec"]["data"] for s in streams] == [HOSTILE]

    log = open(server.log_path, "rb").read()
    assert b"event=decode_error" in log, log
    assert not RAW_CONTROL.search(log), log
    for line in log.splitlines():
        assert line.startswith(b"batchd: "), line
    # The file named, escaped.
    assert b"b\\x1b[31m\\r.JPEG" in log, log


@pytest.mark.parametrize("value", ["\r\n1000", "1000\r\n", "\x0b1000\x0c",
                                   " 1000", "1000 ", "+1000", "1000\x1b[2J"])
def test_option_numbers_are_strict_and_refusals_name_them(server,
                                                                value):
    with pytest.raises(batchd.InvalidArgumentError) as e:
        batchd.Loader("strict", 8, world_size=1, rank=0,
                      server=server.address, connect_timeout=10.0,
                      options={"examples": value, "payload_bytes": "64"})
    message = str(e.value)
    assert "option examples=" in message, message
    assert server.status()["streams"] == []
    # The operator's view of the same refusal.
    r = batchctl(server, "plan", "--workload", "synthetic",
                 "--global-batch-size", "8", "--world-size", "1",
                 "--option", f"examples={value}", "--option",
                 "payload_bytes=64")
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert b"option examples=" in r.stderr, r.stderr
    assert not RAW_CONTROL.search(r.stderr), r.stderr
    # Digits alone still work.
    with batchd.Loader("strict", 8, world_size=1, rank=0,
                       server=server.address, connect_timeout=10.0,
                       options={"examples": "1000",
                                "payload_bytes": "64"}) as ld:
        assert ld.next_batch()[1].step == 0


def test_a_protobuf_complaint_per_request_is_rate_limited(server):
    caller = build_program("test_rpc_caller")
    r = subprocess.run([caller, server.address, "open-invalid-utf8", "300"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert r.stdout.strip() == "refused 300"
    server.status()  # still serving
    lines = open(server.log_path, "rb").read().splitlines()
    assert not any(b"[libprotobuf" in line for line in lines), lines[:5]
    for line in lines:
        assert line.startswith(b"batchd: ts="), line
    protobuf = [line for line in lines if b"library=protobuf" in line]
    assert protobuf, lines
    assert b"invalid UTF-8" in protobuf[0], protobuf[0]
    # One line per 10 s: 300 calls are nowhere near 300 lines.
    assert len(protobuf) <= 10, protobuf
