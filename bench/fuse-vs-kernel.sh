#!/usr/bin/env bash
# XfsWin's FUSE host against the kernel's own XFS (loop mount) on the same image, in one run, with
# both FUSE transports: classic /dev/fuse, and FUSE over io_uring (Linux 6.14+ with
# CONFIG_FUSE_IO_URING; the script turns /sys/module/fuse/parameters/enable_uring on for those runs
# and restores it afterwards):
#   - sequential read of a 1 GiB file (and the raw image file with dd iflag=direct, for scale)
#   - stat of 100k files, find over 100k entries, readdir of a 1M-entry directory
# Every measurement starts cold: the file system is mounted afresh and the page, dentry and inode
# caches are dropped first. Needs root, xfsprogs, fuse3, python3, the .NET SDK.
# Usage: bench/fuse-vs-kernel.sh [RUNS]      (default 2 runs per measurement; the best is reported)
#   XFSWIN_BENCH_ONLY="read_big stat_100k"  measures only those (no report table)
#   XFSWIN_BENCH_FUSE_OPTIONS="max_threads=8" adds mount options to both FUSE mounts
#   XFSWIN_BENCH_XFSWIN=DIR|FILE  measures the xfswin.dll built in DIR (another commit's build), or the executable
#                             FILE (the Native AOT binary of scripts/publish-cli.sh), instead of building this tree
# The image (6 GiB sparse, ~1.3 GiB used) is cached under ${XFSWIN_BENCH_CACHE:-/var/tmp/xfswin-bench}.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-2}
[ "$(id -u)" -eq 0 ] || { echo "Run as root: it loop-mounts images and drops caches." >&2; exit 1; }
# The io_uring switch is machine-wide: hold the lock the FUSE tests take while they change it.
[ -n "${XFSWIN_URING_LOCK_HELD:-}" ] || exec env XFSWIN_URING_LOCK_HELD=1 flock -x /tmp/xfswin-enable-uring.lock bash "bench/$(basename "$0")" "$@"

cache=${XFSWIN_BENCH_CACHE:-/var/tmp/xfswin-bench}
key=$(sed -n '/^# --- image ---/,/^# --- end image ---/p' "$0" | sha256sum | cut -c1-16)
img=$cache/bench-$key.img
mkdir -p "$cache"

# --- image ---
if [ ! -f "$img" ]; then
  echo "Building the benchmark image (once; cached as $img)..."
  tmp=$img.tmp; m=$(mktemp -d /tmp/xfswin-bench-fill-XXXXXX)
  rm -f "$tmp"; truncate -s 6G "$tmp"; mkfs.xfs -q -f -L bench "$tmp"
  mount -o loop "$tmp" "$m"
  dd if=/dev/urandom of="$m/big.bin" bs=1M count=1024 status=none
  python3 - "$m" <<'PY'
import os, sys
root = sys.argv[1]
for d in range(100):
    dd = os.path.join(root, "stat", f"d{d:03d}")
    os.makedirs(dd)
    for f in range(1000):
        os.close(os.open(os.path.join(dd, f"file-{f:04d}"), os.O_CREAT | os.O_WRONLY, 0o644))
huge = os.path.join(root, "huge")
os.makedirs(huge)
target = os.path.join(root, "huge-target")
open(target, "w").close()
for i in range(1_000_000):
    os.link(target, os.path.join(huge, f"entry-{i:07d}"))
PY
  umount "$m"; rmdir "$m"; mv "$tmp" "$img"
fi
# --- end image ---

. bench/lib.sh
bench_xfswin

mnt=$(mktemp -d /tmp/xfswin-bench-XXXXXX)
unmount_all() { fusermount3 -u "$mnt" 2>/dev/null || umount "$mnt" 2>/dev/null || true; }
uring_param=/sys/module/fuse/parameters/enable_uring
uring_orig=$(cat "$uring_param" 2>/dev/null || echo "")
restore_uring() { [ -z "$uring_orig" ] || echo "$uring_orig" > "$uring_param" 2>/dev/null || true; }
trap 'unmount_all; rmdir "$mnt"; restore_uring' EXIT

drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }
mount_kernel() { mount -t xfs -o loop,ro "$img" "$mnt"; }
mount_fuse() { "${xfswin[@]}" mount -o io_uring=no${XFSWIN_BENCH_FUSE_OPTIONS:+,$XFSWIN_BENCH_FUSE_OPTIONS} "$img" "$mnt" 2>/dev/null; }
mount_uring() {
  echo Y > "$uring_param"
  local out pid i
  out=$("${xfswin[@]}" mount ${XFSWIN_BENCH_FUSE_OPTIONS:+-o "$XFSWIN_BENCH_FUSE_OPTIONS"} "$img" "$mnt" 2>&1)
  pid=$(sed -n 's/.*server pid \([0-9]*\).*/\1/p' <<<"$out")
  # Serving through io_uring means queue threads waiting in io_uring_enter (system call 426).
  for i in $(seq 50); do
    grep -qs '^426 ' /proc/"$pid"/task/*/syscall && return 0
    sleep 0.1
  done
  echo "FUSE over io_uring did not start (server pid ${pid:-?}): $out" >&2
  return 1
}

# seconds of wall time for a command, with the file system freshly mounted and caches dropped
timed() { # kind command...
  local kind=$1; shift
  "mount_$kind"; drop_caches
  local t0 t1; t0=$(date +%s.%N); "$@" >/dev/null; t1=$(date +%s.%N)
  unmount_all; sleep 0.5
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }'
}

statlist=$(mktemp /tmp/xfswin-bench-list-XXXXXX)
for d in $(seq -f '%03g' 0 99); do for f in $(seq -f '%04g' 0 999); do echo "$mnt/stat/d$d/file-$f"; done; done > "$statlist"

read_big()   { dd if="$mnt/big.bin" of=/dev/null bs=1M status=none; }
stat_100k()  { xargs -d '\n' -a "$statlist" stat --printf=''; }
find_100k()  { find "$mnt/stat" | wc -l; }
readdir_1m() { ls -f "$mnt/huge" | wc -l; }

raw_read() { drop_caches; local t0 t1; t0=$(date +%s.%N); dd if="$img" of=/dev/null bs=1M count=1024 skip=0 iflag=direct status=none; t1=$(date +%s.%N); awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }'; }

load_start=$(cut -d' ' -f1-3 /proc/loadavg)
echo "Measuring ($runs runs each, best reported)..."
raw=$(raw_read)
have_uring=0
[ -w "$uring_param" ] && have_uring=1
# The three mounts take turns run by run, so that a drift of the virtual disk's speed over minutes
# (seen here: 2x) falls on all of them alike instead of on whichever ran last.
lower() { if [ -z "$1" ] || awk -v t="$2" -v b="$1" 'BEGIN { exit !(t < b) }'; then echo "$2"; else echo "$1"; fi; }
declare -A k f u
for t in ${XFSWIN_BENCH_ONLY:-read_big stat_100k find_100k readdir_1m}; do
  k[$t]=""; f[$t]=""; u[$t]=""
  for _ in $(seq "$runs"); do
    k[$t]=$(lower "${k[$t]}" "$(timed kernel "$t")")
    f[$t]=$(lower "${f[$t]}" "$(timed fuse "$t")")
    if [ $have_uring = 1 ]; then u[$t]=$(lower "${u[$t]}" "$(timed uring "$t")"); restore_uring; fi
  done
  echo "  $t: kernel ${k[$t]} s, fuse /dev/fuse ${f[$t]} s, fuse io_uring ${u[$t]:-n/a} s"
done
rm -f "$statlist"
[ -z "${XFSWIN_BENCH_ONLY:-}" ] || exit 0   # a partial run prints only the lines above
load_end=$(cut -d' ' -f1-3 /proc/loadavg)

ratio() { awk -v k="$1" -v f="$2" 'BEGIN { printf "%.2f", k / f }'; }   # kernel time / fuse time = fuse speed relative to the kernel
mbps() { awk -v t="$1" 'BEGIN { printf "%.0f", 1024 / t }'; }
cell() { if [ -z "$1" ]; then echo "not available"; elif [ "${2:-}" = mb ]; then echo "$1 s ($(mbps "$1") MiB/s)"; else echo "$1 s"; fi; }
uratio() { if [ -z "${u[$1]}" ]; then echo "-"; else echo "$(ratio "${k[$1]}" "${u[$1]}")x"; fi; }

cat <<REPORT

### FUSE host vs kernel ($(date -u +%Y-%m-%d))

Machine: $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), kernel $(uname -r),
.NET $(dotnet --version), libfuse $(pkg-config --modversion fuse3 2>/dev/null || echo '?'), $(free -g | awk '/Mem:/ {print $2}') GiB RAM.
Image: $(basename "$img") on $(df --output=source "$cache" | tail -1), 6 GiB sparse; every run mounts afresh after dropping caches; best of $runs.
Load average (1/5/15 min) at start: $load_start; at end: $load_end (other jobs share the machine).

| Measurement | Kernel XFS (loop) | XfsWin FUSE, /dev/fuse | speed vs kernel | XfsWin FUSE, io_uring | speed vs kernel | Goal |
|---|---|---|---|---|---|---|
| Sequential read, 1 GiB file (dd bs=1M) | ${k[read_big]} s ($(mbps "${k[read_big]}") MiB/s) | ${f[read_big]} s ($(mbps "${f[read_big]}") MiB/s) | $(ratio "${k[read_big]}" "${f[read_big]}")x | $(cell "${u[read_big]}" mb) | $(uratio read_big) | ≥ 0.8x |
| stat of 100k files | ${k[stat_100k]} s | ${f[stat_100k]} s | $(ratio "${k[stat_100k]}" "${f[stat_100k]}")x | $(cell "${u[stat_100k]}") | $(uratio stat_100k) | ≥ 0.5x |
| find over 100k entries | ${k[find_100k]} s | ${f[find_100k]} s | $(ratio "${k[find_100k]}" "${f[find_100k]}")x | $(cell "${u[find_100k]}") | $(uratio find_100k) | ≥ 0.5x |
| readdir of a 1M-entry directory (ls -f) | ${k[readdir_1m]} s | ${f[readdir_1m]} s | $(ratio "${k[readdir_1m]}" "${f[readdir_1m]}")x | $(cell "${u[readdir_1m]}") | $(uratio readdir_1m) | ≥ 0.5x |

Raw image file, first 1 GiB with dd iflag=direct bs=1M (its buffer is in 4 KiB pages; see TransferMemory for why that matters on virtual disks): $(printf '%.3f' "$raw") s ($(mbps "$raw") MiB/s).
REPORT
