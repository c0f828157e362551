#!/usr/bin/env bash
# Chat templates, byte for byte: renders every case of tests/chat/conversations.json with
# @huggingface/jinja (the reference) and with `ridge chat-template --batch`, and compares
# the bytes (or, where the reference raises, that ridge raises the same message).
# usage: tests/chat/run_chat_tests.sh [RIDGE_BINARY]   (default: $RIDGE_BIN, else build/ridge)
# Prints "chat templates: N passed, M failed"; exits 1 if any failed. Skips (exit 0) with
# a message when node or @huggingface/jinja is missing.
set -euo pipefail
cd "$(dirname "$0")/../.."
RIDGE="${1:-${RIDGE_BIN:-build/ridge}}"
if ! command -v node >/dev/null 2>&1 || [ ! -d node_modules/@huggingface/jinja ]; then
  echo "chat templates: SKIPPED (needs node and npm package @huggingface/jinja)"
  exit 0
fi
[ -x "$RIDGE" ] || { echo "chat templates: $RIDGE is not an executable (build ridge first)"; exit 1; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
node tests/chat/render_reference.mjs tests/chat/conversations.json "$tmp"
"$RIDGE" chat-template --batch "$tmp/cases.json" > "$tmp/ridge.jsonl"
node --input-type=module - "$tmp/reference.jsonl" "$tmp/ridge.jsonl" "${CHAT_TESTS_VERBOSE:-0}" <<'JS'
import fs from "node:fs";
const [refPath, oursPath, verbose] = process.argv.slice(2);
const read = (p) => fs.readFileSync(p, "utf8").split("\n").filter((l) => l).map((l) => JSON.parse(l));
const ref = read(refPath), ours = new Map(read(oursPath).map((r) => [r.name, r]));
let pass = 0, failed = 0;
for (const r of ref) {
  const o = ours.get(r.name);
  let why = null;
  if (!o) why = "no ridge output";
  else if (r.error !== undefined) {
    if (o.error === undefined) why = `reference raised "${r.error}" but ridge rendered`;
    else if (!o.error.includes(r.error)) why = `errors differ:\n    reference: ${r.error}\n    ridge:     ${o.error}`;
  } else if (o.error !== undefined) why = `ridge raised: ${o.error}`;
  else if (o.output !== r.output) {
    let i = 0;
    while (i < r.output.length && r.output[i] === o.output[i]) ++i;
    why = `output differs at character ${i}:\n    reference: ${JSON.stringify(r.output.slice(Math.max(0, i - 40), i + 60))}\n    ridge:     ${JSON.stringify(o.output.slice(Math.max(0, i - 40), i + 60))}`;
  }
  if (why) { ++failed; console.log(`FAIL ${r.name}: ${why}`); }
  else { ++pass; if (verbose === "1") console.log(`ok   ${r.name}`); }
}
console.log(`chat templates: ${pass} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
JS
