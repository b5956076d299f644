"""Runs the Kubernetes manifests of docker/ with `podman kube play`:

1. docker/kubernetes-pod.yaml, the sidecar pod: batchd and a trainer that
   reads one epoch on 2 ranks (tests/container/trainer_check.py), then the
   pod's stop (SIGTERM), after which batchd must have exited 0.
2. docker/kubernetes-daemonset.yaml: its pod template as a pod (podman
   plays no DaemonSet) with the node's paths (hostPath) in a scratch
   directory and /dev/shm a small tmpfs there, then its trainer pod; after
   the trainer's epoch the daemon pod stops, exits 0 and leaves no ring.

What is changed for podman, and only that: the images are the local ones
scripts/container-check.sh built, the trainer runs trainer_check.py, GPU
limits and probes go (no GPUs here; podman runs probes through systemd),
the claim is a podman volume, emptyDirs are made as Kubernetes makes them
(podman 4.3 makes named volumes of them), and the native
sidecar (an init container with restartPolicy Always, which podman 4.3
would run to completion first) becomes a regular container, as the
manifest says to do on clusters older than 1.29.

    kube_check.py --prefix P --image IMAGE --trainer IMAGE --work DIR
"""

import argparse
import copy
import os
import subprocess
import sys
import time

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHECK = ["python3", "/usr/local/bin/trainer_check.py", "epoch",
         "--world-size", "2", "--global-batch-size", "64", "--examples", "1024"]


