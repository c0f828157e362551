#!/usr/bin/env bash
# Installs every dependency of ridge on a fresh Debian 12 machine. Idempotent: a second
# run with everything present touches nothing. Debian packages via apt (as root, or with
# sudo); npm packages for the test peers via `npm ci` against the committed lockfile.
# Node.js 20 and npm are expected on the machine already: never apt-install Debian's npm.
set -euo pipefail
cd "$(dirname "$0")/.."

pkgs=(build-essential cmake ninja-build pkg-config libgtest-dev libgmock-dev
      libbenchmark-dev libfmt-dev libpcre2-dev libutf8proc-dev nlohmann-json3-dev
      libboost1.81-dev chromium libzmq3-dev cppzmq-dev python3-zmq python3-msgpack
      openmpi-bin libopenmpi-dev
      clang libclang-rt-14-dev)

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || { echo "setup: need root (or sudo) to apt-get install ${missing[*]}" >&2; exit 1; }
    SUDO=sudo
  fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "setup: Node.js 20 and npm are required for the test peers (node-llama-cpp); install them first" >&2
  exit 1
fi
# npm ci only when the lockfile changed since the last install.
stamp=node_modules/.ridge-lock.sha256
want=$(sha256sum package-lock.json | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "setup: npm ci"
  npm ci --no-audit --no-fund --loglevel=error
  echo "$want" > "$stamp"
fi
