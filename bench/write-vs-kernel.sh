#!/usr/bin/env bash
# The write path against the kernel's own XFS, in one run, on fresh copies of one empty volume
# (mkfs.xfs defaults, 4 GiB sparse image):
#   write_1g   sequential write of a 1 GiB file plus fsync (dd bs=1M conv=fsync), and a raw O_DIRECT
#              write of a new file on the same disk for scale
#   create_20k 20,000 creates of 4 KiB files in 20 directories, then sync
#   create_2x10k  the same 20,000 creates by two processes at once, each in its own 10 directories, then sync:
#              with create_20k, how creates in separate directories scale with a second thread
#   unlink     unlink of $XFSWIN_BENCH_UNLINKS empty files (default 100,000, in 100 directories), then sync
#   rename     a rename-heavy run: 20,000 renames across the 20 directories of create_20k, then sync
#   untar      untar of a source tree (a tar of /usr/include made once: headers in nested directories)
#   sparse_3x10k  30,000 4 KiB writes into holes of three new files in turn (every other block of each, so each write
#              is a new extent and the files' mappings grow into extent btrees: a download of several files, VM disks
#              filled at random), then fsync of each
# The creates are also measured on the FUSE floor: bench/fuse-null.c, a FUSE server that stores nothing and answers
# at once, mounted as xfswin mounts and served by as many threads as xfswin's default. It receives the same requests,
# so its time is what the FUSE round trips alone cost on this machine, and no FUSE server can create faster.
# Each measurement mounts afresh (kernel: loop mount; xfswin: `xfswin mount -o rw`) with caches
# dropped, and times the operation plus its sync; the setup (the files to unlink or rename) and the
# unmount are not timed; the xfswin server's CPU time (user + system, from /proc) over the same span is printed too
# (the least of the runs): it moves far less with the machine's load than the wall time. After every xfswin run,
# xfs_repair -n must find nothing. For the creates, the
# kernel's log traffic is read from /sys/fs/xfs/<dev>/stats (log blocks written) and printed per create.
# Needs root, xfsprogs, fuse3 and libfuse3-dev, gcc, python3, the .NET SDK.
# Usage: bench/write-vs-kernel.sh [RUNS]     (default 1; the best of RUNS is reported)
#   XFSWIN_BENCH_ONLY="create_20k untar"  measures only those
#   XFSWIN_BENCH_UNLINKS=N                files for the unlink run (default 100000)
#   XFSWIN_BENCH_XFSWIN=DIR|FILE          measures the xfswin.dll built in DIR (another commit's build), or the
#                                         executable FILE (the Native AOT binary of scripts/publish-cli.sh, as xfswin
#                                         ships on Linux x64)
#   XFSWIN_BENCH_FUSE_OPTIONS=...         adds mount options to the xfswin mounts
#   XFSWIN_BENCH_URING=on|off|auto        FUSE over io_uring (default auto): xfswin is measured through /dev/fuse and,
#                                         when the kernel's switch (/sys/module/fuse/parameters/enable_uring) is on,
#                                         through io_uring as well; "on" turns the switch on for the run (and back)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-1}
only=${XFSWIN_BENCH_ONLY:-write_1g create_20k create_2x10k unlink rename untar sparse_3x10k}
unlinks=${XFSWIN_BENCH_UNLINKS:-100000}
[ "$(id -u)" -eq 0 ] || { echo "Run as root: it loop-mounts images and drops caches." >&2; exit 1; }
work=$(mktemp -d /var/tmp/xfswin-wbench-XXXXXX)
mnt=$(mktemp -d /tmp/xfswin-wbench-mnt-XXXXXX)
cleanup() {
  mountpoint -q "$mnt" && { umount "$mnt" 2>/dev/null || fusermount3 -u "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null || true; }
  [ -z "${uring_was:-}" ] || echo "$uring_was" > /sys/module/fuse/parameters/enable_uring
  rm -rf "$work"; rmdir "$mnt" 2>/dev/null || true
}
trap cleanup EXIT

. bench/lib.sh
bench_xfswin
echo "machine: $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')), kernel $(uname -r), $(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
extra_options=${XFSWIN_BENCH_FUSE_OPTIONS:+,$XFSWIN_BENCH_FUSE_OPTIONS}
# The transports xfswin is measured through: /dev/fuse always, FUSE over io_uring when the kernel has it switched on.
uring_switch=/sys/module/fuse/parameters/enable_uring
uring_was=""
sides="kernel xfswin"
case ${XFSWIN_BENCH_URING:-auto} in
  on)
    [ -w "$uring_switch" ] || { echo "This kernel has no FUSE over io_uring ($uring_switch is missing)." >&2; exit 1; }
    uring_was=$(cat "$uring_switch"); echo Y > "$uring_switch"; sides="kernel xfswin uring" ;;
  off) ;;
  auto)
    if [ "$(cat "$uring_switch" 2>/dev/null)" = Y ]; then sides="kernel xfswin uring"
    elif [ -e "$uring_switch" ]; then echo "FUSE over io_uring is off in this kernel (XFSWIN_BENCH_URING=on measures it too)."; fi ;;
  *) echo "XFSWIN_BENCH_URING is on, off or auto" >&2; exit 1 ;;
