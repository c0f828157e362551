#!/usr/bin/env node
// Renders a roofline report (ridge roofline --html) in headless Chromium and checks it:
// no script or SVG errors, and every plotted point, read back from the rendered page and
// inverted through the axes' decade ticks, gives the reported intensity and GFLOP/s
// (the report's JSON, ridge roofline --json) within 1%; so do the roofs and ridge points.
//
//   node check_svg.mjs REPORT.html REPORT.json [--chromium /usr/bin/chromium]
//
// Positions come from the rendered layout (getBoundingClientRect in a copy of the page
// with a measuring script prepended), and axis values from the tick labels' text, so the
// check shares nothing with the generator but the markup's class names.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const args = process.argv.slice(2);
let chromium = process.env.CHROMIUM || '/usr/bin/chromium';
const pos = [];
for (let i = 0; i < args.length; ++i) {
  if (args[i] === '--chromium') chromium = args[++i];
  else pos.push(args[i]);
}
if (pos.length !== 2) {
  console.error('usage: node check_svg.mjs REPORT.html REPORT.json [--chromium PATH]');
  process.exit(2);
}
const [htmlPath, jsonPath] = pos;
const TOL = 0.01;

// Runs before the report's own markup: collects errors, then measures after layout.
const HARNESS = `<script>
window.__errors = [];
window.addEventListener('error', e => window.__errors.push(String(e.message || e)));
window.addEventListener('unhandledrejection', e => window.__errors.push('unhandled rejection: ' + e.reason));
for (const k of ['error', 'warn']) {
  const orig = console[k];
  console[k] = (...a) => { window.__errors.push(k + ': ' + a.join(' ')); orig.apply(console, a); };
}
window.addEventListener('load', () => {
  const box = el => el.getBoundingClientRect();
  const svg = document.querySelector('svg#roofline');
  const out = { errors: window.__errors, svg: svg ? box(svg).toJSON() : null, ticks: { x: [], y: [] },
                points: [], roofs: [], ridges: [], note: '', verdicts: [] };
  if (svg) {
    for (const g of svg.querySelectorAll('g.tick')) {
      const r = box(g.querySelector('line'));
      const axis = g.classList.contains('x') ? 'x' : 'y';
      out.ticks[axis].push({ pos: axis === 'x' ? (r.left + r.right) / 2 : (r.top + r.bottom) / 2,
                             label: g.querySelector('text').textContent });
    }
    for (const c of svg.querySelectorAll('circle.op')) {
      const r = box(c);
      out.points.push({ x: (r.left + r.right) / 2, y: (r.top + r.bottom) / 2, w: r.width, ...c.dataset });
    }
    for (const l of svg.querySelectorAll('line.roof')) {
      const r = box(l);
      out.roofs.push({ kind: l.classList.contains('dram') ? 'dram' : 'compute', left: r.left, right: r.right,
                       top: r.top, bottom: r.bottom, ...l.dataset });
    }
    for (const c of svg.querySelectorAll('circle.ridge')) {
      const r = box(c);
      out.ridges.push({ x: (r.left + r.right) / 2, y: (r.top + r.bottom) / 2, ...c.dataset });
    }
  }
  const note = document.querySelector('p.note');
  out.note = note ? note.textContent : '';
  out.verdicts = [...document.querySelectorAll('p.verdict')].map(p => p.dataset.bottleneck);
  const pre = document.createElement('pre');
  pre.id = '__measure';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>`;

const failures = [];
const fail = msg => failures.push(msg);
const rel = (got, want) => Math.abs(got / want - 1);

