# The XFS_IOC_EXCHANGE_RANGE calls of FileAttrIoctlTests. "prepare ROOT" makes the files (the kernel, on the base
# volume); "run ROOT" (a kernel XFS mount or an xfswin FUSE mount of a copy of it; xfs_io refuses its exchangerange
# command on other file systems than XFS, so the ioctl is called here) prints each call's result (ok or errno) and
# then every file's size and SHA-256.
import ctypes, fcntl, hashlib, os, random, struct, sys

libc = ctypes.CDLL(None, use_errno=True)
def fallocate(fd, mode, offset, length):
    if libc.fallocate(fd, mode, ctypes.c_long(offset), ctypes.c_long(length)) != 0:
        raise OSError(ctypes.get_errno(), 'fallocate')

mode, root = sys.argv[1], sys.argv[2]
P = lambda n: os.path.join(root, n)

def xr(f1, f2, o1, o2, ln, fl, m1=os.O_RDWR, m2=os.O_RDWR):
    a = os.open(P(f1), m1); b = os.open(P(f2), m2)
    try:
        fcntl.ioctl(b, 0x40285881, struct.pack("iIQQQQ", a, 0, o1, o2, ln, fl)); res = "ok"
    except OSError as e:
        res = "errno %d" % e.errno
    finally:
        os.close(a); os.close(b)
    print(f1, f2, o1, o2, ln, fl, res)

def run():
    xr("x1", "x2", 0, 0, 8192, 0)
    xr("x1", "x2", 4096, 8192, 4096, 4)          # dry run
    xr("x1", "x2", 0, 4096, 100, 0)              # short length inside both files
    xr("x1", "x2", 0, 0, 50000, 0)               # past x1's EOF
    xr("x1", "x3", 0, 0, 0, 1)                   # to EOF: the sizes trade too
    xr("x1", "x1", 0, 4096, 4096, 0)             # one file, apart
    xr("x1", "x1", 0, 0, 8192, 0)                # one file, overlapping
    xr("x2", "x1", 36864, 8192, 70000 - 36864, 0)
    xr("x3", "x2", 0, 0, 4096, 0, os.O_RDONLY)   # file 1 read-only
    xr("x3", "x2", 0, 0, 4096, 0, os.O_RDWR | os.O_APPEND)
    xr("x3", "x2", 4096, 65536, 40000 - 4096, 0)
    xr("x3", "x2", 0, 0, 4096, 16)               # unknown flag
    xr("x3", "x2", 1000, 0, 4096, 0)             # unaligned offset
    xr("x2", "x3", 65536, 36864, 70000 - 65536, 0)  # x2's partial last block to x3's EOF
    xr("x4", "x5", 0, 0, 300 * 4096, 8)          # FILE1_WRITTEN: only x4's written blocks move
    xr("x4", "x2", 0, 0, 16 * 4096, 2)           # DSYNC
    xr("x5", "x4", 0, 0, 0, 1)
    xr("d", "x2", 0, 0, 4096, 0, os.O_RDONLY)     # a directory
    # An empty range moves both files' mtime (and ctime); a dry run moves neither.
    for length, fl in ((0, 0), (4096, 4)):
        for n in ("x1", "x3"): os.utime(P(n), ns=(10**9, 10**9))
        xr("x1", "x3", 0, 0, length, fl)
        print("mtime moved", [os.stat(P(n)).st_mtime_ns != 10**9 for n in ("x1", "x3")])
    # file_remove_privs of both files: root keeps setuid and setgid, security.capability goes for everyone.
    xr("p1", "p2", 0, 0, 8192, 0)
    # An unprivileged caller (uid and gid 1000, no other groups) loses setuid, setgid with group execute, and setgid
    # of a group it is not in; setgid without group execute in its own group stays.
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        os.setgroups([]); os.setgid(1000); os.setuid(1000)
        xr("q1", "q2", 0, 0, 8192, 0)
        xr("q3", "q4", 0, 0, 8192, 0)
        xr("q5", "q6", 0, 0, 8192, 4)             # a dry run takes them too
        sys.stdout.flush()
        os._exit(0)
    os.waitpid(pid, 0)
    for name in PRIVS:
        st = os.stat(P(name))
        try:
            cap = os.getxattr(P(name), "security.capability").hex()
        except OSError as e:
            cap = "errno %d" % e.errno
        print(name, oct(st.st_mode), st.st_uid, st.st_gid, cap)
    for name in ("x1", "x2", "x3", "x4", "x5", *PRIVS):
        data = open(P(name), "rb").read()
        print(name, len(data), hashlib.sha256(data).hexdigest())


# Files for the privilege removal: name, owner, group, mode, with a capability (v2: effective, cap_net_bind_service).
PRIVS = {"p1": (0, 0, 0o6755, True), "p2": (0, 0, 0o2644, True), "q1": (1000, 1000, 0o4755, True), "q2": (1000, 1000, 0o2775, False),
         "q3": (1000, 2000, 0o2664, False), "q4": (1000, 1000, 0o2664, True), "q5": (1000, 1000, 0o6775, True), "q6": (1000, 1000, 0o644, False)}
CAPABILITY = struct.pack("<5I", 0x02000001, 1 << 10, 0, 0, 0)

def prepare():
    for name, (uid, gid, mode, cap) in PRIVS.items():
        with open(P(name), "wb") as f:
            f.write(bytes([len(name) + int(name[1])]) * 8192)
        os.chown(P(name), uid, gid)
        os.chmod(P(name), mode)
        if cap: os.setxattr(P(name), "security.capability", CAPABILITY)
    rng = random.Random(3)
    for name, size in (("x1", 40000), ("x2", 70000), ("x3", 12288), ("x4", 300 * 4096)):
        with open(P(name), "wb") as f:
            f.write(bytes(rng.getrandbits(8) for _ in range(size)))
    # x4: holes every other block; x5: preallocated (unwritten) blocks with data in some.
    fd = os.open(P("x4"), os.O_RDWR)
    for i in range(0, 300, 2): fallocate(fd, 0x2 | 0x1, i * 4096, 4096)
    os.close(fd)
    fd = os.open(P("x5"), os.O_RDWR | os.O_CREAT, 0o644)
    os.posix_fallocate(fd, 0, 300 * 4096)
    for i in range(0, 300, 3): os.pwrite(fd, bytes([i % 251]) * 4096, i * 4096)
    os.close(fd)
    os.sync()

(run if mode == "run" else prepare)()
