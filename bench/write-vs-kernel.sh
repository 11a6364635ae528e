#!/usr/bin/env bash
# The write path against the kernel's own XFS, in one run, on fresh copies of one empty volume
# (mkfs.xfs defaults, 4 GiB sparse image):
#   - sequential write of a 1 GiB file plus fsync (dd bs=1M conv=fsync), and a raw O_DIRECT write of
#     the image file for scale
#   - 20,000 creates of 4 KiB files in 20 directories, then sync
#   - unlink of those 20,000 files, then sync
#   - a rename-heavy run: 20,000 renames across the 20 directories, then sync
# Each measurement mounts afresh (kernel: loop mount; xfswin: `xfswin mount -o rw`) with caches
# dropped, and times the operation plus its sync; the unmount is not timed. After the xfswin runs,
# xfs_repair -n must find nothing. Needs root, xfsprogs, fuse3, python3, the .NET SDK.
# Usage: bench/write-vs-kernel.sh [RUNS]     (default 1; the best of RUNS is reported)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-1}
[ "$(id -u)" -eq 0 ] || { echo "Run as root: it loop-mounts images and drops caches." >&2; exit 1; }
work=$(mktemp -d /var/tmp/xfswin-wbench-XXXXXX)
mnt=$(mktemp -d /tmp/xfswin-wbench-mnt-XXXXXX)
cleanup() { mountpoint -q "$mnt" && umount "$mnt" 2>/dev/null; fusermount3 -u "$mnt" 2>/dev/null || true; rm -rf "$work"; rmdir "$mnt" 2>/dev/null || true; }
trap cleanup EXIT

echo "Building xfswin (Release)..."
dotnet build src/XfsWin.Cli -c Release -v quiet -nologo >/dev/null
xfswin=(dotnet "$PWD/src/XfsWin.Cli/bin/Release/net10.0/xfswin.dll")

base=$work/base.img
truncate -s 4G "$base"
mkfs.xfs -q -f "$base"

mount_kernel() { cp --sparse=always "$base" "$work/k.img"; mount -o loop "$work/k.img" "$mnt"; }
umount_kernel() { umount "$mnt"; }
mount_xfswin() { cp --sparse=always "$base" "$work/x.img"; "${xfswin[@]}" mount -o rw "$work/x.img" "$mnt" >/dev/null; }
umount_xfswin() {
  fusermount3 -u "$mnt"
  for _ in $(seq 1200); do pgrep -f "mount -o rw $work/x.img" >/dev/null || break; sleep 0.1; done
  xfs_repair -n "$work/x.img" >/dev/null 2>&1 || { echo "xfs_repair -n found problems in xfswin's image" >&2; exit 1; }
}

now() { date +%s.%N; }
# Everything durable: syncfs for the kernel's XFS, and an fsync of the root directory, which FUSE passes on
# (the kernel does not send syncfs to FUSE servers; fsync forces xfswin's log and flushes the device).
settle() { sync -f "$mnt"; python3 -c 'import os, sys; fd = os.open(sys.argv[1], os.O_RDONLY); os.fsync(fd)' "$mnt"; }
drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }

# Each workload runs in a mounted $mnt and prints nothing.
seq_write() { dd if=/dev/zero of="$mnt/big" bs=1M count=1024 conv=fsync status=none; }
prepare_tree() { for d in $(seq 0 19); do mkdir -p "$mnt/d$d"; done; }
creates() {
  python3 - "$mnt" <<'PY'
import os, sys
root = sys.argv[1]
data = b"x" * 4096
for i in range(20000):
    fd = os.open(os.path.join(root, f"d{i % 20}", f"file-{i:05d}"), os.O_CREAT | os.O_WRONLY, 0o644)
    os.write(fd, data)
    os.close(fd)
PY
  settle
}
unlinks() { find "$mnt" -name 'file-*' -delete; settle; }
renames() {
  python3 - "$mnt" <<'PY'
import os, sys
root = sys.argv[1]
for i in range(20000):
    os.rename(os.path.join(root, f"d{i % 20}", f"file-{i:05d}"), os.path.join(root, f"d{(i + 7) % 20}", f"moved-{i:05d}"))
PY
  settle
}

# measure NAME SETUP WORK: best time of $runs for WORK after SETUP, on kernel and xfswin.
declare -A best
measure() {
  local name=$1 setup=$2 job=$3
  for side in kernel xfswin; do
    local b=""
    for _ in $(seq "$runs"); do
      "mount_$side"; $setup; drop
      local t0; t0=$(now); $job; local t1; t1=$(now)
      "umount_$side"
      local t; t=$(echo "$t1 - $t0" | bc)
      if [ -z "$b" ] || (( $(echo "$t < $b" | bc) )); then b=$t; fi
    done
    best[$name,$side]=$b
  done
}

noop() { :; }
with_files() { prepare_tree; creates; }
measure "write 1 GiB + fsync" noop seq_write
measure "create 20k x 4 KiB + sync" prepare_tree creates
measure "unlink 20k + sync" with_files unlinks
measure "rename 20k + sync" with_files renames

drop
raw0=$(now); dd if=/dev/zero of="$work/raw.img" bs=1M count=1024 oflag=direct conv=fsync status=none; raw1=$(now)
raw=$(echo "$raw1 - $raw0" | bc)

printf '\n| Operation | Kernel (s) | xfswin rw mount (s) | xfswin vs kernel |\n|---|---|---|---|\n'
for name in "write 1 GiB + fsync" "create 20k x 4 KiB + sync" "unlink 20k + sync" "rename 20k + sync"; do
  k=${best[$name,kernel]}; x=${best[$name,xfswin]}
  printf '| %s | %.3f | %.3f | %.2fx |\n' "$name" "$k" "$x" "$(echo "$k / $x" | bc -l)"
done
printf '\nRaw O_DIRECT write of 1 GiB to a file on the same disk: %.3f s\n' "$raw"
