#!/usr/bin/env bash
# `find -ls` over many small directories (3,000 directories of 10 empty files, in 30 parents of 100),
# cold, on the kernel's XFS (loop mount) and on xfswin's FUSE host over /dev/fuse and, where the
# kernel has it, FUSE over io_uring: the workload of `ls -lR`, `du`, `tar` and file managers, where
# every directory costs the FUSE host an open, two listings, a release and a lookup per entry.
# Every run mounts afresh after dropping the page, dentry and inode caches. Needs root, xfsprogs,
# fuse3, python3, the .NET SDK.
# Usage: bench/find-ls-smalldirs.sh [RUNS]   (default 3; every run is printed)
#   XFSWIN_BENCH_XFSWIN=DIR|FILE  measures the xfswin.dll built in DIR, or the executable FILE (the Native AOT binary
#                             of scripts/publish-cli.sh), instead of building this tree
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
[ "$(id -u)" -eq 0 ] || { echo "Run as root: it loop-mounts images and drops caches." >&2; exit 1; }
# The io_uring switch is machine-wide: hold the lock the FUSE tests take while they change it.
[ -n "${XFSWIN_URING_LOCK_HELD:-}" ] || exec env XFSWIN_URING_LOCK_HELD=1 flock -x /tmp/xfswin-enable-uring.lock bash "bench/$(basename "$0")" "$@"

cache=${XFSWIN_BENCH_CACHE:-/var/tmp/xfswin-bench}
img=$cache/smalldirs-3000x10.img
mkdir -p "$cache"
if [ ! -f "$img" ]; then
  echo "Building the image (once; cached as $img)..."
  m=$(mktemp -d /tmp/xfswin-bench-fill-XXXXXX)
  rm -f "$img.tmp"; truncate -s 2G "$img.tmp"; mkfs.xfs -q -f "$img.tmp"
  mount -o loop "$img.tmp" "$m"
  python3 - "$m" <<'PY'
import os, sys
for d in range(3000):
    p = os.path.join(sys.argv[1], f"a{d // 100:02d}", f"d{d:04d}")
    os.makedirs(p)
    for f in range(10):
        open(os.path.join(p, f"f{f}"), "w").close()
PY
  umount "$m"; rmdir "$m"; mv "$img.tmp" "$img"
fi

. bench/lib.sh
bench_xfswin

mnt=$(mktemp -d /tmp/xfswin-bench-XXXXXX)
uring_param=/sys/module/fuse/parameters/enable_uring
uring_orig=$(cat "$uring_param" 2>/dev/null || echo "")
cleanup() { fusermount3 -u "$mnt" 2>/dev/null || umount "$mnt" 2>/dev/null || true; rmdir "$mnt"; [ -z "$uring_orig" ] || echo "$uring_orig" > "$uring_param"; }
trap cleanup EXIT

timed() { # mount-command...
  "$@"; sync; echo 3 > /proc/sys/vm/drop_caches
  local t0 t1; t0=$(date +%s.%N); find "$mnt" -ls > /dev/null; t1=$(date +%s.%N)
  fusermount3 -u "$mnt" 2>/dev/null || umount "$mnt"; sleep 0.3
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }'
}
kernel() { mount -t xfs -o loop,ro "$img" "$mnt"; }
devfuse() { "${xfswin[@]}" mount -o io_uring=no "$img" "$mnt" 2>/dev/null; }
uring() { echo Y > "$uring_param"; "${xfswin[@]}" mount "$img" "$mnt" 2>/dev/null; }

echo "Machine: $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), kernel $(uname -r)"
for _ in $(seq "$runs"); do
  k=$(timed kernel); f=$(timed devfuse)
  u="n/a"; if [ -w "$uring_param" ]; then u=$(timed uring); echo "$uring_orig" > "$uring_param"; fi
  echo "find -ls, 3000 dirs x 10 files, cold: kernel $k s, /dev/fuse $f s, io_uring $u s"
done
