#!/usr/bin/env python3
"""Exactness harness: molla's logits vs the float64 oracle (and llama.cpp).

    python3 scripts/exactness.py --molla target/release/molla \\
        --models M1.gguf M2.gguf [--prompts scripts/prompts.json] [--llamacpp] \\
        [--md docs/exactness.md] [--json docs/bench/exactness.json] \\
        [--max-top16 0.1]

For every model x prompt (prompts are chosen by general.architecture:
llama -> "smollm2", qwen2 -> "qwen2"), runs `MOLLA logits --model M --tokens
ids` (JSON: {"tokens", "vocab", "logprobs"}), the oracle (scripts/oracle.py,
cached in ~/.cache/molla/oracle since it is the slow part) and, with
--llamacpp, scripts/llamacpp_logits.py.  Each engine is compared with the
oracle on:
  top1   its argmax is the oracle's (a different argmax is accepted when the
         oracle rates it within 0.05 of its own top-1: a near tie);
  top16  max |d logprob| over the oracle's 16 most likely ids;
  probe  max |d logprob| over 256 ids spread evenly over the vocabulary.
Exits 1 if any molla case fails top1, has top16 > --max-top16, or (with
--llamacpp) has a larger top16 or probe error than llama.cpp's.  Without
--molla only llama.cpp is measured (to check the oracle against it).
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys
import time

import numpy as np
from gguf import GGUFReader

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import oracle  # noqa: E402

PROMPT_SET = {"llama": "smollm2", "qwen2": "qwen2", "gemma3": "gemma3"}
TIE = 0.05


_model_keys = {}


def model_key(path):
    """sha256 of the whole model file (~1 s/GB, once per run).  A prefix is
    not enough: a GGUF's first MiBs are mostly tokenizer metadata, so two
    quantizations of one model of the same size would share a prefix."""
    if path not in _model_keys:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            while chunk := f.read(1 << 22):
                h.update(chunk)
        _model_keys[path] = h.hexdigest()
    return _model_keys[path]


def oracle_version():
    with open(os.path.join(HERE, "oracle.py"), "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()[:16]


class OracleCache:
    """Oracle results on disk, keyed by model, tokens and oracle.py itself."""

    def __init__(self, cache_dir):
        self.dir = cache_dir
        self.models = {}  # path -> oracle.Model (dequantized weights reused)
        os.makedirs(cache_dir, exist_ok=True)

    def get(self, model_path, tokens):
        key = hashlib.sha256(json.dumps(
            [model_key(model_path), oracle_version(), list(tokens)]).encode())
        file = os.path.join(self.dir, key.hexdigest() + ".json")
        if os.path.exists(file):
            with open(file) as f:
                return json.load(f)
        if model_path not in self.models:
            self.models = {model_path: oracle.Model(model_path)}  # keep one
        result = oracle.run(self.models[model_path], tokens)
        with open(file + ".tmp", "w") as f:
            json.dump(result, f)
        os.replace(file + ".tmp", file)
        return result


def run_json(cmd, what):
    """Run cmd, parse its stdout as the logits JSON; raise RuntimeError."""
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if p.returncode != 0:
        raise RuntimeError(f"{what} exited {p.returncode}: {p.stderr.strip()[-500:]}")
    try:
        return json.loads(p.stdout)
    except json.JSONDecodeError as e:
        raise RuntimeError(f"{what} printed no JSON ({e}): {p.stdout[:200]!r}")


def compare(got, ref, tokens):
    """Metrics of engine output `got` against the oracle's `ref`."""
    r = np.asarray(ref["logprobs"], dtype=np.float64)
    if got.get("tokens") != list(tokens):
        raise RuntimeError(f"tokens echoed {got.get('tokens')} != {tokens}")
    if got.get("vocab") != len(r) or len(got.get("logprobs", [])) != len(r):
        raise RuntimeError(f"vocab {got.get('vocab')}/{len(got.get('logprobs', []))}"
                           f" != oracle's {len(r)}")
    g = np.asarray(got["logprobs"], dtype=np.float64)
    if not np.all(np.isfinite(g)):
        raise RuntimeError("non-finite logprobs")
    top16 = np.argsort(-r, kind="stable")[:16]
    probe = np.linspace(0, len(r) - 1, 256).astype(int)
    top = int(np.argmax(g))
    return {
        "top1": top, "ref_top1": int(top16[0]),
        "top1_ok": bool(top == top16[0] or r[top] >= r[top16[0]] - TIE),
        "top16_err": float(np.max(np.abs(g[top16] - r[top16]))),
        "probe_err": float(np.max(np.abs(g[probe] - r[probe]))),
    }


def measure(what, fn, ref, tokens):
    t0 = time.time()
    try:
        m = compare(fn(), ref, tokens)
    except (RuntimeError, subprocess.TimeoutExpired, OSError) as e:
        m = {"error": str(e)}
    m["seconds"] = round(time.time() - t0, 3)
    return m


def case_failures(case, max_top16):
    """Reasons this case fails (empty: passes). Only molla can fail."""
    mo, lc = case.get("molla"), case.get("llamacpp")
    if mo is None:
        return []
    if "error" in mo:
        return ["molla error: " + mo["error"]]
    why = []
    if not mo["top1_ok"]:
        why.append(f"top1 {mo['top1']} != oracle {mo['ref_top1']}")
    if max_top16 is not None and mo["top16_err"] > max_top16:
        why.append(f"top16 err {mo['top16_err']:.4g} > {max_top16}")
    if lc and "error" not in lc:
        for k in ("top16_err", "probe_err"):
            if mo[k] > lc[k]:
                why.append(f"{k} {mo[k]:.4g} > llama.cpp's {lc[k]:.4g}")
    return why


