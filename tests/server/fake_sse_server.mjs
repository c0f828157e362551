// A fake OpenAI-compatible server for testing `ridge bench serve` without a model: it
// streams max_tokens one-character tokens with known delays, so the client's TTFT and
// ITL can be checked against them. Node 20, no dependencies.
//
//   node tests/server/fake_sse_server.mjs [--port 0] [--ttft-ms 20] [--itl-ms 5]
//        [--crlf] [--fragment] [--fail-every N] [--stall] [--no-usage]
//
// Prints the port it listens on as the first line of stdout. GET /stats answers with
// the number of requests served and the peak number of requests in flight at once.
// --crlf ends lines with \r\n; --fragment splits every event into two writes at a random
// byte (so into two HTTP chunks); --fail-every N answers every Nth request with HTTP 500;
// --stall accepts completions and never answers; --no-usage omits the usage chunk.
import http from 'node:http';

const argv = process.argv.slice(2);
const opt = (name, dflt) => {
  const i = argv.indexOf(name);
  return i >= 0 ? argv[i + 1] : dflt;
};
const has = (name) => argv.includes(name);
const port = Number(opt('--port', '0'));
const ttftMs = Number(opt('--ttft-ms', '20'));
const itlMs = Number(opt('--itl-ms', '5'));
const failEvery = Number(opt('--fail-every', '0'));
const eol = has('--crlf') ? '\r\n' : '\n';
const fragment = has('--fragment');
const stall = has('--stall');
const usage = !has('--no-usage');

let served = 0, inFlight = 0, peak = 0;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function sendJson(res, status, obj) {
  const body = JSON.stringify(obj);
  res.writeHead(status, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) });
  res.end(body);
}

async function complete(req, res, body, chat) {
  const n = ++served;
  if (failEvery > 0 && n % failEvery === 0) {
    return sendJson(res, 500, { error: { message: `fake failure of request ${n}`, type: 'server_error' } });
  }
  const nOut = body.max_tokens;
  const promptTokens = chat ? JSON.stringify(body.messages).length : body.prompt?.length;
  if (!Number.isInteger(nOut) || nOut < 1 || body.stream !== true || promptTokens === undefined) {
    return sendJson(res, 400, { error: { message: 'want stream: true, max_tokens >= 1 and a prompt', type: 'invalid_request_error' } });
  }
  if (chat === false && !body.prompt.every((t) => Number.isInteger(t) && t >= 10 && t < 1000)) {
    return sendJson(res, 400, { error: { message: 'prompt ids outside [10, 1000)', type: 'invalid_request_error' } });
  }
  if (stall) return; // never answers; the client's timeout must end it
  let closed = false;
  res.on('close', () => { closed = true; });
  res.writeHead(200, { 'Content-Type': 'text/event-stream', 'Cache-Control': 'no-cache' });
  const send = (obj) => {
    const ev = `data: ${typeof obj === 'string' ? obj : JSON.stringify(obj)}${eol}${eol}`;
    if (!fragment) return res.write(ev);
    const cut = 1 + Math.floor(Math.random() * (ev.length - 1));
    res.write(ev.slice(0, cut));
    res.write(ev.slice(cut));
  };
  const base = { id: `cmpl-${n}`, object: chat ? 'chat.completion.chunk' : 'text_completion', created: 0, model: 'fake' };
  const choice = (text, finish) => chat
    ? { index: 0, delta: finish ? {} : { content: text }, finish_reason: finish }
    : { index: 0, text, logprobs: null, finish_reason: finish };
  res.write(`: a comment the client must skip${eol}${eol}`);
  if (chat) send({ ...base, choices: [{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }] });
  await sleep(ttftMs);
  for (let i = 0; i < nOut && !closed; ++i) {
    if (i > 0) await sleep(itlMs);
    send({ ...base, choices: [choice('x', null)] });
  }
  if (closed) return;
  send({ ...base, choices: [choice('', 'length')] });
  if (usage) {
    send({ ...base, choices: [], usage: { prompt_tokens: promptTokens, completion_tokens: nOut, total_tokens: promptTokens + nOut } });
  }
  send('[DONE]');
  res.end();
}

const server = http.createServer((req, res) => {
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', async () => {
    if (req.method === 'GET' && req.url === '/v1/models') {
      return sendJson(res, 200, { object: 'list', data: [{ id: 'fake', object: 'model', owned_by: 'ridge-tests' }] });
    }
    if (req.method === 'GET' && req.url === '/stats') return sendJson(res, 200, { served, peak, inFlight });
    const chat = req.url === '/v1/chat/completions';
    if (req.method !== 'POST' || (req.url !== '/v1/completions' && !chat)) {
      return sendJson(res, 404, { error: { message: `no route ${req.method} ${req.url}`, type: 'not_found' } });
    }
    let body;
    try {
      body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
    } catch {
      return sendJson(res, 400, { error: { message: 'body is not JSON', type: 'invalid_request_error' } });
    }
    peak = Math.max(peak, ++inFlight);
    res.on('close', () => { --inFlight; });
    await complete(req, res, body, chat);
  });
});
server.keepAliveTimeout = 1000;
server.listen(port, '127.0.0.1', () => {
  console.log(server.address().port);
});
