#!/bin/bash
# What best-effort work costs a latency-bound neighbour, without
# PostgreSQL: PAIRS (2) copies of tools/probe/pingpong at once (two
# processes answering each other, a transaction in miniature; one pair
# never needs more than one CPU at a time, two pairs sometimes need two)
# alone and beside neighbours at idle priority (SCHED_IDLE; those in
# cgroups of their own have cpu.idle set there too):
#
#   none     nothing beside it
#   spin     a loop that only spins, on any CPU
#   touch    two starts a second: a process that writes 200 MiB once and
#            exits (tools/probe/touch)
#   cgroups  the same, in cgroups made for it in the memory, cpu (cpu.idle),
#            cpuacct and freezer hierarchies and removed after (what a start
#            and an end do on a cgroup v1 node)
#   reuse    the same, joining one set of cgroups made once
#   spin-rr      the spinner, the pairs at SCHED_RR 1 (placed by the
#                real-time class, which puts a wakeup on a CPU whose task it
#                can preempt)
#   spin-pinned  the spinner, each pair pinned to a CPU of its own (so no
#                wakeup is placed: what is left is preemption)
#
#   [PAIRS=2] tools/probe/run.sh [ROUNDS] [TRANSACTIONS]   (root, cgroup v1)
#
# Every cgroup it makes is named probe-<its pid>-* and removed after each
# neighbour and on exit.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
rounds=${1:-3} n=${2:-30000} pairs=${PAIRS:-2}
for v in "rounds=$rounds" "transactions=$n" "PAIRS=$pairs"; do
    [[ ${v#*=} =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: $v: want a whole number above 0" >&2; exit 1; }
done
[ "$n" -ge 1000 ] || { echo "run.sh: transactions=$n: want at least 1000 (p999 needs them)" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "run.sh: needs root (it makes cgroups)" >&2; exit 1; }
work=$(mktemp -d)
v1=/sys/fs/cgroup
hier="memory cpu cpuacct freezer"
owner=$$ pid=
stop_neighbour() {
    [ -n "$pid" ] || return 0
    kill -TERM -- "-$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    pid=
    # A start killed mid-way may still be writing: its cgroups go when it does.
    for d in "$v1"/memory/probe-$owner-*; do
        [ -d "$d" ] || continue
        # (cgroup files say size 0: read them.)
        while [ -n "$(cat "$d/cgroup.procs")" ]; do kill -KILL $(cat "$d/cgroup.procs") 2>/dev/null || true; done
        for h in $hier; do rmdir "$v1/$h/${d##*/}" 2>/dev/null || true; done
    done
}
cleanup() { stop_neighbour; rm -rf "$work"; }
trap cleanup EXIT
for h in $hier; do [ -d "$v1/$h" ] || { echo "run.sh: needs cgroup v1's $h hierarchy at $v1/$h" >&2; exit 1; }; done
cc -O2 -o "$work/pingpong" "$here/pingpong.c"
cc -O2 -o "$work/touch" "$here/touch.c"

make_set() { for h in $hier; do mkdir "$v1/$h/$1"; done; echo 1 > "$v1/cpu/$1/cpu.idle"; }
drop_set() { for h in $hier; do rmdir "$v1/$h/$1"; done; }
# Paths go in as arguments, not pasted into the script: the work directory's
# may hold spaces.
start_in() {
    sh -c 'for h in $1; do echo $$ > "$2/$h/$3/cgroup.procs"; done; exec "$4" 200' \
        start-in "$hier" "$v1" "$1" "$work/touch"
}
neighbour() {
    local i=0
    case $1 in
        spin | spin-rr | spin-pinned) while :; do :; done ;;
        touch) while :; do "$work/touch" 200; sleep 0.5; done ;;
        cgroups) while :; do i=$((i + 1)); make_set "probe-$owner-$i"; start_in "probe-$owner-$i"; drop_set "probe-$owner-$i"; sleep 0.5; done ;;
        reuse) make_set "probe-$owner-0"; while :; do start_in "probe-$owner-0"; sleep 0.5; done ;;
    esac
}
# Run pair $2 under kind $1 for $3 transactions (the command itself, not a
# string of it: the work directory's path is not split into words).
run_pair() {
    case $1 in
        spin-rr) chrt --rr 1 "$work/pingpong" "$3" ;;
        spin-pinned) taskset -c $((($2 - 1) % $(nproc))) "$work/pingpong" "$3" ;;
        *) "$work/pingpong" "$3" ;;
    esac
}
# The pairs at once; each prints its own line.
measure() {
    local kind=$1 p others=()
    for p in $(seq 2 "$pairs"); do run_pair "$kind" "$p" "$n" | sed "s/^/round $r $kind pair $p: /" & others+=($!); done
    run_pair "$kind" 1 "$n" | sed "s/^/round $r $kind pair 1: /"
    for p in "${others[@]}"; do wait "$p"; done
}
for r in $(seq 1 "$rounds"); do
    for kind in none spin touch cgroups reuse spin-rr spin-pinned; do
        if [ "$kind" = none ]; then
            measure "$kind"
            continue
        fi
        setsid chrt -i 0 bash -c "$(declare -f make_set drop_set start_in neighbour; declare -p v1 hier work owner); neighbour $kind" &
        pid=$!
        measure "$kind"
        stop_neighbour
    done
done
