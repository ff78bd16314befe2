#!/usr/bin/env bash
# Export, check, lower and run every CPU case file with one PyTorch: the test
# that shows when a new PyTorch release changes Inductor's wrapper under us.
#
#   tests/torch_cpu_exports.sh PYTHON WRAPIR [OUTDIR]
#
# PYTHON is an interpreter with torch (and, for the Halide backend, the
# `halide` package; without it, or with WRAPIR_SKIP_HALIDE=1, the Halide
# exports are skipped and said so).
# Every case of fixtures/inductor/cases_cpu.py is exported with Inductor's C++
# backend and its Halide backend, and every case of cases_cpu_control.py
# (cond, switch, while_loop) with the C++ backend; the exporter compares each
# with eager PyTorch. Then every bundle is checked (`wrapir check`: validation,
# every Triton launch reconciled, all four lowerings) and run on the host
# (`wrapir run --device cpu`: against eager and against Inductor's own
# outputs, and a bundle's mutated inputs after the call against eager's).
# Prints one line per bundle and a summary; exits 1 if anything
# failed.
set -uo pipefail
cd "$(dirname "$0")/.."

py=${1:?usage: tests/torch_cpu_exports.sh PYTHON WRAPIR [OUTDIR]}
wrapir=${2:?usage: tests/torch_cpu_exports.sh PYTHON WRAPIR [OUTDIR]}
out=${3:-}
if [ -z "$out" ]; then
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
fi
version=$("$py" -c 'import torch; print(torch.__version__)') || { echo "no torch in $py" >&2; exit 1; }
mkdir -p "$out"
echo "PyTorch $version: exporting into $out"

failed=0
export_set() { # name cases [options...]
  local name=$1 cases=$2
  shift 2
  if ! "$py" fixtures/inductor/export.py --cases "$cases" --out "$out/$name" --quiet "$@" >"$out/$name.log" 2>&1; then
    echo "export $name: failures (PyTorch $version):"
    grep -E '^FAIL' "$out/$name.log" || tail -n 20 "$out/$name.log"
    failed=1
  fi
}

export_set cpp fixtures/inductor/cases_cpu.py
if [ "${WRAPIR_SKIP_HALIDE:-0}" = 1 ]; then
  echo "halide: skipped (WRAPIR_SKIP_HALIDE=1)"
elif "$py" -c 'import halide' 2>/dev/null; then
  export_set halide fixtures/inductor/cases_cpu.py --option cpu_backend=halide
else
  echo "halide: the halide package is not installed for $py; Halide exports skipped"
fi
export_set control fixtures/inductor/cases_cpu_control.py
export_set ops fixtures/inductor/cases_cpu_ops.py
WRAPIR_CASE_DEVICE=cpu export_set features fixtures/inductor/features.py \
  --only feat_item_float,feat_item_float_dynamic

bundles=0
for b in "$out"/*/*/; do
  [ -f "$b/program.json" ] || continue
  bundles=$((bundles + 1))
  name=${b#"$out"/}
  name=${name%/}
  if ! check=$("$wrapir" check "$b" 2>&1); then
    echo "FAIL check $name: $check"
    failed=1
    continue
  fi
  if ! run=$("$wrapir" run "$b" --device cpu 2>&1); then
    echo "FAIL run $name: $run"
    failed=1
    continue
  fi
  echo "ok $name: $(echo "$check" | tail -n 1); $(echo "$run" | grep -E '^(against|mutated inputs against)' | cut -d' ' -f1-5 | paste -sd';' -)"
done
echo "PyTorch $version: $bundles bundles exported, checked, lowered and run"
[ "$bundles" -gt 0 ] || failed=1
exit $failed
