#!/usr/bin/env bash
# The checks and figures only a CUDA card gives (docs/benchmarks.md "GPU figures",
# docs/fidelity.md "Sim vs real on CUDA"). Run from the repository root on a CUDA machine
# with the project importable and the zoo's `small` and `apar-tiny` built:
#
#   bash scripts/gpu_checks.sh [--rates "20 30"] [--threads 4] [--limit S]
#       [--apar-zoo apar-small --apar-loads "32 128 1000" --apar-copies 4] OUT_DIR [PART ...]
#
# PARTs, in order (default: all): env tests calibrate twins kernels speed decoders apar
# (spec_twins: speculative decoding's twins, docs/fidelity.md; engine_tests: the CUDA engine
# tests alone, without the kernels' own; apar_tests: their APAR ones alone; profile: this
# card's GEMM and attention times in Vidur's format, under OUT_DIR/profile, for
# docs/cost_model_fidelity.md).
# Every part appends to OUT_DIR/gpu_checks.log; data files land beside it. A part that fails
# is reported and the next one still runs; the exit status is the number of failed parts.
# --rates: the twins' request rates; --threads: the torch intra-op threads of the
# calibration, its twins and the benchmarks (the twins refuse a profile of other threads);
# --limit: stop a part after S seconds (it counts as failed), so one slow part cannot eat a
# lease's time. --apar-zoo: the APAR model of part apar (default apar-tiny, 12 prompts; another
# entry gets 24 prompts); --apar-loads: its request rates under load (default none);
# --apar-copies: under load, each prompt that many times (default 1). --spec-rates: the request
# rates of part spec_twins (speculative decoding, `small`'s pair, beside twins whose draft is
# priced by its own profile; its database lands in OUT_DIR).
# Times on an H100 host (2026-11-25): env 15 s, tests 150 s, calibrate 75 s,
# twins 120-150 s, speed 60 s (bf16 alone), apar 40 s; decoders about 20 s per prompt. On an
# H200 host (2026-11-26): env 8 s, calibrate 53 s, twins 98 s, decoders 61 s, kernels 40 s,
# tests 108 s, speed 41 s (bf16 and fp32); a fresh machine started in about 30 s. H100
# (2026-11-27, later): spec_twins 173-206 s (both calibrations, the acceptance run, 1-2 rates).
set -u
RATES="20 30"  # the engine saturates near 40 req/s on an H100 host (2026-11-25)
THREADS=4
LIMIT=""
APAR_ZOO=apar-tiny
APAR_LOADS=""
APAR_COPIES=1
SPEC_RATES="10 20"  # a k = 4 step of `small`'s pair: 9-14 ms median under load on an H100 host
while [[ $# -gt 0 && $1 == --* ]]; do
  case $1 in
    --rates) RATES=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --limit) LIMIT=$2; shift 2 ;;
    --apar-zoo) APAR_ZOO=$2; shift 2 ;;
    --apar-loads) APAR_LOADS=$2; shift 2 ;;
    --apar-copies) APAR_COPIES=$2; shift 2 ;;
    --spec-rates) SPEC_RATES=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
OUT=${1:?usage: bash scripts/gpu_checks.sh [--rates R] [--threads N] [--limit S] [--apar-zoo Z] [--apar-loads R] [--apar-copies N] [--spec-rates R] OUT_DIR [PART ...]}
shift
PARTS=${*:-env tests calibrate twins kernels speed decoders apar}
LOG="$OUT/gpu_checks.log"
DB="$OUT/fidelity_cuda.duckdb"
SMALL=$(python3 -c 'from real_backend.zoo.build import resolve_zoo_model as r; print(r("small", "target"))')
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 OUT LOG DB RATES THREADS SMALL APAR_ZOO APAR_LOADS APAR_COPIES SPEC_RATES

wb() { python3 -m workbench "$@"; }

part_env() {
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv
  python3 -c 'import torch, triton, transformers; print("torch", torch.__version__, "triton",
triton.__version__, "transformers", transformers.__version__, torch.cuda.get_device_name())'
  nproc
}

