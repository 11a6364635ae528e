#!/bin/bash
# Runs the Windows adapter's random-sequence test (tests/XfsWin.Driver.Tests, AdapterSoakTests) over a range of seeds:
# each seed is 1,200 WinFsp calls on the read-write adapter checked against a model of the tree, then a kernel mount
# showing that tree byte for byte and xfs_repair -n. A failure names the seed and the step with the steps before it.
# Each seed runs on one thread, on four (each in a directory of its own) and on a case-insensitive mount; about 3 s
# per seed on 2 cores. Needs root (loop mounts) and what scripts/test.sh installs.
# Usage: bench/adapter-soak.sh [FIRST_SEED [COUNT]]   (default 100 100)
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" -eq 0 ] || { echo "Run as root: the test loop-mounts its images." >&2; exit 1; }
dotnet build tests/XfsWin.Driver.Tests -v quiet -nologo > /dev/null
XFSWIN_ADAPTER_SEEDS="${1:-100} ${2:-100}" dotnet test tests/XfsWin.Driver.Tests --no-build \
  --filter "FullyQualifiedName~AdapterSoakTests" --logger "console;verbosity=normal"
