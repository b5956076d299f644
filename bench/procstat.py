"""What the benches read of processes from /proc: the processes below a
pid, their CPU time, threads and memory, and dropping a data set's pages
from the page cache (so that a run reads a never-seen set)."""

import os

TICK = os.sysconf("SC_CLK_TCK")


def descendants(pids):
    """pids and every process below them, the given ones first."""
    children = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(d))
    out, todo = list(pids), [c for p in pids for c in children.get(p, [])]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out


def cpu_seconds(pids, reaped=True):
    """User and system CPU seconds of pids (those that have ended count 0);
    with `reaped`, also those of their children that have ended and were
    waited for (a restarted helper, a DataLoader's workers of a finished
    pass)."""
    total = 0.0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(x) for x in fields[11:15 if reaped else 13]) / TICK
    return total


def status(pid):
    """threads, rss, hwm (peak RSS) and anon (anonymous RSS) of pid (or
    "self"), in bytes (threads a count); all 0 when it has ended. RSS also counts the
    shared pages (the rings') the process has touched."""
    out = {"threads": 0, "rss": 0, "hwm": 0, "anon": 0}
    keys = {"Threads": "threads", "VmRSS": "rss", "VmHWM": "hwm",
            "RssAnon": "anon"}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                name, _, value = line.partition(":")
                if name in keys:
                    n = int(value.split()[0])
                    out[keys[name]] = n if name == "Threads" else n * 1024
    except OSError:
        pass
    return out


def pss(pid):
    """Proportional set size of pid in bytes (shared pages shared out among
    the processes that map them); 0 when it has ended."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def drop_pages(folder):
    """Drops the pages of every file under folder from the page cache
    (posix_fadvise DONTNEED: pages of files the user may read)."""
    for dirpath, _, names in os.walk(folder):
        for n in names:
            fd = os.open(os.path.join(dirpath, n), os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
