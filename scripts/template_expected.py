#!/usr/bin/env python3
"""Expected chat-template renderings for crates/template's tests.

Renders each template in crates/template/tests/data/ with Python's jinja2 set up the
way transformers' `apply_chat_template` does (ImmutableSandboxedEnvironment,
trim_blocks, lstrip_blocks, loopcontrols, a json.dumps-based `tojson` filter,
`raise_exception`, `strftime_now`), for a fixed list of conversations, and writes
crates/template/tests/data/expected.json. The Rust test must match it byte for byte.

Like the Rust crate, a template that cannot render a list of content parts (probed
once per template with a single text part) gets each parts list joined with "\\n".

    python3 -m pip install jinja2 gguf
    python3 scripts/template_expected.py            # write expected.json
    python3 scripts/template_expected.py --extract  # first re-copy templates from the GGUFs

--extract reads `tokenizer.chat_template` from the test models cached by
scripts/fetch-models in ${MOLLA_MODELS:-~/.cache/molla/models}. gemma-3-270m (a base
model) has no template there, so molla falls back to ChatML (crates/template/src/
chatml.jinja); gemma3-it.jinja is the instruction-tuned Gemma 3 template as published
in google/gemma-3-*-it tokenizer_config.json, kept to test a template that takes parts.
"""
import argparse
import json
import os
import sys
import time
from pathlib import Path

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "crates/template/tests/data"
CHATML = ROOT / "crates/template/src/chatml.jinja"
PROBE = "molla_content_probe"
# A fixed clock for strftime_now, so expected outputs do not depend on the day.
FIXED_NOW = 1_753_535_096  # 2025-07-26T13:04:56Z

TEMPLATES = {
    # name: (file relative to ROOT, bos_token, eos_token) as the GGUF metadata gives them
    "smollm2": ("crates/template/tests/data/smollm2.jinja", "<|im_start|>", "<|im_end|>"),
    "qwen2.5-coder": ("crates/template/tests/data/qwen2.5-coder.jinja", "<|endoftext|>", "<|im_end|>"),
    "gemma3-it": ("crates/template/tests/data/gemma3-it.jinja", "<bos>", "<eos>"),
    "chatml": ("crates/template/src/chatml.jinja", "<bos>", "<eos>"),
    "pycompat": ("crates/template/tests/data/pycompat.jinja", "<s>", "</s>"),
}

GGUF_SOURCES = {
    "smollm2": "SmolLM2-135M-Instruct.Q4_1.gguf",
    "qwen2.5-coder": "qwen2.5-coder-0.5b-instruct.gguf",
    "gemma-3-270m (no template: ChatML fallback)": "gemma-3-270m-q4_k_m.gguf",
}

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city — «quoted» \"text\" and\ta tab",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. Zürich"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 7.5},
            },
            "required": ["city"],
        },
    },
}
TIME_TOOL = {
    "type": "function",
    "function": {"name": "get_time", "description": "Current time", "parameters": {"type": "object", "properties": {}}},
}

# Message keys are in molla's serialization order (role, content, name, tool_calls,
# tool_call_id), so templates that iterate `message.items()` see the same order.
SYSTEM = {"role": "system", "content": "You are a terse assistant."}
USER1 = {"role": "user", "content": "Hello! What's 2+2?"}
ASSIST1 = {"role": "assistant", "content": "4."}
USER2 = {"role": "user", "content": "  And 3+3?  日本語 ✓\n"}
TOOL_TURN = [
    {"role": "user", "content": "Weather in Zürich and the time?"},
    {
        "role": "assistant",
        "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": {"city": "Zürich", "days": 2}}},
            {"id": "call_2", "type": "function", "function": {"name": "get_time", "arguments": {}}},
        ],
    },
    {"role": "tool", "content": "{\"temp\": 21.5}", "name": "get_weather", "tool_call_id": "call_1"},
    {"role": "tool", "content": "13:04", "name": "get_time", "tool_call_id": "call_2"},
]