esac
echo "xfswin mount options: rw,io_uring=no$extra_options$([[ $sides == *uring* ]] && echo " and rw,io_uring=yes$extra_options")"

base=$work/base.img
truncate -s 4G "$base"
mkfs.xfs -q -f "$base"
tarball=$work/tree.tar
tar -C /usr -cf "$tarball" include
tree_files=$(tar -tf "$tarball" | wc -l)

# Waits up to a minute for the FUSE server $server_pid (named $1) to mount $mnt; exits with its output if it does not.
await_mount() {
  for _ in $(seq 600); do mountpoint -q "$mnt" && return 0; kill -0 "$server_pid" 2>/dev/null || break; sleep 0.1; done
  echo "$1 did not mount:" >&2; cat "$work/server.log" >&2; exit 1
}
# The FUSE floor's server, built here; it serves with xfswin's default number of threads (FuseMountOptions.MaxThreads).
floor_threads=$(( $(nproc) * 2 > 4 ? $(nproc) * 2 : 4 ))
gcc -O2 -o "$work/fuse-null" bench/fuse-null.c $(pkg-config --cflags --libs fuse3)
mount_floor() {
  "$work/fuse-null" "$mnt" "$floor_threads" > "$work/server.log" 2>&1 &
  server_pid=$!
  await_mount fuse-null
}
umount_floor() { fusermount3 -u "$mnt"; wait "$server_pid" 2>/dev/null || true; server_pid=""; }

mount_kernel() { cp --sparse=always "$base" "$work/k.img"; mount -o loop "$work/k.img" "$mnt"; }
umount_kernel() { umount "$mnt"; rm -f "$work/k.img"; }
# xfswin serves in the foreground of a background job, so that its messages (and the reason, should it stop) land
# in $work/server.log; with the JIT setting the background mode gives its server (every method compiled optimized at
# once). Side "xfswin" serves through /dev/fuse, side "uring" through FUSE over io_uring.
server_pid=""
mount_xfswin() { start_xfswin "io_uring=no"; }
mount_uring() { start_xfswin "io_uring=yes"; }
umount_uring() { umount_xfswin; }
start_xfswin() {
  cp --sparse=always "$base" "$work/x.img"
  DOTNET_TieredCompilation=0 "${xfswin[@]}" mount -f -o "rw,$1$extra_options" "$work/x.img" "$mnt" > "$work/server.log" 2>&1 &
  server_pid=$!
  await_mount xfswin
}
umount_xfswin() {
  fusermount3 -u "$mnt" 2>/dev/null || umount -l "$mnt"
  wait "$server_pid" 2>/dev/null || true
  server_pid=""
  if ! xfs_repair -n "$work/x.img" >/dev/null 2>&1; then echo "xfs_repair -n found problems in xfswin's image" >&2; exit 1; fi
  rm -f "$work/x.img"
}

