// The JSON-Schema-Test-Suite's draft 4 cases (npm json-schema-test-suite) for the keywords
// ridge's structured output compiles and that are unchanged since draft 4: each case's
// document must be accepted by the schema's grammar exactly when the suite says it is
// valid. `ridge grammar accepts --no-strict` (JSON Schema's own default for additional
// properties) is asked about each document, written as the grammar writes JSON: compact,
// and with each object's keys in its schema's properties order (the grammar generates
// properties in that order; the suite's documents are sets of keys).
//
// Left out, each for a stated reason: documents whose numbers the grammar does not write
// (more than 16 integer or fraction digits, exponents of more than two digits: the
// bounds that keep a model from filling its budget with digits); oneOf cases valid under
// several branches (generated as anyOf: the grammar cannot count matches). A schema ridge
// refuses (a keyword it does not compile, such as uniqueItems or a remote $ref) must be
// refused with an error naming it; those are counted, not compared.
// usage: node tests/grammar/json_schema_suite.mjs --ridge build/ridge
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { createRequire } from "node:module";

const RIDGE = process.argv[process.argv.indexOf("--ridge") + 1] ?? "build/ridge";
const req = createRequire(import.meta.url);
const suiteDir = path.join(path.dirname(req.resolve("json-schema-test-suite/package.json")), "tests", "draft4");
// The keywords ridge compiles whose meaning draft 4 already had.
const FILES = ["additionalItems", "additionalProperties", "allOf", "anyOf", "default", "definitions", "enum", "items",
               "maxItems", "maxLength", "maximum", "minItems", "minLength", "minimum", "oneOf", "pattern", "properties",
               "ref", "required", "type"];

function resolve(root, s) {
  for (let i = 0; s && typeof s === "object" && typeof s.$ref === "string" && i < 8; ++i) {
    if (s.$ref === "#") s = root;
    else if (s.$ref.startsWith("#/")) s = s.$ref.slice(2).split("/").map((p) => decodeURIComponent(p).replace(/~1/g, "/").replace(/~0/g, "~"))
                                      .reduce((o, k) => (o == null ? o : o[k]), root);
    else return undefined;
  }
  return s;
}
// The document with each object's keys in its schema's properties order, recursively.
function canonical(root, s, d) {
  s = resolve(root, s);
  if (Array.isArray(d)) {
    return d.map((x, i) => {
      const it = s && (Array.isArray(s.items) ? (i < s.items.length ? s.items[i] : s.additionalItems) : s.items);
      return canonical(root, typeof it === "object" ? it : undefined, x);
    });
  }
  if (d === null || typeof d !== "object") return d;
  const props = (s && typeof s.properties === "object") ? s.properties : {};
  const out = {};
  for (const k of Object.keys(props)) if (k in d) out[k] = canonical(root, props[k], d[k]);
  for (const k of Object.keys(d)) if (!(k in out)) {
    const ap = s && typeof s.additionalProperties === "object" ? s.additionalProperties : undefined;
    out[k] = canonical(root, ap, d[k]);
  }
  return out;
}
function numbersFit(d) {
  if (typeof d === "number") {
    const t = JSON.stringify(d);
    const m = /^-?(\d+)(?:\.(\d+))?(?:[eE][-+]?(\d+))?$/.exec(t);
    return !!m && m[1].length <= 16 && (!m[2] || m[2].length <= 16) && (!m[3] || m[3].length <= 2);
  }
  if (Array.isArray(d)) return d.every(numbersFit);
  if (d && typeof d === "object") return Object.values(d).every(numbersFit);
  return true;
}

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "ridge-jsts-"));
let compared = 0, skipped = 0, refused = 0, wrong = 0;
for (const f of FILES) {
  const groups = JSON.parse(fs.readFileSync(path.join(suiteDir, `${f}.json`), "utf8"));
  for (const g of groups) {
    const cases = g.tests.filter((t) => {
      const ok = numbersFit(t.data) && !(f === "oneOf" && /both/.test(t.description));
      if (!ok) ++skipped;
      return ok;
    });
    if (!cases.length) continue;
    fs.writeFileSync(path.join(tmp, "s.json"), JSON.stringify(g.schema));
    fs.writeFileSync(path.join(tmp, "t.jsonl"), cases.map((t) => JSON.stringify(JSON.stringify(canonical(g.schema, g.schema, t.data)))).join("\n") + "\n");
    const out = execFileSync(RIDGE, ["grammar", "accepts", "--no-strict", "--json-schema", path.join(tmp, "s.json"),
                                     "--texts", path.join(tmp, "t.jsonl")], { encoding: "utf8" }).trim().split("\n");
    if (out[0].startsWith("error ")) {
      ++refused;
      console.log(`refused  ${f}: ${g.description}: ${out[0].slice(6)}`);
      continue;
    }
    cases.forEach((t, i) => {
      ++compared;
      if ((out[i] === "1") !== t.valid) {
        ++wrong;
        console.log(`WRONG    ${f}: ${g.description} / ${t.description}: ridge says ${out[i] === "1" ? "valid" : "invalid"}, ` +
                    `the suite ${t.valid ? "valid" : "invalid"}: ${JSON.stringify(t.data)}`);
      }
    });
  }
}
fs.rmSync(tmp, { recursive: true, force: true });
console.log(`JSON-Schema-Test-Suite draft 4: ${compared} documents compared, ${wrong} wrong; ${refused} schemas refused by name; ${skipped} documents left out`);
process.exit(wrong ? 1 : 0);
