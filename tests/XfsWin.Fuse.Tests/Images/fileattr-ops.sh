#!/usr/bin/env bash
# The file attribute changes of FileAttrIoctlTests, run in ROOT (a kernel XFS mount or an xfswin FUSE mount of a copy of
# the same volume) with xfs_io 6.13: every command's output and exit status, paths relative to ROOT. xfs_io prints
# fsxattr.naextents and dioattr only for XFS (XFS-only ioctls), so those lines are left out, and inode numbers (where
# new inodes go is the allocator's choice).
# The volume holds (made by the kernel): e, f (8 KiB), g (setgid, group 1000), d/, imm/, rt/, app (6 bytes).
set -u
R=$1 X=${XFS_IO:-xfs_io}
cd "$R"
q() { echo "== $*"; "$@" 2>&1 | sed -e "s#$R/##g" | grep -v -e '^fsxattr.naextents' -e '^dioattr' -e '^stat.ino'; echo "rc=${PIPESTATUS[0]}"; }
# FS_IOC_FSSETXATTR straight (xfs_io refuses its cowextsize command on other file systems than XFS).
cow() {
    python3 - "$1" "$2" <<'PY'
import fcntl, os, struct, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
try:
    a = bytearray(fcntl.ioctl(fd, 0x801C581F, bytes(28)))
    x, ext, n, proj, c = struct.unpack_from("<5I", a)
    v = int(sys.argv[2])
    x = (x | 0x10000) if v else (x & ~0x10000)
    struct.pack_into("<5I", a, 0, x, ext, n, proj, v)
    fcntl.ioctl(fd, 0x401C5820, bytes(a))
    print("ok")
except OSError as e:
    print("errno", e.errno)
PY
}
# utimensat(2) on PATH with times given as "null" (no times) or two of now, omit, SECONDS; prints ok or the errno, and
# after a success whether atime and mtime are now (within a second of the call) or their seconds.
ut() {
    python3 - "$@" <<'PY'
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
class TS(ctypes.Structure): _fields_ = [("s", ctypes.c_long), ("ns", ctypes.c_long)]
def spec(v): return TS(0, (1 << 30) - 1) if v == "now" else TS(0, (1 << 30) - 2) if v == "omit" else TS(int(v), 0)
path, t0 = sys.argv[1], time.time_ns() - 10**9
times = None if sys.argv[2] == "null" else (TS * 2)(spec(sys.argv[2]), spec(sys.argv[3]))
rc = libc.utimensat(-100, path.encode(), times, 0)
st = os.stat(path)
show = lambda ns: "now" if ns >= t0 else str(ns // 10**9)
print("ok a=%s m=%s" % (show(st.st_atime_ns), show(st.st_mtime_ns)) if rc == 0 else "errno %d" % ctypes.get_errno())
PY
}
q $X -r -c "lsattr -v" -c stat e
q $X -c "chproj 42" -c "extsize 64k" -c lsproj -c extsize e
q cow e 131072
q cow f 12288
q cow f 0
q $X -r -c stat e f
q $X -c "chattr +i" e
q $X -r -c stat e
q $X -c stat e
q sh -c "echo x >> e"
q rm -f e
q ln e d/e2
q mv e d/
q setfattr -n user.y -v 1 e
q chmod 600 e
q touch e
q $X -r -c "chattr -i" -c "chattr +a" -c lsattr e
q sh -c "echo z >> e"
q sh -c "echo w > e"
q truncate -s 0 e
# may_setattr: append-only allows both times set to now and nothing else.
q ut e null
q ut e 3000 4000
q ut e now now
q ut e now omit
q ut e omit now
q ut e now 5000
q ut e 6000 now
q touch e
q touch -d @7000 e
q $X -r -c "chattr -a" -c "chattr +s +A +d +f" -c lsattr e
q ut e 3000 4000
q $X -c "chattr +i" imm
q touch imm/new
q ut imm null
q ut imm now now
q ut imm 1000 1000
q touch imm
q $X -c "chattr +a" app
q sh -c "echo more >> app"
q cat app
q $X -c "chproj -R 7" -c "chattr +P" -c "extsize 1m" -c stat d
q cow d 65536
mkdir d/sub; touch d/sub/x d/y; ln -s x d/sl
setfattr -n user.k -v 1 d/sub d/sub/x d/y  # as for d/f below
q $X -r -c lsproj -c lsattr -c extsize -c stat d/sub d/sub/x d/y
q ln f d/lnk
q mv f d/f
setfattr -n user.k -v 1 d/f  # new inodes: the kernel here gives each an attribute fork (an LSM is active), ours need one
q $X -c "extsize 4096" f
q $X -c "extsize 6000" d/y
q $X -c "extsize 0" d/y
q $X -c "chproj 70000" d/y
q $X -c "chattr +n" -c lsattr d/sub
# rtinherit (a volume without a realtime section keeps the flag); not beside a copy-on-write hint, which the kernel
# allows and xfs_repair does not.
q $X -c "chattr +t" -c lsattr rt
q $X -c "chattr +e" d/y
q $X -c "chattr +E" f
q $X -r -c stat d .
q $X -c "chproj 5" -c "chattr -P" d
q ls -l g
q $X -c "chproj 3" g
q ls -l g
