#!/bin/bash
# Builds malicious.img: a kernel-made volume whose directory /d is then edited with xfs_db -x into
# something no kernel would write: a stored ".." entry, a name with '/', duplicate names where a
# symlink pointing outside comes first, a directory entry pointing back at the root (a cycle) and
# a symlink loop. Usage: make-malicious.sh OUTDIR
set -euo pipefail
out=$1
img=$out/malicious.img
mnt=$(mktemp -d)
truncate -s 320M "$img"
mkfs.xfs -q -f "$img"
mount -o loop "$img" "$mnt"
trap 'umount "$mnt" 2>/dev/null || true; rmdir "$mnt"' EXIT
mkdir "$mnt/d"
echo dotdot > "$mnt/d/aa"                 # list[0] -> renamed ".."
ln -s ../../.. "$mnt/d/xx"                 # list[1]: symlink escaping upwards
mkdir "$mnt/d/xy"                          # list[2] -> renamed "xx": a directory behind the symlink's name
echo evil > "$mnt/d/xy/evil"
ln -s ../../outside-file "$mnt/d/ss"       # list[3]
echo evil > "$mnt/d/st"                    # list[4] -> renamed "ss": a file behind the symlink's name
echo slash > "$mnt/d/ab"                   # list[5] -> renamed "a/"
ln -s loop2 "$mnt/d/loop1"                 # list[6]
ln -s loop1 "$mnt/d/loop2"                 # list[7]
mkdir "$mnt/d/cyc"                         # list[8] -> points at the root directory
echo fine > "$mnt/d/ok"                    # list[9]: an ordinary file that must still be extracted
ino=$(stat -c %i "$mnt/d")
root=$(stat -c %i "$mnt")
umount "$mnt"
trap - EXIT
rmdir "$mnt"
xfs_db -x -c "inode $ino" \
  -c "write u3.sfdir3.list[0].name 0x2e2e" \
  -c "write u3.sfdir3.list[2].name 0x7878" \
  -c "write u3.sfdir3.list[4].name 0x7373" \
  -c "write u3.sfdir3.list[5].name 0x612f" \
  -c "write u3.sfdir3.list[8].inumber.i4 $root" \
  "$img" >/dev/null
xfs_db -r -c "inode $ino" -c "print u3.sfdir3.list[0].name u3.sfdir3.list[5].name" "$img" | grep -q '"a/"' \
  || { echo "xfs_db did not apply the edits" >&2; exit 1; }
