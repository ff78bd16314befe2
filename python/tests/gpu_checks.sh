#!/usr/bin/env bash
# The exporter package's checks on a CUDA machine with PyTorch and Triton.
#
#   bash python/tests/gpu_checks.sh OUT_DIR [WRAPIR_BINARY]
#
# Each step prints its own ok/FAIL lines and a summary; the script goes on after a
# failed step and exits 1 when any step failed. With WRAPIR_BINARY, fx_module is
# checked on the committed bundles and on every bundle exported here.
set -u
cd "$(dirname "$0")/../.."
OUT=${1:?usage: gpu_checks.sh OUT_DIR [WRAPIR_BINARY]}
WRAPIR=${2:-}
EXPORT="python3 fixtures/inductor/export.py"
COMMITTED=fixtures/inductor/bundles
mkdir -p "$OUT"
status=0
step() {
  echo
  echo "==== $1"
  shift
  "$@" || status=1
}

step "unit tests (pure, and CPU smoke with torch)" bash -c "cd python && python3 -m unittest"
step "features.py through the package" \
  $EXPORT --cases fixtures/inductor/features.py --out "$OUT/features" --jobs 8
step "features.py bundles against the committed ones" \
  python3 python/tests/compare_bundles.py "$OUT/features" "$COMMITTED"
step "cases.py bundles (a few) against the committed ones" bash -c \
  "$EXPORT --cases fixtures/inductor/cases.py --only addmm_relu,cond_branches,mm_dynamic,user_triton,view_output --out '$OUT/cases' --jobs 5 && python3 python/tests/compare_bundles.py '$OUT/cases' '$COMMITTED'"
step "max-autotune (Llama-style, bf16 and f32; GPT-2 bf16)" \
  $EXPORT --cases fixtures/inductor/models.py --only llama_bf16,llama,gpt2_bf16 --mode max-autotune --out "$OUT/max_autotune" --jobs 3
step "max-autotune-no-cudagraphs" \
  $EXPORT --cases fixtures/inductor/models.py --only llama_bf16,resnet --mode max-autotune-no-cudagraphs --out "$OUT/max_autotune_no_cudagraphs" --jobs 2
step "freezing" \
  $EXPORT --cases fixtures/inductor/models.py --only resnet,llama_bf16,bert --option freezing=True --out "$OUT/freezing" --jobs 3
step "ExportedProgram" \
  $EXPORT --cases fixtures/inductor/models.py --only resnet,llama --export-program --out "$OUT/exported_program" --jobs 2
step "dynamic=True (cases that ask for it, and --dynamic on others)" bash -c \
  "$EXPORT --cases fixtures/inductor/models.py --only llama_dynamic,bert_dynamic --out '$OUT/dynamic' --jobs 2 && $EXPORT --cases fixtures/inductor/cases.py --only pointwise,mm_gelu,softmax --dynamic --out '$OUT/dynamic_flag' --jobs 3"
step "the export() API (function, llama_bf16: default, max-autotune, no-cudagraphs, freezing, dynamic, ExportedProgram)" \
  python3 python/tests/gpu_api_smoke.py "$OUT/api"
if [ -n "$WRAPIR" ]; then
  step "fx_module on the committed bundles" \
    python3 python/tests/check_fx_module.py --wrapir "$WRAPIR" "$COMMITTED"/*/
  step "fx_module on the bundles exported here" bash -c \
    "python3 python/tests/check_fx_module.py --wrapir '$WRAPIR' \$(ls -d '$OUT'/*/*/ | while read d; do [ -f \"\$d/program.json\" ] && echo \"\$d\"; done)"
fi
echo
echo "==== done: $([ $status = 0 ] && echo 'every step passed' || echo 'some step failed')"
exit $status
