# Sourced by the server test scripts. serve_start ERR_FILE ARGS...: runs
# `$RIDGE serve --port 0 ARGS` in the background with stderr in ERR_FILE and waits for its
# "on http://127.0.0.1:PORT" line; sets pid, and port (empty when the server exited, or
# was not listening after 30 s). RIDGE_SERVE_LAUNCH, when set, is a command that runs
# the server for it (tests/mpi/launch.py SPLIT: split over MPI ranks), standing for the
# server's process (signals, exit status).
# serve_kill PID: SIGKILL to PID and every process under it (a launcher's mpirun and its
# ranks: killing mpirun alone leaves the ranks running).
serve_kill() {
  local p
  for p in $(pgrep -P "$1"); do serve_kill "$p"; done
  kill -KILL "$1" 2>/dev/null
}
serve_start() {
  local err=$1 i
  shift
  : >"$err"
  ${RIDGE_SERVE_LAUNCH:-} "$RIDGE" serve --port 0 "$@" 2>"$err" &
  pid=$!
  port=""
  for ((i = 0; i < 300; ++i)); do
    port=$(sed -n 's|^serve: .* on http://127\.0\.0\.1:\([0-9]*\) .*|\1|p' "$err")
    [ -n "$port" ] && return
    kill -0 "$pid" 2>/dev/null || return
    sleep 0.1
  done
}
