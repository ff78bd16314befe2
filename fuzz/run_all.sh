#!/usr/bin/env bash
# Runs every fuzz target (or those named after SECONDS) for SECONDS each
# (default 120), logs in fuzz/logs/<target>.log, and prints each target's
# final libFuzzer stats (executions, crashes in fuzz/artifacts/<target>/).
# Environment (all optional):
#   FUZZ_JOBS=1            targets run at once (each one process)
#   FUZZ_BUILD_ARGS=""     extra `cargo fuzz run` arguments, e.g.
#                          "-s none --codegen-units 16" (no sanitizer: a
#                          faster build and more executions)
#   FUZZ_TIMEOUT=1         libFuzzer's per-input limit in seconds; it counts
#                          wall time, so raise it on a loaded machine or at
#                          `nice` (a starved input is not a hang)
#   FUZZ_RSS_MB=4096       libFuzzer's memory limit per target
set -uo pipefail
cd "$(dirname "$0")"
secs="${1:-120}"
shift || true
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(wir_parse json sym safetensors package kernel_image validate_lower gen_program interp_meta interp_host ranks)
jobs_max="${FUZZ_JOBS:-1}"
read -r -a build_args <<< "${FUZZ_BUILD_ARGS:-}"
mkdir -p logs
# Build once, before the targets start (each run would otherwise wait on the build lock).
RUSTC_BOOTSTRAP=1 cargo fuzz build "${build_args[@]}" > logs/build.log 2>&1 || { echo "build failed: fuzz/logs/build.log"; exit 1; }
run_one() {
  local t="$1"
  mkdir -p "corpus/$t" "artifacts/$t"
  RUSTC_BOOTSTRAP=1 cargo fuzz run "${build_args[@]}" "$t" -- -max_total_time="$secs" \
    -rss_limit_mb="${FUZZ_RSS_MB:-4096}" -timeout="${FUZZ_TIMEOUT:-1}" -print_final_stats=1 > "logs/$t.log" 2>&1
  local rc=$?
  local execs crashes
  execs=$(grep -E '^stat::number_of_executed_units:' "logs/$t.log" | tail -1 | awk '{print $2}')
  crashes=$(find "artifacts/$t" -type f | wc -l)
  echo "$t: rc=$rc executions=${execs:-?} artifacts=$crashes $(grep -E '^#[0-9]+.*(DONE|cov:)' "logs/$t.log" | tail -1)"
}
for t in "${targets[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n; done
  run_one "$t" &
done
wait
