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
#   NBKIND=tick makes it what overbook's agent is to the CPU at a 100 ms
#   sample period: a process at normal priority, on any CPU, that wakes
#   every 100 ms and computes for NBTICK ms (1 by default); NBNICE=N runs
#   it at that nice value.
#   NBQUOTA=P caps the neighbour's cgroup at P% of one CPU (CFS bandwidth:
#   v1 cpu.cfs_quota_us, v2 cpu.max, over 100 ms periods), to see whether
#   a CPU the neighbour leaves idle part of the time gives production back
#   its tail.
#   NBQUOTA=leftover has overbook's agent set the ceiling instead (its
#   `[cpu] best-effort-max = "leftover"`, NBTARGET the busy-target, 0.65 by
#   default): the neighbour is a best-effort container of its own node
#   root, the agent's events are kept beside each scene's report, and the
#   neighbour's CPU time is printed.
set -euo pipefail
bin=$(realpath "${1:?the overbook binary}")
out=${2:?an output directory}
pairs=${3:-4}
[ "$(id -u)" = 0 ] || { echo "needs root (cgroups)" >&2; exit 1; }
mkdir -p "$out"
# v1's cpu hierarchy where it is mounted, else v2's unified one.
if [ -e /sys/fs/cgroup/cpu/cgroup.procs ]; then
  cg=/sys/fs/cgroup/cpu/overbook-neighbour
  v1=1
else
  cg=/sys/fs/cgroup/overbook-neighbour
  v1=
fi
agent_root=overbook-neighbour-node
if [ "${NBQUOTA:-}" = leftover ]; then
  # The agent's node root and the neighbour's container in it (v1: the
  # memory hierarchy, which the agent watches; it mirrors the rest).
  if [ -n "$v1" ]; then
    cg=/sys/fs/cgroup/memory/$agent_root/be-neighbour
  else
    cg=/sys/fs/cgroup/$agent_root/be-neighbour
    echo +cpu >/sys/fs/cgroup/cgroup.subtree_control 2>/dev/null || true
  fi
fi
pid=
agent=
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  pid=
  if [ -n "$agent" ]; then kill "$agent" 2>/dev/null || true; wait "$agent" 2>/dev/null || true; fi
  agent=
  rmdir "$cg" 2>/dev/null || true
  if [ "${NBQUOTA:-}" = leftover ]; then
    for h in /sys/fs/cgroup /sys/fs/cgroup/memory /sys/fs/cgroup/cpu /sys/fs/cgroup/cpuacct \
      /sys/fs/cgroup/freezer; do
      rmdir "$h/$agent_root/be-neighbour" "$h/$agent_root" 2>/dev/null || true
    done
  fi
}
trap cleanup EXIT
for i in $(seq 1 "$pairs"); do
  for mode in alone neighbour; do
    if [ "$mode" = neighbour ]; then
      mkdir -p "$cg"
      # The agent-like ticker keeps the normal priority it stands for.
      if [ "${NBKIND:-chain}" != tick ] && [ -e "$cg/cpu.idle" ]; then echo 1 >"$cg/cpu.idle"; fi
      if [ "${NBQUOTA:-}" = leftover ]; then
        cat >"$out/agent.toml" <<EOF
[node]
root = "$agent_root"
[agent]
state_db = ""
task_log_dir = "$out/agent-logs"
event_log = "$out/events-$i.jsonl"
[[classes]]
pattern = "be-*"
class = "best-effort"
[cpu]
best-effort-max = "leftover"
busy-target = ${NBTARGET:-0.65}
EOF
        rm -f "$out/events-$i.jsonl"
        "$bin" agent --config "$out/agent.toml" --socket "$out/agent.sock" \
          >"$out/agent-$i.log" 2>&1 &
        agent=$!
      elif [ -n "${NBQUOTA:-}" ]; then
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
        if [ "${NBKIND:-chain}" = tick ]; then
          exec nice -n "${NBNICE:-0}" python3 -c '
import sys, time
busy = float(sys.argv[1]) / 1000
while True:
    end = time.perf_counter() + busy
    while time.perf_counter() < end:
        pass
    time.sleep(0.1)
' "${NBTICK:-1}"
        fi
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
    if [ -n "$pid" ]; then
      # The neighbour's CPU time: its shell's (it is the spinner or the
      # workload's parent, which waits).
      nb=$(pgrep -P "$pid" || true)
      for p in $pid $nb; do
        [ -r /proc/$p/schedstat ] && awk -v m="$mode-$i" -v p="$p" \
          '{ printf "%s: neighbour pid %s used %.1f CPU-s\n", m, p, $1 / 1e9 }' /proc/$p/schedstat
      done | tee -a "$out/neighbour-cpu.txt"
    fi
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
