#!/usr/bin/env bash
# The GPU test targets, for a CUDA machine that has no Rust toolchain: build
# them on a development machine, copy the checkout with DIR to the GPU
# machine, run them there from the checkout's root.
#
#   tests/gpu_tests.sh build DIR      # here: release test binaries, the CLI and
#                                     # the runtime library, stripped, as one
#                                     # DIR/gpu-tests.tar.xz (~9 MB: the binaries
#                                     # share most of their code)
#   tests/gpu_tests.sh run DIR        # there: unpacks it, runs every target;
#                                     # a summary line last
#
# `run` sets what the tests would otherwise take from cargo: the checkout root
# (CARGO_MANIFEST_DIR), the CLI (WRAPIR_BIN) and the runtime library
# (WRAPIR_RUNTIME_DIR); the kernel cache is off so that every run compiles
# its kernels afresh. TARGETS (space-separated) narrows the targets; THREADS
# sets the test threads (default 4; `cuda_ranks` always runs on one, its
# ranks take every GPU). Exits 1 when any target failed.
set -u
cd "$(dirname "$0")/.."
MODE=${1:?usage: gpu_tests.sh build|run DIR}
DIR=${2:?usage: gpu_tests.sh build|run DIR}
TARGETS=${TARGETS:-cuda cuda_prepared cuda_concurrent cuda_gemm cuda_conv cuda_rnn cuda_moe cuda_detection cuda_attention cuda_errors cuda_alloc cuda_model cuda_capi cuda_ranks}

case "$MODE" in
build)
  set -e
  args=()
  for t in $TARGETS; do args+=(--test "$t"); done
  cargo build --release --features cuda --bin wrapir
  cargo build --release -p wrapir-runtime
  stage=$(mktemp -d)
  trap 'rm -rf "$stage"' EXIT
  cargo test --release --features cuda --no-run "${args[@]}" --message-format=json |
    python3 -c '
import json, shutil, sys
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        name = m["target"]["name"]
        shutil.copy(m["executable"], f"{sys.argv[1]}/t_{name}")
' "$stage"
  cp target/release/wrapir target/release/libwrapir_runtime.so "$stage/"
  strip "$stage"/* 2>/dev/null || true
  mkdir -p "$DIR"
  tar -C "$stage" -cf - . | xz -9e >"$DIR/gpu-tests.tar.xz"
  ls -l "$DIR/gpu-tests.tar.xz"
  ;;
run)
  DIR=$(cd "$DIR" && pwd)
  if [ -f "$DIR/gpu-tests.tar.xz" ]; then
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
      "$DIR/gpu-tests.tar.xz" "$DIR" || exit 1
  fi
  export CARGO_MANIFEST_DIR=$PWD WRAPIR_BIN=$DIR/wrapir WRAPIR_RUNTIME_DIR=$DIR WRAPIR_KERNEL_CACHE=off
  failed=()
  for t in $TARGETS; do
    threads=${THREADS:-4}
    [ "$t" = cuda_ranks ] && threads=1
    echo "==== $t"
    if [ ! -x "$DIR/t_$t" ]; then
      echo "no $DIR/t_$t (build it with: tests/gpu_tests.sh build DIR)"
      failed+=("$t")
      continue
    fi
    "$DIR/t_$t" --test-threads "$threads" || failed+=("$t")
  done
  if [ ${#failed[@]} -eq 0 ]; then
    echo "==== gpu tests: every target passed ($TARGETS)"
  else
    echo "==== gpu tests: failed: ${failed[*]}"
    exit 1
  fi
  ;;
*)
  echo "usage: gpu_tests.sh build|run DIR" >&2
  exit 2
  ;;
esac
