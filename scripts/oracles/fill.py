#!/usr/bin/env python3
"""Fill a kernel-mounted XFS volume with every kind of object XfsWin must read.

Usage: fill.py MOUNTPOINT full|small

"full" (the `default` image) adds a 100,000-entry directory (data fork in btree format: its blocks are
allocated in free space fragmented on purpose) and a file with >= 10,000 extents (a bmbt of 2+ levels
with 4 KiB blocks). "small" keeps every form but smaller, for the feature-variant images.
Content is pseudo-random from fixed seeds, so two runs produce the same data.
"""
import os
import random
import re
import socket
import stat
import subprocess
import sys

NS = 1_000_000_000


def data(seed: int, n: int) -> bytes:
    return random.Random(seed).randbytes(n)


def write(path, content: bytes, mode=0o644):
    with open(path, "wb") as f:
        f.write(content)
    os.chmod(path, mode)


def setx(path, name, value: bytes):
    os.setxattr(path, name, value, follow_symlinks=False)


def run(*args):
    subprocess.run(args, check=True)


def extent_count(path, attr_fork=False):
    """Extents of a fork as the kernel maps them (xfs_io bmap), holes not counted."""
    out = subprocess.run(["xfs_io", "-r", "-c", "bmap -a" if attr_fork else "bmap", path],
                         check=True, capture_output=True, text=True).stdout
    return sum(1 for line in out.splitlines() if re.match(r"\s*\d+: \[\d+\.\.\d+\]: \d+\.\.\d+", line))


def allocated_block(path, content: bytes):
    """Writes and fsyncs a file, so its blocks are allocated now (not at writeback)."""
    with open(path, "wb") as f:
        f.write(content)
        f.flush()
        os.fsync(f.fileno())


