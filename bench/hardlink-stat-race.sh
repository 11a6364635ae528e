#!/bin/bash
# Measures FUSE's cached-link-count limitation (docs/fuse.md, "Read-write mounts"): one thread links a second name to a
# file and unlinks it, 20,000 times, while two threads stat the file's first name; counts the links refused (ENOENT,
# the kernel's cached count 0). Runs on a fresh 300 MB volume through `xfswin mount -o rw,OPTIONS`, and on the kernel's
# XFS for comparison. Needs root (loop mounts, FUSE) and what scripts/test.sh installs.
# Usage: bench/hardlink-stat-race.sh [MOUNT_OPTIONS ...]   (each a comma list added to rw; default: none)
#   e.g. bench/hardlink-stat-race.sh "" max_threads=1 entry_timeout=0
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" -eq 0 ] || { echo "Run as root: the script loop-mounts images and mounts FUSE." >&2; exit 1; }
mkfs=/var/cache/xfswin/xfsprogs-6.13/bin/mkfs.xfs
[ -x "$mkfs" ] || mkfs=mkfs.xfs
dotnet build src/XfsWin.Cli -v quiet -nologo > /dev/null
xfswin=(dotnet "$PWD/src/XfsWin.Cli/bin/Debug/net10.0/xfswin.dll")
work=$(mktemp -d /tmp/xfswin-hardlink.XXXXXX)
trap 'mountpoint -q "$work/mp" && { fusermount3 -u "$work/mp" 2>/dev/null || umount "$work/mp"; }; rm -rf "$work"' EXIT
mkdir "$work/mp"

race() {
  python3 - "$1" <<'PY'
import os, sys, threading
mp = sys.argv[1]
for d in ("d1", "d2"): os.mkdir(os.path.join(mp, d))
a = os.path.join(mp, "d1/a"); t = os.path.join(mp, "d2/t")
open(a, "w").write("x")
stop = False
def looker():
    while not stop:
        try: os.stat(a)
        except OSError: pass
threads = [threading.Thread(target=looker) for _ in range(2)]
for th in threads: th.start()
refused = 0
for i in range(20000):
    try: os.link(a, t)
    except OSError: refused += 1; continue
    os.unlink(t)
stop = True
for th in threads: th.join()
print(f"{refused} of 20000 links refused")
PY
}

fresh() { rm -f "$work/v.img"; truncate -s 300M "$work/v.img"; "$mkfs" -q -f "$work/v.img"; }

fresh
mount -o loop "$work/v.img" "$work/mp"
echo "kernel XFS: $(race "$work/mp")"
umount "$work/mp"
[ $# -eq 0 ] && set -- ""
for options in "$@"; do
  fresh
  "${xfswin[@]}" mount -o "rw${options:+,$options}" "$work/v.img" "$work/mp" > /dev/null 2>&1
  echo "xfswin mount -o rw${options:+,$options}: $(race "$work/mp")"
  fusermount3 -u "$work/mp"
  sleep 1
done
