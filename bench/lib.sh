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