def fmt(m, key):
    if m is None:
        return "-"
    if "error" in m:
        return "ERROR"
    if key == "top1_ok":
        return "yes" if m[key] else "NO"
    return f"{m[key]:.2e}"


COLUMNS = ["model", "prompt", "tokens", "molla top1", "molla top16", "molla probe",
           "llama.cpp top1", "llama.cpp top16", "llama.cpp probe", "result"]


def rows(cases):
    for c in cases:
        mo, lc = c.get("molla"), c.get("llamacpp")
        yield [c["model"], str(c["prompt"]), str(len(c["tokens"])),
               fmt(mo, "top1_ok"), fmt(mo, "top16_err"), fmt(mo, "probe_err"),
               fmt(lc, "top1_ok"), fmt(lc, "top16_err"), fmt(lc, "probe_err"),
               "FAIL" if c["failures"] else ("ok" if mo else "-")]


def print_table(cases):
    table = [COLUMNS] + list(rows(cases))
    width = [max(len(r[i]) for r in table) for i in range(len(COLUMNS))]
    for r in table:
        print("  ".join(s.ljust(w) for s, w in zip(r, width)))
    for c in cases:
        for why in c["failures"]:
            print(f"FAIL {c['model']} prompt {c['prompt']}: {why}")


def write_markdown(path, cases, args, ok):
    lines = [
        "# Exactness: molla vs a float64 reference",
        "",
        "Generated by `scripts/exactness.py`. The reference is `scripts/oracle.py`:",
        "every weight dequantized to float64 and the whole forward run in float64.",
        "Errors are max |Δ log-probability| of the last position, over the",
        "reference's top-16 tokens (top16) and over 256 ids spread evenly across",
        "the vocabulary (probe). top1: same argmax as the reference (near ties",
        f"within {TIE} accepted).",
        "",
        f"Threshold: molla top16 ≤ {args.max_top16}"
        + (", and no larger than llama.cpp's errors." if args.llamacpp else "."),
        "",
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
    ]
    lines += ["| " + " | ".join(r) + " |" for r in rows(cases)]
    lines += ["", f"Result: {'PASS' if ok else 'FAIL'}", ""]
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        f.write("\n".join(lines))


def main():
    home_cache = os.path.join(os.path.expanduser("~"), ".cache", "molla", "oracle")
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--molla", help="path to the molla binary")
    ap.add_argument("--models", nargs="+", required=True)
    ap.add_argument("--prompts", default=os.path.join(HERE, "prompts.json"))
    ap.add_argument("--llamacpp", action="store_true",
                    help="also measure llama.cpp (needs llama-cpp-python)")
    ap.add_argument("--md", help="write a markdown report here")
    ap.add_argument("--json", help="write the results as JSON here")
    ap.add_argument("--max-top16", type=float, default=0.1)
    ap.add_argument("--molla-arg", action="append", default=[],
                    help="extra argument for `molla logits` (repeatable), e.g. --molla-arg=--decode")
    ap.add_argument("--oracle-cache", default=home_cache)
    args = ap.parse_args()
    if not args.molla and not args.llamacpp:
        ap.error("nothing to measure: give --molla and/or --llamacpp")

    with open(args.prompts) as f:
        prompts = json.load(f)
    cache = OracleCache(args.oracle_cache)
    cases = []
    for model in args.models:
        arch = GGUFReader(model).fields["general.architecture"].contents()
        name = os.path.basename(model)
        if PROMPT_SET.get(arch) not in prompts:
            print(f"exactness: no prompts for {name} (arch {arch})", file=sys.stderr)
            return 2
        for i, tokens in enumerate(prompts[PROMPT_SET[arch]]):
            print(f"exactness: {name} prompt {i} ({len(tokens)} tokens)",
                  file=sys.stderr, flush=True)
            ids = ",".join(map(str, tokens))
            case = {"model": name, "arch": arch, "prompt": i, "tokens": tokens}
            t0 = time.time()
            ref = cache.get(model, tokens)
            case["oracle_seconds"] = round(time.time() - t0, 3)
            if args.molla:
                cmd = [args.molla, "logits", "--model", model, "--tokens", ids] + args.molla_arg
                case["molla"] = measure("molla", lambda: run_json(cmd, "molla"),
                                        ref, tokens)
            if args.llamacpp:
                cmd = [sys.executable, os.path.join(HERE, "llamacpp_logits.py"),
                       "--model", model, "--tokens", ids]
                case["llamacpp"] = measure(
                    "llama.cpp", lambda: run_json(cmd, "llama.cpp"), ref, tokens)
            case["failures"] = case_failures(case, args.max_top16)
            cases.append(case)

    ok = not any(c["failures"] for c in cases)
    print_table(cases)
    if args.md:
        write_markdown(args.md, cases, args, ok)
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:  # one case a line: diffable
            f.write(f'{{"max_top16": {json.dumps(args.max_top16)}, "tie": {TIE}, '
                    f'"pass": {json.dumps(ok)}, "cases": [\n'
                    + ",\n".join(json.dumps(c) for c in cases) + "\n]}\n")
    print("exactness: " + ("PASS" if ok else "FAIL"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