now() { date +%s.%N; }
# CPU seconds (user + system) the xfswin server has used so far (0 for the kernel's side).
server_cpu() {
  if [ -n "$server_pid" ] && [ -r "/proc/$server_pid/stat" ]; then
    awk -v hz="$(getconf CLK_TCK)" '{ sub(/^.*\) /, ""); printf "%.2f", ($12 + $13) / hz }' "/proc/$server_pid/stat"
  else echo 0; fi
}
# Everything durable: syncfs for the kernel's XFS, and an fsync of the root directory, which FUSE passes on
# (the kernel does not send syncfs to FUSE servers; fsync forces xfswin's log and flushes the device).
settle() { sync -f "$mnt"; python3 -c 'import os, sys; fd = os.open(sys.argv[1], os.O_RDONLY); os.fsync(fd)' "$mnt"; }
drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
# The kernel's log blocks written so far on the loop mount (0 for FUSE).
log_blocks() {
  local dev; dev=$(basename "$(findmnt -no SOURCE "$mnt")")
  if [ -r "/sys/fs/xfs/$dev/stats/stats" ]; then awk '$1 == "log" { print $3 }' "/sys/fs/xfs/$dev/stats/stats"; else echo 0; fi
}

# Each workload runs in a mounted $mnt and prints nothing.
run_write_1g() { dd if=/dev/zero of="$mnt/big" bs=1M count=1024 conv=fsync status=none; }
make_dirs() { for d in $(seq 0 19); do mkdir -p "$mnt/d$d"; done; }
run_create_20k() {
  python3 - "$mnt" <<'PY'
import os, sys
root = sys.argv[1]
data = b"x" * 4096
for i in range(20000):
    fd = os.open(os.path.join(root, f"d{i % 20}", f"file-{i:05d}"), os.O_CREAT | os.O_WRONLY, 0o644)
    os.write(fd, data)
    os.close(fd)
PY
  settle
}
run_create_2x10k() {
  python3 - "$mnt" <<'PY'
import os, sys
root = sys.argv[1]
data = b"x" * 4096
def creates(half):
    # Files half, half + 2, ...: process 0 fills d0, d2, ... d18, process 1 d1, d3, ... d19.
    for i in range(half, 20000, 2):
        fd = os.open(os.path.join(root, f"d{i % 20}", f"file-{i:05d}"), os.O_CREAT | os.O_WRONLY, 0o644)
        os.write(fd, data)
        os.close(fd)
pid = os.fork()
if pid == 0:
    code = 1
    try:
        creates(1)
        code = 0
    finally:
        os._exit(code)
creates(0)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
PY
  settle
}
make_empty_files() {
  python3 - "$mnt" "$unlinks" <<'PY'
import os, sys
root, n = sys.argv[1], int(sys.argv[2])
for d in range(100):
    os.mkdir(os.path.join(root, f"u{d:02d}"))
for i in range(n):
    os.close(os.open(os.path.join(root, f"u{i % 100:02d}", f"f-{i:06d}"), os.O_CREAT | os.O_WRONLY, 0o644))
PY
  settle
}
run_unlink() {
  python3 - "$mnt" "$unlinks" <<'PY'
import os, sys
root, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    os.unlink(os.path.join(root, f"u{i % 100:02d}", f"f-{i:06d}"))
PY
  settle
}
run_rename() {
  python3 - "$mnt" <<'PY'
import os, sys
root = sys.argv[1]
for i in range(20000):
    os.rename(os.path.join(root, f"d{i % 20}", f"file-{i:05d}"), os.path.join(root, f"d{(i + 7) % 20}", f"moved-{i:05d}"))
PY
  settle
}
run_untar() { tar -C "$mnt" -xf "$tarball"; settle; }
run_sparse_3x10k() {
  python3 - "$mnt" <<'PY'
import os, sys
root = sys.argv[1]
data = b"s" * 4096
fds = [os.open(os.path.join(root, f"sparse-{f}"), os.O_CREAT | os.O_WRONLY, 0o644) for f in range(3)]
for i in range(10000):
    for fd in fds:
        os.pwrite(fd, data, 2 * i * 4096)
for fd in fds:
    os.fsync(fd)
    os.close(fd)
PY
  settle
}

noop() { :; }
setup_of() {
  case $1 in
    write_1g|untar|sparse_3x10k) echo noop ;;
    create_20k|create_2x10k) echo make_dirs ;;
    unlink) echo make_empty_files ;;
    rename) echo with_files ;;
  esac
}
with_files() { make_dirs; run_create_20k; }

