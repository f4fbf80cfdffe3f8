#!/usr/bin/env python3
"""Record llama.cpp's tokenization of crates/tokenizer/tests/data/texts.json for the test models.

Writes crates/tokenizer/tests/data/expected-{smollm2,qwen2,gemma3}.json, which the Rust test
crates/tokenizer/tests/llamacpp.rs compares against. Needs llama-cpp-python (`import llama_cpp`)
and the models from scripts/fetch-models (in ${MOLLA_MODELS:-~/.cache/molla/models}).

For each text it records, through llama.cpp's C API:
  ids        llama_tokenize(add_special=true,  parse_special=true)   (llama-tokenize's defaults)
  ids_plain  llama_tokenize(add_special=false, parse_special=false)
  detok      llama_detokenize(ids, remove_special=true,  unparse_special=true), hex
  detok_raw  llama_detokenize(ids, remove_special=false, unparse_special=false), hex
and per model: bos/eos/eot ids, add_bos/add_eos, the end-of-generation set, and the pieces
(llama_token_to_piece, special=true) of a sample of ids.

Pre-tokenizers no test model uses (llama-bpe, gpt-2, default, falcon) are recorded on SmolLM2's
vocabulary with tokenizer.ggml.pre replaced and tokenizer.ggml.add_bos_token removed (written to
a temporary metadata-only GGUF); the Rust test applies the same change to the Vocab it reads.

Usage: scripts/tokenizer_expected.py [--models DIR] [--only NAME ...]
"""

import argparse
import ctypes
import json
import os
import struct
import sys
import tempfile

import llama_cpp as L

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "crates", "tokenizer", "tests", "data")
MODELS = {
    "smollm2": "SmolLM2-135M-Instruct.Q4_1.gguf",
    "qwen2": "qwen2.5-coder-0.5b-instruct.gguf",
    "gemma3": "gemma-3-270m-q4_k_m.gguf",
}
# name -> (base model, tokenizer.ggml.pre to substitute)
VARIANTS = {
    "smollm2-llama-bpe": ("smollm2", "llama-bpe"),
    "smollm2-gpt2": ("smollm2", "gpt-2"),
    "smollm2-default": ("smollm2", "default"),
    "smollm2-falcon": ("smollm2", "falcon"),
}
NULL = -1
# Kept alive at module level: llama.cpp calls it for every log line.
_QUIET = L.llama_log_callback(lambda level, text, data: None)


def _skip_value(data, off, vtype):
    """Offset just past a GGUF metadata value of type `vtype` starting at `off`."""
    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
    if vtype == 8:
        (n,) = struct.unpack_from("<Q", data, off)
        return off + 8 + n
    if vtype == 9:
        etype, n = struct.unpack_from("<IQ", data, off)
        off += 12
        if etype in sizes:
            return off + n * sizes[etype]
        for _ in range(n):
            off = _skip_value(data, off, etype)
        return off
    return off + sizes[vtype]


