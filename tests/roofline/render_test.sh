#!/usr/bin/env bash
# The roofline page in headless Chromium: no errors, and the plotted points read back
# through the rendered axes give the reported numbers within 1% (check_svg.mjs).
#
#   tests/roofline/render_test.sh REPORT.html REPORT.json   # a report of `ridge roofline --html --json`
#   tests/roofline/render_test.sh [BUILD_DIR]               # the unit test's hand-made report
#
# CHROMIUM overrides /usr/bin/chromium. Without Chromium or Node it skips (exit 0) with a
# message, except under CI=true, where it fails.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
chromium="${CHROMIUM:-/usr/bin/chromium}"

missing=""
[ -x "$chromium" ] || missing="$chromium"
command -v node >/dev/null 2>&1 || missing="${missing:+$missing, }node"
if [ -n "$missing" ]; then
  if [ "${CI:-}" = "true" ]; then echo "FAIL: missing $missing (required under CI=true)" >&2; exit 1; fi
  echo "SKIP: missing $missing; the roofline page was not rendered" >&2
  exit 0
fi

if [ $# -eq 2 ]; then
  exec node "$here/check_svg.mjs" "$1" "$2" --chromium "$chromium"
fi
if [ $# -gt 2 ]; then echo "usage: $0 [REPORT.html REPORT.json | BUILD_DIR]" >&2; exit 2; fi
build="${1:-$root/build}"
[ -x "$build/ridge_tests" ] || { echo "no $build/ridge_tests: build it first (cmake --build $build --target ridge_tests)" >&2; exit 1; }
CHROMIUM="$chromium" exec "$build/ridge_tests" --gtest_filter='RooflineHtml.*'
