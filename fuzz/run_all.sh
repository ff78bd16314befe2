#!/usr/bin/env bash
# Runs every fuzz target one after another for SECONDS each (default 120),
# one process at a time, logs in fuzz/logs/<target>.log.
set -uo pipefail
cd "$(dirname "$0")"
secs="${1:-120}"
shift || true
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(wir_parse json sym safetensors package kernel_image validate_lower gen_program interp_meta interp_host ranks)
mkdir -p logs
for t in "${targets[@]}"; do
  RUSTC_BOOTSTRAP=1 cargo fuzz run "$t" -- -max_total_time="$secs" -rss_limit_mb=4096 -timeout=1 \
    -print_final_stats=1 > "logs/$t.log" 2>&1
  echo "$t: rc=$? $(grep -E '^#[0-9]+.*(DONE|cov:)' "logs/$t.log" | tail -1)"
done
