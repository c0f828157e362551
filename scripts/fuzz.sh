#!/usr/bin/env bash
# Builds the GGUF fuzzer (tests/fuzz/fuzz_gguf.cpp: reader, model loader, tokenizer) with
# clang + libFuzzer + ASan/UBSan in build-fuzz, and runs it with a fixed seed and run
# count over the committed seed corpus. New inputs go to a scratch dir, so the corpus in
# git never changes. Exits non-zero on a finding (crash, UB, leak, timeout, OOM) and
# says where the reproducer is.
#
#   scripts/fuzz.sh                 # ~1 min on 2 cores from a clean tree (20 s build, 40 s fuzzing)
#   FUZZ_RUNS=1000000 scripts/fuzz.sh
#
# Env: FUZZ_RUNS (default 150000), FUZZ_SEED (1), FUZZ_BUILD (build-fuzz), FUZZ_CORPUS
# (tests/fuzz/corpus), CC/CXX (clang).
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
  -DRIDGE_FUZZ=ON -DRIDGE_TESTS=OFF -DRIDGE_BENCH=OFF >/dev/null
cmake --build "$BUILD" --target fuzz_gguf -j "$(nproc)"
echo "fuzz: built in $(elapsed) s"

scratch=$(mktemp -d "${TMPDIR:-/tmp}/ridge-fuzz.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
artifacts=$BUILD/fuzz-artifacts
mkdir -p "$artifacts"
log=$BUILD/fuzz.log

rc=0
# halt_on_error: a UBSan report is a finding even in code built without
# -fno-sanitize-recover; detect_leaks: a leak is a finding too.
UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 \
  "./$BUILD/fuzz_gguf" -seed="$SEED" -runs="$RUNS" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
  -dict=tests/fuzz/gguf.dict -artifact_prefix="$artifacts/" -print_final_stats=1 \
  "$scratch" "$CORPUS" >"$log" 2>&1 || rc=$?

grep -E '^#[0-9]+ +DONE|^Done [0-9]+ runs|^stat::(number_of_executed_units|average_exec_per_sec|peak_rss_mb)' "$log" || true
if ((rc != 0)); then
  echo "---- last lines of $log ----"
  tail -n 60 "$log"
  echo "fuzz: FINDING (exit $rc) after $(elapsed) s; reproducer(s):"
  grep -oE "Test unit written to [^ ]+" "$log" | sed 's/^/  /' || true
  echo "  replay: ./$BUILD/fuzz_gguf FILE"
  exit 1
fi
echo "fuzz: no findings in $RUNS runs (seed $SEED), $(elapsed) s in total"