const report = JSON.parse(fs.readFileSync(jsonPath, 'utf8'));
let html = fs.readFileSync(htmlPath, 'utf8');
html = /<head[^>]*>/i.test(html) ? html.replace(/<head[^>]*>/i, m => m + HARNESS) : HARNESS + html;
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ridge-roofline-'));
try {
  const page = path.join(tmp, 'page.html');
  fs.writeFileSync(page, html);
  const t0 = Date.now();
  const r = spawnSync(chromium, ['--headless', '--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage',
    '--no-first-run', '--disable-extensions', `--user-data-dir=${path.join(tmp, 'profile')}`,
    '--enable-logging=stderr', '--v=0', '--window-size=1280,1024', '--dump-dom', 'file://' + page],
    { encoding: 'utf8', timeout: 60000, maxBuffer: 64 << 20 });
  if (r.error) throw new Error(`cannot run ${chromium}: ${r.error.message}`);
  if (r.status !== 0) throw new Error(`${chromium} exited with ${r.status}: ${(r.stderr || '').slice(-2000)}`);
  // The page's console messages (SVG attribute errors, uncaught exceptions) land here.
  for (const line of (r.stderr || '').split('\n'))
    if (/:CONSOLE[:(]|Uncaught|SyntaxError/.test(line)) fail('console: ' + line.trim());
  const m = /<pre id="__measure">([\s\S]*?)<\/pre>/.exec(r.stdout);
  if (!m) throw new Error('the measuring script left no result (page did not load?)');
  const unescape = s => s.replace(/&lt;/g, '<').replace(/&gt;/g, '>').replace(/&quot;/g, '"')
    .replace(/&#39;/g, "'").replace(/&nbsp;/g, '\u00a0').replace(/&amp;/g, '&');
  const out = JSON.parse(unescape(m[1]));
  console.log(`chromium: ${Date.now() - t0} ms`);
  for (const e of out.errors) fail('page error: ' + e);
  if (!out.svg || out.svg.width < 100 || out.svg.height < 100) throw new Error('no rendered svg#roofline');

  // Each axis: position = a + b * log10(value), fitted to the decade ticks; the ticks
  // must lie on that line (a log axis) and be in order.
  const axis = name => {
    const t = out.ticks[name].map(k => ({ pos: k.pos, v: Number(k.label), label: k.label }));
    if (t.length < 2) throw new Error(`axis ${name}: ${t.length} ticks`);
    for (const k of t)
      if (!(k.v > 0) || Math.abs(Math.log10(k.v) - Math.round(Math.log10(k.v))) > 1e-9)
        throw new Error(`axis ${name}: tick label '${k.label}' is not a decade`);
    const xs = t.map(k => Math.log10(k.v)), ys = t.map(k => k.pos);
    const n = t.length, mx = xs.reduce((s, x) => s + x, 0) / n, my = ys.reduce((s, y) => s + y, 0) / n;
    let sxy = 0, sxx = 0;
    for (let i = 0; i < n; ++i) sxy += (xs[i] - mx) * (ys[i] - my), sxx += (xs[i] - mx) ** 2;
    const b = sxy / sxx, a = my - b * mx;
    const worst = Math.max(...t.map((k, i) => Math.abs(a + b * xs[i] - k.pos)));
    if (worst > 0.5) fail(`axis ${name}: decade ticks are not evenly spaced (off by ${worst.toFixed(2)} px)`);
    if (name === 'x' ? b <= 0 : b >= 0) fail(`axis ${name}: values run the wrong way`);
    return p => 10 ** ((p - a) / b);
  };
  const X = axis('x'), Y = axis('y');

  // Points against the reported per-op numbers.
  const want = new Map();
  for (const ph of report.phases)
    for (const op of ph.ops) {
      const key = `${ph.phase}/${ph.batch}/${op.name}`;
      const plottable = op.flops > 0 && op.bytes > 0 && op.seconds > 0;
      if (plottable) want.set(key, op);
      else if (!out.note.includes(op.name)) fail(`${key}: not plottable and not listed in the note`);
    }
  let maxErr = 0;
  const seen = new Set();
  for (const p of out.points) {
    const key = `${p.phase}/${p.batch}/${p.op}`;
    const op = want.get(key);
    if (!op) { fail(`${key}: plotted, but not a plottable op of the report`); continue; }
    if (seen.has(key)) fail(`${key}: plotted twice`);
    seen.add(key);
    if (!(p.w > 0)) fail(`${key}: the circle has no size`);
    const ei = rel(X(p.x), op.intensity), eg = rel(Y(p.y), op.gflops);
    maxErr = Math.max(maxErr, ei, eg);
    if (ei > TOL) fail(`${key}: plotted at intensity ${X(p.x)}, reported ${op.intensity}`);
    if (eg > TOL) fail(`${key}: plotted at ${Y(p.y)} GFLOP/s, reported ${op.gflops}`);
    if (rel(Number(p.intensity), op.intensity) > 1e-6 || rel(Number(p.gflops), op.gflops) > 1e-6)
      fail(`${key}: data attributes ${p.intensity}, ${p.gflops} differ from the report`);
  }
  for (const key of want.keys()) if (!seen.has(key)) fail(`${key}: reported but not plotted`);

  // Roofs and ridge points against the reported ceilings.
  const roofs = report.roofs || {};
  for (const r of out.roofs) {
    if (r.kind === 'dram') {
      // Lower-left and upper-right ends of y = bw * x.
      for (const [x, y] of [[r.left, r.bottom], [r.right, r.top]]) {
        const e = rel(Y(y) / X(x), report.dram_gbs);
        maxErr = Math.max(maxErr, e);
        if (e > TOL) fail(`DRAM roof: ${Y(y) / X(x)} GB/s at x=${X(x)}, reported ${report.dram_gbs}`);
      }
      continue;
    }
    const want = roofs[r.class];
    if (!want) { fail(`roof ${r.class}: not in the report's roofs`); continue; }
    const ey = rel(Y((r.top + r.bottom) / 2), want.gflops), ex = rel(X(r.left), want.ridge);
    maxErr = Math.max(maxErr, ey, ex);
    if (ey > TOL) fail(`roof ${r.class}: at ${Y((r.top + r.bottom) / 2)} GFLOP/s, reported ${want.gflops}`);
    if (ex > TOL) fail(`roof ${r.class}: starts at ${X(r.left)} FLOP/B, ridge reported ${want.ridge}`);
  }
  const nDram = out.roofs.filter(r => r.kind === 'dram').length;
  if (nDram !== 1) fail(`${nDram} DRAM roofs drawn`);
  for (const cls of Object.keys(roofs)) {
    if (!out.roofs.some(r => r.class === cls)) fail(`roof ${cls}: reported but not drawn`);
    const rp = out.ridges.find(r => r.class === cls);
    if (!rp) { fail(`ridge ${cls}: not marked`); continue; }
    const ex = rel(X(rp.x), roofs[cls].ridge), ey = rel(Y(rp.y), roofs[cls].gflops);
    maxErr = Math.max(maxErr, ex, ey);
    if (ex > TOL || ey > TOL) fail(`ridge ${cls}: marked at (${X(rp.x)}, ${Y(rp.y)}), reported ${roofs[cls].ridge}`);
  }
  const verdicts = report.phases.map(p => p.bottleneck).join(',');
  if (out.verdicts.join(',') !== verdicts) fail(`verdicts on the page ${out.verdicts} != reported ${verdicts}`);

  console.log(`${out.points.length} points, ${out.roofs.length} roofs, ${out.ridges.length} ridge points; ` +
              `worst error ${(100 * maxErr).toFixed(4)}%`);
} catch (e) {
  fail(e.message);
} finally {
  fs.rmSync(tmp, { recursive: true, force: true });
}
if (failures.length) {
  for (const f of failures) console.error('FAIL ' + f);
  process.exit(1);
}
console.log('ok');
