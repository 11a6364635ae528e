#!/usr/bin/env bash
# Agreement of `xfswin check` with `xfs_repair -n` (6.13) on damaged copies of the oracle images: xfs_db 6.13 field
# fuzzing with valid CRCs (fuzz -d, verbs zeroes ones firstbit middlebit lastbit add sub random) on every field of the
# superblocks, AG headers, AGFL, every AG btree's root, inodes of every format, directory, attribute, extent-btree and
# remote blocks, plus blocktrash with fixed seeds. Prints a table per structure: cases, how many xfs_repair -n flags,
# agreements, false negatives (repair flags, we do not), false positives, crashes and hangs of xfswin check; writes
# every case and the commands reproducing each disagreement to OUT (cases.jsonl, disagreements.txt).
# The images are built once by scripts/oracles/make-images.sh into $XFSWIN_BENCH_CACHE (/var/tmp/xfswin-bench).
# Needs root (loop mounts to build the images), xfsprogs 6.13 (scripts/install-deps.sh), the .NET SDK. The checker runs
# in process (bench/XfsWin.Benchmarks check-judge: the same VolumeChecker `xfswin check` runs), one per job.
# Usage: bench/check-agreement.sh [OUT] [extra check-agreement.py options: --every N, --only STRUCTURE, --seeds N, --jobs N]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-/var/tmp/xfswin-check-agreement}
shift || true
[ "$(id -u)" -eq 0 ] || { echo "Run as root: the oracle images are made through loop mounts." >&2; exit 1; }
cache=${XFSWIN_BENCH_CACHE:-/var/tmp/xfswin-bench}
mkdir -p "$cache"
images=()
for name in rmap-nrext64 mkfs613 b1k dir64k v4; do
  if [ ! -f "$cache/$name.meta.json" ]; then
    echo "Building the oracle image $name (once; cached in $cache)..."
    bash scripts/oracles/make-images.sh "$name" "$cache" >/dev/null
  fi
  images+=("$name=$cache/$name.img")
done
dotnet build bench/XfsWin.Benchmarks -c Release -v quiet -nologo >/dev/null
xfsprogs=${XFSWIN_CACHE:-/var/cache/xfswin}/xfsprogs-6.13/bin
echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(uname -r)"
echo "xfs_repair: $("$xfsprogs/xfs_repair" -V); xfswin: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src || echo ' (with local changes)')"
rm -rf "$out"
# A private copy of the build: the run takes a while, and a rebuild meanwhile must not change the checker under test.
mkdir -p "$out/judge"
cp -a bench/XfsWin.Benchmarks/bin/Release/net10.0/. "$out/judge/"
python3 bench/check-agreement.py --images "$(IFS=,; echo "${images[*]}")" --xfsprogs "$xfsprogs" \
  --judge "$out/judge/XfsWin.Benchmarks check-judge" --out "$out" "$@"
