#!/usr/bin/env bash
# Publishes the xfswin CLI for Linux x64 as it ships there: one Native AOT binary, OUT/xfswin (default
# artifacts/linux-x64/xfswin), with no .NET runtime needed to run it. Prints the binary's path.
# Needs clang and zlib1g-dev (scripts/install-deps.sh installs them) besides the .NET SDK; the ILCompiler packages come
# from the NuGet source at the SDK's version. The build tree goes to OUT.build, not to the source tree's bin/ and obj/
# (a runtime-specific restore there would change the next plain build).
# Usage: scripts/publish-cli.sh [OUT]
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(realpath -m "${1:-artifacts/linux-x64}")
[ "$(uname -m)" = x86_64 ] || { echo "publish-cli: Native AOT is set up for linux-x64 only; on $(uname -m) run the framework-dependent build (dotnet build src/XfsWin.Cli)." >&2; exit 1; }
command -v clang >/dev/null && [ -e /usr/include/zlib.h ] \
  || { echo "publish-cli: Native AOT needs clang and zlib1g-dev: run scripts/install-deps.sh (as root) or apt-get install clang zlib1g-dev." >&2; exit 1; }
# PublishAot is on for linux-x64 in src/XfsWin.Cli/XfsWin.Cli.csproj. The binary is stripped; its symbols are beside it
# (xfswin.dbg).
dotnet publish src/XfsWin.Cli -c Release -r linux-x64 -nologo -v quiet --artifacts-path "$out.build" -o "$out" >&2
echo "$out/xfswin"
