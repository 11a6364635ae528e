#!/bin/bash
# Makes the tree the FUSE tests compare: a real mkfs.xfs volume filled by the kernel through a
# loop mount. Usage: tree.sh IMAGE. Every kind of inode, directory and xattr form, odd names,
# times with nanoseconds before 1970 and after 2038, sparse and multi-extent files.
set -euo pipefail
img=$1
mnt=$(mktemp -d /tmp/xfswin-tree-XXXXXX)
rm -f "$img"
truncate -s 512M "$img"
mkfs.xfs -q -f -L fusetree "$img"
mount -o loop "$img" "$mnt"
trap 'cd /; umount "$mnt" 2>/dev/null || true; rmdir "$mnt"' EXIT
cd "$mnt"

# Regular files: empty, small, a few MiB of random data, sparse with holes, many small extents.
: > empty
printf 'hello, xfs\n' > small.txt
head -c 3000000 /dev/urandom > random.bin
truncate -s 100M sparse.bin
printf 'start' | dd of=sparse.bin conv=notrunc status=none
printf 'middle' | dd of=sparse.bin bs=1 seek=50000000 conv=notrunc status=none
printf 'end' | dd of=sparse.bin bs=1 seek=104857597 conv=notrunc status=none
for i in $(seq 0 2 80); do head -c 4096 /dev/urandom | dd of=fragmented.bin bs=4096 seek=$i conv=notrunc status=none; done
xfs_io -f -c 'falloc 0 1m' -c 'pwrite -q 4096 4096' unwritten.bin

# Directories of every form: short form, block, leaf, node (with many entries).
mkdir -p dirs/short dirs/block dirs/leaf dirs/node
touch dirs/short/a dirs/short/b
for i in $(seq 1 60); do touch "dirs/block/file-$i"; done
for i in $(seq 1 300); do touch "dirs/leaf/entry-with-a-longer-name-$i"; done
for i in $(seq 1 6000); do : > "dirs/node/n$i"; done
mkdir -p deep/a/b/c/d/e/f/g/h && echo bottom > deep/a/b/c/d/e/f/g/h/leaf.txt

# Names: UTF-8, spaces, a 255-byte name, characters shells dislike.
echo utf8 > 'héllo wörld.txt'
echo japanese > '日本語のファイル名.txt'
mkdir 'Ünïcödé dïr' && echo inside > 'Ünïcödé dïr/ñ.txt'
touch "$(printf 'x%.0s' $(seq 1 255))"
touch -- 'quote'"'"'and"double' 'star*question?' '-leading-dash'

# Links: short (inline) and long (remote) symlinks, dangling, to a directory, hard links.
ln -s small.txt link-short
ln -s "$(printf 'long/%.0s' $(seq 1 180))target" link-long
ln -s /nowhere/at/all link-dangling
ln -s dirs link-dir
echo linked > hard1 && ln hard1 hard2 && ln hard1 dirs/hard3

# Special files.
mkdir special
mknod special/null c 1 3
mknod special/loop7 b 7 7
mknod special/bigdev c 300 70000
mkfifo special/fifo
python3 -c 'import socket,sys; s=socket.socket(socket.AF_UNIX); s.bind(sys.argv[1])' special/socket

# Modes and owners.
mkdir modes
for m in 0000 0400 0644 0755 1777 2755 4755 6711; do echo "$m" > "modes/m$m"; chmod "$m" "modes/m$m"; done
echo owned > modes/owned && chown 1234:5678 modes/owned
mkdir modes/sticky-dir && chmod 1777 modes/sticky-dir

# Extended attributes: short form, leaf (many), remote values, every namespace, ACLs.
mkdir xattrs
echo a > xattrs/few
setfattr -n user.colour -v blue xattrs/few
setfattr -n user.empty xattrs/few
setfattr -n trusted.secret -v hidden xattrs/few
setfattr -n security.label -v system_u xattrs/few
echo b > xattrs/many
for i in $(seq 1 120); do setfattr -n "user.attribute-number-$i" -v "value $i" xattrs/many; done
echo c > xattrs/remote
setfattr -n user.big -v "0s$(head -c 6000 /dev/urandom | base64 -w0)" xattrs/remote
echo d > xattrs/acl
setfacl -m u:1000:rx,g:100:r xattrs/acl
mkdir xattrs/acl-dir && setfacl -d -m u:1000:rwx xattrs/acl-dir && setfacl -m u:1001:rx xattrs/acl-dir
setfattr -n user.on-dir -v yes xattrs/acl-dir
setfattr -h -n trusted.on-link -v yes link-short

# Times with nanoseconds, before the epoch and after 2038 (bigtime).
mkdir times
touch -d '2001-02-03 04:05:06.123456789' times/past
touch -d '1950-06-01 12:00:00.5' times/before-epoch
touch -d '2100-01-01 00:00:00.999999999' times/future
touch -a -d '2010-10-10 10:10:10.101010101' times/past
touch -h -d '2005-05-05 05:05:05.050505050' link-short
touch -d '2003-03-03 03:03:03.3' times
touch -d '2020-01-01' reference-time
touch -d '2030-01-01' newer-than-reference

cd /
umount "$mnt"
trap - EXIT
rmdir "$mnt"
if ! out=$(xfs_repair -n "$img" 2>&1); then echo "$out" >&2; exit 1; fi
