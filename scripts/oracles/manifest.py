#!/usr/bin/env python3
"""Record what the Linux kernel shows for every entry of a mounted tree, as JSON.

Usage: manifest.py ROOT OUT.json

ROOT should be a volume mounted READ-ONLY, so reading files does not move their access times.
Symlinks are never followed. Per entry the manifest holds (see docs/testing.md):
  path (hex of the raw bytes, relative to ROOT, "" for ROOT itself) and a printable form,
  type, mode, ino, nlink, uid, gid, size, blocks (512-byte units), atime/mtime/ctime in ns,
  btime in ns (statx; null when the kernel does not report it), rdev major/minor,
  sha256 of regular files, symlink target (hex), every xattr (name -> hex value), and for
  directories the entries (name hex -> inode), "." and ".." excluded (their meaning is fixed:
  "." is the directory itself, ".." its parent, the root's ".." is the root).
"""
import ctypes
import ctypes.util
import hashlib
import json
import os
import stat
import struct
import sys

AT_FDCWD = -100
AT_SYMLINK_NOFOLLOW = 0x100
AT_STATX_DONT_SYNC = 0x4000
STATX_BASIC_STATS = 0x7FF
STATX_BTIME = 0x800

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_statx = getattr(_libc, "statx", None)
if _statx is not None:
    _statx.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_uint, ctypes.c_void_p]
    _statx.restype = ctypes.c_int


def birth_time_ns(path: bytes):
    """Creation time in ns from statx(2), or None when the file system does not report one."""
    if _statx is None:
        return None
    buf = ctypes.create_string_buffer(256)
    if _statx(AT_FDCWD, path, AT_SYMLINK_NOFOLLOW | AT_STATX_DONT_SYNC, STATX_BASIC_STATS | STATX_BTIME, buf) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), path)
    mask = struct.unpack_from("<I", buf.raw, 0)[0]
    if not mask & STATX_BTIME:
        return None
    sec, nsec = struct.unpack_from("<qI", buf.raw, 80)  # stx_btime
    return sec * 1_000_000_000 + nsec


TYPES = [
    (stat.S_ISREG, "file"),
    (stat.S_ISDIR, "dir"),
    (stat.S_ISLNK, "symlink"),
    (stat.S_ISCHR, "chardev"),
    (stat.S_ISBLK, "blockdev"),
    (stat.S_ISFIFO, "fifo"),
    (stat.S_ISSOCK, "socket"),
]


def type_name(mode: int) -> str:
    for test, name in TYPES:
        if test(mode):
            return name
    raise ValueError(f"unknown file type in mode {mode:o}")


def printable(rel: bytes) -> str:
    return "/" + rel.decode("utf-8", "backslashreplace").replace("\n", "\\n")


def sha256_of(path: bytes) -> str:
    h = hashlib.sha256()
    with open(path, "rb", buffering=0) as f:
        while True:
            chunk = f.read(1 << 20)
            if not chunk:
                break
            h.update(chunk)
    return h.hexdigest()


def xattrs_of(path: bytes) -> dict:
    out = {}
    for name in sorted(os.listxattr(path, follow_symlinks=False)):
        try:
            out[name] = os.getxattr(path, name, follow_symlinks=False).hex()
        except OSError as e:
            # A value the kernel lists but will not hand out (an empty security.capability: EINVAL) is recorded as
            # the text "!errno N", so that two trees still compare.
            out[name] = ("!errno %d" % e.errno).encode().hex()
    return out


def record(root: bytes, rel: bytes, hashes: dict) -> dict:
    full = os.path.join(root, rel) if rel else root
    st = os.lstat(full)
    kind = type_name(st.st_mode)
    entry = {
        "path": rel.hex(),
        "printable": printable(rel),
        "type": kind,
        "mode": st.st_mode,
        "ino": st.st_ino,
        "nlink": st.st_nlink,
        "uid": st.st_uid,
        "gid": st.st_gid,
        "size": st.st_size,
        "blocks": st.st_blocks,
        "atime_ns": st.st_atime_ns,
        "mtime_ns": st.st_mtime_ns,
        "ctime_ns": st.st_ctime_ns,
        "btime_ns": birth_time_ns(full),
        "rdev_major": os.major(st.st_rdev) if kind in ("chardev", "blockdev") else 0,
        "rdev_minor": os.minor(st.st_rdev) if kind in ("chardev", "blockdev") else 0,
        "sha256": None,
        "target": None,
        "xattrs": xattrs_of(full),
        "children": None,
    }
    if kind == "file":
        if st.st_ino not in hashes:
            hashes[st.st_ino] = sha256_of(full)
        entry["sha256"] = hashes[st.st_ino]
    elif kind == "symlink":
        entry["target"] = os.readlink(full).hex()
    elif kind == "dir":
        children = {}
        with os.scandir(full) as it:
            for d in it:
                children[d.name.hex()] = d.inode()
        entry["children"] = dict(sorted(children.items()))
    return entry


def walk(root: bytes):
    hashes = {}
    stack = [b""]
    while stack:
        rel = stack.pop()
        entry = record(root, rel, hashes)
        yield entry
        if entry["type"] == "dir":
            names = sorted(bytes.fromhex(h) for h in entry["children"])
            for name in reversed(names):
                stack.append(os.path.join(rel, name) if rel else name)


def main(argv):
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    root = os.fsencode(argv[1])
    out = argv[2]
    if not os.path.isdir(root):
        print(f"manifest.py: {argv[1]} is not a directory", file=sys.stderr)
        return 1
    sv = os.statvfs(root)
    if not sv.f_flag & os.ST_RDONLY:
        print(f"manifest.py: warning: {argv[1]} is mounted read-write; reading files may change atimes",
              file=sys.stderr)
    entries = list(walk(root))
    doc = {
        "format": 1,
        "source": "kernel",
        "entries": entries,
    }
    tmp = out + ".tmp"
    with open(tmp, "w", encoding="ascii") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")
    os.replace(tmp, out)
    print(f"manifest.py: {len(entries)} entries -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
