#!/usr/bin/env bash
# Runs every XfsWin test on this machine: installs what is missing, builds, tests against the real
# kernel XFS driver and xfsprogs, and prints one summary line "N passed, N failed".
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh

results=$(mktemp -d)
trap 'rm -rf "$results"' EXIT
run_tests() { dotnet test "$@" -c Release --logger "trx" --results-directory "$results" --logger "console;verbosity=normal"; }
# Arguments (say a --filter) go to dotnet test.
set +e
run_tests XfsWin.sln "$@"
status=$?
set -e

python3 - "$results" <<'PY'
import glob, sys, xml.etree.ElementTree as ET
ns = {"t": "http://microsoft.com/schemas/VisualStudio/TeamTest/2010"}
passed = failed = skipped = 0
failures = []
for trx in glob.glob(sys.argv[1] + "/**/*.trx", recursive=True):
    root = ET.parse(trx).getroot()
    for r in root.iterfind("t:Results/t:UnitTestResult", ns):
        if r.get("outcome") not in ("Passed", "NotExecuted"):
            message = r.findtext("t:Output/t:ErrorInfo/t:Message", default="", namespaces=ns)
            failures.append((r.get("testName"), r.get("duration"), message.strip()))
    c = root.find("t:ResultSummary/t:Counters", ns)
    if c is None:
        continue
    passed += int(c.get("passed", 0))
    failed += int(c.get("failed", 0)) + int(c.get("error", 0)) + int(c.get("timeout", 0)) + int(c.get("aborted", 0))
    skipped += int(c.get("notExecuted", 0))
# The failures are repeated last, so that the end of a long CI log names them.
for name, duration, message in failures:
    print(f"FAILED {name} ({duration})")
    for line in message.splitlines()[:12]:
        print(f"    {line[:300]}")
print(f"{passed} passed, {failed} failed, {skipped} skipped")
PY
exit $status
