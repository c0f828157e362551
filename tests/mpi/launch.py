#!/usr/bin/python3
"""Runs one ridge command split over MPI ranks on this box, as a test's server launcher
(tests/server/serve_lib.sh RIDGE_SERVE_LAUNCH).

    launch.py SPLIT RIDGE ARGS...

starts `mpirun --oversubscribe --bind-to none -np N RIDGE ARGS' -t 1 SPLIT_FLAGS`, where
SPLIT is N (tensor parallel), PP=N (pipeline stages) or TxP (both), and ARGS' is ARGS with
  - any -t/--threads dropped (the ranks share the machine's cores: one thread each);
  - --kv-cache-memory and --swap-space (as two arguments or FLAG=VALUE) divided by the
    number of ranks: they are each rank's, and where a rank holds 1/N of a token's K/V
    (its heads, or its layers: not a latent shared by every tensor-parallel rank, nor
    KV heads fewer than the ranks, nor stages of unequal layers) the pool and the swap
    space keep the blocks the one-process run of the same test has.

It stands for the server's process: SIGTERM or SIGINT sent to it goes to rank 0 alone,
which drains and then stops the other ranks (a signal to mpirun would end the job as
signalled, not with the server's exit status), and it exits with mpirun's status.
Python, not bash: a bash script started in the background cannot trap SIGINT.
"""
import os
import re
import signal
import subprocess
import sys

if len(sys.argv) < 3:
    sys.exit("usage: launch.py SPLIT RIDGE ARGS...")
split, ridge, args = sys.argv[1], sys.argv[2], sys.argv[3:]
if split.startswith("PP="):
    np_ = int(split[3:])
    flags = ["--pipeline-parallel-size", str(np_)]
elif "x" in split:
    tp, pp = (int(x) for x in split.split("x"))
    np_ = tp * pp
    flags = ["--tensor-parallel-size", str(tp), "--pipeline-parallel-size", str(pp)]
else:
    np_ = int(split)
    flags = ["--tensor-parallel-size", str(np_)]

UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mb": 1 << 20, "mib": 1 << 20,
         "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30}


def divided(flag, value):
    """flag's value for one of np_ ranks, in bytes."""
    m = re.fullmatch(r"([0-9]+(?:\.[0-9]*)?)([a-zA-Z]*)", value)
    unit = m.group(2).lower() if m else None
    if unit == "" and flag == "--swap-space":
        unit = "g"  # vLLM's flag: GB when bare
    if unit not in UNITS:
        sys.exit(f"launch.py: {flag} {value} is no size this launcher can divide")
    n = int(float(m.group(1)) * UNITS[unit]) // np_
    if n <= 0:
        sys.exit(f"launch.py: {flag} {value} over {np_} ranks leaves each nothing")
    return f"{n}B"


out, i = [], 0
while i < len(args):
    a = args[i]
    if a in ("-t", "--threads"):
        i += 2
        continue
    if a.startswith(("-t=", "--threads=")):
        i += 1
        continue
    if a in ("--kv-cache-memory", "--swap-space") and i + 1 < len(args):
        out += [a, divided(a, args[i + 1])]
        i += 2
        continue
    if a.startswith(("--kv-cache-memory=", "--swap-space=")):
        flag, value = a.split("=", 1)
        out.append(f"{flag}={divided(flag, value)}")
        i += 1
        continue
    out.append(a)
    i += 1

env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
mpirun = subprocess.Popen(["mpirun", "--oversubscribe", "--bind-to", "none", "-np", str(np_), ridge, *out, "-t", "1",
                           *flags], env=env)


def rank0():
    """Rank 0's pid among mpirun's children, or None before it started."""
    try:
        kids = open(f"/proc/{mpirun.pid}/task/{mpirun.pid}/children").read().split()
    except OSError:
        return None
    for p in kids:
        try:
            if b"OMPI_COMM_WORLD_RANK=0" in open(f"/proc/{p}/environ", "rb").read().split(b"\0"):
                return int(p)
        except OSError:
            pass
    return None


def forward(sig, _frame):
    r = rank0()
    try:
        os.kill(r if r else mpirun.pid, sig)
    except ProcessLookupError:
        pass


signal.signal(signal.SIGTERM, forward)
signal.signal(signal.SIGINT, forward)
sys.exit(mpirun.wait())
