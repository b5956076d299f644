"""Tests of the deployment files in docker/: the systemd unit, the example
configuration, the Kubernetes pod, the Dockerfile and the script that
lists the image's runtime packages.

    BATCHD_BIN=<build>/server/batchd /usr/bin/python3 -m pytest \\
        tests/python/test_service.py

The unit is checked with `systemd-analyze verify` (Debian's systemd),
which needs no running systemd; the image itself is not built here.
"""

import configparser
import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
import tomllib
import uuid

import pytest

DOCKER = os.path.join(os.path.dirname(__file__), "..", "..", "docker")
UNIT = os.path.join(DOCKER, "batchd.service")
CONFIG = os.path.join(DOCKER, "batchd.toml")


def binary(name):
    daemon = os.environ.get("BATCHD_BIN")
    if not daemon:
        pytest.fail("set BATCHD_BIN to the batchd daemon (<build>/server/batchd)")
    return os.path.join(os.path.dirname(daemon), name)


def read_unit():
    # systemd units are ini files whose keys may repeat; keep the last, as
    # systemd does for the settings read here, and keep the keys' case.
    parser = configparser.ConfigParser(strict=False, interpolation=None,
                                       delimiters=("=",))
    parser.optionxform = str
    parser.read(UNIT)
    return parser


def test_unit_passes_systemd_analyze_verify(tmp_path):
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed (Debian: systemd)")
    # verify wants ExecStart's binary to exist: point it at the build's.
    text = open(UNIT).read()
    assert "ExecStart=/usr/local/bin/batchd " in text
    text = text.replace("ExecStart=/usr/local/bin/batchd ",
                        f"ExecStart={os.path.abspath(binary('batchd'))} ")
    unit = tmp_path / "batchd.service"
    unit.write_text(text)
    r = subprocess.run([analyze, "verify", "--man=no", str(unit)],
                       capture_output=True, text=True, timeout=120)
    # Containers without a running systemd add warnings of their own; only
    # those about this unit count.
    about_unit = [line for line in (r.stdout + r.stderr).splitlines()
                  if "batchd.service" in line]
    assert r.returncode == 0 and about_unit == [], r.stdout + r.stderr


def test_unit_is_a_hardened_notify_service_that_keeps_dev_shm():
    service = read_unit()["Service"]
    expected = {
        "Type": "notify", "NotifyAccess": "main", "WatchdogSec": "30",
        "RuntimeDirectory": "batchd", "Restart": "on-failure",
        "User": "batchd", "ProtectSystem": "strict", "ProtectHome": "yes",
        "PrivateTmp": "yes", "NoNewPrivileges": "yes",
        "ExecStart": "/usr/local/bin/batchd --config /etc/batchd/batchd.toml",
    }
    assert {k: service.get(k) for k in expected} == expected
    # The rings live in /dev/shm and are shared with the trainers; the
    # daemon watches trainers through /proc/<pid>.
    assert "/dev/shm" in service.get("ReadWritePaths", "").split()
    for key in ("InaccessiblePaths", "TemporaryFileSystem", "ReadOnlyPaths"):
        assert "/dev" not in service.get(key, ""), key
    assert service.get("ProtectProc", "default") == "default"
    assert service.get("PrivateIPC", "no") == "no"
    # The socket the configuration names is in the RuntimeDirectory.
    config = tomllib.load(open(CONFIG, "rb"))
    assert config["listen"] == "unix:///run/batchd/batchd.sock"


