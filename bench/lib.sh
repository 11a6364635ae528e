# Shared by the bench scripts that run a test class many times (source it; it defines functions only).

# Exits unless running as root; $1 says why root is needed.
bench_require_root() {
  [ "$(id -u)" -eq 0 ] || { echo "Run as root: $1" >&2; exit 1; }
}

# The machine line every result in docs/benchmarks.md carries.
bench_machine() {
  echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), kernel $(uname -r)"
}

# Builds test project $1 (Release), runs the tests matching filter $2 with detailed output, keeps the lines matching
# the extended regex $3 and the pass/fail summary, and prints the wall time. Returns the test run's status.
# Environment variables for the test (XFSWIN_*) are taken from the caller's environment.
bench_run_tests() {
  local project=$1 filter=$2 lines=$3 start status=0
  dotnet build "$project" -c Release -v quiet -nologo >/dev/null || { echo "build of $project failed" >&2; return 1; }
  start=$(date +%s)
  dotnet test "$project" -c Release --no-build -nologo --filter "$filter" --logger "console;verbosity=detailed" \
    | grep -E "$lines|Passed!|Failed!" || status=$?
  echo "wall time: $(( $(date +%s) - start )) s"
  return $status
}

# Sets the array xfswin to the command that runs the xfswin CLI under measurement: XFSWIN_BENCH_XFSWIN names either a
# directory holding a build's xfswin.dll (another commit's build, run by dotnet) or an executable (the Native AOT binary
# scripts/publish-cli.sh makes, as xfswin ships on Linux x64); unset, this tree's CLI is built (Release) and run by dotnet.
bench_xfswin() {
  local chosen=${XFSWIN_BENCH_XFSWIN:-}
  if [ -n "$chosen" ] && [ -f "$chosen" ] && [ -x "$chosen" ]; then
    xfswin=("$(realpath "$chosen")")
  elif [ -n "$chosen" ]; then
    [ -f "$chosen/xfswin.dll" ] || { echo "XFSWIN_BENCH_XFSWIN=$chosen is neither an executable nor a directory with xfswin.dll" >&2; exit 1; }
    xfswin=(dotnet "$(realpath "$chosen")/xfswin.dll")
  else
    echo "Building xfswin (Release)..."
    dotnet build src/XfsWin.Cli -c Release -v quiet -nologo >/dev/null
    xfswin=(dotnet "$PWD/src/XfsWin.Cli/bin/Release/net10.0/xfswin.dll")
  fi
  echo "xfswin under measurement: ${xfswin[*]}"
}
