#!/usr/bin/env bash
# Measure how a node's tasks slow down as its memory is squeezed into swap,
# and write overbook's thrashing calibration (calibration/default.toml).
#
#   sudo tools/calibrate/run.sh                  # anon + file, 3 repetitions
#   REPS=1 MODES=anon tools/calibrate/run.sh     # a quick look
#
# Method (cgroup v1, see docs/TESTBED in the design notes):
#   * a swap file of SWAP_GIB is added for the run (and removed after);
#   * every measurement gets a fresh "node" memory cgroup under this shell's
#     own memory cgroup, with memory.limit_in_bytes = LIMIT_MIB;
#   * WORKERS random-touch workers (touch.c) share a working set of
#     squeeze x LIMIT_MIB, either private anonymous memory written at random
#     (anon: evictions go to swap) or a file read at random through mmap
#     (file: evictions drop page cache, misses read the disk);
#   * speed = touches/s in the limited node / touches/s of the same working
#     set in an unlimited node, measured right before it (same size, same CPU
#     contention, so only the squeeze differs);
#   * the squeeze written to the file is the unlimited run's whole charge
#     (memory.usage_in_bytes: working set + binaries + page tables) over the
#     limit, so "1.0" means the limit is exactly what the node needs;
#   * the node's memcg OOM killer is disabled (memory.oom_control), so that a
#     charge reclaim cannot satisfy stalls rather than kills a worker;
#   * major faults and refaults per second of the whole node come from the
#     node's memory.stat over the same window;
#   * points are interleaved (repetition-major) so slow drift in the machine's
#     load spreads over all of them; the summary takes the median per point.
#
# Everything it creates (swap file, data file, cgroups, worker processes) is
# removed on exit, however it exits.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)

LIMIT_MIB=${LIMIT_MIB:-256}
WORKERS=${WORKERS:-2}
REPS=${REPS:-3}
WARM=${WARM:-1.5}
SECS=${SECS:-2.5}
BASE_WARM=${BASE_WARM:-0.5}
BASE_SECS=${BASE_SECS:-1.5}
MAX_TRIES=${MAX_TRIES:-3}
SWAP_GIB=${SWAP_GIB:-2}
MODES=${MODES:-"anon file"}
ANON_POINTS=${ANON_POINTS:-"0.8 0.9 1.0 1.05 1.1 1.2 1.3 1.5 2.0"}
FILE_POINTS=${FILE_POINTS:-"0.9 1.0 1.1 1.2 1.5 2.0"}
SCRATCH=${SCRATCH:-/var/tmp}
OUT=${OUT:-$ROOT/calibration/default.toml}
RAW=${RAW:-${OUT%.toml}-runs.csv}

