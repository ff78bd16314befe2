#!/usr/bin/env bash
# Builds the seed corpora of the fuzz targets under fuzz/corpus/<target>/ from
# the committed fixtures (fixtures/*.wir, fixtures/invalid/*.wir, the bundles'
# program.json and inputs.safetensors). Idempotent; run from anywhere.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
corpus="$root/fuzz/corpus"
max_bytes=262144 # seeds over 256 KiB slow every execution down; leave them out
mkdir -p "$corpus"/{wir_parse,json,sym,safetensors,package,kernel_image,validate_lower,interp_meta,interp_host,gen_program,ranks}

copy() { # copy SRC TARGET NAME, if small enough
  local size
  size=$(stat -c %s "$1")
  if [ "$size" -le "$max_bytes" ]; then cp "$1" "$corpus/$2/$3"; fi
}

for f in "$root"/fixtures/*.wir "$root"/fixtures/invalid/*.wir; do
  name="$(basename "$(dirname "$f")")_$(basename "$f")"
  for t in wir_parse validate_lower interp_meta interp_host; do copy "$f" "$t" "$name"; done
done
# Regression inputs the fuzz targets found or that issues reported.
for f in "$root"/fuzz/regressions/*.wir; do
  for t in wir_parse validate_lower interp_meta interp_host; do copy "$f" "$t" "regression_$(basename "$f")"; done
done
# The prover's regressions (blow-ups past its limits, hangs) seed the sym target.
for f in "$root"/fuzz/regressions/sym_*.txt; do copy "$f" sym "regression_$(basename "$f")"; done
for d in "$root"/fixtures/inductor/bundles/*/; do
  b="$(basename "$d")"
  if [ -f "$d/program.json" ]; then
    for t in json validate_lower interp_meta interp_host; do copy "$d/program.json" "$t" "$b.json"; done
  fi
  if [ -f "$d/inputs.safetensors" ]; then copy "$d/inputs.safetensors" safetensors "$b.safetensors"; fi
  for k in "$d"/kernels/*.cubin "$d"/kernels/*.ptx; do
    if [ -f "$k" ]; then copy "$k" kernel_image "${b}_$(basename "$k")"; fi
  done
done

# package: small bundles packed with the wrapir binary, when one is built
# (WRAPIR names another one, e.g. a release build elsewhere). Without one the
# package target starts from an empty corpus and stays at its header checks.
wrapir_bin="${WRAPIR:-$root/target/debug/wrapir}"
if [ -x "$wrapir_bin" ]; then
  for b in cat_mm softmax topk feat_cond_unbacked; do
    "$wrapir_bin" pack "$root/fixtures/inductor/bundles/$b" -o "$corpus/package/$b.wirpkg" >/dev/null
    # The same package as format version 1 (no checksums verified): mutations
    # of its entries reach the entry readers instead of the checksum check.
    cp "$corpus/package/$b.wirpkg" "$corpus/package/${b}_v1.wirpkg"
    printf '\x01\x00\x00\x00' | dd of="$corpus/package/${b}_v1.wirpkg" bs=1 seek=8 conv=notrunc status=none
  done
  # Issue 35: a package whose entry was corrupted after packing (one byte of
  # its last entry flipped) must be an error naming the entry.
  cp "$corpus/package/softmax.wirpkg" "$corpus/package/regression_corrupted_entry.wirpkg"
  size=$(stat -c %s "$corpus/package/regression_corrupted_entry.wirpkg")
  printf '\xff' | dd of="$corpus/package/regression_corrupted_entry.wirpkg" bs=1 seek=$((size - 9)) conv=notrunc status=none
fi

# sym: line 1 and 2 are the sides, further lines assumptions.
i=0
while IFS= read -r seed; do
  printf '%b' "$seed" > "$corpus/sym/seed_$i"
  i=$((i + 1))
done <<'SEEDS'
s0*s1\ns1*s0
(s0 + 1)//2\nceil_div(s0, 2)\ns0 >= 0
ModularIndexing(s0, 4, 8)\n(s0//4) % 8\ns0 >= 0
Max(s0, s1) + Min(s0, s1)\ns0 + s1
u0*s0\ns0*u0\nu0 >= 2\nu0 <= 64\ns0 == 2*u0
CleanDiv(4*s0, 2)\n2*s0
PythonMod(s0 - 7, 3)\ns0 % 3\ns0 >= 7
s0**3\ns0*s0*s0
Eq(s0, 3)\ns0 == 3
(s0 < 4) & (s1 > 2)\nTrue\ns0 == 1\ns1 == 5
SEEDS

# gen_program: a few byte strings (any bytes are a program).
for n in 16 64 256 1024; do head -c "$n" /dev/urandom > "$corpus/gen_program/random_$n"; done
# Rank sets: every rank's program in one file, separated by `---` lines.
for d in "$root"/fixtures/inductor/bundles_ranks/*/; do
  b="$(basename "$d")"
  out="$corpus/ranks/$b.txt"
  : > "$out"
  sep=""
  for r in "$d"/rank*/; do
    printf '%s' "$sep" >> "$out"
    "${WRAPIR:-$root/target/debug/wrapir}" print "$r" >> "$out" 2>/dev/null || true
    sep=$'\n---\n'
  done
done
# Two small ranks that all-reduce.
for r in 0 1; do
  cat <<'WIR'
wrapir 1

graph main(x: f32[4][1]@cpu) -> (buf0) {
  buffer buf0: f32[4][1]@cpu
  extern buf0 = torch.ops._c10d_functional.all_reduce.default(x, 'sum', '0')
  extern torch.ops._c10d_functional.wait_tensor.default(buf0)
}
WIR
  [ "$r" = 0 ] && printf -- '---\n'
done > "$corpus/ranks/all_reduce_pair.txt"
echo "seeds in $corpus:"
for t in "$corpus"/*/; do echo "  $(basename "$t"): $(ls "$t" | wc -l) files, $(du -sh "$t" | cut -f1)"; done
