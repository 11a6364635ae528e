#!/usr/bin/env python3
"""V4 oracle images: a mkfs.xfs protofile, and a manifest built from what the protofile describes.

The kernel here cannot mount V4 volumes, so nothing can be stat()ed. The manifest therefore comes from
the description mkfs.xfs was given (names, types, modes, owners, sizes, content hashes, link targets,
device numbers, directory entries), and xfs_db supplies only what mkfs chooses itself (inode numbers,
timestamps, block counts). Every described field is cross-checked against xfs_db; any disagreement
fails the build.

  proto.py generate DATADIR PROTOFILE DESC.json
  proto.py manifest DESC.json IMAGE XFS_DB OUT.json
"""
import calendar
import hashlib
import json
import os
import random
import re
import subprocess
import sys
import time

S_IFMT = 0o170000
TYPE_BITS = {"file": 0o100000, "dir": 0o040000, "symlink": 0o120000, "chardev": 0o020000,
             "blockdev": 0o060000, "fifo": 0o010000}
PROTO_CHAR = {"file": "-", "dir": "d", "symlink": "l", "chardev": "c", "blockdev": "b", "fifo": "p"}


def node(name, kind, perm, uid=0, gid=0, **kw):
    n = {"name": name, "type": kind, "perm": perm, "uid": uid, "gid": gid}
    n.update(kw)
    return n


def tree():
    rnd = random.Random(4)
    files = [node(f"size-{n}", "file", 0o644, content_seed=n, size=n)
             for n in [0, 1, 100, 4095, 4096, 4097, 65537, 1 << 20, 3 * (1 << 20) + 5]]
    dirs = [node("empty", "dir", 0o755, children=[])]
    for name, count in [("shortform", 3), ("block", 50), ("leaf", 400), ("node", 3000)]:
        dirs.append(node(name, "dir", 0o755, children=[
            node(f"{name}-e{i:05d}{'x' * (i % 19)}", "file", 0o644, content_seed=None, size=0) for i in range(count)]))
    deep = node("bottom", "file", 0o600, content_seed=77, size=777)
    for i in reversed(range(12)):
        deep = node(f"level{i}", "dir", 0o755, children=[deep])
    dirs.append(deep)
    symlinks = [
        node("short", "symlink", 0o777, target="../files/size-100"),
        node("absolute", "symlink", 0o777, target="/absolute/elsewhere"),
        node("remote-1000", "symlink", 0o777, target="r/" * 500),
        node("remote-1023", "symlink", 0o777, target="z" * 1023),
    ]
    special = [
        node("null", "chardev", 0o666, major=1, minor=3),
        node("loop200", "blockdev", 0o660, 0, 6, major=7, minor=200),
        node("bigdev", "chardev", 0o600, major=300, minor=70000),
        node("fifo", "fifo", 0o640, 1000, 1000),
    ]
    owners = [
        node("u1000", "file", 0o640, 1000, 1000, content_seed=5, size=10),
        node("u4e9", "file", 0o600, 4000000000, 4000000000, content_seed=6, size=11),
        node("setuid", "file", 0o4755, 0, 0, content_seed=7, size=12),
        node("setgid", "file", 0o2711, 1000, 2000, content_seed=8, size=13),
        node("none", "file", 0o000, 1, 1, content_seed=9, size=14),
        node("owned-dir", "dir", 0o750, 1000, 100, children=[]),
    ]
    names = [node(n, "file", 0o644, content_seed=1000 + i, size=10 + i)
             for i, n in enumerate(["héllo-wörld", "日本語のファイル名", "n" * 255, "é" * 127 + "x", ".hidden", "-dash"])]
    rnd.shuffle(names)
    return node("", "dir", 0o755, children=[
        node("files", "dir", 0o755, children=files),
        node("dirs", "dir", 0o755, children=dirs),
        node("symlinks", "dir", 0o755, children=symlinks),
        node("special", "dir", 0o755, children=special),
        node("owners", "dir", 0o755, children=owners),
        node("names", "dir", 0o755, children=names),
    ])


def content(n):
    if n.get("content_seed") is None:
        return b""
    return random.Random(n["content_seed"]).randbytes(n["size"])


