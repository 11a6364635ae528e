#!/usr/bin/env python3
# Two files appended in turn, 64 KiB at a time, 8 MiB each, through two open descriptors: prints, for each file, whether
# blocks past EOF are allocated while it is open (st_blocks counts more than its size), then closes them. (What a close
# gives back is not printed: FUSE sends RELEASE after close(2) returns, so a stat right after it may come first.)
# Usage: append-ops.py ROOT
import os, random, sys

root = sys.argv[1]
fds = [os.open(os.path.join(root, f"log{i}"), os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644) for i in range(2)]
rng = random.Random(7)
for _ in range(128):
    for fd in fds:
        os.write(fd, rng.randbytes(64 * 1024))
for i, fd in enumerate(fds):
    st = os.fstat(fd)
    print(f"log{i}: size {st.st_size}, past EOF while open {st.st_blocks * 512 > st.st_size}")
for fd in fds:
    os.close(fd)
