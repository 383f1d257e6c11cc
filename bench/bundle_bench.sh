#!/usr/bin/env bash
# Bundles against the JIT: freezes each model (portable kernels, this CPU),
# links bench/bundle_bench.c with plain cc, and prints the bundle's median
# latency (its parallel_for on a pthread pool of N threads) next to the JIT's
# (native oneDNN kernels, same threads) in the same run, with the freeze
# time and the code size (the object; the weights are a separate file).
# With --ort, ONNX Runtime's median on the same models, batch and threads
# (bench/compare_ort, in the same run) is printed too. --kernels native
# freezes native bundles (oneDNN primitives, OMP_NUM_THREADS=N threads;
# linked with -ldnnl) instead. --rounds K times the bundle and the JIT K
# times each, alternating, and prints the medians of their medians and the
# median of the K paired ratios: on a machine whose speed drifts, pairs
# taken close together compare better than one run of each.
#
#   bench/bundle_bench.sh [--threads N] [--batch B] [--runs R] [--rounds K] [--ort] [--kernels portable|native] MODEL...
set -euo pipefail
cd "$(dirname "$0")/.."
threads=2 batch=1 runs=50 rounds=1 ort=0 kernels=portable
while [[ $# -gt 0 && $1 == --* ]]; do
  case $1 in
    --threads) threads=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --ort) ort=1; shift ;;
    --kernels) kernels=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
kiln=build/bin/kiln
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
json() { /usr/bin/python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }

if ((ort)); then
  bench/compare_ort "$@" --batch "$batch" --threads "$threads" --kiln-repeat 1 --json "$work/ort.json" >/dev/null 2>"$work/ort.log"
fi
ort_ms() { json "next(r['ort']['median_ms'] for r in d['rows'] if r['model'] == '$1')" <"$work/ort.json"; }

printf "%-18s %5s %10s %10s %8s %10s %10s" model batch "jit ms" "bundle ms" ratio "freeze s" "code MiB"
((ort)) && printf " %8s %10s" "ORT ms" "bundle/ORT"
echo
for model in "$@"; do
  name=$(basename "$model" .onnx | tr -c 'A-Za-z0-9_\n' _)
  out=$work/$name
  freeze=$("$kiln" aot-freeze "$model" -o "$out" --name m --batch-sizes "$batch" --kernels "$kernels" --no-cache --json 2>/dev/null)
  libs=-lm
  [[ $kernels == native ]] && libs="-ldnnl -lm"
  cc -O2 -DPREFIX=m -DUPREFIX=M -include "$out/m.h" bench/bundle_bench.c "$out/m.o" $libs -o "$out/bench"
  pairs=()
  for ((r = 0; r < rounds; ++r)); do
    bundle=$(OMP_NUM_THREADS=$threads "$out/bench" "$out/m.weights.bin" "$batch" "$threads" "$runs" | json 'd["median_ms"]')
    jit=$("$kiln" run "$model" --random-inputs --dim batch="$batch" --threads "$threads" --repeat "$runs" --no-cache --json 2>/dev/null |
      json 'd["latency_ms"]["median"]')
    pairs+=("$bundle/$jit")
  done
  read -r bundle jit ratio < <(/usr/bin/python3 -c "
import statistics, sys
pairs = [tuple(map(float, p.split('/'))) for p in sys.argv[1:]]
m = statistics.median
print(m(b for b, _ in pairs), m(j for _, j in pairs), f'{m(b / j for b, j in pairs):.2f}')" "${pairs[@]}")
  seconds=$(echo "$freeze" | json 'd["seconds"]')
  code=$(echo "$freeze" | json 'd["object_bytes"] / 2**20')
  printf "%-18s %5s %10.3f %10.3f %8s %10.1f %10.2f" "$name" "$batch" "$jit" "$bundle" "$ratio" "$seconds" "$code"
  if ((ort)); then
    o=$(ort_ms "$(basename "$model" .onnx)")
    printf " %8.3f %10s" "$o" "$(/usr/bin/python3 -c "print(f'{$bundle / $o:.2f}')")"
  fi
  echo
done
