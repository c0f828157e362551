// Checks a `ridge serve --trace FILE` trace after the server shut down: the file is
// valid Chrome trace JSON, every event has the fields viewers need, and it holds the
// engine's step phases, the forward's per-op spans and a track per served request
// (queued ... finished).
// usage: node tests/server/check_trace.mjs TRACE.json
import { readFileSync } from 'node:fs';

const path = process.argv[2];
const problems = [];
const check = (ok, what) => { if (!ok) problems.push(what); };

let doc;
try {
  doc = JSON.parse(readFileSync(path, 'utf8'));
} catch (e) {
  console.log(`FAIL trace ${path} is not valid JSON: ${e.message}`);
  process.exit(1);
}
const events = Array.isArray(doc) ? doc : doc.traceEvents;
check(Array.isArray(events) && events.length > 0, 'traceEvents is a non-empty array');

let malformed = 0;
for (const ev of events) {
  const base = typeof ev.name === 'string' && typeof ev.ph === 'string' && Number.isInteger(ev.pid) &&
    Number.isInteger(ev.tid);
  const timed = ev.ph === 'M' || typeof ev.ts === 'number';
  const dur = ev.ph !== 'X' || (typeof ev.dur === 'number' && ev.dur >= 0);
  if (!(base && timed && dur && ['X', 'i', 'C', 'M'].includes(ev.ph))) {
    if (++malformed <= 3) console.log(`malformed event: ${JSON.stringify(ev)}`);
  }
}
check(malformed === 0, `${malformed} malformed events`);

const spans = events.filter((e) => e.ph === 'X');
for (const phase of ['step', 'schedule', 'forward', 'sample', 'postprocess'])
  check(spans.some((e) => e.name === phase && e.cat === 'engine'), `an engine span named ${phase}`);
const ops = spans.filter((e) => e.cat === 'op');
check(ops.length > 0, 'at least one per-op span (cat "op"): the forward calls perf::trace_op');
check(ops.every((e) => e.args && typeof e.args.flops === 'number' && typeof e.args.bytes === 'number'),
  'per-op spans carry flops and bytes');
check(events.some((e) => e.ph === 'i' && e.name === 'submit' && e.cat === 'server'), 'a submit instant from HTTP');
check(events.some((e) => e.ph === 'i' && e.name === 'admit' && e.cat === 'sched'), 'an admit decision');

// Request tracks: pid 2, one tid each, named "request N".
const tracks = new Map();
for (const e of events)
  if (e.ph === 'M' && e.name === 'thread_name' && e.pid === 2 && /^request \d+$/.test(e.args?.name ?? ''))
    tracks.set(e.tid, []);
for (const e of events) if (e.pid === 2 && e.ph !== 'M' && tracks.has(e.tid)) tracks.get(e.tid).push(e);
let complete = 0, streamed = 0;
const reasons = {};
for (const evs of tracks.values()) {
  const has = (ph, name) => evs.some((e) => e.ph === ph && e.name === name);
  if (has('X', 'queued') && has('i', 'finished') && has('X', 'request')) complete++;
  if (has('i', 'first_token') && has('X', 'prefill')) streamed++;
  for (const e of evs) if (e.name === 'finished') reasons[e.args.reason] = (reasons[e.args.reason] ?? 0) + 1;
}
check(complete > 0, 'a request track with queued, finished and its request span');
check(streamed > 0, 'a request track with prefill and first_token');
// Every request ends before a clean shutdown: "unfinished" would be lost bookkeeping.
check(!reasons.unfinished, 'no request track left "unfinished"');

const dropped = doc.otherData?.dropped_events;
console.log(`trace: ${events.length} events, ${spans.length} spans (${ops.length} per-op), ` +
  `${tracks.size} request tracks (${complete} complete), finish reasons ${JSON.stringify(reasons)}, ` +
  `dropped ${dropped}`);
if (problems.length) {
  for (const p of problems) console.log(`FAIL trace: expected ${p}`);
  process.exit(1);
}
