#!/usr/bin/env python3
"""Load benchmark for `molla serve` (and llama.cpp's llama-server beside it, same model, same run).

Drives C concurrent streams (default 1, 4, 16), each sending R streamed chat completions one after
another, and reports per concurrency: aggregate generated tok/s (completion tokens over wall time),
time to first token and inter-token latency p50/p95 (over all requests; ITL is the gap between
streamed chunks, one token each), and the slowest stream's ITL p95 over the fastest's.

    python3 scripts/load_bench.py [--bin target/release/molla] [--model PATH] [--streams 1,4,16]
        [--tokens 64] [--requests 2] [--threads N] [--llama-server PATH] [--out FILE.md]

molla runs with --parallel equal to the largest stream count; llama-server with -np likewise
and the same context per slot. Uses only the standard library (raw HTTP, SSE parsed by hand).
"""

import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODELS = Path(os.environ.get("MOLLA_MODELS", Path.home() / ".cache/molla/models"))
TOPICS = ["a dragon", "the sea", "a robot", "a city at night", "an old library", "a storm",
          "a train journey", "a garden", "the moon", "a lost key", "a mountain", "a market",
          "a lighthouse", "a forest", "a violin", "a snowfall"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_health(port, proc, timeout=300):
    t = time.time()
    while time.time() - t < timeout:
        if proc.poll() is not None:
            sys.exit(f"server exited with {proc.returncode}")
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    sys.exit("server did not become healthy")


def one_request(port, i, tokens):
    """One streamed chat completion: (ttft, [inter-chunk gaps], completion tokens)."""
    body = json.dumps({"model": "m", "max_tokens": tokens, "temperature": 0, "stream": True,
                       "ignore_eos": True,  # both servers take llama.cpp's flag: equal lengths
                       "stream_options": {"include_usage": True},
                       "messages": [{"role": "user", "content":
                                     f"Write a long story about {TOPICS[i % len(TOPICS)]}."}]})
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.perf_counter()
    c.request("POST", "/v1/chat/completions", body, {"content-type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {r.read()[:200]}")
    ttft, last, gaps, n = None, None, [], 0
    while True:
        line = r.fp.readline()
        if not line:
            break
        line = line.strip()
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            break
        ev = json.loads(data)
        if ev.get("usage"):
            n = ev["usage"]["completion_tokens"]
        ch = ev.get("choices") or []
        if ch and (ch[0].get("delta") or {}).get("content"):
            now = time.perf_counter()
            if ttft is None:
                ttft = now - t0
            else:
                gaps.append(now - last)
            last = now
    c.close()
    return ttft or 0.0, gaps, n


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def run_level(port, streams, requests, tokens):
    results = [[] for _ in range(streams)]
    errors = []

    def worker(s):
        for k in range(requests):
            try:
                results[s].append(one_request(port, s * requests + k, tokens))
            except Exception as e:  # counted, reported
                errors.append(str(e))

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker, args=(s,)) for s in range(streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    flat = [r for rs in results for r in rs]
    toks = sum(r[2] for r in flat)
    ttfts = [r[0] for r in flat]
    gaps = [g for r in flat for g in r[1]]
    per_stream_p95 = [pct([g for r in rs for g in r[1]], 95) for rs in results if rs]
    spread = max(per_stream_p95) / min(per_stream_p95) if per_stream_p95 and min(per_stream_p95) > 0 else float("nan")
    return {"streams": streams, "tok_s": toks / wall, "tokens": toks, "wall_s": wall,
            "ttft_p50": pct(ttfts, 50), "ttft_p95": pct(ttfts, 95),
            "itl_p50": pct(gaps, 50), "itl_p95": pct(gaps, 95), "itl_spread": spread,
            "errors": len(errors)}


def bench(name, args_list, port, levels, requests, tokens):
    proc = subprocess.Popen(args_list, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rows = []
    try:
        wait_health(port, proc)
        one_request(port, 0, 8)  # warm-up
        for c in levels:
            r = run_level(port, c, requests, tokens)
            r["server"] = name
            rows.append(r)
            print(f"{name:>12} {c:>3} streams: {r['tok_s']:7.1f} tok/s  TTFT p50 {r['ttft_p50']*1e3:7.1f} ms"
                  f"  ITL p50 {r['itl_p50']*1e3:6.1f} p95 {r['itl_p95']*1e3:6.1f} ms"
                  f"  spread {r['itl_spread']:.2f}  errors {r['errors']}", flush=True)
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=str(ROOT / "target/release/molla"))
    ap.add_argument("--model", default=str(MODELS / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--streams", default="1,4,16")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--requests", type=int, default=2, help="requests per stream, one after another")
    ap.add_argument("--ctx", type=int, default=1024, help="context per slot")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--llama-server", default=os.environ.get("LLAMA_SERVER"),
                    help="llama.cpp's llama-server binary, run beside molla")
    ap.add_argument("--molla-args", default="",
                    help="more `molla serve` flags, e.g. \"--mix-max 64\"; several settings "
                         "separated by ';' are each benched (\";--mix-max 64\": without and with)")
    ap.add_argument("--out", help="also write a markdown table here")
    a = ap.parse_args()
    levels = [int(x) for x in a.streams.split(",")]
    np_ = max(levels)
    rows = []
    port = free_port()
    cmd = [a.bin, "serve", "--model", a.model, "--port", str(port), "--ctx", str(a.ctx),
           "--parallel", str(np_), "--device", a.device, "--queue", "1024", "--log", "warn",
           "--max-per-client", "0"]
    if a.threads:
        cmd += ["--threads", str(a.threads)]
    for extra in a.molla_args.split(";"):
        name = f"molla {extra.strip()}".strip()
        port = free_port()
        run = cmd[:]
        run[run.index("--port") + 1] = str(port)
        rows += bench(name, run + extra.split(), port, levels, a.requests, a.tokens)
    if a.llama_server:
        port = free_port()
        cmd = [a.llama_server, "-m", a.model, "--port", str(port), "-np", str(np_),
               "-c", str(a.ctx * np_), "--no-webui", "-ngl", "0" if a.device == "cpu" else "99"]
        if a.threads:
            cmd += ["-t", str(a.threads)]
        rows += bench("llama-server", cmd, port, levels, a.requests, a.tokens)
    head = ("| server | streams | tok/s (aggregate) | TTFT p50 / p95 ms | ITL p50 / p95 ms "
            "| slowest/fastest ITL p95 | errors |\n|---|---|---|---|---|---|---|\n")
    table = head + "".join(
        f"| {r['server']} | {r['streams']} | {r['tok_s']:.1f} | {r['ttft_p50']*1e3:.0f} / "
        f"{r['ttft_p95']*1e3:.0f} | {r['itl_p50']*1e3:.1f} / {r['itl_p95']*1e3:.1f} | "
        f"{r['itl_spread']:.2f} | {r['errors']} |\n" for r in rows)
    print(table)
    if a.out:
        Path(a.out).write_text(table)
    sys.exit(1 if any(r["errors"] for r in rows) else 0)


if __name__ == "__main__":
    main()
