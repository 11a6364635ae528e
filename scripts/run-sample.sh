#!/usr/bin/env bash
# Mounts the bundled sample XFS volume read-only through FUSE, lists it, and says how to unmount.
# Installs what is missing (fuse3, zstd; clang and zlib1g-dev on x86-64; needs root for that), builds xfswin, unpacks the sample.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v fusermount3 >/dev/null || need+=(fuse3)
command -v zstd >/dev/null || need+=(zstd)
# On x86-64 xfswin is built as it ships there, one Native AOT binary (scripts/publish-cli.sh), which needs these.
if [ "$(uname -m)" = x86_64 ]; then
  command -v clang >/dev/null || need+=(clang)
  [ -e /usr/include/zlib.h ] || need+=(zlib1g-dev)
fi
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "Missing: ${need[*]}. Install them (sudo apt-get install ${need[*]}) or run this script as root." >&2
    exit 1
  fi
  echo "Installing ${need[*]}..."
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
command -v dotnet >/dev/null || { echo "The .NET 10 SDK is required (https://dot.net)." >&2; exit 1; }
[ -e /dev/fuse ] || modprobe fuse 2>/dev/null || true

if [ "$(uname -m)" = x86_64 ]; then
  echo "Building xfswin (Native AOT: a minute or two the first time)..."
  xfswin=("$(scripts/publish-cli.sh)")
else
  echo "Building xfswin..."
  dotnet build src/XfsWin.Cli -c Release -v quiet -nologo >/dev/null
  xfswin=(dotnet "$PWD/src/XfsWin.Cli/bin/Release/net10.0/xfswin.dll")
fi

work=$(mktemp -d /tmp/xfswin-sample-XXXXXX)
zstd -d -q samples/sample.xfs.zst -o "$work/sample.xfs.img"
mkdir "$work/mnt"
"${xfswin[@]}" mount "$work/sample.xfs.img" "$work/mnt"

echo
echo "== ls -la $work/mnt"
ls -la "$work/mnt"
echo
echo "== find (first 20 entries)"
(cd "$work/mnt" && find . | sort | head -20)
echo
echo "== README.txt"
cat "$work/mnt/README.txt"
echo
echo "== extended attributes of README.txt"
getfattr -d "$work/mnt/README.txt" 2>/dev/null || echo "(install the 'attr' package to see them)"
echo
echo "The sample is mounted read-only at: $work/mnt"
echo "Unmount it with:                    fusermount3 -u $work/mnt && rm -rf $work"