CASES = {
    "single_user": {"messages": [USER1], "add_generation_prompt": True},
    "system_user": {"messages": [SYSTEM, USER1], "add_generation_prompt": True},
    "multi_turn": {"messages": [SYSTEM, USER1, ASSIST1, USER2], "add_generation_prompt": True},
    "multi_turn_no_gen": {"messages": [USER1, ASSIST1, USER2, ASSIST1], "add_generation_prompt": False},
    "tools_only": {"messages": [USER1], "tools": [WEATHER_TOOL, TIME_TOOL], "add_generation_prompt": True},
    "tool_call_and_result": {
        "messages": [SYSTEM] + TOOL_TURN + [{"role": "assistant", "content": "21.5°C, 13:04."}],
        "tools": [WEATHER_TOOL, TIME_TOOL],
        "add_generation_prompt": False,
    },
    "tool_result_then_gen": {"messages": TOOL_TURN, "tools": [WEATHER_TOOL], "add_generation_prompt": True},
    "content_parts": {
        "messages": [
            {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
            {"role": "user", "content": [{"type": "text", "text": "Describe "}, {"type": "text", "text": " this. "}]},
        ],
        "add_generation_prompt": True,
    },
    "roles_not_alternating": {"messages": [USER1, USER2], "add_generation_prompt": True},
}

STRFTIME = [
    (FIXED_NOW, "%d %b %Y"),
    (FIXED_NOW, "%Y-%m-%d %H:%M:%S"),
    (0, "%A %a %B %b %y %j %p %I %%"),
    (951_825_600, "%d %B %Y, %A (%j) %I:%M %p"),  # 2000-02-29 12:00 UTC
    (4_102_444_799, "%Y-%m-%dT%H:%M:%S %a"),  # 2099-12-31 23:59:59
]


def make_env():
    """The environment transformers' `_compile_jinja_template` builds."""

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        # transformers uses datetime.now() (local time); molla uses UTC, pinned here
        return time.strftime(format, time.gmtime(FIXED_NOW))

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render(template, bos, eos, messages, tools, add_generation_prompt):
    return template.render(messages=messages, tools=tools, documents=None,
                           add_generation_prompt=add_generation_prompt, bos_token=bos, eos_token=eos)


def supports_parts(template, bos, eos):
    probe = [{"role": "user", "content": [{"type": "text", "text": PROBE}]}]
    try:
        return PROBE in render(template, bos, eos, probe, None, False)
    except Exception:
        return False


def flatten(messages):
    out = []
    for m in messages:
        if isinstance(m.get("content"), list):
            m = dict(m)
            m["content"] = "\n".join(p["text"] for p in m["content"] if p.get("type") == "text")
        out.append(m)
    return out


def extract(models_dir):
    import gguf

    for name, file in GGUF_SOURCES.items():
        reader = gguf.GGUFReader(models_dir / file)
        field = reader.fields.get("tokenizer.chat_template")
        if field is None:
            print(f"{file}: no tokenizer.chat_template", file=sys.stderr)
            continue
        text = bytes(field.parts[field.data[0]]).decode("utf-8")
        out = ROOT / TEMPLATES[name][0]
        out.write_text(text, encoding="utf-8", newline="")
        print(f"{file}: {len(text)} bytes -> {out.relative_to(ROOT)}", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--extract", action="store_true", help="re-copy templates from the cached GGUFs first")
    ap.add_argument("--out", default=str(DATA / "expected.json"))
    args = ap.parse_args()
    if args.extract:
        extract(Path(os.environ.get("MOLLA_MODELS", Path.home() / ".cache/molla/models")).expanduser())

    env = make_env()
    expected = []
    templates = {}
    for tname, (path, bos, eos) in TEMPLATES.items():
        source = (ROOT / path).read_text(encoding="utf-8")
        template = env.from_string(source)
        parts = supports_parts(template, bos, eos)
        templates[tname] = {"file": path, "bos": bos, "eos": eos, "supports_content_parts": parts}
        for cname, case in CASES.items():
            messages = case["messages"] if parts else flatten(case["messages"])
            row = {"template": tname, "case": cname}
            try:
                row["output"] = render(template, bos, eos, messages, case.get("tools"), case["add_generation_prompt"])
            except Exception as e:  # the Rust side must fail too
                row["error"] = f"{type(e).__name__}: {e}"
            expected.append(row)

    strftime = [{"timestamp": ts, "format": f, "output": time.strftime(f, time.gmtime(ts))} for ts, f in STRFTIME]
    doc = {
        "generator": "scripts/template_expected.py",
        "jinja2": jinja2.__version__,
        "fixed_now": FIXED_NOW,
        "templates": templates,
        "cases": CASES,
        "expected": expected,
        "strftime": strftime,
    }
    Path(args.out).write_text(json.dumps(doc, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    n_err = sum("error" in r for r in expected)
    print(f"wrote {args.out}: {len(expected)} renderings ({n_err} expected errors)", file=sys.stderr)


if __name__ == "__main__":
    main()
