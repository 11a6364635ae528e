#!/usr/bin/env python3
# The quota enforcement scenario of QuotaEnforcementTests, run as root against a mount point: the kernel's XFS
# mounted with uquota,gquota,pquota (in user-mode Linux, through quota-guest.sh edquot) and `xfswin mount -o rw`
# (on the host). Each step runs in a child process as an ordinary user (setgroups, setgid, setuid) and goes on
# until the file system refuses; the outcome of every step (how far it got, the errno name) is written as JSON
# to the file named second, so the two runs can be compared.
#
# usage: quota-edquot.py MOUNTPOINT RESULT.json
#
# The volume (quota-guest.sh limits) has /w (mode 0777, owned by 1000:1000), /pj (mode 0777, project 20,
# inherited) and /u1001 (100000 bytes of user 1001, past its soft block limit with an expired timer); limits:
# user 1000 bsoft=256k bhard=1m isoft=5 ihard=12, user 1002 isoft=3 ihard=6, user 1001 bsoft=64k bhard=10m,
# user 1006 bhard=640k, user 1007 bhard=600k, group default (id 0) bhard=2m, project 20 ihard=3, project 30 bhard=64k.
import errno
import fcntl  # imported as root: an ordinary user may not read the interpreter's library
import json
import os
import struct
import sys

M, RESULT = sys.argv[1], sys.argv[2]
BLOCK = b"\xab" * 4096
LIMIT = 100000


def as_user(uid, gid, step, groups=()):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            os.setgroups(list(groups))
            os.setgid(gid)
            os.setuid(uid)
            outcome = step()
        except OSError as e:
            outcome = ["unexpected", errno.errorcode.get(e.errno, str(e.errno))]
        os.write(w, json.dumps(outcome).encode())
        os._exit(0)
    os.close(w)
    data = b""
    while True:
        chunk = os.read(r, 65536)
        if not chunk:
            break
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    return json.loads(data)


def err(e):
    return errno.errorcode.get(e.errno, str(e.errno))


