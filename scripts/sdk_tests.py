#!/usr/bin/env python3
"""molla serve against the official SDKs: starts `molla serve` on SmolLM2-135M-Instruct on a free
port and drives it with the `openai` and `anthropic` Python packages (versions pinned in
scripts/requirements.txt), plus raw HTTP for what an SDK cannot send (malformed bodies).

    python3 scripts/sdk_tests.py [--bin target/release/molla] [--model PATH] [-k NAME]

Every check asserts real content (greedy answers, counts that must agree, event order), so a
broken server fails it. The newer features' tests (structured output, tool calls, the Responses
API, n choices, Ollama's client) are in scripts/sdk_features.py. Exit status 0 only when every
test passed.
"""

import argparse
import concurrent.futures as cf
import http.client
import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
import traceback
from pathlib import Path

import anthropic
import ollama
import openai

# The prompt, the greedy setting and the test registry are shared with the newer features'
# tests, which register themselves there on import.
from sdk_features import FRANCE, GREEDY, TESTS, test

ROOT = Path(__file__).resolve().parent.parent
MODELS = Path(os.environ.get("MOLLA_MODELS", Path.home() / ".cache/molla/models"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A `molla serve` child process on a free loopback port."""

    def __init__(self, binary, model, *extra):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        args = [binary, "serve", "--model", str(model), "--port", str(self.port),
                "--device", "cpu", "--ctx", "2048", *extra]
        self.log = open(os.environ.get("MOLLA_SDK_LOG", os.devnull), "a")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=self.log)
        deadline = time.time() + 120
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"molla serve exited with {self.proc.returncode}: {args}")
            try:
                if raw("GET", self.port, "/health")[0] == 200:
                    return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("molla serve did not answer /health within 120 s")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.log.close()


def raw(method, port, path, body=None, headers=None):
    """One HTTP request with a raw byte body: (status, headers, body bytes)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    h = {"content-type": "application/json"}
    h.update(headers or {})
    try:
        c.request(method, path, body=body, headers=h)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the server answered (413) before reading the whole body: read its answer
    r = c.getresponse()
    out = (r.status, dict(r.getheaders()), r.read())
    c.close()
    return out


def raw_json(method, port, path, obj=None, headers=None):
    body = None if obj is None else json.dumps(obj).encode()
    s, h, b = raw(method, port, path, body, headers)
    return s, json.loads(b)


# ---------------------------------------------------------------- OpenAI


@test
def models(ctx):
    ids = [m.id for m in ctx.oa.models.list().data]
    assert ids == [ctx.model_id], ids
    assert ctx.oa.models.retrieve(ctx.model_id).id == ctx.model_id
    try:
        ctx.oa.models.retrieve("no-such-model")
        raise AssertionError("unknown model did not fail")
    except openai.NotFoundError as e:
        assert e.status_code == 404


@test
def chat_greedy_knows_paris(ctx):
    r = ctx.oa.chat.completions.create(model="m", messages=FRANCE, temperature=0, max_tokens=32)
    c = r.choices[0]
    assert "Paris" in c.message.content, c.message.content
    assert c.message.role == "assistant"
    assert c.finish_reason in ("stop", "length"), c.finish_reason
    u = r.usage
    assert u.prompt_tokens > 5 and u.completion_tokens > 0, u
    assert u.total_tokens == u.prompt_tokens + u.completion_tokens, u
    assert r.object == "chat.completion" and r.id.startswith("chatcmpl-")


@test
def chat_stream_matches_plain_and_reports_usage(ctx):
    plain = ctx.oa.chat.completions.create(model="m", messages=FRANCE, temperature=0,
                                           max_tokens=32)
    chunks = list(ctx.oa.chat.completions.create(
        model="m", messages=FRANCE, temperature=0, max_tokens=32, stream=True,
        stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == plain.choices[0].message.content, (text, plain.choices[0].message.content)
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finish == [plain.choices[0].finish_reason], finish
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None, last
    assert last.usage.completion_tokens == plain.usage.completion_tokens
    assert last.usage.prompt_tokens == plain.usage.prompt_tokens
    assert all(c.usage is None for c in chunks[:-1])
    # without include_usage there is no usage chunk
    chunks = list(ctx.oa.chat.completions.create(
        model="m", messages=FRANCE, temperature=0, max_tokens=4, stream=True))
    assert all(c.usage is None and c.choices for c in chunks)


@test
def max_tokens_and_max_completion_tokens(ctx):
    for kw in ({"max_tokens": 3}, {"max_completion_tokens": 3}):
        r = ctx.oa.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "Write a long story about a dog."}],
            temperature=0, **kw)
        assert r.usage.completion_tokens == 3, (kw, r.usage)
        assert r.choices[0].finish_reason == "length"


@test
def stop_strings(ctx):
    full = ctx.oa.chat.completions.create(model="m", messages=FRANCE, temperature=0,
                                          max_tokens=32).choices[0].message.content
    cut = full.index("Paris")
    for stream in (False, True):
        kw = dict(model="m", messages=FRANCE, temperature=0, max_tokens=32,
                  stop=["Paris", "zzzz"])
        if stream:
            chunks = list(ctx.oa.chat.completions.create(stream=True, **kw))
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            reason = [c.choices[0].finish_reason for c in chunks if c.choices][-1]
        else:
            c = ctx.oa.chat.completions.create(**kw).choices[0]
            text, reason = c.message.content, c.finish_reason
        assert text == full[:cut], (text, full)
        assert reason == "stop", reason


@test
def completions_plain_stream_and_usage(ctx):
    kw = dict(model="m", prompt="The capital of France is", temperature=0, max_tokens=8)
    r = ctx.oa.completions.create(**kw)
    text = r.choices[0].text
    assert "Paris" in text, text
    assert r.usage.completion_tokens == 8 or r.choices[0].finish_reason == "stop", r
    chunks = list(ctx.oa.completions.create(stream=True, stream_options={"include_usage": True},
                                            **kw))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == text
    assert chunks[-1].usage.completion_tokens == r.usage.completion_tokens
    assert chunks[-1].usage.prompt_tokens == r.usage.prompt_tokens
    # token ids as the prompt give the same answer
    ids = raw_json("POST", ctx.port, "/tokenize",
                   {"content": "The capital of France is", "add_special": True})[1]["tokens"]
    r2 = ctx.oa.completions.create(model="m", prompt=ids, temperature=0, max_tokens=8)
    assert r2.choices[0].text == text and r2.usage.prompt_tokens == len(ids)


@test
def chat_logprobs(ctx):
    r = ctx.oa.chat.completions.create(model="m", messages=FRANCE, temperature=0, max_tokens=12,
                                       logprobs=True, top_logprobs=3)
    c = r.choices[0]
    content = c.logprobs.content
    assert len(content) == r.usage.completion_tokens, (len(content), r.usage)
    assert "".join(t.token for t in content) == c.message.content
    for t in content:
        assert t.logprob <= 0 and len(t.top_logprobs) == 3, t
        assert bytes(t.bytes).decode("utf-8", "replace") == t.token or t.bytes
        lps = [x.logprob for x in t.top_logprobs]
        assert lps == sorted(lps, reverse=True), lps
        assert sum(math.exp(x) for x in lps) <= 1.0 + 1e-4
        # greedy: the chosen token is the most likely one
        assert t.top_logprobs[0].token == t.token, t
        assert abs(t.top_logprobs[0].logprob - t.logprob) < 1e-6
    # streamed: the same tokens, spread over the chunks
    chunks = list(ctx.oa.chat.completions.create(
        model="m", messages=FRANCE, temperature=0, max_tokens=12, logprobs=True,
        top_logprobs=3, stream=True))
    streamed = [t for ch in chunks if ch.choices and ch.choices[0].logprobs
                for t in ch.choices[0].logprobs.content]
    assert [t.token for t in streamed] == [t.token for t in content]
    assert all(abs(a.logprob - b.logprob) < 1e-6 for a, b in zip(streamed, content))
    # without logprobs the field is null
    r = ctx.oa.chat.completions.create(model="m", messages=FRANCE, temperature=0, max_tokens=2)
    assert r.choices[0].logprobs is None
    try:
        ctx.oa.chat.completions.create(model="m", messages=FRANCE, max_tokens=2,
                                       logprobs=True, top_logprobs=50)
        raise AssertionError("top_logprobs=50 was accepted")
    except openai.BadRequestError as e:
        assert "top_logprobs" in str(e), e


@test
def completions_logprobs(ctx):
    r = ctx.oa.completions.create(model="m", prompt="The capital of France is", temperature=0,
                                  max_tokens=6, logprobs=2)
    lp = r.choices[0].logprobs
    n = r.usage.completion_tokens
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == n, lp
    assert "".join(lp.tokens) == r.choices[0].text
    assert lp.text_offset[0] == 0 and lp.text_offset == sorted(lp.text_offset), lp.text_offset
    for tok, l, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert len(top) == 2 and l <= 0
        assert max(top.values()) == l and tok in top, (tok, l, top)


@test
def seed_and_penalties(ctx):
    kw = dict(model="m", messages=[{"role": "user", "content": "Tell me a story."}],
              temperature=1.0, max_tokens=16)
    a = ctx.oa.chat.completions.create(seed=1234, **kw).choices[0].message.content
    b = ctx.oa.chat.completions.create(seed=1234, **kw).choices[0].message.content
    assert a == b, (a, b)
    c = ctx.oa.chat.completions.create(seed=99, **kw).choices[0].message.content
    d = ctx.oa.chat.completions.create(seed=99, **kw).choices[0].message.content
    assert c == d and (a != c), (a, c)
    # a strong frequency penalty changes a greedy answer that repeats itself
    rep = [{"role": "user", "content": "Say 'yes' twenty times."}]
    g = ctx.oa.chat.completions.create(model="m", messages=rep, temperature=0, max_tokens=24)
    p = ctx.oa.chat.completions.create(model="m", messages=rep, temperature=0, max_tokens=24,
                                       frequency_penalty=2.0, presence_penalty=1.0)
    assert g.choices[0].message.content != p.choices[0].message.content
    # llama.cpp's extras go through extra_body
    e = ctx.oa.chat.completions.create(model="m", messages=FRANCE, temperature=0, max_tokens=8,
                                       extra_body={"top_k": 1, "min_p": 0.1,
                                                   "repeat_penalty": 1.1})
    assert e.choices[0].message.content


@test
def logit_bias_and_ignore_eos(ctx):
    base = ctx.oa.chat.completions.create(model="m", messages=FRANCE, temperature=0,
                                          max_tokens=32, logprobs=True)
    first = base.choices[0].logprobs.content[0]
    ids = raw_json("POST", ctx.port, "/tokenize", {"content": first.token})[1]["tokens"]
    assert len(ids) == 1, ids
    banned = ctx.oa.chat.completions.create(model="m", messages=FRANCE, temperature=0,
                                            max_tokens=32, logit_bias={str(ids[0]): -100},
                                            logprobs=True)
    assert banned.choices[0].logprobs.content[0].token != first.token, banned
    # the answer ends by itself before 200 tokens; with ignore_eos it runs to the limit
    assert base.choices[0].finish_reason == "stop", base
    long = ctx.oa.chat.completions.create(model="m", messages=FRANCE, temperature=0,
                                          max_tokens=40, extra_body={"ignore_eos": True})
    assert long.usage.completion_tokens == 40 and long.choices[0].finish_reason == "length"


@test
def embeddings(ctx):
    r = ctx.oa.embeddings.create(model="m", input=["Paris is in France.", "Paris is in France.",
                                                    "The dog sleeps."])
    vs = [d.embedding for d in r.data]
    assert [d.index for d in r.data] == [0, 1, 2]
    assert len(vs[0]) == 576, len(vs[0])  # SmolLM2-135M's n_embd
    norm = math.sqrt(sum(x * x for x in vs[0]))
    assert abs(norm - 1) < 1e-4, norm
    cos = lambda a, b: sum(x * y for x, y in zip(a, b))
    assert cos(vs[0], vs[1]) > 0.99999 and cos(vs[0], vs[2]) < 0.999
    assert r.usage.prompt_tokens > 6
    one = ctx.oa.embeddings.create(model="m", input="The dog sleeps.")
    assert abs(cos(one.data[0].embedding, vs[2]) - 1) < 1e-5
    try:
        ctx.oa.embeddings.create(model="m", input=[])
        raise AssertionError("empty input was accepted")
    except openai.BadRequestError:
        pass


@test
def tokenize_detokenize(ctx):
    s, v = raw_json("POST", ctx.port, "/tokenize", {"content": "Hello world"})
    assert s == 200 and len(v["tokens"]) == 2, v
    s, d = raw_json("POST", ctx.port, "/detokenize", {"tokens": v["tokens"]})
    assert s == 200 and d["content"] == "Hello world", d
    s, e = raw_json("POST", ctx.port, "/detokenize", {"tokens": [10 ** 9]})
    assert s == 400 and "error" in e, (s, e)


# ---------------------------------------------------------------- Anthropic


@test
def anthropic_messages(ctx):
    m = ctx.an.messages.create(model="m", max_tokens=32, messages=FRANCE, extra_body=GREEDY)
    assert m.type == "message" and m.role == "assistant" and m.id.startswith("msg_")
    assert "Paris" in m.content[0].text, m.content
    assert m.stop_reason in ("end_turn", "max_tokens"), m.stop_reason
    assert m.usage.input_tokens > 5 and 0 < m.usage.output_tokens <= 32
    n = ctx.an.messages.count_tokens(model="m", messages=FRANCE).input_tokens
    assert n == m.usage.input_tokens, (n, m.usage)
    # content blocks count as their text; a system prompt counts too
    blocks = [{"role": "user", "content": [{"type": "text",
                                            "text": "What is the capital of France?"}]}]
    n2 = ctx.an.messages.count_tokens(model="m", messages=blocks).input_tokens
    assert n2 == n, (n2, n)
    n3 = ctx.an.messages.count_tokens(model="m", messages=blocks,
                                      system="You answer every question in great detail. " * 8)
    assert n3.input_tokens > n + 40, (n3, n)
    s = ctx.an.messages.create(model="m", max_tokens=3, extra_body=GREEDY,
                               messages=[{"role": "user", "content": "Write a long story."}])
    assert s.stop_reason == "max_tokens" and s.usage.output_tokens == 3, s
    full = m.content[0].text
    st = ctx.an.messages.create(model="m", max_tokens=32, messages=FRANCE, extra_body=GREEDY,
                                stop_sequences=["Paris"])
    assert st.stop_reason == "stop_sequence" and st.stop_sequence == "Paris", st
    assert st.content[0].text == full[:full.index("Paris")]


@test
def anthropic_stream_event_order(ctx):
    m = ctx.an.messages.create(model="m", max_tokens=32, messages=FRANCE, extra_body=GREEDY)
    events = list(ctx.an.messages.create(model="m", max_tokens=32, extra_body=GREEDY,
                                         messages=FRANCE, stream=True))
    kinds = [e.type for e in events]  # the SDK drops ping events
    assert kinds[:2] == ["message_start", "content_block_start"], kinds
    assert kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"], kinds
    assert set(kinds[2:-3]) == {"content_block_delta"}, kinds
    # on the wire: event names match their data's type, ping third
    s, _, body = raw("POST", ctx.port, "/v1/messages",
                     json.dumps({"model": "m", "max_tokens": 8, "messages": FRANCE,
                                 "stream": True, **GREEDY}).encode())
    assert s == 200
    wire = []
    for block in body.decode().split("\n\n"):
        lines = dict(l.split(": ", 1) for l in block.splitlines() if ": " in l)
        if lines:
            assert json.loads(lines["data"])["type"] == lines["event"], block
            wire.append(lines["event"])
    assert wire[:3] == ["message_start", "content_block_start", "ping"], wire
    assert wire[-3:] == ["content_block_stop", "message_delta", "message_stop"], wire
    text = "".join(e.delta.text for e in events if e.type == "content_block_delta")
    assert text == m.content[0].text, (text, m.content[0].text)
    assert events[0].message.usage.input_tokens == m.usage.input_tokens
    delta = events[-2]
    assert delta.delta.stop_reason == m.stop_reason
    assert delta.usage.output_tokens == m.usage.output_tokens
    # the SDK's helper assembles the same message
    with ctx.an.messages.stream(model="m", max_tokens=32, extra_body=GREEDY,
                                messages=FRANCE) as s:
        final = s.get_final_message()
    assert final.content[0].text == m.content[0].text


@test
def anthropic_errors(ctx):
    try:
        ctx.an.messages.create(model="m", max_tokens=8, messages=[])
        raise AssertionError("empty messages accepted")
    except anthropic.BadRequestError as e:
        assert e.body["type"] == "error" and e.body["error"]["type"] == "invalid_request_error"
    s, v = raw_json("POST", ctx.port, "/v1/messages", {"model": "m", "messages": FRANCE})
    assert s == 400 and "max_tokens" in v["error"]["message"], v


# ---------------------------------------------------------------- hostile input


def openai_error(status, body, want_status, param=None):
    assert status == want_status, (status, body)
    v = json.loads(body)
    e = v["error"]
    assert isinstance(e["message"], str) and isinstance(e["type"], str), v
    assert "param" in e and "code" in e, v
    if param:
        assert e["param"] == param, v


@test
def malformed_requests(ctx):
    p = ctx.port
    chat = "/v1/chat/completions"
    s, _, b = raw("POST", p, chat, b"{\"messages\": [")
    openai_error(s, b, 400)
    s, _, b = raw("POST", p, chat, json.dumps({"messages": FRANCE, "max_tokens": "ten"}).encode())
    openai_error(s, b, 400, "max_tokens")
    s, _, b = raw("POST", p, chat, json.dumps({"messages": "hi"}).encode())
    openai_error(s, b, 400, "messages")
    s, _, b = raw("POST", p, chat, json.dumps({"messages": FRANCE, "temperature": -1}).encode())
    openai_error(s, b, 400)
    s, _, b = raw("POST", p, "/v1/completions", json.dumps({"prompt": [1, -5]}).encode())
    openai_error(s, b, 400, "prompt")
    s, _, b = raw("POST", p, "/v1/completions", b'{"prompt": "\xff\xfe bad"}')
    openai_error(s, b, 400)
    s, _, b = raw("GET", p, "/v1/nowhere")
    openai_error(s, b, 404)
    s, _, b = raw("POST", p, chat, b"{\"messages\": \"" + b"a" * (5 << 20) + b"\"}")
    openai_error(s, b, 413)
    s, _, b = raw("POST", p, chat, b"[]")
    openai_error(s, b, 400)
    s, _, b = raw("POST", p, chat, b"")
    openai_error(s, b, 400)
    s, _, b = raw("POST", p, chat, json.dumps({"messages": FRANCE, "max_tokns": 5}).encode())
    openai_error(s, b, 400, "max_tokns")
    s, _, b = raw("POST", p, "/v1/completions", json.dumps({"prompt": "a", "echo": True}).encode())
    openai_error(s, b, 400, "echo")
    s, _, b = raw("POST", p, chat, json.dumps({"messages": FRANCE,
                                               "logit_bias": {"x": 1}}).encode())
    openai_error(s, b, 400, "logit_bias")
    # Anthropic's route answers in its own shape
    s, _, b = raw("POST", p, "/v1/messages", json.dumps(
        {"model": "m", "max_tokens": 4, "messages": FRANCE, "temprature": 0}).encode())
    v = json.loads(b)
    assert s == 400 and "temprature" in v["error"]["message"], (s, v)
    s, _, b = raw("POST", p, "/v1/messages", b"{oops")
    v = json.loads(b)
    assert s == 400 and v["type"] == "error" and v["error"]["type"] == "invalid_request_error", v
    s, _, b = raw("POST", p, "/v1/messages", b"{\"x\": \"" + b"a" * (5 << 20) + b"\"}")
    v = json.loads(b)
    assert s == 413 and v["type"] == "error", (s, v)
    # the server is still fine
    assert raw("GET", p, "/health")[0] == 200


@test
def metrics(ctx):
    ctx.oa.chat.completions.create(model="m", messages=FRANCE, temperature=0, max_tokens=2)
    s, h, b = raw("GET", ctx.port, "/metrics")
    text = b.decode()
    assert s == 200 and h.get("content-type", "").startswith("text/plain"), h
    for name in ("molla_requests_total", "molla_prompt_tokens_total",
                 "molla_generated_tokens_total", "molla_time_to_first_token_seconds_bucket",
                 "molla_inter_token_latency_seconds_bucket", "molla_queue_depth"):
        assert name in text, name
    line = [l for l in text.splitlines()
            if l.startswith("molla_requests_total") and 'route="/v1/chat/completions"' in l
            and 'status="200"' in l]
    assert line and float(line[0].split()[-1]) >= 1, line


# ---------------------------------------------------------------- concurrency


def greedy(ctx, i):
    q = ["What is the capital of France?", "Name a color.", "What is 2+2?",
         "Who wrote Hamlet?"][i % 4] + " " * (i // 4)
    r = ctx.oa.chat.completions.create(model="m", temperature=0, max_tokens=24,
                                       messages=[{"role": "user", "content": q}])
    return r.choices[0].message.content


@test
def concurrent_greedy_equals_alone(ctx):
    alone = [greedy(ctx, i) for i in range(16)]
    with cf.ThreadPoolExecutor(16) as ex:
        together = list(ex.map(lambda i: greedy(ctx, i), range(16)))
    for i, (a, t) in enumerate(zip(alone, together)):
        assert a == t, (i, a, t)


@test
def disconnect_frees_the_slot(ctx):
    # open as many long streams as there are slots, read a little, hang up
    for _ in range(ctx.parallel + 1):
        c = http.client.HTTPConnection("127.0.0.1", ctx.port, timeout=60)
        body = json.dumps({"messages": [{"role": "user", "content": "Write a long story."}],
                           "max_tokens": 2000, "temperature": 0, "stream": True})
        c.request("POST", "/v1/chat/completions", body, {"content-type": "application/json"})
        r = c.getresponse()
        assert r.status == 200
        r.fp.readline()
        c.close()
    t = time.time()
    r = ctx.oa.chat.completions.create(model="m", messages=FRANCE, temperature=0, max_tokens=8)
    assert "Paris" in r.choices[0].message.content
    assert time.time() - t < 30, "a hung-up stream kept its slot"
    deadline = time.time() + 10
    while True:
        text = raw("GET", ctx.port, "/metrics")[2].decode()
        if "molla_active_sequences 0" in text.splitlines():
            break
        assert time.time() < deadline, "sequences still active after every client left"
        time.sleep(0.1)


# ---------------------------------------------------------------- API key


def api_key_suite(binary, model):
    srv = Server(binary, model, "--api-key", "sekrit")
    try:
        assert raw("GET", srv.port, "/health")[0] == 200
        s, _, b = raw("GET", srv.port, "/v1/models")
        assert s == 401 and json.loads(b)["error"]["type"] == "authentication_error", b
        bad = openai.OpenAI(base_url=srv.base + "/v1", api_key="wrong", max_retries=0)
        try:
            bad.models.list()
            raise AssertionError("wrong key accepted")
        except openai.AuthenticationError:
            pass
        good = openai.OpenAI(base_url=srv.base + "/v1", api_key="sekrit", max_retries=0)
        assert good.models.list().data
        an_bad = anthropic.Anthropic(base_url=srv.base, api_key="wrong", max_retries=0)
        try:
            an_bad.messages.count_tokens(model="m", messages=FRANCE)
            raise AssertionError("wrong x-api-key accepted")
        except anthropic.AuthenticationError as e:
            assert e.body["type"] == "error"
        an = anthropic.Anthropic(base_url=srv.base, api_key="sekrit", max_retries=0)
        assert an.messages.count_tokens(model="m", messages=FRANCE).input_tokens > 0
    finally:
        srv.stop()


def drain_suite(binary, model):
    """SIGTERM while requests run: they all finish whole, then the server exits 0."""
    srv = Server(binary, model, "--parallel", "2")
    try:
        oa = openai.OpenAI(base_url=srv.base + "/v1", api_key="none", max_retries=0, timeout=120)
        story = [{"role": "user", "content": "Write a long story about a dragon."}]
        kw = dict(model="m", messages=story, max_tokens=48, temperature=0)
        alone = oa.chat.completions.create(**kw).choices[0].message.content

        def streamed():
            return "".join(c.choices[0].delta.content or ""
                           for c in oa.chat.completions.create(stream=True, **kw) if c.choices)

        with cf.ThreadPoolExecutor(3) as ex:
            futs = [ex.submit(lambda: oa.chat.completions.create(**kw).choices[0].message.content),
                    ex.submit(streamed), ex.submit(streamed)]
            time.sleep(0.3)
            srv.proc.send_signal(signal.SIGTERM)
            got = [f.result() for f in futs]
        assert all(g == alone for g in got), (alone, got)
        assert srv.proc.wait(60) == 0, srv.proc.returncode
    finally:
        srv.stop()


class Ctx:
    pass




def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.environ.get("MOLLA_BIN", str(ROOT / "target/release/molla")))
    ap.add_argument("--model", default=str(MODELS / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--parallel", type=int, default=16)
    ap.add_argument("-k", default="", help="run only tests whose name contains this")
    a = ap.parse_args()
    if not Path(a.model).exists():
        sys.exit(f"{a.model} is missing: run scripts/fetch-models")
    # prompts (~35 tokens) are prefilled 16 a step, so prefill chunks interleave with decoding
    # one client (this process) opens as many streams as there are slots: no per-client cap
    srv = Server(a.bin, a.model, "--parallel", str(a.parallel), "--prefill-chunk", "16",
                 "--max-per-client", "0")
    ctx = Ctx()
    ctx.port, ctx.parallel = srv.port, a.parallel
    ctx.model_id = Path(a.model).name.removesuffix(".gguf")
    ctx.oa = openai.OpenAI(base_url=srv.base + "/v1", api_key="none", max_retries=0, timeout=300)
    ctx.an = anthropic.Anthropic(base_url=srv.base, api_key="none", max_retries=0, timeout=300)
    ctx.ol = ollama.Client(host=srv.base, timeout=300)
    failed = []
    t0 = time.time()
    try:
        for fn in TESTS:
            if a.k not in fn.__name__:
                continue
            t = time.time()
            try:
                fn(ctx)
                print(f"ok    {fn.__name__} ({time.time() - t:.1f} s)", flush=True)
            except Exception:
                failed.append(fn.__name__)
                print(f"FAIL  {fn.__name__}\n{traceback.format_exc()}", flush=True)
        if srv.proc.poll() is not None:
            failed.append("server-alive")
            print(f"FAIL  the server exited ({srv.proc.returncode})")
    finally:
        srv.stop()
    if a.k in "api_key_suite":
        try:
            api_key_suite(a.bin, a.model)
            print("ok    api_key_suite")
        except Exception:
            failed.append("api_key_suite")
            print(f"FAIL  api_key_suite\n{traceback.format_exc()}")
    if a.k in "drain_suite":
        try:
            drain_suite(a.bin, a.model)
            print("ok    drain_suite")
        except Exception:
            failed.append("drain_suite")
            print(f"FAIL  drain_suite\n{traceback.format_exc()}")
    print(f"sdk tests: {len(failed)} failed in {time.time() - t0:.0f} s"
          + (f": {', '.join(failed)}" if failed else ""))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
