#!/usr/bin/env python3
"""What writes, truncates and chowns take from files with setuid, setgid or a file capability: run as root on a
mount (allow_other), with the unprivileged steps in children as uid/gid 65534; prints each file's mode and whether it
still has security.capability after each step, for comparison between the kernel's XFS and an xfswin mount."""
import os, struct, subprocess, sys, time

root = sys.argv[1]
CAP = struct.pack("<IIIII", 0x02000001, 1 << 10, 0, 0, 0)  # VFS_CAP_REVISION_2, effective; cap_net_bind_service


def p(name):
    return os.path.join(root, name)


def report(step, *names):
    for n in names:
        st = os.stat(p(n))
        try:
            has_cap = len(os.getxattr(p(n), "security.capability")) > 0
        except OSError:
            has_cap = False
        print(f"{step}: {n} mode {st.st_mode & 0o7777:04o} size {st.st_size} cap {has_cap}")


def as_nobody(action):
    pid = os.fork()
    if pid == 0:
        try:
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            action()
            os._exit(0)
        except OSError as e:
            print(f"  unprivileged step failed: {e.strerror}")
            os._exit(1)
    os.waitpid(pid, 0)


def make(name, mode, data=b"0123456789" * 100):
    with open(p(name), "wb") as f:
        f.write(data)
    os.chmod(p(name), mode)


def write_at(name, offset, data):
    fd = os.open(p(name), os.O_WRONLY)
    try:
        os.pwrite(fd, data, offset)
    finally:
        os.close(fd)


# Unprivileged writes and truncates of setuid/setgid files (group-executable or not; the writer is not in group 0).
make("w", 0o6777)
make("t", 0o6777)
make("o", 0o6777)
make("g", 0o2767)
make("x", 0o2777)
as_nobody(lambda: write_at("w", 5, b"abc"))
as_nobody(lambda: os.truncate(p("t"), 100))
as_nobody(lambda: os.close(os.open(p("o"), os.O_WRONLY | os.O_TRUNC)))
as_nobody(lambda: write_at("g", 0, b"g"))
as_nobody(lambda: os.truncate(p("x"), 10))
report("unprivileged", "w", "t", "o", "g", "x")

# fallocate past EOF and copy_file_range into setuid/setgid files, unprivileged.
make("f", 0o6777)
make("k", 0o6777)
make("src", 0o644)


def fallocate():
    fd = os.open(p("f"), os.O_WRONLY)
    try:
        os.posix_fallocate(fd, 0, 8192)
    finally:
        os.close(fd)


def copy_range():
    src = os.open(p("src"), os.O_RDONLY)
    dst = os.open(p("k"), os.O_WRONLY)
    try:
        os.copy_file_range(src, dst, 100, 0, 0)
    finally:
        os.close(src)
        os.close(dst)


as_nobody(fallocate)
as_nobody(copy_range)
report("unprivileged", "f", "k")

# Root keeps setuid and setgid on write and truncate (CAP_FSETID).
make("r", 0o6755)
write_at("r", 0, b"root")
os.truncate(p("r"), 50)
report("root", "r")

# A file capability goes at the first write, whoever writes; a later one set on a file already written goes too.
make("c", 0o755)
os.setxattr(p("c"), "security.capability", CAP)
report("capability set", "c")
write_at("c", 0, b"c")
report("written", "c")
os.setxattr(p("c"), "security.capability", CAP)
write_at("c", 1, b"d")
report("set again and written", "c")
os.setxattr(p("c"), "security.capability", CAP)
os.truncate(p("c"), 3)
report("set again and truncated", "c")

# setuid added to a file that writes have already found clean, then an unprivileged write.
make("s", 0o777)
as_nobody(lambda: write_at("s", 0, b"s"))
os.chmod(p("s"), 0o4777)
as_nobody(lambda: write_at("s", 1, b"t"))
report("setuid added later", "s")

