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
expect_error "mkmodel with an unknown preset"   "huge-9000"                  "$RIDGE" mkmodel --preset huge-9000 -o x.gguf
expect_error "mkmodel without -o"               "-o"                         "$RIDGE" mkmodel --preset tiny
expect_error "generate -f with a missing file"  "missing_prompts\.txt"       "$RIDGE" generate -m tiny.gguf -f missing_prompts.txt
expect_error "generate with both -p and -f"     "-p.*-f|-f.*-p"              "$RIDGE" generate -m tiny.gguf -p hi -f prompts.txt
expect_error "perplexity on a too-short text"   "short\.txt"                 "$RIDGE" perplexity -m tiny.gguf -f short.txt
expect_error "perplexity without -f"            "-f"                         "$RIDGE" perplexity -m tiny.gguf

# --- good input: exit 0 -------------------------------------------------------------
expect_ok "info -m tiny.gguf"                            "$RIDGE" info -m tiny.gguf
expect_ok "generate -m tiny.gguf -p hi -n 4 --temp 0"    "$RIDGE" generate -m tiny.gguf -p hi -n 4 --temp 0

echo "cli: $passed passed, $failed failed"
((failed == 0))
