#!/usr/bin/env bash
# Builds the GGUF fuzzer (tests/fuzz/fuzz_gguf.cpp: reader, model loader, tokenizer) and the
# safetensors one (tests/fuzz/fuzz_safetensors.cpp: header and offsets) with
# clang + libFuzzer + ASan/UBSan in build-fuzz, and runs it with a fixed seed and run
# count over the committed seed corpus. New inputs go to a scratch dir, so the corpus in
# git never changes. Exits non-zero on a finding (crash, UB, leak, timeout, OOM) and
# says where the reproducer is.
#
#   scripts/fuzz.sh                 # ~3.5 min on 2 cores from a clean tree (about 2 min of it the build)
#   FUZZ_RUNS=1000000 scripts/fuzz.sh
#
# Env: FUZZ_RUNS (default 150000), FUZZ_SEED (1), FUZZ_BUILD (build-fuzz), FUZZ_CORPUS
# (tests/fuzz/corpus), FUZZ_ST_RUNS (100000, the safetensors target's), CC/CXX (clang).
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS=${FUZZ_RUNS:-150000}
SEED=${FUZZ_SEED:-1}
BUILD=${FUZZ_BUILD:-build-fuzz}
CORPUS=${FUZZ_CORPUS:-tests/fuzz/corpus}
t0=$EPOCHREALTIME
elapsed() { awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }

if [[ -f $BUILD/CMakeCache.txt ]] && ! grep -q '^CMAKE_CXX_COMPILER_ID:.*Clang' "$BUILD/CMakeCache.txt" &&
   ! grep -q 'CMAKE_CXX_COMPILER:FILEPATH=.*clang' "$BUILD/CMakeCache.txt"; then
  echo "fuzz: $BUILD was configured with a compiler other than clang; remove it first" >&2
  exit 2
fi
CC=${CC:-clang} CXX=${CXX:-clang++} cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Debug \
  -DRIDGE_FUZZ=ON -DRIDGE_TESTS=OFF -DRIDGE_BENCH=OFF -DRIDGE_CUDA=OFF >/dev/null
cmake --build "$BUILD" --target fuzz_gguf fuzz_safetensors -j "$(nproc)"
echo "fuzz: built in $(elapsed) s"

scratch=$(mktemp -d "${TMPDIR:-/tmp}/ridge-fuzz.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
artifacts=$BUILD/fuzz-artifacts
mkdir -p "$artifacts"

# fuzz TARGET RUNS CORPUS DICT: one fixed-seed run; 1 on a finding.
fuzz() {
  local target=$1 runs=$2 corpus=$3 dict=$4 rc=0 log=$BUILD/$1.log
  mkdir -p "$scratch/$target"
  # halt_on_error: a UBSan report is a finding even in code built without
  # -fno-sanitize-recover; detect_leaks: a leak is a finding too.
  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 \
    "./$BUILD/$target" -seed="$SEED" -runs="$runs" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
    -dict="$dict" -artifact_prefix="$artifacts/" -print_final_stats=1 \
    "$scratch/$target" "$corpus" >"$log" 2>&1 || rc=$?
  echo "fuzz: $target"
  grep -E '^#[0-9]+ +DONE|^Done [0-9]+ runs|^stat::(number_of_executed_units|average_exec_per_sec|peak_rss_mb)' "$log" || true
  if ((rc != 0)); then
    echo "---- last lines of $log ----"
    tail -n 60 "$log"
    echo "fuzz: FINDING in $target (exit $rc) after $(elapsed) s; reproducer(s):"
    grep -oE "Test unit written to [^ ]+" "$log" | sed 's/^/  /' || true
    echo "  replay: ./$BUILD/$target FILE"
    return 1
  fi
}

fuzz fuzz_gguf "$RUNS" "$CORPUS" tests/fuzz/gguf.dict || exit 1
fuzz fuzz_safetensors "${FUZZ_ST_RUNS:-100000}" tests/fuzz/corpus_safetensors tests/fuzz/safetensors.dict || exit 1
echo "fuzz: no findings in $RUNS + ${FUZZ_ST_RUNS:-100000} runs (seed $SEED), $(elapsed) s in total"
