#!/bin/bash
# Builds tree.img: a V5 volume made by mkfs.xfs and filled by the kernel through a loop mount with
# every kind of object extract must recreate. Usage: make-tree.sh OUTDIR
set -euo pipefail
out=$1
img=$out/tree.img
mnt=$(mktemp -d)
truncate -s 320M "$img"
mkfs.xfs -q -f -L cli-tree "$img"
mount -o loop "$img" "$mnt"
trap 'umount "$mnt" 2>/dev/null || true; rmdir "$mnt"' EXIT
cd "$mnt"
mkdir -p dir/sub/deeper empty-dir sticky many
echo "hello, xfs" > dir/hello.txt
printf 'line\n%.0s' $(seq 1 1000) > dir/sub/lines.txt
head -c 12582917 /dev/urandom > big.bin                  # 12 MiB + 5 bytes: several extents' worth
: > empty
truncate -s 50M sparse.bin                                # holes with data in the middle and at the end
printf 'middle' | dd of=sparse.bin bs=1 seek=20000000 conv=notrunc status=none
printf 'tail' | dd of=sparse.bin bs=1 seek=52428796 conv=notrunc status=none
ln dir/hello.txt hardlink-1
ln dir/hello.txt dir/sub/hardlink-2
ln -s dir/hello.txt rel-link
ln -s /etc/passwd abs-link
ln -s does/not/exist dangling-link
ln -s ../../big.bin dir/sub/up-link
ln -s rel-link link-to-link
ln big.bin big-hard
mkfifo fifo
mknod chardev c 1 3
mknod blockdev b 7 200
python3 -c 'import socket,sys; s=socket.socket(socket.AF_UNIX); s.bind(sys.argv[1])' sock
for i in $(seq 1 300); do echo "$i" > "many/entry-number-$i"; done
long=$(printf 'L%.0s' $(seq 1 255)); echo long > "dir/$long"
echo bytes > "$(printf 'latin1-\xe9-name')"
echo space > "dir/name with spaces"
# chown before chmod: chown clears setuid/setgid.
chown 1000:1000 dir/hello.txt; chown 65534:100 big.bin; chown -h 4321:8765 rel-link; chown 123:456 dir/sub
chmod 4755 big.bin; chmod 2750 dir/sub; chmod 1777 sticky; chmod 0000 empty; chmod 0640 dir/hello.txt
setfattr -n user.color -v blue dir/hello.txt
setfattr -n user.binary -v 0x00ff10ab big.bin
head -c 3000 /dev/urandom > /tmp/xattr-big.$$; setfattr -n user.large -v "0x$(xxd -p /tmp/xattr-big.$$ | tr -d '\n')" dir/sub/lines.txt; rm /tmp/xattr-big.$$
setfattr -n trusted.secret -v s3cr3t dir/sub/lines.txt
setfattr -n security.label -v lbl empty-dir
setfattr -h -n trusted.onlink -v yes rel-link
for i in $(seq 1 40); do setfattr -n "user.many-$i" -v "value-$i" many/entry-number-1; done
setfacl -m u:1234:rwx,g:555:r-x dir/sub/lines.txt
setfacl -m u:99:r dir
setfacl -d -m u:77:rwx,g:88:rx,o::- dir/sub/deeper
# Times with nanoseconds, set last (after content, links and xattrs change ctime/mtime).
touch -h -d '2001-02-03 04:05:06.123456789' -a rel-link
touch -h -d '1999-12-31 23:59:59.987654321' -m rel-link
touch -d '2010-05-06 07:08:09.000000001' -a big.bin
touch -d '2020-01-02 03:04:05.999999999' -m big.bin
touch -d '1970-01-01 00:00:00.5' -m dir/hello.txt
touch -d '2038-01-19 03:14:08.25' -m empty      # past 2^31: needs bigtime
touch -d '2015-06-07 08:09:10.111111111' dir/sub dir/sub/deeper many sticky empty-dir dir .
cd /
umount "$mnt"
trap - EXIT
rmdir "$mnt"