def generate(datadir, protofile, descfile):
    os.makedirs(datadir, exist_ok=True)
    root = tree()
    lines = ["xfswin-oracle", "0 0"]
    counter = [0]

    def mode_token(n):
        perm = n["perm"]
        return (PROTO_CHAR[n["type"]] + ("u" if perm & 0o4000 else "-") + ("g" if perm & 0o2000 else "-")
                + format(perm & 0o777, "03o"))

    def emit(n, depth):
        ind = "  " * depth
        head = f"{ind}{n['name']} " if depth else ind
        spec = f"{mode_token(n)} {n['uid']} {n['gid']}"
        t = n["type"]
        if t == "file":
            data = content(n)
            counter[0] += 1
            src = os.path.join(datadir, f"f{counter[0]}")
            with open(src, "wb") as f:
                f.write(data)
            n["sha256"] = hashlib.sha256(data).hexdigest()
            n["size"] = len(data)
            lines.append(f"{head}{spec} {src}")
        elif t == "symlink":
            lines.append(f"{head}{spec} {n['target']}")
        elif t in ("chardev", "blockdev"):
            lines.append(f"{head}{spec} {n['major']} {n['minor']}")
        elif t == "fifo":
            lines.append(f"{head}{spec}")
        elif t == "dir":
            lines.append(f"{head}{spec}")
            for c in n["children"]:
                emit(c, depth + 1)
            lines.append(f"{ind}$")

    emit(root, 0)
    with open(protofile, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    with open(descfile, "w", encoding="utf-8") as f:
        json.dump(root, f)


# ---------------------------------------------------------------- manifest from description + xfs_db

def xfs_db(db, image, commands):
    args = [db, "-r"]
    for c in commands:
        args += ["-c", c]
    args.append(image)
    env = dict(os.environ, TZ="UTC", LC_ALL="C")
    r = subprocess.run(args, capture_output=True, env=env, check=False)
    if r.returncode != 0:
        raise SystemExit(f"proto.py: xfs_db failed: {r.stderr.decode(errors='replace')}")
    return r.stdout.decode("utf-8", errors="surrogateescape")


LS_LINE = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\S+)\s+0x[0-9a-f]+\s+(\d+)\s(.*) \((good|bad)\)$")


def parse_time(text):
    # xfs_db prints timestamps with ctime(3): "Sun Nov 22 03:47:51 2026" (TZ=UTC)
    return calendar.timegm(time.strptime(text.strip(), "%a %b %d %H:%M:%S %Y"))


def manifest(descfile, image, db, out):
    with open(descfile, encoding="utf-8") as f:
        root = json.load(f)
    bs = int(re.search(r"blocksize = (\d+)", xfs_db(db, image, ["sb 0", "print blocksize"])).group(1))
    root_ino = int(re.search(r"rootino = (\d+)", xfs_db(db, image, ["sb 0", "print rootino"])).group(1))

    # Pass 1: inode numbers of every path, from xfs_db's directory listings (which also cross-checks names).
    dirs = []

    def collect(n, path, ino, parent_ino):
        n["path"] = path
        n["ino"] = ino
        n["parent_ino"] = parent_ino
        if n["type"] == "dir":
            dirs.append(n)

    collect(root, b"", root_ino, root_ino)
    i = 0
    while i < len(dirs):
        d = dirs[i]
        i += 1
        listing = xfs_db(db, image, ["ls /" + d["path"].decode()])
        found = {}
        for line in listing.splitlines():
            if line.endswith(":") and not found:
                continue  # the "/path:" header
            m = LS_LINE.match(line)
            if not m:
                raise SystemExit(f"proto.py: cannot parse xfs_db ls line {line!r}")
            if m.group(6) != "good":
                raise SystemExit(f"proto.py: xfs_db reports a bad entry: {line!r}")
            found[m.group(5).encode("utf-8", "surrogateescape")] = int(m.group(2))
        if found.pop(b".", None) != d["ino"] or found.pop(b"..", None) != d["parent_ino"]:
            raise SystemExit(f"proto.py: '.' or '..' of /{d['path'].decode()} disagrees with xfs_db")
        want = {c["name"].encode(): c for c in d["children"]}
        if set(want) != set(found):
            raise SystemExit(f"proto.py: entries of /{d['path'].decode()} differ: described {sorted(want)[:5]}..., "
                             f"xfs_db {sorted(found)[:5]}...")
        for name, c in want.items():
            collect(c, (d["path"] + b"/" + name) if d["path"] else name, found[name], d["ino"])

    # Pass 2: per inode, what mkfs chose (times, blocks) and a cross-check of what we described.
    every = []

    def flatten(n):
        every.append(n)
        for c in n.get("children", []):
            flatten(c)

    flatten(root)
    fields = "core.mode core.uid core.gid core.nlinkv2 core.size core.nblocks core.atime.sec core.atime.nsec " \
             "core.mtime.sec core.mtime.nsec core.ctime.sec core.ctime.nsec"
    entries = []
    chunk = 200
    for start in range(0, len(every), chunk):
        part = every[start:start + chunk]
        cmds = []
        for n in part:
            cmds += [f"inode {n['ino']}", "print " + fields]
            if n["type"] in ("chardev", "blockdev"):
                cmds.append("print u.dev")
        text = xfs_db(db, image, cmds)
        blocks = re.split(r"(?m)^(?=core\.mode = )", text)[1:]
        if len(blocks) != len(part):
            raise SystemExit(f"proto.py: expected {len(part)} inode prints from xfs_db, got {len(blocks)}")
        for n, blk in zip(part, blocks):
            v = dict(re.findall(r"(?m)^(\S+) = (.*)$", blk))
            entries.append(to_entry(n, v, bs))
    entries.sort(key=lambda e: e["_order"])
    for e in entries:
        del e["_order"]
    doc = {"format": 1, "source": "protofile", "entries": entries}
    with open(out, "w", encoding="ascii") as f:
        json.dump(doc, f, separators=(",", ":"))
    print(f"proto.py: {len(entries)} entries (cross-checked with xfs_db) -> {out}")


