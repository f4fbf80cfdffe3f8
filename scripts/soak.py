#!/usr/bin/env python3
"""Soak test for `molla serve`: C clients for D seconds, each looping over a random mix of
streamed, plain, and cancelled (hung up after a few chunks) chat completions. Fails on any error
(a non-200, a malformed stream, a truncated answer) or when the server's RSS at the end exceeds
its RSS after the warm-up by more than --rss-slack (default 5%).

    python3 scripts/soak.py [--bin target/release/molla] [--clients 32] [--seconds 600]
        [--parallel 8]
"""

import argparse
import http.client
import json
import os
import random
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODELS = Path(os.environ.get("MOLLA_MODELS", Path.home() / ".cache/molla/models"))
QUESTIONS = ["What is the capital of France?", "Write a poem about rain.", "Count to ten.",
             "Explain gravity briefly.", "Name three fruits.", "Tell me a joke."]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_kib(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def request(port, rng, stats):
    mode = rng.choice(["stream", "plain", "cancel"])
    body = {"messages": [{"role": "user", "content": rng.choice(QUESTIONS)}],
            "max_tokens": rng.randint(4, 48), "temperature": rng.choice([0, 0.8]),
            "stream": mode != "plain"}
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    c.request("POST", "/v1/chat/completions", json.dumps(body),
              {"content-type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {r.read()[:200]!r}")
    if mode == "plain":
        v = json.loads(r.read())
        u = v["usage"]
        assert u["completion_tokens"] <= body["max_tokens"], v
        assert v["choices"][0]["finish_reason"] in ("stop", "length"), v
    elif mode == "stream":
        done, finish = False, None
        for line in r:
            line = line.strip()
            if line == b"data: [DONE]":
                done = True
                break
            if line.startswith(b"data:"):
                ev = json.loads(line[5:])
                assert "error" not in ev, ev
                ch = ev.get("choices") or []
                if ch and ch[0].get("finish_reason"):
                    finish = ch[0]["finish_reason"]
        assert done and finish in ("stop", "length"), (done, finish)
    else:
        for _ in range(rng.randint(1, 4)):
            if not r.fp.readline():
                break
    c.close()
    stats[mode] += 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=str(ROOT / "target/release/molla"))
    ap.add_argument("--model", default=str(MODELS / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--warmup", type=float, default=None, help="seconds (default: a tenth)")
    ap.add_argument("--parallel", type=int, default=8)
    ap.add_argument("--rss-slack", type=float, default=0.05)
    a = ap.parse_args()
    port = free_port()
    proc = subprocess.Popen([a.bin, "serve", "--model", a.model, "--port", str(port),
                             "--device", "cpu", "--ctx", "1024", "--parallel", str(a.parallel),
                             "--queue", str(4 * a.clients), "--log", "warn"])
    t = time.time()
    while True:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                break
        except OSError:
            if proc.poll() is not None or time.time() - t > 120:
                sys.exit("server did not start")
            time.sleep(0.2)
    stats = {"stream": 0, "plain": 0, "cancel": 0}
    errors = []
    end = time.time() + a.seconds
    warm_until = time.time() + (a.warmup if a.warmup is not None else a.seconds / 10)

    def client(i):
        rng = random.Random(i)
        while time.time() < end:
            try:
                request(port, rng, stats)
            except Exception as e:
                errors.append(repr(e))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(a.clients)]
    for th in threads:
        th.start()
    time.sleep(max(0.0, warm_until - time.time()))
    rss_warm = rss_kib(proc.pid)
    for th in threads:
        th.join()
    time.sleep(0.5)
    rss_end = rss_kib(proc.pid)
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    c.request("GET", "/metrics")
    metrics = c.getresponse().read().decode()
    proc.terminate()
    code = proc.wait(60)
    active = [l for l in metrics.splitlines() if l.startswith("molla_active_sequences")]
    print(f"requests {stats}, errors {len(errors)}, RSS after warm-up {rss_warm} KiB, "
          f"at the end {rss_end} KiB ({(rss_end / max(rss_warm, 1) - 1) * 100:+.1f}%), "
          f"{active}, exit {code}")
    for e in errors[:5]:
        print("  error:", e)
    ok = (not errors and rss_end <= rss_warm * (1 + a.rss_slack) and code == 0
          and active == ["molla_active_sequences 0"])
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
