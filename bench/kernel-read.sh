#!/usr/bin/env bash
# The Linux kernel's own XFS reading /seq/big of the benchmark volume with O_DIRECT (dd iflag=direct
# through a read-only loop mount), next to a raw O_DIRECT dd of the same image byte range: the
# kernel's figure for the comparison XfsWin's benchmarks make against the raw device.
#
#   bench/kernel-read.sh IMAGE_DIR [rounds]     # IMAGE_DIR: what make-bench-images.sh printed
set -euo pipefail
dir=${1:?usage: kernel-read.sh IMAGE_DIR [rounds]}
rounds=${2:-3}
[[ $(id -u) -eq 0 ]] || { echo "kernel-read: must run as root (loop mount)" >&2; exit 1; }
img="$dir/bench.img"
manifest="$dir/manifest.txt"
[[ -f $img && -f $manifest ]] || { echo "kernel-read: $dir has no bench.img/manifest.txt: run make-bench-images.sh" >&2; exit 1; }
read -r _ image_offset length < <(grep -m1 '^big.extent=' "$manifest" | cut -d= -f2)
[[ $(grep -c '^big.extent=' "$manifest") -eq 1 ]] || { echo "kernel-read: /seq/big is not one extent; the raw dd below assumes it is" >&2; exit 1; }
mnt=$(mktemp -d /tmp/xfswin-kread.XXXXXX)
# --direct-io=on: the loop driver reads the image with O_DIRECT too, so no page cache anywhere.
loop=$(losetup --find --show --read-only --direct-io=on "$img")
cleanup() { umount "$mnt" 2>/dev/null || true; losetup -d "$loop" 2>/dev/null || true; rmdir "$mnt" 2>/dev/null || true; }
trap cleanup EXIT
mount -t xfs -o ro,norecovery "$loop" "$mnt"

rate() { # rate CMD...: MiB/s of a dd run, from its byte count and elapsed time
    local start end
    start=$(date +%s.%N)
    "$@" status=none
    end=$(date +%s.%N)
    awk -v b="$length" -v s="$start" -v e="$end" 'BEGIN { printf "%.0f", b / 1048576 / (e - s) }'
}
echo "| Reader (O_DIRECT; /seq/big unless named) | bs | MiB/s per round |"
echo "|---|---|---|"
for bs in 1 4; do
    k=() r=()
    for ((i = 0; i < rounds; i++)); do
        k+=("$(rate dd if="$mnt/seq/big" of=/dev/null bs=${bs}M iflag=direct)")
        r+=("$(rate dd if="$img" of=/dev/null bs=${bs}M iflag=direct,skip_bytes,count_bytes skip="$image_offset" count="$length")")
    done
    echo "| kernel XFS (loop mount, dd iflag=direct) | ${bs} MiB | ${k[*]} |"
    echo "| raw image range (dd iflag=direct) | ${bs} MiB | ${r[*]} |"
done
# The 10,000-extent file and its contiguous twin (40,960,000 bytes each), as ExtentBenchmarks reads them.
length=$(grep -m1 '^frag.size=' "$manifest" | cut -d= -f2)
for f in frag contig; do
    k=()
    for ((i = 0; i < rounds; i++)); do k+=("$(rate dd if="$mnt/ext/$f" of=/dev/null bs=1M iflag=direct)"); done
    echo "| kernel XFS, /ext/$f (dd iflag=direct) | 1 MiB | ${k[*]} |"
done
