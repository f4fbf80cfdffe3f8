#!/usr/bin/env python3
"""Turns the JSON written by scripts/bench-cpu (llama-bench -o json, molla bench --json) into a
ratio table; writes docs/bench/cpu-<date>.md and .json."""
import argparse, datetime, glob, json, os, platform, subprocess


def cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def llama_rates(path, p, n):
    pp = tg = None
    build = ""
    for rec in json.load(open(path)):
        build = rec.get("build_commit", build)
        if rec.get("n_prompt") == p and rec.get("n_gen") == 0:
            pp = rec["avg_ts"]
        if rec.get("n_gen") == n and rec.get("n_prompt") == 0:
            tg = rec["avg_ts"]
    if build in ("", "unknown", "0"):
        # Built from the llama-cpp-python sdist, which carries no git metadata.
        build = os.environ.get("LLAMA_CPP_VERSION", "0c1e570 (llama-cpp-python 0.3.36 sdist)")
    return pp, tg, build


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--p", type=int, required=True)
    ap.add_argument("--n", type=int, required=True)
    ap.add_argument("--llama-bench", default="")
    ap.add_argument("--out", default="docs/bench")
    a = ap.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    date = datetime.date.today().isoformat()
    rows = []
    for mj in sorted(glob.glob(os.path.join(a.dir, "*.molla.json"))):
        name = os.path.basename(mj)[: -len(".molla.json")]
        m = json.load(open(mj))
        lpp, ltg, build = llama_rates(os.path.join(a.dir, name + ".llama.json"), a.p, a.n)
        rows.append({
            "model": name, "threads": a.threads,
            "molla_pp": m["pp_tok_s"], "llama_pp": lpp,
            "molla_tg": m["tg_tok_s"], "llama_tg": ltg,
            "pp_ratio": m["pp_tok_s"] / lpp if lpp else None,
            "tg_ratio": m["tg_tok_s"] / ltg if ltg else None,
            "molla_ttft_ms": m.get("ttft_ms"), "molla_peak_rss": m.get("peak_rss_bytes"),
            "llama_build": build,
        })
    head = (f"CPU speed, {date}, molla {commit}, llama.cpp {rows[0]['llama_build'] if rows else '?'}"
            f" (llama-bench), {cpu_name()}, {os.cpu_count()} logical cores, {a.threads} threads")
    lines = [f"# {head}", "",
             f"| model | pp{a.p} molla | pp{a.p} llama.cpp | ratio | tg{a.n} molla | tg{a.n} llama.cpp | ratio |",
             "|---|---|---|---|---|---|---|"]
    fmt = lambda v: "-" if v is None else f"{v:.1f}"
    rat = lambda v: "-" if v is None else f"{v:.2f}x"
    for r in rows:
        lines.append(f"| {r['model']} | {fmt(r['molla_pp'])} | {fmt(r['llama_pp'])} | {rat(r['pp_ratio'])} "
                     f"| {fmt(r['molla_tg'])} | {fmt(r['llama_tg'])} | {rat(r['tg_ratio'])} |")
    text = "\n".join(lines) + "\n\nReproduce: `scripts/bench-cpu -t %d -p %d -n %d`\n" % (a.threads, a.p, a.n)
    print(text)
    os.makedirs(a.out, exist_ok=True)
    stem = os.path.join(a.out, f"cpu-{date}")
    open(stem + ".md", "w").write(text)
    json.dump({"date": date, "commit": commit, "cpu": cpu_name(), "rows": rows},
              open(stem + ".json", "w"), indent=1)


if __name__ == "__main__":
    main()
