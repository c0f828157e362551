"""KV-cache events from a running `ridge serve --kv-events-endpoint`, decoded by a decoder
written here from vLLM's layout (vllm/distributed/kv_events.py), with pyzmq and msgpack
(Debian's python3-zmq and python3-msgpack), not by ridge's code:

  [topic, seq (8 bytes big-endian), payload] on PUB; replay: ROUTER, request = the first
  seq wanted (8 bytes), reply = [seq, payload] per buffered batch, then [-1, b""];
  payload = [ts, [event...], data_parallel_rank?]; an event is, as current vLLM writes it,
  a map {"type": "BlockStored", "block_hashes", "parent_block_hash", "token_ids",
  "block_size", "lora_id", "medium", ...} | {"type": "BlockRemoved", "block_hashes",
  "medium"} | {"type": "AllBlocksCleared"}, or in vLLM's layout before 2026 (array-like
  msgspec structs, as its examples/online_serving/kv_events_subscriber.py shows) the same
  fields in that order after the tag: ["BlockStored", block_hashes, ...].

Checks: sequence numbers from 0 without a gap once replay has filled the start (the
startup batch is published before this subscriber joins, so replay is exercised on every
run), replayed payloads equal the published ones, the first batch clears the cache, every
stored chain continues a block the cache holds (or starts a prompt), its token ids are
whole blocks of the prompts sent, every prompt's full blocks are found as a chain from the
root, every removed block was stored and not yet removed, and a pool smaller than the
requests evicts. Also /metrics' vLLM-named series.

usage: python3 kv_events.py HTTP_PORT PUB_ENDPOINT REPLAY_ENDPOINT BLOCK_SIZE [map|array]
"""
import json
import random
import sys
import time
import urllib.request

import msgpack
import zmq

port, pub_ep, replay_ep, bs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
layout = sys.argv[5] if len(sys.argv) > 5 else "map"
FIELDS = {"BlockStored": ["block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium"],
          "BlockRemoved": ["block_hashes", "medium"], "AllBlocksCleared": []}


def event(ev):
    """(tag, {field: value}) of one event in the expected layout."""
    if layout == "map":
        check(isinstance(ev, dict) and "type" in ev, f"not a tagged map: {ev!r}")
        return ev.get("type"), ev
    check(isinstance(ev, list) and ev and isinstance(ev[0], str), f"not a tag-first array: {ev!r}")
    names = FIELDS.get(ev[0], [])
    check(len(ev) >= 1 + len(names), f"{ev[0]} with {len(ev) - 1} fields")
    return ev[0], dict(zip(names, ev[1:]))
fails = []


def check(ok, what):
    if not ok:
        fails.append(what)
        print("FAIL", what)


