# XFS_IOC_FSGETXATTRA (the attribute fork's extent count in fsx_nextents) beside FS_IOC_FSGETXATTR, for
# FileAttrIoctlTests. "prepare ROOT" makes the files (the kernel, on the base volume): attribute forks in short form
# (al: under 16 bytes of attributes, al2: several), in extents (ae) and in a btree (ab: remote values, every other one
# removed, so that the fork maps many separate ranges); "run ROOT" (a kernel XFS mount or an xfswin FUSE mount of a
# copy) prints both ioctls' struct fsxattr for each, before and after a short-form fork grows.
import fcntl, os, struct, sys

mode, root = sys.argv[1], sys.argv[2]
P = lambda n: os.path.join(root, n)
NAMES = ("al", "al2", "ae", "ab", "plain", "dir")

def show(name):
    fd = os.open(P(name), os.O_RDONLY)
    try:
        for label, cmd in (("fsgetxattr", 0x801C581F), ("fsgetxattra", 0x801C582D)):
            try:
                x, ext, n, proj, cow = struct.unpack_from("<5I", fcntl.ioctl(fd, cmd, bytes(28)))
                print(name, label, hex(x), ext, n, proj, cow)
            except OSError as e:
                print(name, label, "errno", e.errno)
    finally:
        os.close(fd)

def run():
    for name in NAMES: show(name)
    os.setxattr(P("al2"), "user.more", b"m" * 40)
    os.setxattr(P("dir"), "user.more", b"m" * 40)
    show("al2"); show("dir")

def prepare():
    for n in ("al", "al2", "ae", "ab", "plain"):
        with open(P(n), "wb") as f: f.write(b"d" * 100)
    os.mkdir(P("dir"))
    os.setxattr(P("al"), "user.a", b"1")
    for i in range(5): os.setxattr(P("al2"), "user.n%d" % i, b"z" * 20)
    for i in range(3): os.setxattr(P("dir"), "user.n%d" % i, b"z" * 20)
    for i in range(40): os.setxattr(P("ae"), "user.k%d" % i, b"v" * 200)
    for i in range(200): os.setxattr(P("ab"), "user.r%d" % i, bytes([i % 256]) * 5000)
    for i in range(0, 200, 2): os.removexattr(P("ab"), "user.r%d" % i)
    os.sync()

(run if mode == "run" else prepare)()
