#!/usr/bin/env bash
# `xfswin check` (the CLI as it ships on Linux: Native AOT, scripts/publish-cli.sh) against `xfs_repair -n` (6.13) on the same images, in the same run, cold (page cache dropped before
# every run) and warm (run again at once). Both only read; both report the same verdict (the script says so).
# Default images, built once into $XFSWIN_BENCH_CACHE (/var/tmp/xfswin-bench):
#   rmap-nrext64  512 MiB, ~3,600 inodes (the oracle matrix's, scripts/oracles/make-images.sh)
#   default       1 GiB, ~112,000 inodes, a 100,000-entry directory, a 10,240-extent file (the oracle matrix's)
#   many-4g       4 GiB, mkfs.xfs 6.13 defaults (rmapbt, reflink), ~300,000 files in 300 directories, xattrs, hard
#                 links, symlinks, reflinked copies, written by the kernel through a loop mount (made here)
# Needs root (loop mounts, dropping the page cache), xfsprogs 6.13, the .NET SDK, clang and zlib1g-dev.
# Usage: bench/check-vs-xfs-repair.sh [--runs N] [IMAGE...]   (default: the three images above, 3 runs)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=3
if [ "${1:-}" = "--runs" ]; then runs=$2; shift 2; fi
[ "$(id -u)" -eq 0 ] || { echo "Run as root: it drops the page cache between runs." >&2; exit 1; }
cache=${XFSWIN_BENCH_CACHE:-/var/tmp/xfswin-bench}
xfsprogs=${XFSWIN_CACHE:-/var/cache/xfswin}/xfsprogs-6.13/bin
repair=$xfsprogs/xfs_repair

# The 4 GiB volume with many small files, filled by the kernel (deterministic names, sizes and contents).
make_many() {
  local img=$1 mnt loop
  echo "Building $img (once: a few minutes)..." >&2
  rm -f "$img.tmp"
  truncate -s 4G "$img.tmp"
  "$xfsprogs/mkfs.xfs" -q -f "$img.tmp"
  mnt=$(mktemp -d)
  loop=$(losetup --find --show "$img.tmp")
  mount -t xfs "$loop" "$mnt"
  trap 'umount "$mnt" 2>/dev/null; losetup -d "$loop" 2>/dev/null; rmdir "$mnt"' EXIT
  python3 - "$mnt" <<'EOF'
import os, random, sys
root = sys.argv[1]
rng = random.Random(4)
blob = bytes(rng.getrandbits(8) for _ in range(65536))
for d in range(300):
    dd = os.path.join(root, f"d{d:03}")
    os.mkdir(dd)
    for f in range(1000):
        p = os.path.join(dd, f"file-{f:04}-{'n' * (f % 23)}")
        n = rng.choice((0, 100, 1000, 3000, 5000, 9000))
        with open(p, "wb") as o:
            o.write(blob[:n])
        if f % 10 == 0:
            os.setxattr(p, "user.tag", blob[:1 + f % 200])
        if f % 97 == 0:
            os.link(p, os.path.join(dd, f"link-{f}"))
        if f % 89 == 0:
            os.symlink(f"file-{f:04}", os.path.join(dd, f"sym-{f}"))
    if d % 25 == 0:
        os.sync()
    if d % 50 == 0:
        big = os.path.join(dd, "big")
        with open(big, "wb") as o:
            for _ in range(512):
                o.write(blob)
EOF
  for d in 000 050 100 150; do cp --reflink=always "$mnt/d$d/big" "$mnt/d$d/big.copy"; done
  umount "$mnt"
  losetup -d "$loop"
  rmdir "$mnt"
  trap - EXIT
  "$repair" -n "$img.tmp" >/dev/null
  mv "$img.tmp" "$img"
}

images=("$@")
if [ ${#images[@]} -eq 0 ]; then
  mkdir -p "$cache"
  for name in rmap-nrext64 default; do
    if [ ! -f "$cache/$name.meta.json" ]; then
      echo "Building the oracle image $name (once; cached in $cache)..." >&2
      bash scripts/oracles/make-images.sh "$name" "$cache" >/dev/null
    fi
    images+=("$cache/$name.img")
  done
  [ -f "$cache/many-4g.img" ] || make_many "$cache/many-4g.img"
  images+=("$cache/many-4g.img")
fi

# The CLI as it ships on Linux: the Native AOT binary scripts/publish-cli.sh makes (its build tree beside it).
xfswin=$(scripts/publish-cli.sh "$cache/xfswin-aot")

# Seconds taken by a command; its exit status (0 clean, 1 problems) goes to the file $verdict.
verdict=$(mktemp)
seconds() {
  local start end rc=0
  start=$(date +%s.%N)
  "$@" >/dev/null 2>&1 || rc=$?
  end=$(date +%s.%N)
  echo "$rc" > "$verdict"
  echo "$end - $start" | bc
}
drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }

echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "xfs_repair: $("$repair" -V) ($repair); xfswin: $(git rev-parse --short HEAD)"
printf '%-14s %-10s %-4s %-14s %8s %8s %5s\n' image inodes run tool cold_s warm_s exit
for img in "${images[@]}"; do
  [ -f "$img" ] || { echo "no such image: $img" >&2; exit 1; }
  inodes=$("$xfsprogs/xfs_db" -r -c 'sb 0' -c 'print icount' "$img" | awk '{print $3}')
  name=$(basename "$img" .img)
  for r in $(seq 1 "$runs"); do
    drop; cold=$(seconds "$repair" -n "$img"); warm=$(seconds "$repair" -n "$img"); ex=$(cat "$verdict")
    printf '%-14s %-10s %-4s %-14s %8.2f %8.2f %5s\n' "$name" "$inodes" "$r" "xfs_repair -n" "$cold" "$warm" "$ex"
    drop; cold=$(seconds "$xfswin" check --no-progress "$img"); warm=$(seconds "$xfswin" check --no-progress "$img"); ex=$(cat "$verdict")
    printf '%-14s %-10s %-4s %-14s %8.2f %8.2f %5s\n' "$name" "$inodes" "$r" "xfswin check" "$cold" "$warm" "$ex"
  done
done
rm -f "$verdict"
