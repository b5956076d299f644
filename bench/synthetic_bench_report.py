#!/usr/bin/env python3
"""Prints synthetic_bench.sh's table: batchctl bench figures per slot size
and world size next to ring_bench's memcpy bandwidth for the same size.

Usage: synthetic_bench_report.py RING_JSON RESULTS_JSONL

RING_JSON is `ring_bench --json`; each line of RESULTS_JSONL is
{"slot": NAME, "world_size": W, "result": <batchctl bench --json>} or
{"slot": NAME, "world_size": W, "error": TEXT}. Of several runs of one
(slot, W) the fastest is shown.
"""
import json
import sys

# Slot names of synthetic_bench.sh and their payload bytes per rank batch.
SLOT_BYTES = {
    "1MiB": 1 << 20,
    "18.4MiB": 128 * 224 * 224 * 3,
    "64MiB": 64 << 20,
}

HEADER = ("slot", "W", "batches/s", "rank b/s", "GB/s", "memcpy GB/s",
          "x memcpy", "wait", "srv threads", "srv RSS MiB", "rings MiB")


def best_runs(lines):
    """(slot, W) -> the fastest result, or the error text; in run order."""
    best = {}
    for line in lines:
        if not line.strip():
            continue
        rec = json.loads(line)
        key = (rec["slot"], rec["world_size"])
        if "error" in rec:
            best[key] = rec["error"].strip()
            continue
        cur = best.get(key)
        if not isinstance(cur, dict) or (
                rec["result"]["bytes_per_s"] > cur["bytes_per_s"]):
            best[key] = rec["result"]
    return best


def render(rows):
    widths = [max(len(r[i]) for r in rows if len(r) == len(HEADER))
              for i in range(len(HEADER))]
    out = []
    for r in rows:
        if len(r) != len(HEADER):
            out.append("  ".join(r))
            continue
        out.append("  ".join(
            c.ljust(widths[i]) if i == 0 else c.rjust(widths[i])
            for i, c in enumerate(r)))
    return "\n".join(out)


def main(argv):
    if len(argv) != 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    with open(argv[1]) as f:
        ring = json.load(f)
    with open(argv[2]) as f:
        best = best_runs(f)

    memcpy = {m["bytes"]: m["gb_per_s"] for m in ring["memcpy"]}
    ring_page = {r["slot_payload_bytes"]: r for r in ring["ring"]["results"]
                 if r["touch"] == "page"}
    lat = ring["latency"]
    print()
    print("ring_bench on this machine (one producer and one consumer "
          "process, %d slots):" % ring["ring"]["slots"])
    for name, size in SLOT_BYTES.items():
        r = ring_page.get(size)
        print("  %-8s memcpy %6.2f GB/s   ring %6.2f GB/s (%.2fx memcpy)" %
              (name, memcpy.get(size, float("nan")),
               r["gb_per_s"] if r else float("nan"),
               r["ratio_to_memcpy"] if r else float("nan")))
    print("  publish -> Acquire latency: median %.1f us, p99 %.1f us" %
          (lat["median_us"], lat["p99_us"]))
    print()

    rows = [HEADER]
    for (name, w), r in best.items():
        if not isinstance(r, dict):
            rows.append((name, str(w), "failed: " + r.splitlines()[-1]))
            continue
        gbs = r["bytes_per_s"] / 1e9
        mc = memcpy.get(SLOT_BYTES.get(name, -1), float("nan"))
        rows.append((name, str(w), "%.1f" % r["batches_per_s"],
                     "%.1f" % r["rank_batches_per_s"], "%.2f" % gbs,
                     "%.2f" % mc, "%.2f" % (gbs / mc),
                     "%.1f%%" % (100 * r["wait_fraction"]),
                     str(r["server_threads"]),
                     "%.1f" % (r["server_rss_bytes"] / 2**20),
                     "%.0f" % (r["server_ring_bytes"] / 2**20)))
    print(render(rows))
    print()
    print("batchctl bench: W consumer processes (batchd::Loader), one slot per")
    print("rank batch. GB/s: tensor bytes delivered to all ranks together;")
    print("x memcpy: that over one thread of memcpy of the slot's size; wait:")
    print("mean share of a rank's time spent in Next(); srv threads and RSS:")
    print("largest seen during the run, RSS without the rings.")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
