#!/usr/bin/env python3
"""Summarize tools/calibrate/run.sh's raw runs into calibration/default.toml.

Per point (mode, nominal squeeze): speed = the median over repetitions of the
squeezed node's touches/s over the median of the unlimited node's touches/s
(measured right before each squeezed run): a ratio of medians, so that one
baseline disturbed by the machine's other load does not skew a point. The
per-repetition ratios are listed in the header. Its fault rates are the medians
of the node's major faults/s and refaults/s (anon + file). The squeeze written
is the effective one: the unlimited run's whole charge (working set, binaries,
page tables) over the limit. A point that is effectively under the limit and
saw no major fault has speed 1 by definition (any difference is CPU noise from
the machine's other load). Speeds are then capped at 1 and made non-increasing
along the squeeze (a running minimum), because the simulator's model must be
monotone; the header lists every raw ratio so that any adjustment is visible.
"""
import argparse
import csv
import statistics
import sys
from collections import defaultdict

FORMAT_VERSION = 1
# The smallest speed the file may hold: the format requires speed > 0, and a
# node that made no measurable progress in the window is still not stopped.
MIN_SPEED = 1e-6


def main() -> int:
    ap = argparse.ArgumentParser()
    for name in ("raw", "out", "kernel", "cpu", "swap", "date", "command"):
        ap.add_argument(f"--{name}", required=True)
    for name in ("cores", "memory-kib", "limit", "workers", "reps", "elapsed", "swappiness"):
        ap.add_argument(f"--{name}", type=int, required=True)
    for name in ("warm", "secs"):
        ap.add_argument(f"--{name}", type=float, required=True)
    args = ap.parse_args()

    base = {}
    base_usage = {}
    squeezed = defaultdict(list)  # (mode, squeeze, rep) -> ok rows
    ooms = defaultdict(int)  # (mode, squeeze) -> voided runs
    tries = defaultdict(int)
    with open(args.raw, newline="") as f:
        for row in csv.DictReader(f):
            key = (row["mode"], float(row["squeeze"]), int(row["rep"]))
            ok = row["status"] == "0" and row.get("touches_per_sec")
            if row["kind"] == "base":
                if ok:
                    base[key] = float(row["touches_per_sec"])
                    base_usage[key] = float(row["usage"])
                continue
            tries[key[:2]] += 1
            if ok:
                squeezed[key].append(row)
            else:
                ooms[key[:2]] += 1

    curves = defaultdict(list)
    for mode in ("anon", "file"):
        points = sorted({k[1] for k in squeezed if k[0] == mode} | {k[1] for k in ooms if k[0] == mode})
        for sq in points:
            speeds, majors, refaults, fair, bases, usages, rates = [], [], [], [], [], [], []
            for (m, s, rep), rows in squeezed.items():
                if m != mode or s != sq or (m, s, rep) not in base:
                    continue
                row = rows[-1]
                b = base[(m, s, rep)]
                speeds.append(float(row["touches_per_sec"]) / b)
                rates.append(float(row["touches_per_sec"]))
                majors.append(float(row["pgmajfault_per_sec"]))
                refaults.append(float(row["refault_anon_per_sec"]) + float(row["refault_file_per_sec"]))
                wmax = float(row["worker_max_per_sec"])
                fair.append(float(row["worker_min_per_sec"]) / wmax if wmax > 0 else 1.0)
                bases.append(b)
                usages.append(base_usage[(m, s, rep)])
            if not speeds:
                print(f"summarize: {mode} {sq}: no valid run (all voided by OOM kills?)", file=sys.stderr)
                continue
            effective = statistics.median(usages) / args.limit
            if effective <= 1.0 and max(majors) == 0:
                speed_here = 1.0
            else:
                speed_here = statistics.median(rates) / statistics.median(bases)
            curves[mode].append({
                "nominal": sq,
                "squeeze": round(effective, 4),
                "raw_speed": speed_here,
                "raw_speed": statistics.median(speeds),
                "speeds": speeds,
                "major_faults": statistics.median(majors),
                "refaults": statistics.median(refaults),
                "fairness": statistics.median(fair),
                "base": statistics.median(bases),
                "runs": len(speeds),
                "voided": ooms[(mode, sq)],
            })
        # Cap at 1 and keep the curve non-increasing.
        floor = 1.0
        for p in curves[mode]:
            floor = min(floor, max(p["raw_speed"], MIN_SPEED))
            p["speed"] = floor
        # Effective squeezes must increase with the nominal ones; they do
        # unless the charge beyond the working set varied wildly.
        sq = [p["squeeze"] for p in curves[mode]]
        if any(b <= a for a, b in zip(sq, sq[1:])):
            print(f"summarize: {mode}: effective squeezes not increasing: {sq}", file=sys.stderr)
            return 1

    if not curves["anon"]:
        print("summarize: no anon points: cannot write a calibration", file=sys.stderr)
        return 1

    out = []
    w = out.append
    w("# overbook thrashing calibration: how fast a node's tasks run as its")
    w("# memory demand exceeds its capacity (squeeze = demand / capacity).")
    w("#")
    w(f"# Produced by: {args.command}")
    w(f"#   on {args.date}, {args.elapsed} s of measurement.")
    w("#")
    w("# Method: a cgroup v1 memory cgroup is the node, memory.limit_in_bytes =")
    w(f"# {args.limit >> 20} MiB, with a {args.swap};")
    w(f"# {args.workers} random-touch workers (tools/calibrate/touch.c) share a working")
    w("# set of squeeze x limit: `anon` writes one byte of a random page of private")
    w("# anonymous memory (evictions go to swap); `file` reads one byte of a random")
    w("# page of an mmap'd file (evictions drop page cache, misses read the disk).")
    w("# speed = median touches/s in the limited node / median touches/s of the same")
    w("# working set in an unlimited node (each measured just before its limited run);")
    w(f"# warm-up {args.warm} s, window {args.secs} s, {args.reps} repetitions interleaved over the points.")
    w("# major_faults / refaults are the whole node's pgmajfault and")
    w("# workingset_refault_{anon,file} per second from memory.stat over the window.")
    w("# squeeze = the unlimited run's whole charge (memory.usage_in_bytes: working")
    w("# set + binaries + page tables) / limit. The node's memcg OOM killer is off")
    w("# (memory.oom_control): near the limit it otherwise killed a worker within")
    w("# seconds in most runs, even with free swap; with it off, a charge that")
    w("# reclaim cannot satisfy waits, and that stall is part of the slowdown.")
    w("# A point under the limit with no major fault has speed 1 (the rest is CPU")
    w("# noise); speeds are capped at 1 and made non-increasing (running minimum).")
    w("# The working set touches a random page per step, with no other work: the")
    w("# most memory-bound task there is, so these speeds are a pessimistic bound.")
    w("#")
    w("# Measured (ratio of each repetition to its own baseline; fairness = slowest worker's")
    w("# rate / fastest worker's, median: reclaim is not fair, one worker often")
    w("# starves while the other runs; voided = runs retried because a worker died):")
    for mode in ("anon", "file"):
        if not curves[mode]:
            continue
        w(f"#   {mode}: baseline {curves[mode][0]['base']:.3g} touches/s")
        w("#   nominal squeeze  speed     raw speed per repetition    majflt/s  refault/s  fairness voided")
        for p in curves[mode]:
            reps = " ".join(f"{s:.3g}" for s in p["speeds"])
            w(f"#   {p['nominal']:<7g} {p['squeeze']:<7.4g}  {p['speed']:<8.3g}  {reps:<27} {p['major_faults']:>8.0f}  "
              f"{p['refaults']:>9.0f}  {p['fairness']:>8.2f} {p['voided']:>6d}")
    w("")
    w(f"version = {FORMAT_VERSION}")
    w("")
    w("[machine]")
    w(f"kernel = {toml_str(args.kernel)}")
    w(f"cpu = {toml_str(args.cpu)}")
    w(f"cores = {args.cores}")
    w(f"memory = {args.memory_kib * 1024}")
    w(f"swap = {toml_str(args.swap)}")
    w(f"date = {toml_str(args.date)}")
    w(f"command = {toml_str(args.command)}")
    w("")
    w("[method]")
    w(f"node_limit = {args.limit}")
    w(f"workers = {args.workers}")
    w(f"repetitions = {args.reps}")
    w(f"warm_secs = {args.warm:g}")
    w(f"measure_secs = {args.secs:g}")
    w(f"swappiness = {args.swappiness}")
    for mode in ("anon", "file"):
        if not curves[mode]:
            continue
        w("")
        w(f"# {'Anonymous memory: the curve the simulator uses.' if mode == 'anon' else 'Page cache: file-backed working sets.'}")
        w(f"# major_faults, refaults: events per second on the whole node.")
        w(f"[{mode}]")
        w(f"baseline_touches_per_sec = {curves[mode][0]['base']:.4g}")
        w("points = [")
        for p in curves[mode]:
            w(f"    {{ squeeze = {p['squeeze']:g}, speed = {p['speed']:.4g}, "
              f"major_faults = {p['major_faults']:.0f}, refaults = {p['refaults']:.0f} }},")
        w("]")
    with open(args.out, "w") as f:
        f.write("\n".join(out) + "\n")
    return 0


def toml_str(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


if __name__ == "__main__":
    sys.exit(main())