def pm(*args, check=True):
    r = subprocess.run(["podman", "--runtime", "runc", *args], text=True,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if check and r.returncode != 0:
        sys.exit(f"kube_check: podman {' '.join(args)} failed:\n{r.stdout}")
    return r


def wait_exit(container, seconds=300):
    """The container's exit code once it stops (bounded: a loaded machine)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        state = pm("inspect", "-f", "{{.State.Status}} {{.State.ExitCode}}",
                   container).stdout.split()
        if state[0] in ("exited", "stopped"):
            return int(state[1])
        time.sleep(0.5)
    sys.exit(f"kube_check: {container} still runs after {seconds} s")


def wait_ready(container, seconds=60):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if pm("exec", container, "batchctl", "status", "--timeout", "2",
              check=False).returncode == 0:
            return
        time.sleep(0.5)
    logs = pm("logs", container, check=False).stdout
    sys.exit(f"kube_check: {container} not ready after {seconds} s:\n{logs[-2000:]}")


def adapt(spec, args, stream, socket):
    """Local images, the check as the trainer's command, no GPU limits."""
    for c in spec.get("initContainers", []) + spec["containers"]:
        if c["image"].startswith("registry.example.com/batchd"):
            c["image"] = args.image
        elif c["name"] == "trainer":
            c["image"] = args.trainer
            # The trainer may start before batchd's socket exists.
            c["command"] = ["sh", "-c",
                            f"until [ -S {socket} ]; do sleep 0.2; done; "
                            f"exec \"$@\"", "sh"] + CHECK + ["--stream", stream]
        limits = c.get("resources", {}).get("limits", {})
        limits.pop("nvidia.com/gpu", None)
        # podman runs probes through systemd timers, which CI machines do
        # not have; wait_ready asks batchctl status, as the probes do.
        c.pop("startupProbe", None)
        c.pop("livenessProbe", None)


MOUNTS = []  # tmpfs mounts made here, unmounted at the end
PODS = []


def tmpfs(path, size):
    os.makedirs(path, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=1777", "tmpfs", path],
                   check=True)
    MOUNTS.append(path)


def k8s_size(quantity):
    """A Kubernetes quantity (712Mi, 4Gi) as a tmpfs size (712m, 4g)."""
    for suffix, unit in (("Ki", "k"), ("Mi", "m"), ("Gi", "g")):
        if quantity.endswith(suffix):
            return quantity[:-len(suffix)] + unit
    return quantity


def emptydirs_as_kubernetes_makes_them(spec, root):
    """Podman 4.3 turns an emptyDir into a named volume of that name (shared
    by every pod, kept after it, root's and 0755, on disk even for medium
    Memory); Kubernetes makes a fresh directory of mode 0777 per pod, a
    tmpfs of sizeLimit for medium Memory. The pod gets the latter, as
    hostPath directories under `root`."""
    for v in spec["volumes"]:
        ed = v.pop("emptyDir", None)
        if ed is None:
            continue
        path = os.path.join(root, v["name"])
        if ed.get("medium") == "Memory":
            tmpfs(path, k8s_size(ed.get("sizeLimit", "64Mi")))
        else:
            os.makedirs(path)
        os.chmod(path, 0o777)
        v["hostPath"] = {"path": path, "type": "Directory"}


def play(doc, path):
    with open(path, "w") as f:
        yaml.safe_dump(doc, f)
    PODS.append(doc["metadata"]["name"])
    # No pod network: the socket and /dev/shm are all the pods share.
    pm("kube", "play", "--network", "none", path)


def finish(pod, trainer, batchd):
    code = wait_exit(trainer)
    if code != 0:
        sys.exit(f"kube_check: {trainer} exited {code}:\n"
                 + pm("logs", trainer, check=False).stdout[-3000:])
    print(pm("logs", trainer).stdout.strip().splitlines()[-1])
    pm("pod", "stop", "-t", "60", pod)
    code = wait_exit(batchd)
    if code != 0:
        sys.exit(f"kube_check: {batchd} exited {code} on the pod's stop:\n"
                 + pm("logs", batchd, check=False).stdout[-3000:])


def sidecar_pod(args):
    with open(os.path.join(REPO, "docker", "kubernetes-pod.yaml")) as f:
        doc = yaml.safe_load(f)
    spec = doc["spec"]
    name = f"{args.prefix}-pod"
    doc["metadata"]["name"] = name
    for c in list(spec.get("initContainers", [])):
        if c.get("restartPolicy") == "Always":
            del c["restartPolicy"]
            spec["initContainers"].remove(c)
            spec["containers"].insert(0, c)
    if not spec["initContainers"]:
        del spec["initContainers"]
    socket = next(e["value"] for e in spec["containers"][0]["env"]
                  if e["name"] == "BATCHD_SERVER")[len("unix://"):]
    adapt(spec, args, "kube-sidecar", socket)
    for v in spec["volumes"]:
        if "persistentVolumeClaim" in v:
            claim = f"{args.prefix}-{v['persistentVolumeClaim']['claimName']}"
            pm("volume", "create", claim)
            v["persistentVolumeClaim"]["claimName"] = claim
    emptydirs_as_kubernetes_makes_them(spec, os.path.join(args.work, "pod"))
    play(doc, os.path.join(args.work, "pod.yaml"))
    finish(name, f"{name}-trainer", f"{name}-batchd")
    print("kube_check: kubernetes-pod.yaml: trainer's epoch checked, batchd stopped cleanly")


def daemonset(args):
    with open(os.path.join(REPO, "docker", "kubernetes-daemonset.yaml")) as f:
        ds, trainer_pod = list(yaml.safe_load_all(f))
    node = os.path.join(args.work, "node")
    shm = os.path.join(node, "dev", "shm")
    # The node's /dev/shm: a tmpfs of its own, so that its rings are ours
    # to count.
    tmpfs(shm, "64m")

    def rehome(spec):
        for v in spec["volumes"]:
            hp = v.get("hostPath")
            if hp:
                hp["path"] = node + hp["path"]
                os.makedirs(hp["path"], exist_ok=True)

    name = f"{args.prefix}-node"
    spec = copy.deepcopy(ds["spec"]["template"]["spec"])
    rehome(spec)
    socket = next(e["value"] for e in spec["containers"][0]["env"]
                  if e["name"] == "BATCHD_SERVER")[len("unix://"):]
    adapt(spec, args, "kube-node", socket)
    # podman 4.3 removes a finished init container ("once", its default)
    # in a race with its exit; "always" keeps it.
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "labels": ds["spec"]["template"]["metadata"]["labels"],
                        "annotations": {"io.podman.annotations.init.container.type": "always"}},
           "spec": spec}
    play(pod, os.path.join(args.work, "daemon-pod.yaml"))
    wait_ready(f"{name}-batchd")
    tname = f"{args.prefix}-train"
    trainer_pod["metadata"] = {"name": tname}
    rehome(trainer_pod["spec"])
    adapt(trainer_pod["spec"], args, "kube-node", socket)
    play(trainer_pod, os.path.join(args.work, "trainer-pod.yaml"))
    code = wait_exit(f"{tname}-trainer")
    if code != 0:
        sys.exit(f"kube_check: the node's trainer exited {code}:\n"
                 + pm("logs", f"{tname}-trainer", check=False).stdout[-3000:])
    print(pm("logs", f"{tname}-trainer").stdout.strip().splitlines()[-1])
    # The trainer's pod shares no IPC namespace with the daemon's: its epoch
    # read through the node's /dev/shm (the hostPath) or not at all.
    pm("pod", "stop", "-t", "60", name)
    code = wait_exit(f"{name}-batchd")
    if code != 0:
        sys.exit(f"kube_check: the daemon pod's batchd exited {code}")
    left = [e for e in os.listdir(shm) if e.startswith("batchd.")]
    if left:
        sys.exit(f"kube_check: rings left in the node's /dev/shm: {left}")
    cache = os.stat(os.path.join(node, "var", "cache", "batchd"))
    if cache.st_uid != 10001 or cache.st_mode & 0o777 != 0o700:
        sys.exit("kube_check: the node's cache directory is not batchd's 0700")
    print("kube_check: kubernetes-daemonset.yaml: node daemon, trainer pod's epoch "
          "checked, stopped cleanly, no ring left")


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prefix", required=True)
    p.add_argument("--image", required=True)
    p.add_argument("--trainer", required=True)
    p.add_argument("--work", required=True)
    args = p.parse_args()
    try:
        sidecar_pod(args)
        daemonset(args)
    finally:
        for pod in PODS:
            # The image's VOLUMEs that no pod volume covers are anonymous
            # volumes under podman (Kubernetes has none): removed with it.
            ids = pm("ps", "-a", "-q", "--filter", f"pod={pod}", check=False).stdout.split()
            anon = []
            for c in ids:
                out = pm("inspect", "-f", "{{range .Mounts}}{{.Name}} {{end}}", c,
                         check=False).stdout.split()
                anon += [v for v in out if len(v) == 64]
            pm("pod", "rm", "-f", "-t", "0", pod, check=False)
            for v in anon:
                pm("volume", "rm", "-f", v, check=False)
        for path in reversed(MOUNTS):
            subprocess.run(["umount", "-l", path], check=False)


if __name__ == "__main__":
    main()