def fill(root: str, scale: str):
    full = scale == "full"
    bs = os.statvfs(root).f_bsize
    j = lambda *p: os.path.join(root, *p)

    # ---- regular files: sizes around block and page boundaries, a large one ----
    os.mkdir(j("files"))
    for i, n in enumerate([0, 1, 100, 511, 512, 4095, 4096, 4097, 65535, 65537, 1 << 20, 3 * (1 << 20) + 17]):
        write(j("files", f"size-{n}"), data(100 + i, n))
    write(j("files", "large-24M"), data(7, 24 << 20))

    # ---- sparse files (holes), preallocation (unwritten extents) ----
    os.mkdir(j("sparse"))
    with open(j("sparse", "holes"), "wb") as f:
        f.write(data(11, 5000))
        f.seek(5 << 20)
        f.write(data(12, 70000))
        f.truncate(64 << 20)
        f.seek((64 << 20) - 10)
        f.write(b"0123456789")
    with open(j("sparse", "hole-only"), "wb") as f:
        f.truncate(10 << 20)
    with open(j("sparse", "prealloc"), "wb") as f:
        os.posix_fallocate(f.fileno(), 0, 4 << 20)
    with open(j("sparse", "prealloc-partial"), "wb") as f:
        os.posix_fallocate(f.fileno(), 0, 4 << 20)
        f.seek(1 << 20)
        f.write(data(13, 100_000))
    write(j("sparse", "prealloc-beyond-eof"), data(14, 10_000))
    run("xfs_io", "-c", "falloc -k 0 2m", j("sparse", "prealloc-beyond-eof"))

    # ---- hard links ----
    os.mkdir(j("links"))
    os.mkdir(j("links", "sub"))
    write(j("links", "original"), data(20, 3000))
    os.link(j("links", "original"), j("links", "second"))
    os.link(j("links", "original"), j("links", "sub", "third"))

    # ---- names ----
    names = j("names").encode()
    os.mkdir(names)
    for n in ["with space", " leading space", "trailing space ", "new\nline", "tab\tname",
              "héllo wörld", "日本語のファイル名", "emoji-\U0001F600", "dots...", ".hidden", "-dash",
              "quote'\"", "back\\slash", "a:b*c?d<e>f|g", "n" * 255, "é" * 127 + "x", "日" * 85]:
        write(os.path.join(names, n.encode()), n.encode())
    for raw in [b"latin1-\xe9\xe8", b"invalid-\xff\xfe", b"\x01\x02ctl", b"x" * 200 + b"\xc3"]:
        write(os.path.join(names, raw), raw)

    # ---- symlinks: local (in the inode) and remote (blocks); dangling; to dirs ----
    os.mkdir(j("symlinks"))
    os.symlink("../files/size-100", j("symlinks", "short"))
    os.symlink("t", j("symlinks", "one-char"))
    os.symlink("/absolute/path/outside", j("symlinks", "absolute"))
    os.symlink("dangling-" + "d" * 40, j("symlinks", "dangling"))
    os.symlink("../names", j("symlinks", "to-dir"))
    os.symlink("p/" * 500, j("symlinks", "remote-1000"))  # longer than the inode literal area
    os.symlink("q" * 1023, j("symlinks", "remote-max-1023"))
    os.symlink(b"\xff\xfe-non-utf8-target", os.path.join(j("symlinks").encode(), b"non-utf8-target"))

    # ---- special files ----
    os.mkdir(j("special"))
    os.mkfifo(j("special", "fifo"), 0o640)
    os.mknod(j("special", "null"), stat.S_IFCHR | 0o666, os.makedev(1, 3))
    os.mknod(j("special", "loop200"), stat.S_IFBLK | 0o660, os.makedev(7, 200))
    os.mknod(j("special", "bigdev"), stat.S_IFCHR | 0o600, os.makedev(300, 70000))
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(j("special", "socket"))
    s.close()

    # ---- reflink copies (shared extents) ----
    os.mkdir(j("reflink"))
    write(j("reflink", "source"), data(30, 1 << 20))
    run("cp", "--reflink=always", j("reflink", "source"), j("reflink", "clone"))
    run("cp", "--reflink=always", j("reflink", "source"), j("reflink", "clone-modified"))
    with open(j("reflink", "clone-modified"), "r+b") as f:
        f.seek(8192)
        f.write(b"copy-on-write happened here")

    # ---- xattrs in every form ----
    os.mkdir(j("xattrs"))
    p = j("xattrs", "shortform")
    write(p, b"sf")
    setx(p, "user.a", b"1")
    setx(p, "user.empty", b"")
    p = j("xattrs", "leaf")
    write(p, b"leaf")
    for i in range(40):
        setx(p, f"user.leaf-{i:03d}", data(40 + i, 20 + i))
    p = j("xattrs", "node")
    write(p, b"node")
    for i in range(2000 if full else 600):
        setx(p, f"user.node-attribute-{i:05d}", f"value-{i}".encode() * (1 + i % 5))
    # Remote values in at least two attribute-fork extents: the kernel allocates each value when it is set, and
    # may put the second right after the first (one extent). A block taken by another file of the same directory
    # (so of the same AG) between the two separates them; the result is checked, and the file made again until it
    # holds two extents (the default image's tests rely on them; the small images only carry the values).
    p = j("xattrs", "remote")
    for attempt in range(32):
        write(p, b"remote")
        setx(p, "user.remote-5000", data(50, 5000))
        filler = j("xattrs", f"filler-{attempt}")
        allocated_block(filler, data(53, bs))
        setx(p, "user.remote-64k", data(51, 65536))
        setx(p, "user.local-small", b"small")
        os.remove(filler)
        if extent_count(p, attr_fork=True) >= 2 or not full:
            break
        os.remove(p)
    else:
        raise SystemExit("fill.py: /xattrs/remote: the kernel kept its remote values in one extent in 32 attempts")
    p = j("xattrs", "namespaces")
    write(p, b"ns")
    setx(p, "trusted.secret", b"trusted value")
    setx(p, "security.label", b"system_u:object_r:label_t:s0")
    setx(p, "user.plain", b"plain")
    setx(p, "trusted.remote", data(52, 6000))
    p = j("xattrs", "acl-file")
    write(p, b"acl")
    run("setfacl", "-m", "u:1000:rwx,u:4000000000:r,g:1000:rx,m::rwx,o::r", p)
    p = j("xattrs", "acl-dir")
    os.mkdir(p)
    run("setfacl", "-m", "u:1000:rwx,g::rx", p)
    run("setfacl", "-d", "-m", "u:1000:rwx,g:2000:rx,o::-", p)
    write(os.path.join(p, "inherits-default-acl"), b"inherited")
    os.mkdir(os.path.join(p, "subdir-inherits"))
    p = j("xattrs", "on-symlink")
    os.symlink("target", p)
    setx(p, "trusted.on-link", b"link attr")
    p = j("xattrs", "on-dir")
    os.mkdir(p)
    setx(p, "user.dir-attr", b"d")

    # ---- directories in every form ----
    os.mkdir(j("dirs"))
    os.mkdir(j("dirs", "empty"))
    for name, count in [("shortform", 3), ("block", 50), ("leaf", 400), ("node", 12000 if full else 3000)]:
        d = j("dirs", name)
        os.mkdir(d)
        for i in range(count):
            open(os.path.join(d, f"{name}-entry-{i:06d}{'x' * (i % 23)}"), "wb").close()
    deep = j("dirs", "deep")
    for i in range(20):
        deep = os.path.join(deep, f"level{i}")
    os.makedirs(deep)
    write(os.path.join(deep, "bottom"), b"bottom of the tree")

    # ---- a file with many extents: every other block written (bmbt format) ----
    os.mkdir(j("extents"))
    if full:
        # Written whole, then every other block punched: 10,240 one-block extents, and the punched
        # blocks leave free space fragmented right where the big directory below will grow.
        nblocks = 20480
        with open(j("extents", "many-extents"), "wb") as f:
            f.write(data(60, nblocks * bs))
            f.flush()
            os.fsync(f.fileno())
        cmds = []
        for b in range(1, nblocks, 2):
            cmds += ["-c", f"fpunch {b * bs} {bs}"]
        run("xfs_io", *cmds, j("extents", "many-extents"))
    else:
        nblocks = min(2000, (32 << 20) // bs)
        with open(j("extents", "many-extents"), "wb") as f:
            for b in range(0, nblocks, 2):
                f.seek(b * bs)
                f.write(data(61 + b, bs))

    if full:
        # 100,000+ entries; created in the same AG as the fragmented file, so the directory's
        # blocks land in one-block holes and its data fork goes to btree format.
        # A file inside the new directory has its inode, and so its blocks, in the directory's AG: written whole
        # and punched every other block, it leaves one-block holes right where the directory's blocks go.
        big = j("extents", "big-dir")
        os.mkdir(big)
        fragmenter = os.path.join(big, "fragmenter")
        allocated_block(fragmenter, data(62, 8192 * bs))
        run("xfs_io", *[a for b in range(1, 8192, 2) for a in ("-c", f"fpunch {b * bs} {bs}")], fragmenter)
        for i in range(100_000):
            open(os.path.join(big, f"e{i:06d}-{'n' * (i % 31)}"), "wb").close()
        os.remove(fragmenter)
        # An inode's data fork holds at most (inode size - core) / 16 extent records: with more, it is a btree.
        if extent_count(big) <= 64:
            raise SystemExit(f"fill.py: /extents/big-dir has only {extent_count(big)} extents: its fork is not a btree")

    # ---- owners and modes ----
    os.mkdir(j("owners"))
    for name, uid, gid, mode in [("u1000", 1000, 1000, 0o640), ("u4e9", 4000000000, 4000000000, 0o600),
                                 ("nobody", 65534, 65534, 0o444), ("setuid", 0, 0, 0o4755),
                                 ("setgid", 1000, 2000, 0o2711), ("none", 1, 1, 0o000)]:
        p = j("owners", name)
        write(p, name.encode(), mode)
        os.chown(p, uid, gid)
        os.chmod(p, mode)
    os.mkdir(j("owners", "sticky-dir"))
    os.chmod(j("owners", "sticky-dir"), 0o1777)
    os.symlink("u1000", j("owners", "link-owned"))
    os.lchown(j("owners", "link-owned"), 1234, 5678)

    # ---- timestamps: ns precision, before 1970, after 2038 (bigtime) ----
    os.mkdir(j("times"))
    for name, a, m in [("ns", 1_600_000_000 * NS + 123_456_789, 1_600_000_001 * NS + 987_654_321),
                       ("epoch", 0, 0),
                       ("pre-1970", -1_234_567_890 * NS + 500_000_000, -1 * NS + 1),
                       ("post-2038", 4_102_444_800 * NS + 999_999_999, 2_147_483_648 * NS + 1),
                       ("far-future", 15_000_000_000 * NS + 7, 16_000_000_000 * NS)]:
        p = j("times", name)
        write(p, name.encode())
        os.utime(p, ns=(a, m))
    os.symlink("ns", j("times", "link-times"))
    os.utime(j("times", "link-times"), ns=(1_000_000_000 * NS + 1, 1_000_000_001 * NS + 2), follow_symlinks=False)
    os.mkdir(j("times", "dir-times"))
    os.utime(j("times", "dir-times"), ns=(900_000_000 * NS + 5, 900_000_000 * NS + 6))
    os.utime(j("times"), ns=(1_700_000_000 * NS, 1_700_000_000 * NS + 42))

    os.sync()


def main(argv):
    if len(argv) != 3 or argv[2] not in ("full", "small"):
        print(__doc__, file=sys.stderr)
        return 2
    fill(argv[1], argv[2])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
