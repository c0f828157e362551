// Compares ridge's output with the reference's for one tokenizer; prints one summary line
// and the first mismatches with escaped strings. Exit code 0 when everything is identical.
//
//   node compare.mjs NAME CORPUS REF.jsonl IDS IDS_SPECIAL TEXT.jsonl TEXT_SPECIAL.jsonl
//
// IDS / IDS_SPECIAL: `ridge tokenize --ids --jsonl` output (space-separated ids per line)
// without and with BOS/EOS; TEXT*: `ridge tokenize --decode --jsonl` of the reference's ids.
import { readFileSync } from "node:fs";

const [name, corpusPath, refPath, idsPath, idsSpPath, textPath, textSpPath] = process.argv.slice(2);
const lines = (p) => {
  const l = readFileSync(p, "utf8").split("\n");
  if (l.at(-1) === "") l.pop();
  return l;
};
const corpus = lines(corpusPath).map((l) => JSON.parse(l));
const ref = lines(refPath).map((l) => JSON.parse(l));
const ids = lines(idsPath).map((l) => (l.trim() === "" ? [] : l.trim().split(" ").map(Number)));
const idsSp = lines(idsSpPath).map((l) => (l.trim() === "" ? [] : l.trim().split(" ").map(Number)));
const text = lines(textPath).map((l) => JSON.parse(l));
const textSp = lines(textSpPath).map((l) => JSON.parse(l));
for (const [what, a] of [["ids", ids], ["ids with special", idsSp], ["decode", text], ["decode special", textSp]])
  if (a.length !== corpus.length) {
    console.log(`${name}: ridge gave ${a.length} lines of ${what} for ${corpus.length} inputs`);
    process.exit(1);
  }

const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);
const esc = (s) => JSON.stringify(s).replace(/[\u007f-\uffff]/g, (c) => c);  // JSON escapes, Unicode kept
const cut = (s, n = 160) => (s.length > n ? s.slice(0, n) + "…" : s);
const window = (a, i) => `${i > 0 ? "… " : ""}${a.slice(Math.max(0, i - 2), i + 6).join(" ")}${i + 6 < a.length ? " …" : ""}`;

const counts = { ids: 0, ids_special: 0, text: 0, text_special: 0 };
const bad = [];
for (let i = 0; i < corpus.length; i++) {
  const r = ref[i];
  const problems = [];
  if (same(ids[i], r.ids)) counts.ids++;
  else problems.push(["ids", r.ids, ids[i]]);
  if (same(idsSp[i], r.ids_special)) counts.ids_special++;
  else problems.push(["ids+special", r.ids_special, idsSp[i]]);
  if (text[i] === r.text) counts.text++;
  else problems.push(["decode", r.text, text[i]]);
  if (textSp[i] === r.text_special) counts.text_special++;
  else problems.push(["decode+special", r.text_special, textSp[i]]);
  if (problems.length) bad.push([i, problems]);
}
const n = corpus.length;
const ok = bad.length === 0;
console.log(
  `${name.padEnd(12)} ids ${counts.ids}/${n}  ids+special ${counts.ids_special}/${n}  ` +
    `decode ${counts.text}/${n}  decode+special ${counts.text_special}/${n}  ${ok ? "PASS" : "FAIL"}`,
);
for (const [i, problems] of bad.slice(0, 5)) {
  console.log(`  line ${i + 1}: ${cut(esc(corpus[i]))}`);
  for (const [what, want, got] of problems) {
    if (Array.isArray(want)) {
      let k = 0;
      while (k < want.length && k < got.length && want[k] === got[k]) k++;
      console.log(`    ${what} differ at #${k}: reference [${window(want, k)}]  ridge [${window(got, k)}]`);
    } else {
      console.log(`    ${what}: reference ${cut(esc(want))}  ridge ${cut(esc(got))}`);
    }
  }
}
if (bad.length > 5) console.log(`  ... and ${bad.length - 5} more lines differ`);
process.exit(ok ? 0 : 1);