def post(path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


ctx = zmq.Context()
sub = ctx.socket(zmq.SUB)
sub.connect(pub_ep)
sub.setsockopt(zmq.SUBSCRIBE, b"")
time.sleep(0.5)  # the subscription reaches the publisher

rng = random.Random(7)
prompts = []
for i in range(40):  # distinct first tokens: each prompt its own chain from the root
    n = rng.randint(2 * bs, 5 * bs)
    prompts.append([10 + i] + [rng.randint(3, 200) for _ in range(n - 1)])
for p in prompts:
    post("/v1/completions", {"prompt": p, "max_tokens": 4, "temperature": 0})
# One prompt again: its blocks are hits now, no new chain.
post("/v1/completions", {"prompt": prompts[-1], "max_tokens": 4, "temperature": 0})

batches = {}  # seq -> payload
deadline = time.time() + 3
while time.time() < deadline:
    if sub.poll(300):
        topic, seq, payload = sub.recv_multipart()
        check(topic == b"", f"topic {topic!r}")
        batches[int.from_bytes(seq, "big", signed=True)] = payload
        deadline = time.time() + 1
check(len(batches) > 0, "no batch received")

# Replay from 0: fills what was published before the subscription.
dealer = ctx.socket(zmq.DEALER)
dealer.connect(replay_ep)
dealer.send_multipart([b"", b"malformed"])  # over 8 bytes: ignored, the publisher goes on
dealer.send_multipart([b"", (0).to_bytes(8, "big")])
replayed = {}
while True:
    check(dealer.poll(5000) != 0, "replay did not answer")
    if fails and fails[-1] == "replay did not answer":
        break
    empty, seq, payload = dealer.recv_multipart()
    s = int.from_bytes(seq, "big", signed=True)
    if s == -1:
        check(payload == b"", "the end marker carries a payload")
        break
    replayed[s] = payload
check(not batches or min(batches) > 0, "the startup batch reached a subscriber that joined later (replay not exercised)")
for s, p in batches.items():
    check(replayed.get(s) == p, f"replayed batch {s} differs from the published one")
seqs = sorted(set(batches) | set(replayed))
check(seqs == list(range(len(seqs))), f"sequence numbers with gaps: {seqs[:5]}...")

# Decode every batch in order.
stored = {}  # hash -> (parent, tokens of the block)
removed = set()
n_removed = 0
first = True
decoded = {}  # seq -> [(tag, fields)]
for s in seqs:
    batch = msgpack.unpackb(replayed.get(s, batches.get(s)), raw=False)
    check(isinstance(batch, list) and len(batch) >= 2, f"batch {s}: {batch!r}")
    ts, events = batch[0], batch[1]
    if layout == "map":
        check(len(batch) == 3 and batch[2] == 0, f"batch {s}: data_parallel_rank {batch[2:]!r}")
    check(isinstance(ts, float) and abs(ts - time.time()) < 600, f"batch {s}: ts {ts}")
    decoded[s] = [event(ev) for ev in events]
    for tag, f in decoded[s]:
        if first:
            check(tag == "AllBlocksCleared" and len(f) <= 1, f"the first event is {tag} {f!r}")
            first = False
            continue
        if tag == "BlockStored":
            hashes, parent, tokens = f["block_hashes"], f["parent_block_hash"], f["token_ids"]
            check(f["block_size"] == bs, f"block_size {f['block_size']}")
            check(f["lora_id"] is None and f["medium"] == "GPU", f"lora_id {f['lora_id']!r}, medium {f['medium']!r}")
            check(len(tokens) == bs * len(hashes), f"{len(tokens)} tokens for {len(hashes)} blocks")
            check(parent is None or parent in stored, f"parent {parent} not held")
            for i, h in enumerate(hashes):
                check(isinstance(h, int) and 0 <= h < 2**63, f"hash {h!r}")
                check(h not in stored, f"block {h} stored twice")
                stored[h] = (parent if i == 0 else hashes[i - 1], tokens[i * bs:(i + 1) * bs])
                removed.discard(h)
        elif tag == "BlockRemoved":
            check(f["medium"] == "GPU", f"medium {f['medium']!r}")
            for h in f["block_hashes"]:
                check(h in stored, f"removed block {h} was not stored")
                stored.pop(h, None)
                removed.add(h)
                n_removed += 1
        else:
            check(tag == "AllBlocksCleared", f"unknown event {tag!r}")
            stored.clear()

# Every prompt's full blocks were stored as a chain from the root (evicted since or not):
# rebuild the tree from every stored event, removals ignored.
ever = {}
for s in seqs:
    for tag, f in decoded[s]:
        if tag == "BlockStored":
            hs, toks = f["block_hashes"], f["token_ids"]
            for i, h in enumerate(hs):
                ever[(f["parent_block_hash"] if i == 0 else hs[i - 1], tuple(toks[i * bs:(i + 1) * bs]))] = h
for i, p in enumerate(prompts):
    parent = None
    for b in range(len(p) // bs):
        h = ever.get((parent, tuple(p[b * bs:(b + 1) * bs])))
        if h is None:
            check(False, f"prompt {i}: block {b} was never stored under its prefix")
            break
        parent = h
check(n_removed > 0, "a pool smaller than the requests evicted nothing")
print(f"kv events: {len(seqs)} batches ({len(seqs) - len(batches)} by replay only), "
      f"{len(ever)} blocks stored, {n_removed} removed, {len(stored)} held at the end")

with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
    text = r.read().decode()
for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
             "vllm:gpu_cache_usage_perc", "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total"):
    check(any(l.startswith(name + "{") for l in text.splitlines()), f"/metrics has no {name}")
hits = [float(l.rsplit(" ", 1)[1]) for l in text.splitlines() if l.startswith("vllm:prefix_cache_hits_total{")]
check(hits and hits[0] > 0, "no prefix-cache hit counted (the repeated prompt)")

sys.exit(1 if fails else 0)
