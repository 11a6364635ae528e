# XFS_IOC_START_COMMIT and XFS_IOC_COMMIT_RANGE for FileAttrIoctlTests. "prepare ROOT" makes the files (the kernel,
# on the base volume): c1..c6 (file 2 of each commit) and t1..t6 (file 1), 16 KiB each; "run ROOT" (a kernel XFS
# mount or an xfswin FUSE mount of a copy; xfs_io's startupdate and commitupdate refuse other file systems than XFS,
# so the ioctls are called here) prints each call's result and the freshness records START_COMMIT returns, then
# every file's SHA-256.
import fcntl, hashlib, os, random, struct, sys

mode, root = sys.argv[1], sys.argv[2]
P = lambda n: os.path.join(root, n)
START, COMMIT = 0x80585882, 0x40585883

def start(name, flags=os.O_RDWR):
    fd = os.open(P(name), flags)
    try:
        out = fcntl.ioctl(fd, START, bytes(88))
    except OSError as e:
        print("start", name, "errno", e.errno); return None
    finally:
        os.close(fd)
    print("start", name, out[:40].hex(), out[40:].hex())
    return out[40:]

def commit(f1, f2, fresh, o1=0, o2=0, ln=16384, fl=0, pad=0, fd1=None):
    a = os.open(P(f1), os.O_RDWR); b = os.open(P(f2), os.O_RDWR)
    try:
        fcntl.ioctl(b, COMMIT, struct.pack("iIQQQQ", a if fd1 is None else fd1, pad, o1, o2, ln, fl) + fresh); res = "ok"
    except OSError as e:
        res = "errno %d" % e.errno
    finally:
        os.close(a); os.close(b)
    print("commit", f1, f2, o1, o2, ln, fl, pad, res)

def run():
    f = start("c1")
    commit("t1", "c1", f)                               # unchanged: exchanged
    commit("t1", "c1", f)                               # the commit itself moved c1's times: busy
    f = start("c2", os.O_RDONLY)                        # START_COMMIT needs no write access
    os.pwrite(os.open(P("c2"), os.O_WRONLY), b"changed", 100)
    commit("t2", "c2", f)                               # written since: busy
    f = start("c3")
    os.utime(P("c3"), ns=(10**9, 10**9))
    commit("t3", "c3", f)                               # times set since: busy
    f = start("c4")
    commit("t4", "c1", f)                               # another file's record: busy
    commit("t4", "c4", f[:44] + b"\0\0\0\0")            # no magic: busy
    commit("t4", "c4", b"\1" + f[1:])                   # another file system: busy
    commit("t4", "c4", b"\1" + f[1:], fd1=-1)           # busy before the descriptor is looked at
    commit("t4", "c4", f, fd1=-1)                       # bad descriptor
    commit("t4", "c4", f, fl=16)                        # unknown flag
    commit("t4", "c4", f, o1=100)                       # unaligned: the range checks come first
    commit("t4", "c4", f, pad=7)                        # the padding is not checked: exchanged
    f = start("c5")
    os.utime(P("c5"), ns=(10**9, 10**9))
    commit("t5", "c5", f, ln=0)                         # an empty range is not checked for freshness
    commit("t5", "c5", f, fl=4)                         # a dry run is: busy
    f = start("c6")
    commit("t6", "c6", f, fl=4)                         # fresh dry run
    commit("t6", "c6", f, o1=4096, o2=8192, ln=4096, fl=2)  # a dry run leaves the record fresh; DSYNC
    commit("t6", "c6", f, fl=1)                         # TO_EOF after that commit: busy
    start("d", os.O_RDONLY)                             # any inode can be sampled
    for i in range(1, 7):
        for name in ("c%d" % i, "t%d" % i):
            print(name, hashlib.sha256(open(P(name), "rb").read()).hexdigest())

def prepare():
    rng = random.Random(5)
    for i in range(1, 7):
        for name in ("c%d" % i, "t%d" % i):
            with open(P(name), "wb") as f: f.write(bytes(rng.getrandbits(8) for _ in range(16384)))
    os.sync()

(run if mode == "run" else prepare)()