ORDER = [0]


def to_entry(n, v, bs):
    path = n["path"]
    kind = n["type"]
    mode = TYPE_BITS[kind] | n["perm"]
    children = n.get("children", [])
    nlink = 2 + sum(1 for c in children if c["type"] == "dir") if kind == "dir" else 1
    if kind == "file":
        size = n["size"]
    elif kind == "symlink":
        size = len(n["target"].encode())
    else:
        size = None  # directory sizes are the format's business; taken from xfs_db below
    where = "/" + path.decode()

    def check(field, described, ondisk):
        if described != ondisk:
            raise SystemExit(f"proto.py: {where}: {field} described as {described}, xfs_db says {ondisk}")

    check("mode", oct(mode), oct(int(v["core.mode"], 8)))
    check("uid", n["uid"], int(v["core.uid"]))
    check("gid", n["gid"], int(v["core.gid"]))
    check("nlink", nlink, int(v["core.nlinkv2"]))
    disk_size = int(v["core.size"])
    if size is not None:
        check("size", size, disk_size)
    major = minor = 0
    if kind in ("chardev", "blockdev"):
        dev = int(v["u.dev"], 16)
        major, minor = (dev >> 18) & 0x3FFF, dev & 0x3FFFF
        check("rdev", (n["major"], n["minor"]), (major, minor))

    def ns(prefix):
        return parse_time(v[prefix + ".sec"]) * 1_000_000_000 + int(v[prefix + ".nsec"])

    ORDER[0] += 1
    return {
        "_order": ORDER[0],
        "path": path.hex(),
        "printable": "/" + path.decode("utf-8", "backslashreplace"),
        "type": kind,
        "mode": mode,
        "ino": n["ino"],
        "nlink": nlink,
        "uid": n["uid"],
        "gid": n["gid"],
        "size": disk_size,
        "blocks": int(v["core.nblocks"]) * (bs // 512),
        "atime_ns": ns("core.atime"),
        "mtime_ns": ns("core.mtime"),
        "ctime_ns": ns("core.ctime"),
        "btime_ns": None,
        "btime_known": True,
        "rdev_major": major,
        "rdev_minor": minor,
        "sha256": n.get("sha256"),
        "target": n["target"].encode().hex() if kind == "symlink" else None,
        "xattrs": {},
        "children": {c["name"].encode().hex(): c["ino"] for c in sorted(children, key=lambda c: c["name"].encode())}
        if kind == "dir" else None,
    }


def main(argv):
    if len(argv) == 5 and argv[1] == "generate":
        generate(argv[2], argv[3], argv[4])
    elif len(argv) == 6 and argv[1] == "manifest":
        manifest(argv[2], argv[3], argv[4], argv[5])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