def write_until(path, at=0):
    """4 KiB writes one after another until one fails: the blocks written and the errno."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    n = 0
    try:
        while n < LIMIT:
            done = os.pwrite(fd, BLOCK, at + n * 4096)
            if done != 4096:
                return [n, "short write of %d" % done]
            n += 1
        return [n, "no error"]
    except OSError as e:
        return [n, err(e)]
    finally:
        os.close(fd)


def create_until(directory, prefix):
    """Empty files made one after another until one fails: how many and the errno."""
    n = 0
    try:
        while n < 1000:
            os.close(os.open(os.path.join(directory, "%s%d" % (prefix, n)), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
            n += 1
        return [n, "no error"]
    except OSError as e:
        return [n, err(e)]


def attempt(action):
    try:
        action()
        return "ok"
    except OSError as e:
        return err(e)


def truncate(path, size):
    fd = os.open(path, os.O_WRONLY)
    try:
        os.ftruncate(fd, size)
    finally:
        os.close(fd)


w, pj = os.path.join(M, "w"), os.path.join(M, "pj")
steps = [
    # Root fills a short-form directory of user 1000's to the last entry its inode holds (no blocks: nothing charged).
    ("root fills a short-form directory of user 1000", 0, 0, lambda: attempt(lambda: fill_directory(os.path.join(w, "sf"), 18, 1000))),
    # User 1000 writes to its hard block limit (crossing the soft one starts its block timer).
    ("u1000 writes", 1000, 1000, lambda: write_until(os.path.join(w, "f"))),
    # At the hard block limit a create is refused for the blocks it reserves, inodes to spare or not.
    ("u1000 creates at its block limit", 1000, 1000, lambda: attempt(lambda: os.close(os.open(os.path.join(w, "g"), os.O_WRONLY | os.O_CREAT, 0o644)))),
    ("u1000 mkdir at its block limit", 1000, 1000, lambda: attempt(lambda: os.mkdir(os.path.join(w, "d")))),
    ("u1000 symlink at its block limit", 1000, 1000, lambda: attempt(lambda: os.symlink("t", os.path.join(w, "sl")))),
    # A user xattr on an inode without an attribute fork reserves the fork's blocks; removing one reserves too.
    ("u1000 setxattr at its block limit", 1000, 1000, lambda: attempt(lambda: os.setxattr(os.path.join(w, "f"), "user.a", b"v"))),
    ("u1000 removexattr at its block limit", 1000, 1000, lambda: attempt(lambda: os.removexattr(os.path.join(w, "f"), "user.a"))),
    # A hard link in its own directory: refused the reservation, it still goes in where the entry fits.
    ("u1000 links at its block limit", 1000, 1000, lambda: attempt(lambda: os.link(os.path.join(w, "f"), os.path.join(w, "l")))),
    # A rename reserves what the target directory may need: refused, it goes ahead where the entry fits, and is
    # refused (EDQUOT) where the target directory must grow a block (its 19th entry no longer fits in the inode).
    ("u1000 renames at its block limit", 1000, 1000, lambda: attempt(lambda: os.rename(os.path.join(w, "l"), os.path.join(w, "l2")))),
    ("u1000 renames into a full short-form directory at its block limit", 1000, 1000,
     lambda: attempt(lambda: os.rename(os.path.join(w, "l2"), os.path.join(w, "sf", "n000000018")))),
    # Overwriting what is allocated needs nothing more.
    ("u1000 overwrites", 1000, 1000, lambda: attempt(lambda: write_over(os.path.join(w, "f")))),
    # Freed blocks make room again.
    ("u1000 truncates to 8 KiB", 1000, 1000, lambda: attempt(lambda: truncate(os.path.join(w, "f"), 8192))),
    # A symlink whose target needs a block of its own, a directory.
    ("u1000 remote symlink", 1000, 1000, lambda: attempt(lambda: os.symlink("t" * 900, os.path.join(w, "rl")))),
    ("u1000 mkdir", 1000, 1000, lambda: attempt(lambda: os.mkdir(os.path.join(w, "d")))),
    ("u1000 creates to its hard inode limit", 1000, 1000, lambda: create_until(w, "e")),
    ("u1000 setxattr", 1000, 1000, lambda: attempt(lambda: os.setxattr(os.path.join(w, "f"), "user.a", b"v" * 100))),
    # User 1002: its own inode limits.
    ("u1002 creates", 1002, 1002, lambda: create_until(w, "i")),
    # User 1001: past its soft block limit with the grace time over, no block more, though far from its hard limit.
    ("u1001 writes past an expired soft limit", 1001, 1001, lambda: write_until(os.path.join(w, "s"))),
    ("u1001 appends", 1001, 1001, lambda: write_until(os.path.join(M, "u1001"), 100000)),
    # User 1000 past its soft block limit, under its hard one: its block timer runs at the end.
    ("u1000 writes 300 KiB", 1000, 1000, lambda: attempt(lambda: write_blocks(os.path.join(w, "f"), 2, 75))),
    # fallocate reserves its whole range and a mapping split: 800 KiB no longer fits under the hard limit, 100 KiB does.
    ("u1000 fallocates 800 KiB", 1000, 1000, lambda: attempt(lambda: fallocate(os.path.join(w, "f"), 400 * 1024, 800 * 1024))),
    ("u1000 fallocates 100 KiB", 1000, 1000, lambda: attempt(lambda: fallocate(os.path.join(w, "f"), 400 * 1024, 100 * 1024))),
    # User 1003 in group 1000, which has no limits of its own: the group default (2 MiB) applies.
    ("u1003 in group 1000 writes", 1003, 1000, lambda: write_until(os.path.join(w, "h"))),
    # A chgrp to a full group by a member: the file's blocks must fit the group's quota; an empty file's do.
    ("u1003 chgrp of a written file to full group 1000", 1003, 1003, lambda: attempt(lambda: chgrp_written(os.path.join(w, "h2"), 10)), [1000]),
    ("u1003 chgrp of an empty file to full group 1000", 1003, 1003, lambda: attempt(lambda: chgrp_written(os.path.join(w, "h3"), 0)), [1000]),
    # Project 20 (its directory counts): ENOSPC, not EDQUOT.
    ("u1004 creates in project 20", 1004, 1004, lambda: create_until(pj, "x")),
    # A rename leaving a whiteout (root only): the whiteout is a new inode of project 20, which has none to spare.
    ("root renames with a whiteout in project 20", 0, 0, lambda: attempt(lambda: rename_whiteout(os.path.join(pj, "x0"), os.path.join(pj, "y0")))),
    # FS_IOC_FSSETXATTR moving a file to another project: the new project's quota must take the file's blocks and its
    # inode (ENOSPC), unless the caller is privileged (CAP_FOWNER: root's move is forced past the limit).
    ("u1005 moves a 4-block file to project 20 at its inode limit", 1005, 1005, lambda: attempt(lambda: set_project(os.path.join(w, "m1"), 4, 20))),
    ("u1005 moves a 32-block file to project 30", 1005, 1005, lambda: attempt(lambda: set_project(os.path.join(w, "m2"), 32, 30))),
    ("u1005 moves a 4-block file to project 30", 1005, 1005, lambda: attempt(lambda: set_project(os.path.join(w, "m3"), 4, 30))),
    ("root moves a 32-block file to project 30", 0, 0, lambda: attempt(lambda: set_project(os.path.join(w, "m4"), 32, 30))),
    # copy_file_range shares blocks piece by piece, each reserving its quota (xfs_reflink_remap_extent): of root's
    # 64 blocks, hole, 64 blocks, hole, 64 blocks, user 1006 (160 blocks) gets the first two pieces and the hole
    # between; the call returns the bytes remapped.
    ("root writes three extents with holes between", 0, 0, lambda: attempt(lambda: write_with_holes(os.path.join(w, "src"), 194, [64, 129]))),
    # The targets of the copies past the limit are made first: a create reserves blocks for the directory and inodes.
    ("u1006 creates two empty files", 1006, 1006, lambda: attempt(lambda: create_empty(os.path.join(w, "c1006b"), os.path.join(w, "c1006c")))),
    ("u1006 copy_file_range of 194 blocks past its block limit", 1006, 1006, lambda: copy_range(os.path.join(w, "src"), os.path.join(w, "c1006"))),
    # With 32 blocks left, the first 64-block piece does not fit: nothing is remapped, and the kernel falls back to
    # copying the bytes (a splice through the page cache), which goes on until the quota refuses a write. At the limit
    # the copy has nothing to give and fails.
    ("u1006 copy_file_range with its first piece past its block limit", 1006, 1006, lambda: copy_range(os.path.join(w, "src"), os.path.join(w, "c1006b"))),
    ("u1006 copy_file_range at its block limit", 1006, 1006, lambda: copy_range(os.path.join(w, "src"), os.path.join(w, "c1006c"))),
    # User 1007 (150 blocks) is left 22 after the same remap. Where the kernel falls back to copying, it writes 64 KiB
    # at a time through the page cache (Linux 6.1's pipe of 16 pages) and stops at the first piece whose blocks do not
    # all fit (16 blocks here); xfswin copies block by block up to the limit (22). What both promise is checked: a short
    # copy, within the limit, of the source's first bytes. The copy is removed after, so the usage reports still agree.
    ("u1007 creates two empty files", 1007, 1007, lambda: attempt(lambda: create_empty(os.path.join(w, "c1007a"), os.path.join(w, "c1007b")))),
    ("u1007 copy_file_range of 194 blocks past its block limit", 1007, 1007, lambda: copy_range(os.path.join(w, "src"), os.path.join(w, "c1007a"))),
    ("u1007 copy_file_range with its first piece past its block limit, 22 blocks left", 1007, 1007, lambda: copy_range_within(os.path.join(w, "src"), os.path.join(w, "c1007b"), 22 * 4096)),
    ("u1005 moves a 1-block file to project 30 past its limit", 1005, 1005, lambda: attempt(lambda: set_project(os.path.join(w, "m5"), 1, 30))),
    ("u1005 moves an empty file to project 30 past its limit", 1005, 1005, lambda: attempt(lambda: set_project(os.path.join(w, "m6"), 0, 30))),
]


def fill_directory(path, count, owner):
    """A directory owned by OWNER holding COUNT empty files named n000000000 and on."""
    os.mkdir(path)
    os.chown(path, owner, owner)
    for i in range(count):
        os.close(os.open(os.path.join(path, "n%09d" % i), os.O_WRONLY | os.O_CREAT, 0o644))


def create_empty(*paths):
    for path in paths:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o644))


def set_project(path, blocks, project):
    """Writes a file of BLOCKS blocks, then sets its project id through FS_IOC_FSSETXATTR."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        for i in range(blocks):
            os.pwrite(fd, BLOCK, i * 4096)
        a = bytearray(fcntl.ioctl(fd, 0x801C581F, bytes(28)))
        struct.pack_into("<I", a, 12, project)
        fcntl.ioctl(fd, 0x401C5820, bytes(a))
    finally:
        os.close(fd)


