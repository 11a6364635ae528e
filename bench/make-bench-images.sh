#!/usr/bin/env bash
# Builds the benchmark volume: a real mkfs.xfs image filled by the Linux kernel through a loop
# mount, plus a manifest (inode numbers, sizes, extent lists from xfs_bmap) the benchmarks read.
#
#   bench/make-bench-images.sh            # prints the directory holding bench.img and manifest.txt
#
# Cache: ${XFSWIN_BENCH_CACHE:-/var/tmp/xfswin-bench}/<hash of this script>/. The image is built
# once per version of this script (older versions' images are deleted); delete the directory to
# force a rebuild.
# Needs root, loop devices, the kernel's XFS driver, mkfs.xfs, xfs_bmap and python3.
#
# Contents (all files written by the kernel; names are f0000000, f0000001, ...):
#   /seq/big        1 GiB from /dev/urandom (dd): sequential-read benchmark
#   /ext/frag       10,000 extents of one 4 KiB block each (direct writes interleaved with /ext/gaps,
#                   so neighbouring blocks belong to the other file and extents cannot merge)
#   /ext/contig     a file of the same size as /ext/frag, written in one go (one extent)
#   /d10k           10,000 empty files
#   /d100k          100,000 files of varied sizes (0..8191 bytes of data, some sparse up to 1 MiB)
#   /d1m            1,000,000 empty files
set -euo pipefail

die() { echo "make-bench-images: $*" >&2; exit 1; }

[[ $(id -u) -eq 0 ]] || die "must run as root (it loop-mounts the image it builds)"
grep -qw xfs /proc/filesystems || modprobe xfs 2>/dev/null || true
grep -qw xfs /proc/filesystems || die "the kernel has no XFS driver (modprobe xfs failed)"
for tool in mkfs.xfs xfs_bmap losetup python3 dd sha256sum; do
    command -v "$tool" >/dev/null || die "$tool is missing: apt-get install -y xfsprogs util-linux python3 coreutils"
done

script_hash=$(sha256sum "${BASH_SOURCE[0]}" | cut -c1-16)
cache_root=${XFSWIN_BENCH_CACHE:-/var/tmp/xfswin-bench}
final="$cache_root/$script_hash"
if [[ -f "$final/manifest.txt" ]]; then
    echo "$final"
    exit 0
fi
mkdir -p "$cache_root"
# Images from older versions of this script are stale (and 2-3 GB each): drop them.
find "$cache_root" -mindepth 1 -maxdepth 1 -type d -regextype posix-extended -regex '.*/[0-9a-f]{16}' \
    ! -name "$script_hash" -exec rm -rf {} +
work=$(mktemp -d "$cache_root/build.XXXXXX")
mnt=$(mktemp -d /tmp/xfswin-bench-mnt.XXXXXX)
mounted=0
cleanup() {
    if [[ $mounted -eq 1 ]]; then umount "$mnt" || umount -l "$mnt" || true; fi
    rmdir "$mnt" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

img="$work/bench.img"
log() { echo "make-bench-images: $(date +%T) $*" >&2; }

log "formatting an 8 GiB sparse image with mkfs.xfs ($(mkfs.xfs -V))"
truncate -s 8G "$img"
mkfs.xfs -q -f -L xfsbench "$img"
mount -o loop "$img" "$mnt"
mounted=1

log "writing /seq/big (1 GiB from /dev/urandom)"
mkdir "$mnt/seq"
dd if=/dev/urandom of="$mnt/seq/big" bs=4M count=256 status=none
sync -f "$mnt/seq/big"

log "writing /ext/frag (10,000 one-block extents) and /ext/contig"
mkdir "$mnt/ext"
python3 - "$mnt/ext" <<'PY'
import mmap, os, sys
d = sys.argv[1]
blocks = 10_000
flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT
frag = os.open(os.path.join(d, "frag"), flags, 0o644)
gaps = os.open(os.path.join(d, "gaps"), flags, 0o644)
buf = mmap.mmap(-1, 4096)  # page-aligned, as O_DIRECT needs
for i in range(blocks):
    # Each direct write allocates its block now; the next block on disk goes to the other file.
    for fd in (frag, gaps):
        buf.seek(0)
        buf.write(os.urandom(4096))
        os.pwrite(fd, buf, i * 4096)
os.close(frag)
os.close(gaps)
with open(os.path.join(d, "contig"), "wb") as f:
    f.write(os.urandom(blocks * 4096))
PY
sync -f "$mnt/ext/contig"

make_dir() { # make_dir NAME COUNT MODE(empty|varied)
    python3 - "$mnt/$1" "$2" "$3" <<'PY'
import os, random, sys
path, count, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
os.mkdir(path)
dfd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
rng = random.Random(20261122)
data = os.urandom(8192)
for i in range(count):
    fd = os.open(f"f{i:07d}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644, dir_fd=dfd)
    if mode == "varied":
        n = rng.randrange(8192)
        if n:
            os.write(fd, data[:n])
        if i % 100 == 0:
            os.ftruncate(fd, rng.randrange(1 << 20))
    os.close(fd)
os.close(dfd)
PY
}
log "creating /d10k (10,000 empty files)"
make_dir d10k 10000 empty
log "creating /d100k (100,000 files of varied sizes)"
make_dir d100k 100000 varied
log "creating /d1m (1,000,000 empty files)"
make_dir d1m 1000000 empty
sync -f "$mnt/d1m"

manifest="$work/manifest.txt"
extents() { # extents NAME PATH: 'NAME.extent=<file byte> <image byte> <bytes>' per extent, from the kernel's bmap
    xfs_bmap "$2" | awk -v n="$1" 'NR > 1 && $3 != "hole" {
        split($2, f, /[][.:]+/); split($3, p, /\.\./);
        printf "%s.extent=%.0f %.0f %.0f\n", n, f[2] * 512, p[1] * 512, (p[2] - p[1] + 1) * 512 }'
}
{
    echo "# XfsWin benchmark volume; made by make-bench-images.sh $script_hash"
    echo "mkfs=$(mkfs.xfs -V)"
    echo "kernel=$(uname -r)"
    for f in seq/big ext/frag ext/contig d10k d100k d1m; do
        key=${f##*/}
        echo "$key.path=/$f"
        echo "$key.ino=$(stat -c %i "$mnt/$f")"
        echo "$key.size=$(stat -c %s "$mnt/$f")"
    done
    for d in d10k d100k d1m; do echo "$d.entries=$(find "$mnt/$d" -mindepth 1 -maxdepth 1 | wc -l)"; done
    echo "d100k.totalsize=$(find "$mnt/d100k" -mindepth 1 -maxdepth 1 -printf '%s\n' | awk '{ s += $1 } END { printf "%d", s }')"
    extents big "$mnt/seq/big"
    extents frag "$mnt/ext/frag"
    extents contig "$mnt/ext/contig"
} > "$manifest"
frag_extents=$(grep -c '^frag.extent=' "$manifest")
[[ $frag_extents -ge 9000 ]] || die "/ext/frag has only $frag_extents extents; the interleaved direct writes did not fragment it"
log "/ext/frag has $frag_extents extents, /seq/big $(grep -c '^big.extent=' "$manifest"), /ext/contig $(grep -c '^contig.extent=' "$manifest")"

umount "$mnt"
mounted=0
rmdir "$mnt"
mv "$work" "$final"
trap - EXIT
echo "$final"