# chown by root clears setuid, and setgid of group-executable files.
make("n", 0o6755)
make("m", 0o2745)
os.chown(p("n"), 1000, 1000)
os.chown(p("m"), 1000, 1000)
report("chown", "n", "m")

# Truncates of empty setuid/setgid files, unprivileged: ftruncate and open(O_TRUNC) take setuid and setgid, as does
# truncate(2) of a file with blocks preallocated past EOF, or to its own size; truncate(2) to 0 of an empty file that
# maps nothing keeps them on the kernel's XFS (xfs_setattr_size returns before the mode changes).
make("ef", 0o6777, b"")
make("eo", 0o6777, b"")
make("ep", 0o6777, b"")
make("es", 0o6777, b"12345")
make("ez", 0o6777, b"")
subprocess.run(["fallocate", "--keep-size", "--length", "8192", p("ep")], check=True)


def ftruncate(name, size):
    fd = os.open(p(name), os.O_WRONLY)
    try:
        os.ftruncate(fd, size)
    finally:
        os.close(fd)


as_nobody(lambda: ftruncate("ef", 0))
as_nobody(lambda: os.close(os.open(p("eo"), os.O_WRONLY | os.O_TRUNC)))
as_nobody(lambda: os.truncate(p("ep"), 0))
as_nobody(lambda: os.truncate(p("es"), 5))
as_nobody(lambda: os.truncate(p("ez"), 0))
report("empty truncated", "ef", "eo", "ep", "es", "ez")
# The truncate to the size it has gave back the blocks preallocated past EOF.
print(f"preallocated, truncated to its size: blocks {os.stat(p('ep')).st_blocks}")


def times_moved(name, action):
    """Whether the modification and change times moved when action ran (the kernel's clock ticks between the two)."""
    before = os.stat(p(name))
    time.sleep(0.02)
    action()
    after = os.stat(p(name))
    return f"mtime {after.st_mtime_ns != before.st_mtime_ns} ctime {after.st_ctime_ns != before.st_ctime_ns}"


# Which truncates set the times: truncate(2) only when the size moves; ftruncate and open(O_TRUNC) always.
make("tt", 0o644, b"12345")

print("truncate(2) to its size:", times_moved("tt", lambda: os.truncate(p("tt"), 5)))
print("truncate(2) longer:", times_moved("tt", lambda: os.truncate(p("tt"), 9)))
print("ftruncate to its size:", times_moved("tt", lambda: ftruncate("tt", 5)))
make("te", 0o644, b"")
print("open(O_TRUNC) of an empty file:", times_moved("te", lambda: os.close(os.open(p("te"), os.O_WRONLY | os.O_TRUNC))))
print("truncate(2) to 0 of an empty file:", times_moved("te", lambda: os.truncate(p("te"), 0)))
print("open(O_TRUNC) of a written file:", times_moved("tt", lambda: os.close(os.open(p("tt"), os.O_WRONLY | os.O_TRUNC))))


def open_errno(name, flags):
    try:
        os.close(os.open(p(name), flags))
        return "ok"
    except OSError as e:
        return e.strerror


# An append-only file is opened for writing with O_APPEND only, and never truncated at open (may_open), even read-only.
make("ao", 0o644, b"12345")
subprocess.run(["chattr", "+a", p("ao")], check=True)
for label, flags in [("O_WRONLY|O_APPEND", os.O_WRONLY | os.O_APPEND), ("O_WRONLY|O_APPEND|O_TRUNC", os.O_WRONLY | os.O_APPEND | os.O_TRUNC),
                     ("O_RDONLY|O_TRUNC", os.O_RDONLY | os.O_TRUNC), ("O_WRONLY", os.O_WRONLY)]:
    print(f"append-only open {label}: {open_errno('ao', flags)}")
print(f"append-only size {os.stat(p('ao')).st_size}")
subprocess.run(["chattr", "-a", p("ao")], check=True)
