#!/usr/bin/env python3
"""Writes clicks.jsonl, the windows example's input: click events in the order they arrive,
with their event time `ts` (milliseconds). Most arrive within a few seconds of when they
happened; some come 5 to 40 seconds late, a few several minutes late. Users click in bursts
(sessions) with quiet spells of more than 30 minutes between them. Deterministic: run it to
get the same file."""

import json
import random

rng = random.Random(14)
START = 1_764_633_600_000  # 2025-12-02T00:00:00Z
PAGES = ["/", "/docs", "/docs/install", "/docs/windows", "/pricing", "/blog", "/blog/wasm",
         "/login", "/signup", "/search", "/ünïcode", "/about"]
USERS = [f"u{i:02}" for i in range(60)]

events = []
for user in USERS:
    t = START + rng.randrange(0, 40 * 60_000)
    while t < START + 4 * 3_600_000:
        for _ in range(rng.randrange(3, 30)):  # a burst
            events.append({"ts": t, "user": user, "page": rng.choice(PAGES),
                           "action": rng.choice(["view", "view", "click", "buy"])})
            t += rng.randrange(2_000, 120_000)
        t += rng.randrange(31 * 60_000, 90 * 60_000)  # quiet
events.sort(key=lambda e: e["ts"])

def arrival(e):
    r = rng.random()
    if r < 0.005:
        delay = rng.randrange(120_000, 600_000)
    elif r < 0.035:
        delay = rng.randrange(5_000, 40_000)
    else:
        delay = rng.randrange(0, 3_000)
    return e["ts"] + delay

arrivals = sorted((arrival(e), i, e) for i, e in enumerate(events))
with open("clicks.jsonl", "w", encoding="utf-8") as f:
    for _, _, e in arrivals:
        f.write(json.dumps(e, ensure_ascii=False, separators=(",", ":")) + "\n")
print(f"{len(arrivals)} events")
