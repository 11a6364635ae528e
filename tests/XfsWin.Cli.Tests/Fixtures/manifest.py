#!/usr/bin/env python3
"""Prints one line per object under ROOT with everything extract must preserve: relative path,
type, mode, uid, gid, size, atime/mtime in ns, device numbers, symlink target, hard-link group,
every xattr (raw value, hex) and a SHA-256 of file contents. Pass 1 stats everything (lstat
before any listdir/read of an object, so reading cannot move an atime), pass 2 hashes.
Usage: manifest.py ROOT [--no-atime-for-dirs]"""
import hashlib, os, stat, sys

root = os.fsencode(sys.argv[1])
records = []

def walk(rel):
    full = os.path.join(root, rel) if rel else root
    st = os.lstat(full)
    records.append((rel, st))
    if stat.S_ISDIR(st.st_mode):
        for name in sorted(os.listdir(full)):
            walk(os.path.join(rel, name) if rel else name)

walk(b"")
groups = {}
lines = []
for rel, st in records:
    full = os.path.join(root, rel) if rel else root
    kind = stat.S_IFMT(st.st_mode)
    t = {stat.S_IFREG: "file", stat.S_IFDIR: "dir", stat.S_IFLNK: "symlink", stat.S_IFIFO: "fifo",
         stat.S_IFSOCK: "socket", stat.S_IFCHR: "chr", stat.S_IFBLK: "blk"}[kind]
    fields = [repr(rel or b"."), t, "mode=%o" % stat.S_IMODE(st.st_mode), "uid=%d" % st.st_uid, "gid=%d" % st.st_gid]
    if kind == stat.S_IFREG or kind == stat.S_IFLNK:
        fields.append("size=%d" % st.st_size)
    fields.append("mtime=%d" % st.st_mtime_ns)
    fields.append("atime=%d" % st.st_atime_ns)
    if kind in (stat.S_IFCHR, stat.S_IFBLK):
        fields.append("rdev=%d:%d" % (os.major(st.st_rdev), os.minor(st.st_rdev)))
    if kind == stat.S_IFLNK:
        fields.append("target=%r" % os.readlink(full))
    if kind != stat.S_IFDIR:
        fields.append("nlink=%d" % st.st_nlink)
        if st.st_nlink > 1:
            groups.setdefault(st.st_ino, rel)
            fields.append("linkgroup=%r" % groups[st.st_ino])
    for name in sorted(os.listxattr(full, follow_symlinks=False)):
        # XFS keeps ACLs as trusted.SGI_ACL_FILE/DEFAULT and recent kernels list those raw names
        # too; system.posix_acl_* below carries the same ACL in the form every file system takes.
        if name in ("trusted.SGI_ACL_FILE", "trusted.SGI_ACL_DEFAULT"):
            continue
        fields.append("xattr:%s=%s" % (name, os.getxattr(full, name, follow_symlinks=False).hex()))
    lines.append(fields)
for (rel, st), fields in zip(records, lines):
    if stat.S_ISREG(st.st_mode):
        h = hashlib.sha256()
        with open(os.path.join(root, rel), "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        fields.append("sha256=" + h.hexdigest())
    print(" ".join(fields))
