#!/usr/bin/env bash
# The whole suite, as CI runs it (make test calls this after setup + release build):
#   0. the layer check: no include against the layers' direction (docs/ARCHITECTURE.md)
#   1. unit tests (GoogleTest via ctest) on the release build, every ISA path
#   2. command-line bad-input tests
#   3. the outside oracle: ridge vs llama.cpp (node-llama-cpp) on every arch x dtype,
#      and ridge's tokenizers vs llama.cpp's on every vocabulary in ../shared/vocab;
#      chat templates vs @huggingface/jinja; tokenizer.json files vs @huggingface/tokenizers
#   4. unit tests again under ASan + UBSan (-O1; the networking layers and the cases' own code
#      -O0, CMakeLists.txt; debug invariant checks on)
#   5. the GGUF and safetensors reader fuzzers (clang libFuzzer), fixed seed and run count
# and between them the server tests (once in one process, once split over MPI ranks) and
# the MPI tests (tests/mpi).
# Under CI=true a missing ../shared is a failure, never a skip.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
BUILD_SAN=${BUILD_SAN:-build-san}
JOBS=${JOBS:-$(nproc)}
passed=0
failed=0
failures=()
t_all=$(date +%s)

# Each stage's output also goes to a log, so that a failure's summary at the very end
# (the part of a CI log that is kept) names the failing cases, not only the stage.
log_dir=$(mktemp -d)
trap 'rm -rf "$log_dir"' EXIT

stage() {  # name, command...
  local name=$1 t0 what
  shift
  t0=$(date +%s)
  echo
  echo "=== $name"
  # tee through a process substitution, not a pipe: a process a stage leaves behind
  # holding its output must not hold the suite (tee gets a few seconds to drain). Each
  # stage its own log, so such a tee cannot write into the next stage's.
  local rc=0 tee_pid i stage_log="$log_dir/$((passed + failed)).log"
  "$@" > >(tee "$stage_log") 2>&1 || rc=$?
  tee_pid=${!:-}
  for i in $(seq 50); do [ -n "$tee_pid" ] && kill -0 "$tee_pid" 2>/dev/null || break; sleep 0.1; done
  if [ "$rc" = 0 ]; then
    passed=$((passed + 1))
    echo "=== $name: ok ($(($(date +%s) - t0)) s)"
  else
    failed=$((failed + 1))
    # ctest's list ("  420 - Suite.Case (Failed)"), GoogleTest's "[  FAILED  ] Suite.Case",
    # the shell suites' "FAIL ..." lines: at most eight, one line.
    what=$(grep -a -E '^[[:space:]]*[0-9]+ - .*\((Failed|Timeout|SEGFAULT|Subprocess aborted|Exception|Child aborted|Not Run|ILLEGAL|OTHER_FAULT|INTERRUPT|NUMERICAL|BAD_COMMAND)\)|^\[  FAILED  \] [A-Za-z]|^FAIL[ :]' "$stage_log" |
      grep -a -v -E 'listed below|^\[  FAILED  \] [0-9]+ test' |
      sed -E 's/^[[:space:]]+//; s/ +/ /g; s/ \([0-9]+ ms\)$//' | sort -u | head -8 | cut -c1-160 | paste -sd ';' -)
    failures+=("$name${what:+ [$what]}")
    echo "=== $name: FAILED ($(($(date +%s) - t0)) s)"
  fi
}

# The kernels' default parameters, whatever a kernel cache on this machine holds, and no
# tuning run on a command's first use (tools/kernel_cache.h): the suite checks results,
# which no tuned parameter changes (the FP8 path aside), and tests/cli covers the cache.
export RIDGE_KERNEL_CACHE=off RIDGE_KERNEL_AUTOTUNE=0

if [ "${CI:-}" = true ] && [ ! -f ../shared/models/stories260K.gguf ]; then
  echo "test: ../shared/models/stories260K.gguf is missing; under CI=true the real-model tests must run" >&2
  exit 1
fi

unit_all_isas() {
  local rc=0
  (cd "$BUILD" && ctest --output-on-failure -j1 --timeout 900) || rc=1
  # The SIMD paths chosen at run time: run the kernel and model tests on each one.
  for isa in scalar avx2; do
    echo "--- RIDGE_ISA=$isa"
    RIDGE_ISA=$isa "$BUILD/ridge_tests" --gtest_brief=1 \
      --gtest_filter='Quant*:F16*:ForwardRef*:*BatchInvariance*:Stories260K*' || rc=1
  done
  return $rc
}

# The sanitizer build's cases run $JOBS at a time: each is a process whose sanitizer start-up
# is a large part of its time, while the release stage's cases, whose thread pools fill
# the machine, run one at a time (faster so). Each process has its own scratch directory
# (tests/unit/main.cpp).
sanitized() {
  cmake -S . -B "$BUILD_SAN" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DRIDGE_SANITIZE=ON -DRIDGE_BENCH=OFF -DRIDGE_CUDA=OFF >/dev/null &&
    cmake --build "$BUILD_SAN" -j "$JOBS" --target ridge_tests &&
    (cd "$BUILD_SAN" && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j "$JOBS" --timeout 1800)
}

stage "layers: every include points down" bash tests/layers/test_check_layers.sh
stage "unit tests (release)" unit_all_isas
stage "command-line errors" bash tests/cli/test_cli.sh "$BUILD/ridge"
stage "oracle: ridge vs llama.cpp" bash tests/oracle/run_oracle.sh "$BUILD/ridge"
stage "tokenizers: ridge vs llama.cpp" node tests/oracle/tokenizer_vs_llama.mjs --ridge "$BUILD/ridge"
stage "chat templates: ridge vs @huggingface/jinja" bash tests/chat/run_chat_tests.sh "$BUILD/ridge"
stage "tokenizer.json: ridge vs @huggingface/tokenizers" bash tests/tokenizers/run_hf_tests.sh "$BUILD/ridge"
stage "structured output: ridge's token masks vs XGrammar" node tests/grammar/xgrammar_masks.mjs --ridge "$BUILD/ridge" --docs 3
stage "structured output: JSON-Schema-Test-Suite (draft 4)" node tests/grammar/json_schema_suite.mjs --ridge "$BUILD/ridge"
stage "server: OpenAI API via the openai client" bash tests/server/run_server_tests.sh "$BUILD/ridge"
stage "tensor and pipeline parallelism over MPI (mpirun on one box)" bash tests/mpi/run_mpi_tests.sh "$BUILD/ridge"
# The server tests again with every server split both ways at once (TP 2 x PP 2, four
# ranks on the box): the tensor-parallel collectives, the stages' hand-offs and the
# logits' way back to rank 0 under the whole API. (SERVER_SPLIT=2 and PP=2 run the same.)
stage "server: OpenAI API split over MPI (TP 2 x PP 2)" env SERVER_SPLIT=2x2 bash tests/server/run_server_tests.sh "$BUILD/ridge"
stage "unit tests (ASan+UBSan)" sanitized
stage "fuzz: GGUF and safetensors readers" bash scripts/fuzz.sh

echo
echo "total $(($(date +%s) - t_all)) s"
((failed)) && printf 'failed: %s\n' "${failures[@]}"
echo "suites: $passed passed, $failed failed"
[ "$failed" = 0 ]