def chgrp_written(path, blocks):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        for i in range(blocks):
            os.pwrite(fd, BLOCK, i * 4096)
    finally:
        os.close(fd)
    os.chown(path, -1, 1000)


def rename_whiteout(old, new):
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    at_fdcwd, rename_whiteout_flag = -100, 4
    if libc.renameat2(at_fdcwd, old.encode(), at_fdcwd, new.encode(), rename_whiteout_flag) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def fallocate(path, offset, length):
    fd = os.open(path, os.O_WRONLY)
    try:
        os.posix_fallocate(fd, offset, length)
    finally:
        os.close(fd)


def write_blocks(path, first, count):
    fd = os.open(path, os.O_WRONLY)
    try:
        for i in range(first, first + count):
            os.pwrite(fd, BLOCK, i * 4096)
    finally:
        os.close(fd)



def write_with_holes(path, blocks, holes):
    """Writes BLOCKS blocks, then punches the blocks HOLES out (a write past EOF would zero the gap in the page
    cache, and the kernel would write those zeros)."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.pwrite(fd, BLOCK * blocks, 0)
        for hole in holes:
            # FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE
            if libc.fallocate(fd, 3, ctypes.c_long(hole * 4096), ctypes.c_long(4096)) != 0:
                e = ctypes.get_errno()
                raise OSError(e, os.strerror(e))
    finally:
        os.close(fd)


def copy_range(source, target):
    """copy_file_range of the whole of SOURCE into TARGET (made if missing): the count returned, TARGET's size and whether its bytes
    are SOURCE's first ones, or the errno."""
    fi = os.open(source, os.O_RDONLY)
    fo = os.open(target, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        n = os.copy_file_range(fi, fo, os.fstat(fi).st_size, 0, 0)
        size = os.fstat(fo).st_size
        return [n, size, os.pread(fo, size, 0) == os.pread(fi, size, 0)]
    except OSError as e:
        return ["error", err(e)]
    finally:
        os.close(fi)
        os.close(fo)


def copy_range_within(source, target, room):
    """copy_range, then TARGET removed: whether the copy was short but not empty, its size the count returned, its
    bytes the source's first ones, and the count within ROOM bytes."""
    r = copy_range(source, target)
    os.unlink(target)
    if r[0] == "error":
        return r
    n, size, same = r
    return [0 < n < os.stat(source).st_size, n == size, same, n <= room]


def write_over(path):
    fd = os.open(path, os.O_WRONLY)
    try:
        for i in range(4):
            os.pwrite(fd, BLOCK, i * 4096)
    finally:
        os.close(fd)


results = []
for name, uid, gid, step, *groups in steps:
    results.append([name, as_user(uid, gid, step, *groups)])
with open(RESULT, "w") as f:
    json.dump(results, f, indent=1)
