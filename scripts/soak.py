#!/usr/bin/env python3
"""Soak test for `molla serve` (issue #7): C clients (32) for a warm-up (60 s) and then D seconds
(600), each looping over a random mix of request kinds:

    chat_stream      POST /v1/chat/completions, stream (half of them with include_usage)
    chat             POST /v1/chat/completions, plain
    completion       POST /v1/completions, plain
    messages_stream  POST /v1/messages (Anthropic), stream
    messages         POST /v1/messages, plain
    cancel           a stream (any of the three routes) hung up after 1-4 events, or (one in
                     four) a plain chat request abandoned right after it was sent

An error is any non-200 on these valid requests, a malformed body or SSE stream (bad JSON, an
`error` event, a missing or doubled finish, no `[DONE]` / `message_stop`, bytes after the end),
too many tokens, or a connection error. Each client connects from its own loopback address
(127.0.0.2, 127.0.0.3, ...), so the server's per-client cap (`--max-per-client`, 8) holds as in
production and a leaked cap slot would show up as a 429.

Before the load, every slot's KV cache is filled once past the longest request of the load
(`--no-prime` skips it): the caches are zeroed lazily, so otherwise RSS creeps for minutes as
slots first reach new positions (bounded; no leak; see prime()). The server's RSS (VmRSS, and
RssAnon, of /proc/PID/status) is sampled every few seconds; the value at the end of the warm-up
is compared with the value at the end of the load, with the largest value after the warm-up, and
with the least-squares trend over the samples after the warm-up (and over their second half).

Then the drain check: every client sends one more request (long ones: `--drain-tokens`, EOS
ignored where the API allows), and once the server reports all of them queued or running,
SIGTERM. Every one of those requests must complete whole (four in 32 hang up after SIGTERM
instead, to show a departing client does not hold up the drain); the process must exit 0; and
new requests after SIGTERM must be refused (connection refused or closed before any response
byte: never accepted) or answered 503, never cut off after their response began.

Exit status 0 when all of it passes.

    cargo build --release -p molla
    nice -n 5 python3 scripts/soak.py [--bin $CARGO_TARGET_DIR/release/molla] [--clients 32]
        [--parallel 32] [--warmup 60] [--seconds 600] [--json out.json] [--md out.md]
"""

import argparse
import http.client
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODELS = Path(os.environ.get("MOLLA_MODELS", Path.home() / ".cache/molla/models"))
QUESTIONS = ["What is the capital of France?", "Write a poem about rain.", "Count to ten.",
             "Explain gravity briefly.", "Name three fruits.", "Tell me a joke.",
             "Why is the sky blue?", "Give me a recipe for pancakes."]
PROMPTS = ["The capital of France is", "Once upon a time", "def fibonacci(n):",
           "The three primary colours are", "In 1969, the first man on the moon"]
KINDS = ["chat_stream", "chat", "completion", "messages_stream", "messages", "cancel"]
DRAIN_KINDS = ["chat_stream", "chat", "completion", "messages_stream", "messages"]
TIMEOUT = 600  # seconds a client waits on one socket operation


class SoakError(Exception):
    pass