# measure NAME: best time of $runs for NAME after its setup, on the kernel and on xfswin.
declare -A best
kernel_log_per_create=""
measure() {
  local name=$1 setup; setup=$(setup_of "$1")
  local measured=$sides
  [[ $name != create_* ]] || measured+=" floor"
  for side in $measured; do
    local b="" bc=""
    for _ in $(seq "$runs"); do
      "mount_$side"; $setup; drop
      local l0; l0=$(log_blocks)
      local c0; c0=$(server_cpu)
      local t0; t0=$(now)
      if ! "run_$name" 2> "$work/workload.err"; then
        echo "$name on $side failed: $(head -c 2000 "$work/workload.err")" >&2
        if [ "$side" != kernel ]; then echo "xfswin server's output:" >&2; tail -c 4000 "$work/server.log" >&2; fi
        fusermount3 -u "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null || true
        [ "$side" = kernel ] || wait "$server_pid" 2>/dev/null || true
        b="failed"; break
      fi
      local t1; t1=$(now)
      local c1; c1=$(server_cpu)
      if [ "$side" = kernel ] && [ "$name" = create_20k ]; then
        kernel_log_per_create=$(( ($(log_blocks) - l0) * 512 / 20000 ))
      fi
      "umount_$side"
      local t; t=$(echo "$t1 - $t0" | bc)
      if [ -z "$b" ] || (( $(echo "$t < $b" | bc) )); then b=$t; fi
      local c; c=$(echo "$c1 - $c0" | bc)
      if [ -z "$bc" ] || (( $(echo "$c < $bc" | bc) )); then bc=$c; fi
    done
    best[$name,$side]=$b
    [ "$side" = kernel ] || best[$name,$side,cpu]=$bc
  done
}

for name in $only; do measure "$name"; done

drop
raw0=$(now); dd if=/dev/zero of="$work/raw.img" bs=1M count=1024 oflag=direct conv=fsync status=none; raw1=$(now)
raw=$(echo "$raw1 - $raw0" | bc)
rm -f "$work/raw.img"

label() {
  case $1 in
    write_1g) echo "write 1 GiB + fsync" ;;
    create_20k) echo "create 20k x 4 KiB + sync" ;;
    create_2x10k) echo "create 20k x 4 KiB, two processes + sync" ;;
    unlink) echo "unlink $unlinks + sync" ;;
    rename) echo "rename 20k + sync" ;;
    untar) echo "untar /usr/include ($tree_files entries) + sync" ;;
    sparse_3x10k) echo "30k 4 KiB writes into holes of 3 files in turn + fsync" ;;
  esac
}
if [[ $sides == *uring* ]]; then
  printf '\n| Operation | Kernel (s) | xfswin, /dev/fuse (s) | vs kernel | server CPU (s) | xfswin, io_uring (s) | vs kernel | server CPU (s) |\n|---|---|---|---|---|---|---|---|\n'
else
  printf '\n| Operation | Kernel (s) | xfswin, /dev/fuse (s) | vs kernel | server CPU (s) |\n|---|---|---|---|---|\n'
fi
for name in $only; do
  k=${best[$name,kernel]}
  row="| $(label "$name") | $([ "$k" = failed ] && echo failed || printf %.3f "$k")"
  for side in ${sides#kernel }; do
    x=${best[$name,$side]}; c=${best[$name,$side,cpu]:-}
    if [ "$k" = failed ] || [ "$x" = failed ]; then row+=" | $x | - | -"; continue; fi
    row+=$(printf ' | %.3f | %.2fx | %.2f' "$x" "$(echo "$k / $x" | bc -l)" "$c")
  done
  echo "$row |"
done
for name in $only; do
  [[ $name == create_* ]] || continue
  k=${best[$name,kernel]}; f=${best[$name,floor]}
  [ "$k" != failed ] && [ "$f" != failed ] || continue
  printf '\nFUSE floor for "%s" (bench/fuse-null.c, %s threads): %.3f s, %.2fx kernel, server CPU %.2f s' \
    "$(label "$name")" "$floor_threads" "$f" "$(echo "$k / $f" | bc -l)" "${best[$name,floor,cpu]}"
done
echo
printf '\nRaw O_DIRECT write of 1 GiB to a new file on the same disk: %.3f s\n' "$raw"
[ -z "$kernel_log_per_create" ] || printf 'Kernel log traffic for the creates: %s bytes per create\n' "$kernel_log_per_create"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
