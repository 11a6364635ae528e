#!/bin/bash
# Builds partitioned disk images with real tables (sfdisk, sgdisk) and real XFS volumes in some
# partitions, plus the tables as `sfdisk --json` sees them. Usage: make-disks.sh OUTDIR
set -euo pipefail
out=$1
loops=()
cleanup() { for l in "${loops[@]}"; do losetup -d "$l" 2>/dev/null || true; done; }
trap cleanup EXIT

# mkxfs IMG START_BYTES SIZE_BYTES LABEL [losetup args]: mkfs.xfs through a loop window, then one file via the kernel.
mkxfs() {
  local img=$1 start=$2 size=$3 label=$4; shift 4
  local dev mnt
  dev=$(losetup -f --show -o "$start" --sizelimit "$size" "$@" "$img"); loops+=("$dev")
  mkfs.xfs -q -f -L "$label" "$dev"
  mnt=$(mktemp -d); mount "$dev" "$mnt"
  echo "in partition $label" > "$mnt/where.txt"
  umount "$mnt"; rmdir "$mnt"
  losetup -d "$dev"
}

# MBR: two primaries, an extended partition with three logicals (5, 6, 7). XFS on 2 and 6.
truncate -s 1300M "$out/mbr.img"
sfdisk -q "$out/mbr.img" <<'T'
label: dos
label-id: 0x1234abcd
start=2048, size=8192, type=c, bootable
start=10240, size=655360, type=83
start=667648, size=1990656, type=5
start=669696, size=8192, type=82
start=679936, size=655360, type=83
start=1337344, size=16384, type=83
T
sfdisk --json "$out/mbr.img" > "$out/mbr.json"
mkxfs "$out/mbr.img" $((10240*512)) $((655360*512)) mbr-p2
mkxfs "$out/mbr.img" $((679936*512)) $((655360*512)) mbr-p6

# GPT on 512-byte sectors (sgdisk): XFS on 2, with names and types.
truncate -s 800M "$out/gpt.img"
sgdisk -n 1:2048:+16M -t 1:ef00 -c 1:"EFI system" \
          -n 2:0:+330M -t 2:8300 -c 2:"xfs data" \
          -n 4:0:+8M -t 4:8200 -c 4:"swap ünïcode" "$out/gpt.img" >/dev/null
sfdisk --json "$out/gpt.img" > "$out/gpt.json"
start=$(sfdisk --json "$out/gpt.img" | python3 -c 'import json,sys; p=[p for p in json.load(sys.stdin)["partitiontable"]["partitions"] if p["node"].endswith("2")][0]; print(p["start"]*512, p["size"]*512)')
mkxfs "$out/gpt.img" $start gpt-p2

# GPT on 4096-byte sectors: partitioned through a 4Kn loop device, as a 4Kn disk would be.
truncate -s 800M "$out/gpt4k.img"
dev=$(losetup -f --show --sector-size 4096 "$out/gpt4k.img"); loops+=("$dev")
sgdisk -n 1:256:+8M -t 1:8300 -c 1:"small" -n 2:0:+330M -t 2:8300 -c 2:"xfs 4k" "$dev" >/dev/null
sfdisk --json "$dev" > "$out/gpt4k.json"
losetup -d "$dev"
read -r start size < <(python3 -c 'import json,sys; t=json.load(open(sys.argv[1]))["partitiontable"]; p=[p for p in t["partitions"] if p["node"].endswith("2")][0]; print(p["start"]*4096, p["size"]*4096)' "$out/gpt4k.json")
mkxfs "$out/gpt4k.img" "$start" "$size" gpt4k-p2 --sector-size 4096