def default_bin():
    target = os.environ.get("CARGO_TARGET_DIR")
    return str(Path(target) / "release/molla" if target else ROOT / "target/release/molla")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_kib(pid, field="VmRSS"):
    """`field` of /proc/PID/status in KiB: VmRSS = RssAnon (heap, stacks, KV caches) + RssFile
    (the mmapped model) + RssShmem."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def src_addr(i):
    """The loopback address client `i` connects from."""
    n = i + 2
    return f"127.0.{n // 250}.{n % 250 + 2}" if n >= 250 else f"127.0.0.{n}"


def connect(port, src):
    return http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT,
                                      source_address=(src, 0))


def get(port, path):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        c.request("GET", path)
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def metrics(port):
    """`name{labels}` -> value of every sample in /metrics."""
    status, body = get(port, "/metrics")
    if status != 200:
        raise SoakError(f"/metrics: HTTP {status}")
    out = {}
    for line in body.decode().splitlines():
        if line and not line.startswith("#"):
            k, _, v = line.rpartition(" ")
            out[k] = float(v)
    return out


# ---- requests ----------------------------------------------------------------------------

def build(kind, rng, model, max_tokens, long=False):
    """(path, body) of a request of `kind`; `long`: as many tokens as allowed."""
    q = "Write a long story about a dragon and a knight." if long else rng.choice(QUESTIONS)
    temp = 0.8 if long else rng.choice([0, 0.8])
    if kind in ("chat_stream", "chat"):
        body = {"model": model, "messages": [{"role": "user", "content": q}],
                "max_tokens": max_tokens, "temperature": temp, "stream": kind == "chat_stream"}
        if kind == "chat_stream" and rng.random() < 0.5:
            body["stream_options"] = {"include_usage": True}
        if long:
            body["ignore_eos"] = True
        return "/v1/chat/completions", body
    if kind in ("completion", "completion_stream"):
        body = {"model": model, "prompt": rng.choice(PROMPTS), "max_tokens": max_tokens,
                "temperature": temp, "stream": kind == "completion_stream"}
        if long:
            body["ignore_eos"] = True
        return "/v1/completions", body
    if kind in ("messages_stream", "messages"):
        return "/v1/messages", {"model": model, "max_tokens": max_tokens, "temperature": temp,
                                "messages": [{"role": "user", "content": q}],
                                "stream": kind == "messages_stream"}
    raise ValueError(kind)


def send(port, src, path, body):
    c = connect(port, src)
    c.request("POST", path, json.dumps(body), {"content-type": "application/json"})
    return c


def expect_200(r):
    if r.status != 200:
        raise SoakError(f"HTTP {r.status}: {r.read()[:300]!r}")


def sse_events(r):
    """(event name or None, data) of each server-sent event, until the body ends."""
    name, data = None, []
    while True:
        line = r.readline()
        if not line:
            if data:
                raise SoakError(f"stream ended inside an event: {data!r}")
            return
        line = line.rstrip(b"\r\n")
        if not line:
            if data:
                yield name, b"\n".join(data)
            name, data = None, []
        elif line.startswith(b"event:"):
            name = line[6:].strip().decode()
        elif line.startswith(b"data:"):
            data.append(line[5:].lstrip())
        elif not line.startswith(b":"):
            raise SoakError(f"not an SSE line: {line[:200]!r}")


def check_openai_stream(r, body, chat):
    ctype = r.getheader("content-type", "")
    if not ctype.startswith("text/event-stream"):
        raise SoakError(f"stream content-type {ctype!r}")
    done, finish, usage, first = False, None, None, True
    obj = "chat.completion.chunk" if chat else "text_completion"
    for _, data in sse_events(r):
        if done:
            raise SoakError(f"data after [DONE]: {data[:200]!r}")
        if data == b"[DONE]":
            done = True
            continue
        ev = json.loads(data)
        if "error" in ev:
            raise SoakError(f"error event {ev}")
        if ev.get("object") != obj:
            raise SoakError(f"chunk object {ev.get('object')!r}")
        ch = ev.get("choices")
        if chat and first and ch[0]["delta"].get("role") != "assistant":
            raise SoakError(f"first chunk {ev}")
        first = False
        if ev.get("usage"):
            usage = ev["usage"]
        if ch:
            if finish is not None:
                raise SoakError(f"chunk after the finish: {ev}")
            finish = ch[0].get("finish_reason")
    if not done:
        raise SoakError("no [DONE]")
    if finish not in ("stop", "length"):
        raise SoakError(f"finish_reason {finish!r}")
    want_usage = (body.get("stream_options") or {}).get("include_usage")
    if want_usage:
        if not usage or usage["completion_tokens"] > body["max_tokens"]:
            raise SoakError(f"usage {usage}")
        return usage["completion_tokens"]
    return None


def check_anthropic_stream(r, body):
    ctype = r.getheader("content-type", "")
    if not ctype.startswith("text/event-stream"):
        raise SoakError(f"stream content-type {ctype!r}")
    seen = []
    out_tokens = None
    for name, data in sse_events(r):
        ev = json.loads(data)
        if ev.get("type") != name:
            raise SoakError(f"event {name!r} carries {ev.get('type')!r}")
        if seen and seen[-1] == "message_stop":
            raise SoakError(f"event after message_stop: {name}")
        if name == "error":
            raise SoakError(f"error event {ev}")
        if name == "message_delta":
            if ev["delta"]["stop_reason"] not in ("end_turn", "max_tokens", "stop_sequence"):
                raise SoakError(f"stop_reason {ev}")
            out_tokens = ev["usage"]["output_tokens"]
        if not seen or seen[-1] != name or name != "content_block_delta":
            seen.append(name)
    want = ["message_start", "content_block_start", "ping", "content_block_delta",
            "content_block_stop", "message_delta", "message_stop"]
    if seen != want and seen != want[:3] + want[4:]:
        raise SoakError(f"event order {seen}")
    if out_tokens is None or out_tokens > body["max_tokens"]:
        raise SoakError(f"output_tokens {out_tokens}")
    return out_tokens


def check_plain(kind, r, body):
    v = json.loads(r.read())
    if kind == "messages":
        if v.get("type") != "message" or v["content"][0]["type"] != "text":
            raise SoakError(f"message {v}")
        if v["stop_reason"] not in ("end_turn", "max_tokens", "stop_sequence"):
            raise SoakError(f"stop_reason {v}")
        n = v["usage"]["output_tokens"]
    else:
        c = v["choices"][0]
        text = c["message"]["content"] if kind == "chat" else c["text"]
        if not isinstance(text, str) or c["finish_reason"] not in ("stop", "length"):
            raise SoakError(f"answer {v}")
        u = v["usage"]
        if u["total_tokens"] != u["prompt_tokens"] + u["completion_tokens"]:
            raise SoakError(f"usage {u}")
        n = u["completion_tokens"]
    if n > body["max_tokens"]:
        raise SoakError(f"{n} tokens > max_tokens {body['max_tokens']}")
    return n


def read_whole(kind, r, body):
    """Checks a 200 response of `kind` to its end; its completion tokens if it says."""
    expect_200(r)
    if kind in ("chat_stream", "completion_stream"):
        return check_openai_stream(r, body, kind == "chat_stream")
    if kind == "messages_stream":
        return check_anthropic_stream(r, body)
    return check_plain(kind, r, body)


def one_request(port, src, kind, rng, model, max_tokens):
    """Runs one request of `kind`; returns (what was done, completion tokens or None)."""
    if kind == "cancel":
        if rng.random() < 0.25:
            path, body = build("chat", rng, model, max_tokens)
            c = send(port, src, path, body)
            time.sleep(rng.uniform(0, 0.5))
            c.close()
            return "cancel_abandon", None
        sk = rng.choice(["chat_stream", "completion_stream", "messages_stream"])
        path, body = build(sk, rng, model, max_tokens)
        c = send(port, src, path, body)
        r = c.getresponse()
        expect_200(r)
        events = sse_events(r)
        for _ in range(rng.randint(1, 4)):
            if next(events, None) is None:
                break
        r.close()
        c.close()
        return "cancel_stream", None
    path, body = build(kind, rng, model, max_tokens)
    c = send(port, src, path, body)
    try:
        return kind, read_whole(kind, c.getresponse(), body)
    finally:
        c.close()


# ---- phases --------------------------------------------------------------------------------

class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.done = {}
        self.tokens = {}
        self.latency = {}
        self.errors = []

    def ok(self, what, tokens, secs):
        with self.lock:
            self.done[what] = self.done.get(what, 0) + 1
            self.latency.setdefault(what, []).append(secs)
            if tokens is not None:
                self.tokens[what] = self.tokens.get(what, 0) + tokens

    def error(self, kind, e):
        with self.lock:
            self.errors.append(f"{kind}: {e!r}"[:400])


def load_phase(port, model, a, end, stats):
    def client(i):
        rng = random.Random(i)
        src = src_addr(i)
        while time.time() < end:
            kind = rng.choice(KINDS)
            t = time.time()
            try:
                what, tokens = one_request(port, src, kind, rng, model, rng.randint(4, a.max_tokens))
                stats.ok(what, tokens, time.time() - t)
            except Exception as e:  # noqa: BLE001: every failure is a soak error
                stats.error(kind, e)

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(a.clients)]
    for th in threads:
        th.start()
    return threads


def after_term_request(port, src, model):
    """A new request after SIGTERM: 'refused', 'reset' or 'closed' (before any response byte:
    never read; the server takes its listen backlog on shutdown, so these come only from a
    handshake completed in the instant the listener closes), '503', or 'served' (connected
    before the listener closed, and answered whole)."""
    rng = random.Random()
    path, body = build("chat", rng, model, 4)
    try:
        c = send(port, src, path, body)
        r = c.getresponse()
    except ConnectionRefusedError:
        return "refused"
    except (ConnectionResetError, BrokenPipeError):
        return "reset"
    except http.client.RemoteDisconnected:
        return "closed"
    if r.status == 503:
        r.read()
        return "503"
    read_whole("chat", r, body)
    return "served"


def drain_phase(port, proc, model, a):
    n = a.clients
    term = threading.Event()
    sent = threading.Semaphore(0)
    results = [None] * n
    after = {}
    after_lock = threading.Lock()
    kinds = ["hangup" if i % 8 == 7 else DRAIN_KINDS[i % len(DRAIN_KINDS)] for i in range(n)]

    def note_after(outcome):
        with after_lock:
            after[outcome] = after.get(outcome, 0) + 1

    def client(i):
        kind, src = kinds[i], src_addr(i)
        rng = random.Random(1000 + i)
        res = {"kind": kind, "ok": False, "headers_before_term": False}
        results[i] = res
        try:
            k = "chat_stream" if kind == "hangup" else kind
            path, body = build(k, rng, model, a.drain_tokens, long=True)
            try:
                c = send(port, src, path, body)
            finally:
                sent.release()
            r = c.getresponse()
            res["headers_before_term"] = not term.is_set()
            if kind == "hangup":
                expect_200(r)
                events = sse_events(r)
                next(events)
                term.wait()
                next(events)
                r.close()
                c.close()
                res["ok"] = True
                return
            read_whole(kind, r, body)
            res["ok"] = True
            res["done_after_term"] = term.is_set()
            c.close()
        except Exception as e:  # noqa: BLE001
            res["error"] = repr(e)[:400]
        if term.is_set():
            try:
                note_after(after_term_request(port, src, model))
            except Exception as e:  # noqa: BLE001
                note_after("error")
                res["after_error"] = repr(e)[:400]

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(n)]
    for th in threads:
        th.start()
    for _ in range(n):
        sent.acquire()
    # SIGTERM once the server holds all of them (queued or running)
    deadline, in_flight = time.time() + 120, 0
    while time.time() < deadline:
        m = metrics(port)
        in_flight = int(m.get("molla_active_sequences", 0) + m.get("molla_queue_depth", 0))
        finished = sum(1 for r in results if r and r.get("ok"))
        if in_flight >= n or in_flight + finished >= n:
            break
        time.sleep(0.2)
    t_term = time.time()
    proc.send_signal(signal.SIGTERM)
    term.set()

    def prober():
        while proc.poll() is None:
            try:
                note_after(after_term_request(port, "127.0.0.1", model))
            except Exception:  # noqa: BLE001
                note_after("error")
            time.sleep(0.25)

    pt = threading.Thread(target=prober, daemon=True)
    pt.start()
    try:
        code = proc.wait(a.drain_timeout)
    except subprocess.TimeoutExpired:
        code = None
    drain_s = time.time() - t_term
    for th in threads:
        th.join(60)
    pt.join(10)
    must = [r for r in results if r and r["kind"] != "hangup"]
    return {
        "requests": n,
        "in_flight_at_sigterm": in_flight,
        "must_complete": len(must),
        "completed": sum(1 for r in must if r["ok"]),
        "hung_up": sum(1 for r in results if r and r["kind"] == "hangup" and r["ok"]),
        "headers_before_sigterm": sum(
            1 for r in results if r and r["headers_before_term"]),
        "failures": [r for r in results if r and not r["ok"]],
        "after_sigterm": after,
        "exit_code": code,
        "drain_s": round(drain_s, 1),
    }


def prime(port, model, n, tokens):
    """Fills each of the server's `n` slots at once, `tokens` past the longest question's prompt.

    A slot's KV cache is allocated whole but zeroed lazily (calloc), so its pages become
    resident as positions are first written: 45 KiB a position for SmolLM2-135M (f32, 30
    layers). Without this, RSS keeps creeping for minutes after the warm-up as slots meet their
    first long prompt-plus-answer, which is bounded (slots x longest request) and no leak."""
    q = max(QUESTIONS, key=len)
    body = {"model": model, "messages": [{"role": "user", "content": q}], "max_tokens": tokens,
            "temperature": 0, "ignore_eos": True}
    errors = []

    def one(i):
        try:
            c = send(port, src_addr(i), "/v1/chat/completions", body)
            read_whole("chat", c.getresponse(), body)
            c.close()
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if errors:
        sys.exit(f"priming failed: {errors[0]}")


def slope_kib_per_min(samples):
    if len(samples) < 2:
        return 0.0
    xs = [t / 60 for t, _ in samples]
    ys = [v for _, v in samples]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den if den else 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default=default_bin())
    ap.add_argument("--model", default=str(MODELS / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--warmup", type=float, default=60, help="seconds of load before the RSS baseline")
    ap.add_argument("--seconds", type=float, default=600, help="seconds of load after the warm-up")
    ap.add_argument("--parallel", type=int, default=None, help="server slots (default: --clients)")
    ap.add_argument("--queue", type=int, default=None, help="server queue (default: 4x --clients)")
    ap.add_argument("--ctx", type=int, default=1024)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--max-tokens", type=int, default=48, help="each request asks 4..this many")
    ap.add_argument("--drain-tokens", type=int, default=64)
    ap.add_argument("--drain-timeout", type=float, default=600)
    ap.add_argument("--no-prime", action="store_true",
                    help="skip filling every slot's KV cache before the load (see prime())")
    ap.add_argument("--sample", type=float, default=5, help="seconds between RSS samples")
    ap.add_argument("--rss-slack", type=float, default=0.05)
    ap.add_argument("--server-log", default="/tmp/molla-soak-server.log")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--md", help="write the results table (markdown) here")
    a = ap.parse_args()
    parallel = a.parallel or a.clients
    queue = a.queue or 4 * a.clients
    port = free_port()
    cmd = [a.bin, "serve", "--model", a.model, "--port", str(port), "--device", "cpu",
           "--ctx", str(a.ctx), "--parallel", str(parallel), "--queue", str(queue),
           "--threads", str(a.threads), "--log", "warn"]
    log = open(a.server_log, "wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    t = time.time()
    while True:
        try:
            if get(port, "/health")[0] == 200:
                break
        except OSError:
            pass
        if proc.poll() is not None or time.time() - t > 120:
            sys.exit(f"server did not start; see {a.server_log}")
        time.sleep(0.2)
    model = json.loads(get(port, "/v1/models")[1])["data"][0]["id"]
    rss_start = rss_kib(proc.pid)
    print(f"soak: {' '.join(cmd)}\nsoak: {a.clients} clients, {a.warmup:.0f} s warm-up + "
          f"{a.seconds:.0f} s, RSS at start {rss_start / 1024:.1f} MiB", flush=True)
    rss_primed = None
    if not a.no_prime:
        prime(port, model, parallel, a.max_tokens + 16)
        rss_primed = rss_kib(proc.pid)
        print(f"soak: primed {parallel} slots, RSS {rss_primed / 1024:.1f} MiB", flush=True)

    t0 = time.time()
    warm_end, end = t0 + a.warmup, t0 + a.warmup + a.seconds
    samples = []  # (seconds since t0, VmRSS KiB, RssAnon KiB)
    stop = threading.Event()

    def sampler():
        while not stop.is_set():
            samples.append((time.time() - t0, rss_kib(proc.pid), rss_kib(proc.pid, "RssAnon")))
            stop.wait(a.sample)

    st = threading.Thread(target=sampler, daemon=True)
    st.start()
    stats = Stats()
    threads = load_phase(port, model, a, end, stats)
    time.sleep(max(0.0, warm_end - time.time()))
    rss_warm = rss_kib(proc.pid)
    anon_warm = rss_kib(proc.pid, "RssAnon")
    while time.time() < end:
        time.sleep(min(60, max(0.0, end - time.time())))
        with stats.lock:
            n, e = sum(stats.done.values()), len(stats.errors)
        print(f"soak: {time.time() - t0:5.0f} s: {n} requests, {e} errors, RSS "
              f"{rss_kib(proc.pid) / 1024:.1f} MiB", flush=True)
    rss_end = rss_kib(proc.pid)
    anon_end = rss_kib(proc.pid, "RssAnon")
    for th in threads:
        th.join(TIMEOUT)
    stop.set()
    st.join()
    load_s = time.time() - t0
    after_warm = [x for x in samples if warm_end - t0 <= x[0] <= end - t0]
    rss_max = max([x[1] for x in after_warm] + [rss_warm, rss_end])
    slope = slope_kib_per_min([(x[0], x[1]) for x in after_warm])
    # the second half of the measured load: a creep that has stopped shows ~0 here
    late = [(x[0], x[1]) for x in after_warm if x[0] >= (warm_end + end) / 2 - t0]
    slope_late = slope_kib_per_min(late)
    time.sleep(1)
    m = metrics(port)
    idle = {k: m.get(k, -1) for k in ("molla_active_sequences", "molla_queue_depth")}
    bad_status = {k: v for k, v in m.items()
                  if k.startswith("molla_requests_total") and 'status="200"' not in k}
    rss_idle = rss_kib(proc.pid)

    print("soak: drain check (SIGTERM under load)", flush=True)
    drain = drain_phase(port, proc, model, a)
    log.close()

    warm_ratio = rss_end / max(rss_warm, 1) - 1
    max_ratio = rss_max / max(rss_warm, 1) - 1
    after_ok = set(drain["after_sigterm"]) <= {"refused", "reset", "closed", "503", "served"}
    checks = {
        "no errors": not stats.errors,
        "server answered only 200s": not bad_status,
        f"RSS end within {a.rss_slack:.0%} of warm-up": warm_ratio <= a.rss_slack,
        "no sequence left active": idle["molla_active_sequences"] == 0
        and idle["molla_queue_depth"] == 0,
        f"all {a.clients} drain requests in flight at SIGTERM":
            drain["in_flight_at_sigterm"] >= a.clients,
        "every accepted request completed": drain["completed"] == drain["must_complete"]
        and not drain["failures"],
        "new requests after SIGTERM refused or 503": after_ok,
        "exit code 0 after drain": drain["exit_code"] == 0,
    }
    mib = lambda k: f"{k / 1024:.1f}"  # noqa: E731
    total = sum(stats.done.values())
    lines = ["| kind | requests | completion tokens | mean s | p95 s |", "|---|---|---|---|---|"]
    for k in sorted(stats.done):
        lat = sorted(stats.latency[k])
        p95 = lat[min(len(lat) - 1, int(0.95 * len(lat)))]
        toks = stats.tokens.get(k)
        lines.append(f"| {k} | {stats.done[k]} | {toks if toks is not None else '-'} | "
                     f"{sum(lat) / len(lat):.1f} | {p95:.1f} |")
    lines.append(f"| **total** | **{total}** | | | |")
    lines += ["", "| measure | value |", "|---|---|",
              f"| load | {a.warmup:.0f} s warm-up + {a.seconds:.0f} s ({load_s:.0f} s until the "
              f"last client finished) |",
              f"| errors | {len(stats.errors)} |",
              f"| non-200 statuses in /metrics | {int(sum(bad_status.values()))} |",
              f"| RSS at start (idle, model loaded) | {mib(rss_start)} MiB |",
              f"| RSS after priming every slot's KV cache | "
              f"{mib(rss_primed) + ' MiB' if rss_primed else 'not primed'} |",
              f"| RSS after warm-up | {mib(rss_warm)} MiB (anon {mib(anon_warm)}) |",
              f"| RSS at the end of the load | {mib(rss_end)} MiB ({warm_ratio:+.1%}; anon "
              f"{mib(anon_end)}) |",
              f"| RSS max after warm-up | {mib(rss_max)} MiB ({max_ratio:+.1%}) |",
              f"| RSS trend after warm-up (least squares) | {slope * 10 / 1024:+.2f} MiB per "
              f"10 min; second half {slope_late * 10 / 1024:+.2f} |",
              f"| RSS idle after the load | {mib(rss_idle)} MiB |",
              f"| active / queued after the load | {int(idle['molla_active_sequences'])} / "
              f"{int(idle['molla_queue_depth'])} |",
              f"| in flight at SIGTERM | {drain['in_flight_at_sigterm']} of {drain['requests']} "
              f"({drain['headers_before_sigterm']} with response headers by then) |",
              f"| completed after SIGTERM | {drain['completed']} of {drain['must_complete']} "
              f"(+{drain['hung_up']} hung up on purpose) |",
              f"| new requests after SIGTERM | "
              f"{', '.join(f'{k} {v}' for k, v in sorted(drain['after_sigterm'].items()))} |",
              f"| drain time, exit code | {drain['drain_s']} s, {drain['exit_code']} |"]
    table = "\n".join(lines)
    print(table)
    for name, ok in checks.items():
        print(f"{'PASS' if ok else 'FAIL'}  {name}")
    for e in stats.errors[:10]:
        print("  error:", e)
    for f in drain["failures"][:10]:
        print("  drain failure:", f)
    if a.md:
        Path(a.md).write_text(table + "\n")
    if a.json:
        Path(a.json).write_text(json.dumps({
            "argv": sys.argv, "command": cmd, "clients": a.clients, "warmup_s": a.warmup, "seconds": a.seconds,
            "requests": stats.done, "completion_tokens": stats.tokens,
            "errors": stats.errors, "non_200_metrics": bad_status,
            "rss_kib": {"start": rss_start, "primed": rss_primed, "warm": rss_warm,
                        "end": rss_end, "max": rss_max, "idle": rss_idle,
                        "anon_warm": anon_warm, "anon_end": anon_end,
                        "slope_kib_per_min": round(slope, 1),
                        "slope_late_kib_per_min": round(slope_late, 1)},
            "rss_samples": samples, "idle": idle, "drain": drain, "checks": checks,
        }, indent=1) + "\n")
    sys.exit(0 if all(checks.values()) else 1)


if __name__ == "__main__":
    main()