part_tests() {
  local status=0
  pytest_on_cuda tests/test_kernels_attention.py tests/test_kernels_cache.py \
    tests/test_kernels_verification.py tests/test_kernels_dispatch.py \
    tests/test_host_to_device.py || status=1
  part_engine_tests || status=1
  return $status
}

part_engine_tests() {
  # The warm-up test counts the kernels compiled in its process: it runs in one of its own.
  local status=0
  pytest_on_cuda tests/test_cuda_decoders.py -k "not warm_up" || status=1
  pytest_on_cuda tests/test_cuda_decoders.py -k warm_up || status=1
  return $status
}

part_apar_tests() {
  pytest_on_cuda tests/test_cuda_decoders.py -k apar
}

part_profile() {
  python3 benchmarks/gpu_kernel_profile.py --out-dir "$OUT/profile" --budget-s 150 \
    --l2 rotate clean --jobs llama-2-7b:1 llama-2-70b:4 attention
}

pytest_on_cuda() {
  python3 -m pytest -p no:randomly -p no:cacheprovider -m "" -q -rs "$@"
}

part_calibrate() {
  OMP_NUM_THREADS=$THREADS wb calibrate --model small --device cuda --dtype bf16 \
    --db "$DB" --csv "$OUT/profile_small_cuda_bf16.csv" --no-progress
}

part_twins() {
  local rate status=0
  for rate in $RATES; do
    OMP_NUM_THREADS=$THREADS wb run scenarios/fidelity/sim_vs_real_cuda_small.yaml \
      --backend both --db "$DB" --set "workload.arrival.rate_per_s=$rate" || status=1
  done
  wb report --db "$DB" --out /tmp/gpu_checks_report >/dev/null || status=1
  cat /tmp/gpu_checks_report/report.md
  return $status
}

part_spec_twins() {
  local rates
  read -ra rates <<<"$SPEC_RATES"
  OMP_NUM_THREADS=$THREADS python3 benchmarks/speculative_twins.py --zoo small --device cuda \
    --db "$OUT/spec_twins_cuda.duckdb" --rates "${rates[@]}"
}

part_kernels() {
  python3 benchmarks/kernels_speed.py --quick --out "$OUT/kernels_speed.json"
}

part_speed() {
  local dtype
  for dtype in bf16 fp32; do
    python3 benchmarks/real_backend_speed.py "$SMALL" --device cuda --dtype "$dtype" \
      --threads "$THREADS" --repeat 3
  done
}

part_decoders() {
  python3 benchmarks/decoding_speed.py --device cuda --dtype bf16 --threads "$THREADS" \
    --prompts 3 --repeat 2 --out "$OUT/decoding_speed_cuda.json"
}

part_apar() {
  local prompts=24 loads=()
  [[ $APAR_ZOO == apar-tiny ]] && prompts=12
  [[ -n $APAR_LOADS ]] && read -ra loads <<<"$APAR_LOADS" && loads=(--load "${loads[@]}")
  python3 benchmarks/apar_speed.py --zoo "$APAR_ZOO" --device cuda --dtype bf16 \
    --kernels triton --threads "$THREADS" --prompts "$prompts" --repeat 2 "${loads[@]}" \
    --copies "$APAR_COPIES"
}

compiled() {  # Triton's on-disk cache: one entry per kernel variant compiled so far
  find "${TRITON_CACHE_DIR:-$HOME/.triton/cache}" -name '*.cubin' 2>/dev/null | wc -l
}

run_part() {
  if [[ -n $LIMIT ]]; then
    timeout "$LIMIT" bash -c "part_$1"
  else
    "part_$1"
  fi
}

export -f $(compgen -A function)
failed=0
for part in $PARTS; do
  start=$(date +%s)
  echo "=== $part ($(date -u +%FT%TZ))" | tee -a "$LOG"
  if run_part "$part" 2>&1 | tee -a "$LOG"; test "${PIPESTATUS[0]}" -eq 0; then
    echo "=== $part ok in $(($(date +%s) - start)) s; $(compiled) kernels compiled" | tee -a "$LOG"
  else
    echo "=== $part FAILED in $(($(date +%s) - start)) s" | tee -a "$LOG"
    failed=$((failed + 1))
  fi
done
exit $failed
