"""`ridge router` in front of two replicas, against round robin in the same run, then with a
replica killed mid-run. Python's standard library only (HTTP, threads).

Workload: NPREFIX shared prefixes of PREFIX_LEN token ids, each request one of them (in a
random order) plus a unique suffix, streamed (stream=true), CONC at a time. Each replica's
KV pool holds about half of the prefixes: round robin sends every prefix to both replicas,
which then evict one another's; the prefix-aware router keeps each prefix on one replica.

Phase 1 and 2 (each router over its own two fresh replicas, the same requests):
  - the pair's prefix-cache hit rate (their vllm:prefix_cache_hits_total / queries) must
    be higher through the prefix-aware router, and its mean TTFT lower;
Phase 3 (the prefix-aware router): one replica is killed (SIGKILL) while requests run;
  every request that had not received its first token when it failed must have been
  retried on the other and completed: a request may fail only after its first token.

usage: python3 router.py RR_URL PREFIX_URL 'RR_REPLICA_URLS' 'PREFIX_REPLICA_URLS' KILL_PID
  (replica URLs space-separated; KILL_PID is one of the prefix router's replicas)
"""
import http.client
import json
import os
import random
import signal
import statistics
import sys
import threading
import time
import urllib.parse
import urllib.request

rr_url, px_url = sys.argv[1], sys.argv[2]
rr_reps, px_reps = sys.argv[3].split(), sys.argv[4].split()
kill_pid = int(sys.argv[5])
NPREFIX, PREFIX_LEN, SUFFIX_LEN, NREQ, CONC = 8, 512, 32, 48, 4
fails = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        fails.append(what)


rng = random.Random(11)
prefixes = [[rng.randint(100, 30000) for _ in range(PREFIX_LEN)] for _ in range(NPREFIX)]
order = [i % NPREFIX for i in range(NREQ)]
rng.shuffle(order)
prompts = [prefixes[p] + [rng.randint(100, 30000) for _ in range(SUFFIX_LEN)] for p in order]


def stream(url, prompt):
    """(ttft seconds or None, ok, saw_first_token) of one streamed completion."""
    u = urllib.parse.urlparse(url)
    t0 = time.time()
    ttft, first, done, err = None, False, False, False
    try:
        c = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
        c.request("POST", "/v1/completions", json.dumps(
            {"prompt": prompt, "max_tokens": 4, "temperature": 0, "stream": True, "ignore_eos": True}),
            {"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            return None, False, False
        for line in r:
            line = line.decode().strip()
            if not line.startswith("data: "):
                continue
            data = line[6:]
            if data == "[DONE]":
                done = True
                break
            ev = json.loads(data)
            if "error" in ev:
                err = True
                continue
            if not first and ev["choices"][0].get("text"):
                first, ttft = True, time.time() - t0
        c.close()
    except Exception:
        pass
    return ttft, done and not err, first


def run(url, on_half=None):
    results = [None] * NREQ
    nxt = [0]
    lock = threading.Lock()

    def worker():
        while True:
            with lock:
                i = nxt[0]
                nxt[0] += 1
                if i == NREQ // 3 and on_half:
                    on_half()
            if i >= NREQ:
                return
            results[i] = stream(url, prompts[i])

    ts = [threading.Thread(target=worker) for _ in range(CONC)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    return results


def scrape(url):
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    v = {}
    for l in text.splitlines():
        if l.startswith("vllm:prefix_cache_"):
            name = l.split("{")[0]
            v[name] = v.get(name, 0) + float(l.rsplit(" ", 1)[1])
    return v


def hit_rate(reps):
    h = q = 0
    for r in reps:
        m = scrape(r)
        h += m.get("vllm:prefix_cache_hits_total", 0)
        q += m.get("vllm:prefix_cache_queries_total", 0)
    return h / q if q else 0.0


res_rr = run(rr_url)
res_px = run(px_url)
for name, res in (("round robin", res_rr), ("prefix-aware", res_px)):
    check(all(ok for _, ok, _ in res), f"{name}: every request completed")
hr_rr, hr_px = hit_rate(rr_reps), hit_rate(px_reps)
tt_rr = statistics.mean(t for t, _, _ in res_rr if t is not None)
tt_px = statistics.mean(t for t, _, _ in res_px if t is not None)
print(f"router: prefix-cache hit rate {hr_rr:.3f} (round robin) vs {hr_px:.3f} (prefix-aware); "
      f"mean TTFT {tt_rr * 1000:.1f} ms vs {tt_px * 1000:.1f} ms")
check(hr_px > hr_rr, "the prefix-aware router's replicas hit their prefix caches more often")
check(tt_px < tt_rr, "the prefix-aware router's mean TTFT is lower")


def router_metrics(url):
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {}
    for l in text.splitlines():
        if l.startswith("ridge_router:"):
            out[l.rsplit(" ", 1)[0]] = float(l.rsplit(" ", 1)[1])
    return out


m = router_metrics(px_url)
check(m.get("ridge_router:matched_tokens_total", 0) > 0, "the router found cached prefixes through the events")

# Text prompts: the router asks a replica's /tokenize, and routes the same text again to
# the replica that has its blocks; distinct texts take turns over idle replicas.
def complete(url, body):
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


text = " ".join(f"word{i}" for i in range(120))
before = router_metrics(px_url)
complete(px_url, {"prompt": text, "max_tokens": 2, "temperature": 0})
time.sleep(0.5)  # its blocks' events reach the router
mid = router_metrics(px_url)
complete(px_url, {"prompt": text, "max_tokens": 2, "temperature": 0})
after = router_metrics(px_url)
gain = after["ridge_router:matched_tokens_total"] - mid["ridge_router:matched_tokens_total"]
check(gain >= 64, f"a text prompt sent again is routed to the replica holding it ({gain:g} tokens matched)")
per = [k for k in after if k.startswith("ridge_router:requests_total{")]
moved = [after[k] - before.get(k, 0) for k in per]
check(max(moved) == 2, f"both went to one replica ({moved})")
before = after
for i in range(4):
    complete(px_url, {"prompt": f"text number {i} " + " ".join(str(i * 7 + k) for k in range(40)),
                      "max_tokens": 2, "temperature": 0})
after = router_metrics(px_url)
moved = [after[k] - before.get(k, 0) for k in per]
check(min(moved) >= 1, f"distinct texts, one at a time, took turns over the replicas ({moved})")

# Phase 3: a replica killed a third of the way through.
killed = []
res_k = run(px_url, on_half=lambda: (os.kill(kill_pid, signal.SIGKILL), killed.append(time.time())))
check(bool(killed), "a replica was killed mid-run")
lost_early = [i for i, (_, ok, first) in enumerate(res_k) if not ok and not first]
lost_late = [i for i, (_, ok, first) in enumerate(res_k) if not ok and first]
print(f"router: with a replica killed, {NREQ - len(lost_early) - len(lost_late)} of {NREQ} completed, "
      f"{len(lost_late)} broke off after their first token")
check(not lost_early, f"no request lost before its first token (lost: {lost_early})")
with urllib.request.urlopen(px_url + "/metrics", timeout=10) as r:
    m = r.read().decode()
health = [l.rsplit(" ", 1)[1] for l in m.splitlines() if l.startswith("ridge_router:replica_healthy{")]
check(sorted(health) == ["0", "1"], f"the killed replica is out of the rotation, the other in it ({health})")
sys.exit(1 if fails else 0)
