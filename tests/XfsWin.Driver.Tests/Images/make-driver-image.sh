#!/usr/bin/env bash
# Builds the driver tests' volume: mkfs.xfs, then the Linux kernel fills it through a loop mount.
# Writes IMAGE and a JSON manifest of what the kernel reports for every file (the tests' oracle).
# usage: make-driver-image.sh IMAGE MANIFEST
set -euo pipefail
img=$1
manifest=$2
for tool in mkfs.xfs setfacl setfattr mknod python3 blkid; do
  command -v "$tool" >/dev/null || { echo "make-driver-image.sh needs $tool: run scripts/install-deps.sh as root" >&2; exit 1; }
done
rm -f "$img"
truncate -s 512M "$img"
mkfs.xfs -q -f -L XFSWINTEST "$img"
mnt=$(mktemp -d)
cleanup() { cd /; umount "$mnt" 2>/dev/null || true; rmdir "$mnt" 2>/dev/null || true; }
trap cleanup EXIT
mount -o loop,noatime "$img" "$mnt"
cd "$mnt"

printf 'hello world\n' > hello.txt
setfattr -n user.color -v blue hello.txt
setfattr -n user.bad:name -v hidden hello.txt
setfattr -n user.big -v "$(head -c 3000 /dev/zero | tr '\0' 'z')" hello.txt
ln hello.txt hardlink.txt
python3 -c "import sys; sys.stdout.buffer.write(bytes((i * 7 + 3) % 251 for i in range(3 * 1048576 + 123)))" > pattern.bin
truncate -s 8M sparse.bin
printf 'middle' | dd of=sparse.bin bs=1 seek=5000000 conv=notrunc status=none
mkdir -p dir/sub
echo inner > dir/sub/inner.txt
ln -s hello.txt rel
ln -s dir dirlink
ln -s /dir/sub abs
ln -s nowhere dangling
ln -s ../../hello.txt dir/sub/uplink
ln -s /hello.txt dir/sub/abslink
ln -s loop2 loop1
ln -s loop1 loop2
mkfifo fifo
mknod chr c 1 3
mknod blk b 7 0
python3 -c "import socket; s = socket.socket(socket.AF_UNIX); s.bind('sock')"
echo ro > readonly.txt; chmod 444 readonly.txt
echo odd > odd.txt; chown 1000:1000 odd.txt; chmod 577 odd.txt
echo acl > acl.txt; chmod 640 acl.txt; setfacl -m u:1234:rwx,g:2345:rw- acl.txt
mkdir sticky; chmod 1777 sticky
echo hidden > .hidden
mkdir names
for n in 'a:b' 'what?' 'star*' 'pipe|x' '<lt>' 'q"q' 'back\slash' $'tab\tname' 'trail.' 'trail ' $'\xff\xfe' $'\xef\x81\x81' 'Case' 'case' 'CASE2' 'émoji😀'; do
  printf '%s' "$n" > "names/$n"
done
mkdir big
(cd big && seq -f 'f%06.0f' 0 99999 | xargs touch)
sync

python3 - "$mnt" > "$manifest.tmp" <<'PY'
import hashlib, json, os, stat, subprocess, sys
root = sys.argv[1]
entries = {}
def walk(rel):
    full = os.path.join(root, rel) if rel else root
    st = os.lstat(full)
    e = {"ino": st.st_ino, "mode": st.st_mode, "uid": st.st_uid, "gid": st.st_gid, "size": st.st_size,
         "nlink": st.st_nlink, "blocks": st.st_blocks, "atime": st.st_atime_ns, "mtime": st.st_mtime_ns,
         "ctime": st.st_ctime_ns, "rdev_major": os.major(st.st_rdev), "rdev_minor": os.minor(st.st_rdev)}
    e["birth"] = int(subprocess.check_output(["stat", "-c", "%W", full]).strip())
    if stat.S_ISLNK(st.st_mode):
        e["target"] = os.fsencode(os.readlink(full)).hex()
    else:
        xattrs = {}
        for name in os.listxattr(full, follow_symlinks=False):
            xattrs[name] = os.getxattr(full, name, follow_symlinks=False).hex()
        e["xattrs"] = xattrs
    if stat.S_ISREG(st.st_mode):
        with open(full, "rb") as f:
            e["sha256"] = hashlib.sha256(f.read()).hexdigest()
    if stat.S_ISDIR(st.st_mode):
        names = [os.fsencode(n) for n in os.listdir(full)]  # readdir order, as the kernel returns it
        e["children"] = [n.hex() for n in names]
        if rel != "big":
            for n in names:
                walk(os.path.join(rel, os.fsdecode(n)) if rel else os.fsdecode(n))
    entries[os.fsencode(rel).hex()] = e
walk("")
vfs = os.statvfs(root)
print(json.dumps({"entries": entries, "statfs": {"bsize": vfs.f_frsize, "blocks": vfs.f_blocks, "bfree": vfs.f_bfree}}))
PY
cd /
umount "$mnt"
rmdir "$mnt"
trap - EXIT
uuid=$(blkid -o value -s UUID "$img")
python3 - "$manifest.tmp" "$uuid" > "$manifest" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
m["uuid"] = sys.argv[2]
print(json.dumps(m))
PY
rm -f "$manifest.tmp"
