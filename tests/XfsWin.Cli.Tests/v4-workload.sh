#!/usr/bin/env bash
# A deterministic workload for a fresh volume, run as root inside user-mode Linux (../XfsWin.Core.Tests/Journal/uml.sh)
# on DEVICE: directories in every form (short form, block, leaf, node), files of many sizes, deletes, renames within
# and across directories, extended attributes (short form, leaf, remote values), hard links, short and long symlinks,
# a removed subtree. Half way the file system is shut down without flushing and mounted again, so the kernel replays a
# log that starts from the clean record mkfs wrote. Last it writes every path (sorted, relative to the root) to LISTING.
#
# usage: v4-workload.sh DEVICE LISTING
set -euo pipefail
dev=$1 listing=$2
mnt=$(mktemp -d /tmp/xfswin-v4-workload.XXXXXX)
cleanup() { umount "$mnt" 2>/dev/null || true; rmdir "$mnt"; }
trap cleanup EXIT

mount -t xfs "$dev" "$mnt"
cd "$mnt"

# Names and contents without a process per file (processes are slow in user-mode Linux): bash builtins only.
fill() { printf "%*s" "$2" "" >"$1"; }
printf -v pad "%*s" 3000 ""
xs=${pad// /x} vs=${pad// /v} bs=${pad// /b}
# name_of D F: sets REPLY to directory D's file F (a name of 10 to 49 characters).
name_of() { printf -v REPLY "dir%d/file-%04d-%s" "$1" "$2" "${xs:0:$(($2 % 40))}"; }

# dir0: node form (600 entries), dir1: leaf form (200), dir2: block form (40), dir3..dir5: short form.
declare -a counts=(600 200 40 6 3 1)
for d in 0 1 2 3 4 5; do
    mkdir "dir$d"
    for ((f = 0; f < counts[d]; f++)); do
        name_of "$d" "$f"
        fill "$REPLY" $(((f * 7919 + d * 104729) % 300000))
    done
done

# Extended attributes: short form on many files, a leaf of many names on one, a remote value on another.
for ((f = 0; f < 200; f += 5)); do
    name_of 1 "$f"
    setfattr -n user.tag -v "${vs:0:$((1 + f % 300))}" "$REPLY"
done
for ((a = 0; a < 60; a++)); do setfattr -n "user.many-$a" -v "value-$a" dir2/file-0001-x; done
setfattr -n user.big -v "$bs" dir2/file-0002-xx
setfattr -n trusted.root-only -v secret dir3

sync
# A crash: the log holds what sync did not put in place; the next mount replays it.
xfs_io -x -c "shutdown" "$mnt"
cd /
umount "$mnt"
mount -t xfs "$dev" "$mnt"
cd "$mnt"

# Deletes (every 7th), renames within a directory and across directories (every 11th), over an existing name too.
for d in 0 1 2; do
    for ((f = 0; f < counts[d]; f++)); do
        name_of "$d" "$f"
        if ((f % 7 == 0)); then rm "$REPLY"
        elif ((f % 11 == 0)); then mv "$REPLY" "dir$(((d + 1) % 6))/moved-$d-$f"
        elif ((f % 13 == 0)); then mv "$REPLY" "dir$d/renamed-$f"
        fi
    done
done
fill dir4/target 1000
mv -f dir3/file-0001-x dir4/target

# Links: hard links (one across directories), an inline symlink, a symlink too long for the inode, a dangling one.
ln dir2/file-0003-xxx hardlink
ln dir2/file-0003-xxx dir5/hardlink-too
ln -s dir1 link
ln -s "$(printf 'long/%.0s' {1..60})end" longlink
ln -s nowhere dangling
mkfifo fifo
mknod chardev c 1 3

# A subtree made and removed, and an emptied directory.
mkdir -p gone/a/b/c
fill gone/a/b/c/file 5000
rm -r gone
rm dir5/file-0000-
rmdir dir5 2>/dev/null || true

find . -mindepth 1 | sed 's|^\./||' | LC_ALL=C sort >"$listing"
cd /
umount "$mnt"