def _gguf_string(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def write_variant(src, dest, pre):
    """Copies src's metadata (no tensors) with tokenizer.ggml.pre = pre and no add_bos_token."""
    with open(src, "rb") as f:
        data = f.read()
    magic, version, _n_tensors, n_kv = struct.unpack_from("<4sIQQ", data, 0)
    assert magic == b"GGUF", src
    off = 24
    kvs = []
    for _ in range(n_kv):
        start = off
        (klen,) = struct.unpack_from("<Q", data, off)
        key = data[off + 8 : off + 8 + klen].decode()
        (vtype,) = struct.unpack_from("<I", data, off + 8 + klen)
        off = _skip_value(data, off + 12 + klen, vtype)
        if key not in ("tokenizer.ggml.pre", "tokenizer.ggml.add_bos_token"):
            kvs.append(data[start:off])
    kvs.append(_gguf_string("tokenizer.ggml.pre") + struct.pack("<I", 8) + _gguf_string(pre))
    with open(dest, "wb") as f:
        f.write(struct.pack("<4sIQQ", b"GGUF", version, 0, len(kvs)))
        f.writelines(kvs)


def load_vocab(path):
    params = L.llama_model_default_params()
    params.vocab_only = True
    model = L.llama_model_load_from_file(path.encode(), params)
    if not model:
        sys.exit(f"llama.cpp could not load {path}")
    return model, L.llama_model_get_vocab(model)


def tokenize(vocab, data, add_special, parse_special):
    cap = len(data) + 16
    buf = (L.llama_token * cap)()
    n = L.llama_tokenize(vocab, data, len(data), buf, cap, add_special, parse_special)
    if n < 0:
        cap = -n
        buf = (L.llama_token * cap)()
        n = L.llama_tokenize(vocab, data, len(data), buf, cap, add_special, parse_special)
    if n < 0:
        raise RuntimeError(f"tokenize failed for {data!r}")
    return list(buf[:n])


def detokenize(vocab, ids, remove_special, unparse_special):
    arr = (L.llama_token * max(1, len(ids)))(*ids)
    cap = 64 + 64 * len(ids)
    out = ctypes.create_string_buffer(cap)
    n = L.llama_detokenize(vocab, arr, len(ids), out, cap, remove_special, unparse_special)
    if n < 0:
        cap = -n
        out = ctypes.create_string_buffer(cap)
        n = L.llama_detokenize(vocab, arr, len(ids), out, cap, remove_special, unparse_special)
    return out.raw[:n]


def piece(vocab, tid):
    cap = 256
    buf = ctypes.create_string_buffer(cap)
    n = L.llama_token_to_piece(vocab, tid, buf, cap, 0, True)
    if n < 0:
        buf = ctypes.create_string_buffer(-n)
        n = L.llama_token_to_piece(vocab, tid, buf, -n, 0, True)
    return buf.raw[:n]


def opt(tid):
    return None if tid == NULL else tid


def record(name, path, texts, pieces=True):
    model, vocab = load_vocab(path)
    n_vocab = L.llama_vocab_n_tokens(vocab)
    eog = [t for t in range(n_vocab) if L.llama_vocab_is_eog(vocab, t)]
    control = [t for t in range(n_vocab) if L.llama_vocab_is_control(vocab, t)]
    sample = sorted(set(list(range(min(n_vocab, 300))) + list(range(0, n_vocab, 97)) + control + eog
                        + list(range(max(0, n_vocab - 50), n_vocab)))) if pieces else []
    cases = []
    for text in texts:
        data = text.encode("utf-8")
        ids = tokenize(vocab, data, True, True)
        cases.append({
            "text": text,
            "ids": ids,
            "ids_plain": tokenize(vocab, data, False, False),
            "detok": detokenize(vocab, ids, True, True).hex(),
            "detok_raw": detokenize(vocab, ids, False, False).hex(),
        })
    out = {
        "model": name if not pieces else os.path.basename(path),
        "llama_cpp_python": L.__version__,
        "n_vocab": n_vocab,
        "bos": opt(L.llama_vocab_bos(vocab)),
        "eos": opt(L.llama_vocab_eos(vocab)),
        "eot": opt(L.llama_vocab_eot(vocab)),
        "add_bos": bool(L.llama_vocab_get_add_bos(vocab)),
        "add_eos": bool(L.llama_vocab_get_add_eos(vocab)),
        "eog": eog,
        "pieces": {str(t): piece(vocab, t).hex() for t in sample},
        "cases": cases,
    }
    L.llama_model_free(model)
    dest = os.path.join(DATA, f"expected-{name}.json")
    with open(dest, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    print(f"{name}: {len(cases)} texts, {len(out['pieces'])} pieces -> {os.path.relpath(dest, ROOT)}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default_dir = os.environ.get("MOLLA_MODELS") or os.path.expanduser("~/.cache/molla/models")
    ap.add_argument("--models", default=default_dir, help="model cache dir (default: %(default)s)")
    ap.add_argument("--only", nargs="*", choices=sorted(MODELS) + sorted(VARIANTS), help="record just these")
    args = ap.parse_args()
    with open(os.path.join(DATA, "texts.json"), encoding="utf-8") as f:
        texts = json.load(f)
    L.llama_backend_init()
    L.llama_log_set(_QUIET, ctypes.c_void_p(0))
    for name in args.only or sorted(MODELS) + sorted(VARIANTS):
        base, pre = VARIANTS.get(name, (name, None))
        path = os.path.join(args.models, MODELS[base])
        if not os.path.exists(path):
            sys.exit(f"missing {path}: run scripts/fetch-models first")
        if pre is None:
            record(name, path, texts)
            continue
        with tempfile.TemporaryDirectory() as tmp:
            variant = os.path.join(tmp, f"{name}.gguf")
            write_variant(path, variant, pre)
            record(name, variant, texts, pieces=False)


if __name__ == "__main__":
    main()
