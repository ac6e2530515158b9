#!/usr/bin/env python3
"""PostgreSQL's slow transactions around best-effort starts, from a
`bench colocation --out` report (its scenes' `pg_windows` and
`be_starts_s`): for each policy, the mean slow transactions per 100 ms
window from 0.5 s before a start to 2 s after it, over all starts and
over lone starts (no other within 1.5 s).

    tools/colocation/starts.py REPORT.json
"""
import json
import sys

BEFORE, AFTER, LONE = 5, 20, 1.5


def profile(scenes, lone):
    sums, starts = [0.0] * (BEFORE + AFTER), 0
    for s in scenes:
        windows, times = s.get("pg_windows") or [], sorted(s.get("be_starts_s") or [])
        for i, t in enumerate(times):
            if lone and any(abs(u - t) < LONE for j, u in enumerate(times) if j != i):
                continue
            starts += 1
            w0 = int(t / 0.1)
            for k in range(-BEFORE, AFTER):
                if 0 <= w0 + k < len(windows):
                    sums[k + BEFORE] += windows[w0 + k][1]
    return starts, [x / starts for x in sums] if starts else []


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    try:
        with open(sys.argv[1]) as f:
            report = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"{sys.argv[1]}: {e}")
    policies = []
    for s in report.get("scenes", []):
        if s["policy"] not in policies:
            policies.append(s["policy"])
    print("windows of 100 ms from", -BEFORE, "to", AFTER - 1, "(0: the start's)")
    for p in policies:
        scenes = [s for s in report["scenes"] if s["policy"] == p]
        if not any(s.get("pg_windows") for s in scenes):
            continue
        for lone in (False, True):
            n, prof = profile(scenes, lone)
            if n:
                label = "lone starts" if lone else "all starts"
                print(f"{p} ({n} {label}): " + " ".join(f"{x:.1f}" for x in prof))


main()