def test_example_config_names_every_setting_and_loads():
    config = tomllib.load(open(CONFIG, "rb"))
    # shm-group names a group of the target system; this host may lack it.
    r = subprocess.run([binary("batchd"), "--config", CONFIG,
                        "--shm-group", "", "--print-config"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    merged = tomllib.loads(r.stdout)
    assert sorted(config) == sorted(merged)
    config["shm-group"] = ""
    assert config == merged


def test_pod_shares_dev_shm_and_the_socket_as_planned(tmp_path):
    yaml = pytest.importorskip("yaml")
    pod = yaml.safe_load(open(os.path.join(DOCKER, "kubernetes-pod.yaml")))
    spec = pod["spec"]
    assert spec["securityContext"]["runAsNonRoot"] is True
    volumes = {v["name"]: v for v in spec["volumes"]}
    (sidecar,) = spec["initContainers"]
    (trainer,) = spec["containers"]
    assert sidecar["restartPolicy"] == "Always"  # a native sidecar
    for container in (sidecar, trainer):
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        assert volumes[mounts["/dev/shm"]]["emptyDir"]["medium"] == "Memory"
        assert "emptyDir" in volumes[mounts["/run/batchd"]]
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
    shm = volumes["shm"]["emptyDir"]["sizeLimit"]

    # The sizeLimit is what `batchctl plan` prints for a spec the size of
    # the comment's: 1024 x 224x224x3 bytes per global batch, 8 ranks, 4
    # slots (synthetic examples of that many bytes).
    sock_dir = tempfile.mkdtemp(prefix="batchd-svc-", dir="/tmp")
    address = f"unix://{sock_dir}/sock"
    data = tmp_path / "data"
    data.mkdir()
    proc = subprocess.Popen(
        [binary("batchd"), "--listen", address, "--data-root", str(data),
         "--shm-prefix", f"batchdsvc{uuid.uuid4().hex[:8]}", "--threads", "1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            with socket.socket(socket.AF_UNIX) as s:
                try:
                    s.connect(f"{sock_dir}/sock")
                    break
                except OSError:
                    assert time.monotonic() < deadline and proc.poll() is None
                    time.sleep(0.02)
        r = subprocess.run(
            [binary("batchctl"), "plan", "--server", address,
             "--global-batch-size", "1024", "--world-size", "8", "--slots",
             "4", "--option", "examples=1281167", "--option",
             "payload_bytes=150528", "--json"],
            capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["kubernetes_size_limit"] == shm
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        shutil.rmtree(sock_dir, ignore_errors=True)
    # The sidecar's memory limit holds the rings it reserves.
    limit = sidecar["resources"]["limits"]["memory"]
    units = {"Mi": 1 << 20, "Gi": 1 << 30}
    as_bytes = lambda q: int(q[:-2]) * units[q[-2:]]  # noqa: E731
    assert as_bytes(limit) > as_bytes(shm)


def test_dockerfile_builds_with_the_scripts_and_runs_as_batchd():
    text = open(os.path.join(DOCKER, "Dockerfile")).read()
    instructions = [line.split(None, 1) for line in text.splitlines()
                    if re.match(r"^[A-Z]+\s", line)]
    # Both stages start from BASE, Debian 12 slim unless a build argument
    # names another image (a local one where no registry is reachable);
    # the runtime stage, the last, takes the binaries from the build stage
    # unless BINARIES=prebuilt names the context's.
    args = dict(re.findall(r"^ARG (\w+)=(\S+)$", text, re.M))
    assert args["BASE"].startswith("debian:bookworm-slim"), args
    assert args["BINARIES"] == "build", args
    froms = [rest.split() for op, rest in instructions if op == "FROM"]
    assert {f[-1]: f[0] for f in froms} == {
        "build": "${BASE}", "prebuilt": "scratch",
        "binaries": "${BINARIES:-build}", "runtime": "${BASE}"}, froms
    assert froms[-1][-1] == "runtime"
    assert "scripts/install-deps.sh" in text and "scripts/build.sh" in text
    users = [rest.strip() for op, rest in instructions if op == "USER"]
    assert users and users[-1].split(":")[0] == "batchd"
    assert "EXPOSE" not in [op for op, _ in instructions]
    assert '["/run/batchd"]' in text  # the socket's volume
    # batchd.toml's cache directory exists and is batchd's (the image
    # exited at once without it), kept in a volume.
    assert "install -d -o batchd -g batchd -m 0700 /var/cache/batchd" in text
    assert '["/var/cache/batchd"]' in text


def test_runtime_packages_lists_the_libraries_of_the_binaries():
    if shutil.which("dpkg") is None:
        pytest.skip("not a Debian system")
    r = subprocess.run(
        [os.path.join(DOCKER, "runtime-packages.sh"), binary("batchd"),
         binary("batchctl")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    packages = r.stdout.split()
    assert any(p.startswith("libgrpc++") for p in packages), packages
    assert "libstdc++6" in packages
    assert not any(p.endswith("-dev") for p in packages), packages
    for p in packages:
        installed = subprocess.run(
            ["dpkg-query", "-W", "-f=${Status}", p], capture_output=True,
            text=True)
        assert installed.stdout == "install ok installed", p
