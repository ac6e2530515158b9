#!/bin/bash
# A rough check of what a best-effort neighbour that only computes costs
# production: isolated scenes of `overbook bench colocation --native`, in
# pairs, one alone and one beside a SCHED_IDLE job on the last CPU that
# hashes memory at about overbook's best-effort pace (no memory pressure).
# Each scene is a run of its own: give LOAD (e.g. "--pg-rate 6581
# --redis-round 855", what a bench run prints) to drive every scene alike;
# without it each calibrates its own load, so compare latencies, not
# throughputs.
#
#   tools/neighbour/run.sh target/release/overbook OUTDIR [PAIRS]
#   NBSIZE (256M) and NBPACE (1 s) set the neighbour's memory and pause:
#   it rewrites a quarter of its memory every NBPACE seconds.
#   NBKIND=spin makes the neighbour a loop that only spins on its CPU (no
#   memory traffic at all), to tell CPU sharing from memory traffic.
#   NBQUOTA=P caps the neighbour's cgroup at P% of one CPU (CFS bandwidth:
#   v1 cpu.cfs_quota_us, v2 cpu.max, over 100 ms periods), to see whether
#   a CPU the neighbour leaves idle part of the time gives production back
#   its tail.
set -euo pipefail
bin=$(realpath "${1:?the overbook binary}")
out=${2:?an output directory}
pairs=${3:-4}
[ "$(id -u)" = 0 ] || { echo "needs root (cgroups)" >&2; exit 1; }
mkdir -p "$out"
# v1's cpu hierarchy where it is mounted, else v2's unified one.
if [ -e /sys/fs/cgroup/cpu/cgroup.procs ]; then
  cg=/sys/fs/cgroup/cpu/overbook-neighbour
else
  cg=/sys/fs/cgroup/overbook-neighbour
fi
pid=
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  pid=
  rmdir "$cg" 2>/dev/null || true
}
trap cleanup EXIT
for i in $(seq 1 "$pairs"); do
  for mode in alone neighbour; do
    if [ "$mode" = neighbour ]; then
      mkdir -p "$cg"
      [ -e "$cg/cpu.idle" ] && echo 1 >"$cg/cpu.idle"
      if [ -n "${NBQUOTA:-}" ]; then
        quota=$((NBQUOTA * 1000))
        if [ -e "$cg/cpu.cfs_quota_us" ]; then
          echo 100000 >"$cg/cpu.cfs_period_us"
          echo "$quota" >"$cg/cpu.cfs_quota_us"
        else
          echo "$quota 100000" >"$cg/cpu.max"
        fi
      fi
      (
        echo "$BASHPID" >"$cg/cgroup.procs"
        last=$(($(nproc) - 1))
        if [ "${NBKIND:-chain}" = spin ]; then
          exec chrt --idle 0 taskset -c "$last" sh -c 'while :; do :; done'
        fi
        exec chrt --idle 0 taskset -c "$last" "$bin" workload chain \
          "${NBSIZE:-256M}" 1000000 --pace "${NBPACE:-1}" --dirty 0.25 >/dev/null
      ) &
      pid=$!
    fi
    "$bin" bench colocation --native --capacity 2GiB --swap 1GiB --seconds 90 \
      --repeats 1 --no-warmup --seed $((40 + i)) --policies isolated ${LOAD:-} \
      --out "$out/$mode-$i.json" >"$out/$mode-$i.log" 2>&1 ||
      { echo "$mode $i failed: see $out/$mode-$i.log" >&2; exit 1; }
    echo "$mode $i: done"
    cleanup
  done
done
for f in "$out"/*-*.json; do
  python3 - "$f" <<'P'
import json, sys
s = json.load(open(sys.argv[1]))["scenes"][0]
print(sys.argv[1].rsplit("/", 1)[-1], "redis p99", s["redis"]["p99_ms"], "ms, postgres p99",
      s["postgres"]["p99_ms"], "ms, by phase", s["postgres"].get("p99_ms_by_phase"),
      "steal", round(100 * s["cpu_steal"], 1), "%")
P
done