die() { echo "run.sh: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "must run as root (swapon, cgroups)"
MEMCG_REL=$(awk -F: '$2 ~ /(^|,)memory(,|$)/ { print $3 }' /proc/self/cgroup)
[ -n "$MEMCG_REL" ] || die "no cgroup v1 memory controller (this script is for v1 hosts)"
MEMCG=/sys/fs/cgroup/memory${MEMCG_REL%/}
[ -f "$MEMCG/memory.limit_in_bytes" ] || die "$MEMCG is not a v1 memory cgroup"
command -v cc >/dev/null || die "needs a C compiler (cc)"
command -v python3 >/dev/null || die "needs python3 (summary)"

WORK=$(mktemp -d "$SCRATCH/overbook-calibrate.XXXXXX")
NODES=$MEMCG/overbook-calibrate-$$
SWAPFILE=""

remove_cgroup() {
    local cg=$1
    [ -d "$cg" ] || return 0
    # Only our workers can be in it; kill them by pid, then drop the charges.
    local pid
    for pid in $(cat "$cg/cgroup.procs" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null || true; done
    for _ in 1 2 3 4 5 6 7 8 9 10; do
        [ -z "$(cat "$cg/cgroup.procs" 2>/dev/null)" ] && break
        sleep 0.1
    done
    echo 0 >"$cg/memory.force_empty" 2>/dev/null || true
    rmdir "$cg" 2>/dev/null || echo "run.sh: could not remove $cg" >&2
}

cleanup() {
    local rc=$?
    set +e
    if [ -d "$NODES" ]; then
        for cg in "$NODES"/*/; do [ -d "$cg" ] && remove_cgroup "${cg%/}"; done
        remove_cgroup "$NODES"
    fi
    [ -n "$SWAPFILE" ] && swapoff "$SWAPFILE" 2>/dev/null
    rm -rf "$WORK"
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

cc -O2 -Wall -o "$WORK/touch" "$HERE/touch.c"

LIMIT=$((LIMIT_MIB << 20))
mkdir "$NODES"

# Swap for the run. A swap file must be fully allocated on a filesystem that
# supports it (ext4, xfs): fallocate does that.
SWAPFILE=$WORK/swap
fallocate -l "${SWAP_GIB}G" "$SWAPFILE"
chmod 600 "$SWAPFILE"
mkswap "$SWAPFILE" >/dev/null
swapon "$SWAPFILE" || { SWAPFILE=""; die "swapon failed (filesystem without swap file support?)"; }

# The data file the file-backed workers read: as large as the largest
# working set, of random bytes (a sparse or zero file would not be read).
if [[ " $MODES " == *" file "* ]]; then
    max=$(printf '%s\n' $FILE_POINTS | sort -g | tail -1)
    mib=$(awk -v p="$max" -v l="$LIMIT_MIB" 'BEGIN { printf "%d", p * l + 1 }')
    head -c "$((mib << 20))" /dev/urandom >"$WORK/data"
    sync "$WORK/data"
fi

# One measurement: KIND (base|squeezed) of MODE at POINT, repetition REP.
# Appends a CSV row; returns the worker program's status.
seq_no=0
measure() {
    local mode=$1 point=$2 rep=$3 kind=$4 try=$5
    local bytes warm secs cg line status
    bytes=$(awk -v p="$point" -v l="$LIMIT" 'BEGIN { printf "%d", p * l }')
    seq_no=$((seq_no + 1))
    cg=$NODES/run-$seq_no
    mkdir "$cg"
    # The kernel's memcg OOM killer is off in the node: near the limit
    # (squeeze 1.0-1.2) it fired within seconds in most runs on the first
    # host measured, even with free swap, because a page touched every few
    # milliseconds always looks referenced to reclaim. With it off, a charge
    # that reclaim cannot satisfy waits for memory instead: the run measures
    # the slowdown (stalls included), not the kernel's own kill.
    echo 1 >"$cg/memory.oom_control"
    if [ "$kind" = squeezed ]; then
        echo "$LIMIT" >"$cg/memory.limit_in_bytes"
        warm=$WARM secs=$SECS
    else
        warm=$BASE_WARM secs=$BASE_SECS
    fi
    status=0
    line=$(timeout -s KILL 180 "$WORK/touch" "$mode" "$cg" "$WORKERS" "$bytes" \
        "$warm" "$secs" "$WORK/data") || status=$?
    remove_cgroup "$cg"
    # key=value pairs to CSV columns, in the order touch prints them.
    local values
    values=$(printf '%s\n' "$line" | tr ' ' '\n' | awk -F= 'NF == 2 { printf ",%s", $2 }')
    echo "$mode,$point,$rep,$kind,$try,$status$values" >>"$RAW"
    printf '%-4s %-5s rep %s %-8s try %s status %s  %s\n' \
        "$mode" "$point" "$rep" "$kind" "$try" "$status" "$line" >&2
    return "$status"
}

mkdir -p "$(dirname "$RAW")"
echo "mode,squeeze,rep,kind,try,status,touches_per_sec,pgmajfault_per_sec,refault_anon_per_sec,refault_file_per_sec,worker_min_per_sec,worker_max_per_sec,secs,fill_secs,rss,cache,swap,usage,oom_kills,alive" >"$RAW"

started=$(date -u +%Y-%m-%dT%H:%M:%SZ)
t0=$(date +%s)
for rep in $(seq 1 "$REPS"); do
    for mode in $MODES; do
        if [ "$mode" = anon ]; then points=$ANON_POINTS; else points=$FILE_POINTS; fi
        for point in $points; do
            measure "$mode" "$point" "$rep" base 1 || true
            # A worker that died voids a run (fewer workers compete); retry,
            # and the summary reports how often it happened at each point.
            for try in $(seq 1 "$MAX_TRIES"); do
                if measure "$mode" "$point" "$rep" squeezed "$try"; then break; fi
            done
        done
    done
done
elapsed=$(($(date +%s) - t0))

# The machine, for the file's header.
kernel=$(uname -r)
cpu=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
cores=$(nproc)
mem_kib=$(awk '/^MemTotal/ { print $2 }' /proc/meminfo)
dev=$(findmnt -no SOURCE -T "$WORK" 2>/dev/null || echo unknown)
fstype=$(findmnt -no FSTYPE -T "$WORK" 2>/dev/null || echo unknown)
blk=$(basename "$dev")
driver=$(basename "$(readlink -f "/sys/block/$blk/device/driver" 2>/dev/null)" 2>/dev/null || echo unknown)
rota=$(cat "/sys/block/$blk/queue/rotational" 2>/dev/null || echo "?")
swap_desc="swap file on $fstype on $dev (driver $driver, rotational=$rota)"

python3 "$HERE/summarize.py" --raw "$RAW" --out "$OUT" \
    --kernel "$kernel" --cpu "$cpu" --cores "$cores" --memory-kib "$mem_kib" \
    --swap "$swap_desc" --date "$started" --elapsed "$elapsed" \
    --limit "$LIMIT" --workers "$WORKERS" --reps "$REPS" --warm "$WARM" --secs "$SECS" \
    --swappiness "$(cat "$MEMCG/memory.swappiness")" \
    --command "LIMIT_MIB=$LIMIT_MIB WORKERS=$WORKERS REPS=$REPS WARM=$WARM SECS=$SECS BASE_WARM=$BASE_WARM BASE_SECS=$BASE_SECS MODES='$MODES' ANON_POINTS='$ANON_POINTS' FILE_POINTS='$FILE_POINTS' tools/calibrate/run.sh"
echo "wrote $OUT and $RAW (${elapsed}s of measurement)" >&2
