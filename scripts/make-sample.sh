#!/usr/bin/env bash
# Rebuilds samples/sample.xfs.zst, the small volume scripts/run-sample.sh mounts: a real mkfs.xfs
# volume (300 MiB, the smallest mkfs.xfs makes, sparse) filled by the Linux kernel through a loop
# mount, then compressed with zstd (about 20 KB). Needs root, xfsprogs, attr, zstd.
set -euo pipefail
cd "$(dirname "$0")/.."
out=$PWD/samples/sample.xfs.zst
work=$(mktemp -d /tmp/xfswin-make-sample-XXXXXX)
img=$work/sample.xfs.img
mnt=$work/mnt
mkdir "$mnt"
cleanup() { cd /; umount "$mnt" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

truncate -s 300M "$img"
mkfs.xfs -q -f -L xfswin-demo -m uuid=5a3b1c2d-0e0f-4a1b-8c9d-0123456789ab "$img"
mount -o loop "$img" "$mnt"
cd "$mnt"

cat > README.txt <<'TEXT'
This is the XfsWin sample volume: a real XFS file system made by mkfs.xfs and filled by the
Linux kernel. You are reading it through XfsWin's own XFS engine, mounted with FUSE.
TEXT
mkdir -p docs 'Ünïcödé' many
printf 'Hello from XFS!\n' > docs/hello.txt
printf '# Notes\n\n- directories, symlinks, extended attributes\n- UTF-8 names\n' > docs/notes.md
printf 'こんにちは\n' > 'Ünïcödé/日本語.txt'
printf 'party\n' > 'Ünïcödé/émoji 🎉.txt'
for i in $(seq -w 1 100); do printf 'file %s\n' "$i" > "many/file-$i.txt"; done
truncate -s 10M sparse.bin
printf 'the end' | dd of=sparse.bin bs=1 seek=$((10*1024*1024 - 7)) conv=notrunc status=none
ln -s docs/hello.txt hello-link
setfattr -n user.comment -v 'read me first' README.txt
setfattr -n user.author -v 'XfsWin' docs
chmod 0600 docs/notes.md
find . -exec touch -h -d '2024-06-01 12:34:56.123456789' {} +

cd /
umount "$mnt"
xfs_repair -n "$img" >/dev/null 2>&1 || { echo "xfs_repair -n does not accept the sample" >&2; exit 1; }
zstd -19 -q -f "$img" -o "$out"
echo "wrote $out ($(stat -c %s "$out") bytes)"
