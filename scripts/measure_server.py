#!/usr/bin/env python3
"""Served throughput at fixed memory: llama-server compressed vs uncompressed, N parallel requests.

    build/venv/bin/python scripts/measure_server.py MODEL [--parallel 1,4,8] [--tokens 8192]
        [--ctx 32768] [--budget 1024] [--threads 2] [--only compressed|uncompressed]
        [--out build/measure-server]

For each N, the compressed server (`--kv-compress beacon --kv-budget B`) and the uncompressed one
run the same N requests of `--tokens` generated tokens (`ignore_eos`, one per slot, all at once).
`-c` is `--ctx`, raised to N x (tokens + 512) where the slots' logical context would not hold a
request: both servers get the same `-c`, so they serve the same requests; only the compressed one
keeps fewer cells.

Each finished run is appended to OUT/results.jsonl at once and skipped when the command is run
again with the same settings, so a long measurement resumes where it stopped. The tables:

1. per N and config: aggregate generated tok/s, per-request tok/s (mean and slowest), peak RSS of
   the server process, KV MiB and cells (llama.cpp's own size line), plugin share of decode time
   (from /metrics), the most cells any request held;
2. at equal KV memory: the uncompressed server's KV MiB for its N slots, and how many compressed
   slots of the same logical context that memory holds (from the compressed server's KV MiB per
   slot).
"""

import argparse
import json
import math
import re
import sys
import threading
import time
import urllib.request
from pathlib import Path

from server_util import ROOT, ServerError, free_port, post, start, stop

PROMPTS = ["Write a long, detailed story about a lighthouse keeper.",
           "Explain, step by step, how a compiler turns source code into machine code.",
           "Describe the history of the printing press in great detail.",
           "Plan a three-month expedition across a desert, day by day."]


def rss_mib(pid: int) -> float:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def ctx_for(args, n: int) -> int:
    """-c for N slots: --ctx, or more where a slot's logical context (-c / N) would not hold a request."""
    return max(args.ctx, n * (args.tokens + 512))


def settings(args, n: int, config: str) -> dict:
    """What a result depends on: a stored row with the same settings is reused."""
    return {"model": Path(args.model).name, "parallel": n, "tokens": args.tokens, "ctx": ctx_for(args, n),
            "threads": args.threads, "config": config,
            "budget": args.budget if config == "compressed" else None}


def run(args, n: int, config: str) -> dict:
    kv_flags = ["--kv-compress", "beacon", "--kv-budget", str(args.budget)] if config == "compressed" else []
    port = free_port()
    out = Path(args.out)
    log_path = out / f"server-{config}-np{n}.log"
    cmd = [str(ROOT / "build/bin/llama-server"), "-m", args.model, "--port", str(port), "--host", "127.0.0.1",
           "-c", str(ctx_for(args, n)), "-np", str(n), "-t", str(args.threads), "--metrics", "--no-ui",
           "-lv", "4", *kv_flags]
    print(f"[measure] {' '.join(cmd)}", flush=True)
    log = open(log_path, "w")
    url = f"http://127.0.0.1:{port}"
    try:
        proc = start(cmd, url, log)
    except ServerError as e:
        log.close()
        tail = log_path.read_text(errors="replace").strip().splitlines()[-3:]
        raise SystemExit(f"[measure] {e}: {' / '.join(tail)} (log: {log_path})") from None
    try:
        peak = [0.0]
        done = threading.Event()

        def sample():
            while not done.is_set():
                peak[0] = max(peak[0], rss_mib(proc.pid))
                time.sleep(0.5)

        sampler = threading.Thread(target=sample)
        sampler.start()
        results = [None] * n
        errors = []

        def one(i):
            try:
                results[i] = post(url + "/completion", {"prompt": PROMPTS[i % len(PROMPTS)], "n_predict": args.tokens,
                                                       "ignore_eos": True, "temperature": 0.7, "seed": i,
                                                       "id_slot": i}, timeout=7200)
            except OSError as e:  # urllib's HTTPError included: the server's answer is in the log
                errors.append(f"request {i}: {e!r}")

        t0 = time.time()
        threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.time() - t0
        done.set()
        sampler.join()
        if errors:
            raise RuntimeError(f"{config}, {n} parallel: {'; '.join(errors)} (server log: {log_path})")
        with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
            metrics = r.read().decode()
    finally:
        stop(proc, 60)
        log.close()
    text = log_path.read_text(errors="replace")
    kv = re.search(r"llama_kv_cache: size = +([\d.]+) MiB \( *(\d+) cells", text)
    m = dict(re.findall(r"^llamacpp:(\S+) (\S+)$", metrics, re.M))
    n_gen = sum(r["tokens_predicted"] for r in results)
    decode_s = float(m.get("tokens_predicted_seconds_total", 0))
    plugin_s = float(m.get("kv_plugin_seconds_total", 0))
    per_request = [r["timings"]["predicted_per_second"] for r in results]
    return {
        **settings(args, n, config),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "generated": n_gen,
        "short_requests": sum(r["tokens_predicted"] < args.tokens for r in results),
        "wall_s": round(wall, 1),
        "agg_tok_s": n_gen / wall,
        "req_tok_s_mean": sum(per_request) / n,
        "req_tok_s_min": min(per_request),
        "rss_peak_mib": peak[0],
        "kv_mib": float(kv.group(1)) if kv else math.nan,
        "kv_cells": int(kv.group(2)) if kv else 0,
        "plugin_share": plugin_s / decode_s if decode_s > 0 else 0.0,
        "max_cells": max(r["timings"].get("kv_cells", -1) for r in results),
    }


def load(path: Path) -> list:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def tables(args, rows: list) -> str:
    out = [f"{args.tokens} generated tokens per request, `--kv-budget {args.budget}`, -t {args.threads}, "
           f"model {Path(args.model).name}", "",
           "| N | config | -c | generated | wall s | aggregate tok/s | per-request tok/s (mean, slowest) "
           "| peak RSS MiB | KV MiB (cells per slot) | plugin share | most cells a request held |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        out.append(f"| {r['parallel']} | {r['config']} | {r['ctx']} | {r['generated']} | {r['wall_s']:.0f} "
                   f"| {r['agg_tok_s']:.1f} | {r['req_tok_s_mean']:.1f}, {r['req_tok_s_min']:.1f} "
                   f"| {r['rss_peak_mib']:.0f} | {r['kv_mib']:.1f} ({r['kv_cells']}) "
                   f"| {100 * r['plugin_share']:.1f}% | {r['max_cells'] if r['max_cells'] >= 0 else 'all'} |")
    by = {(r["parallel"], r["config"]): r for r in rows}
    eq = []
    for n in sorted({r["parallel"] for r in rows}):
        full, comp = by.get((n, "uncompressed")), by.get((n, "compressed"))
        if full and comp and comp["kv_mib"] > 0:
            per_slot = comp["kv_mib"] / n
            eq.append(f"| {n} | {full['ctx'] // n} | {full['kv_mib']:.1f} | {per_slot:.1f} "
                      f"| {int(full['kv_mib'] // per_slot)} |")
    if eq:
        out += ["", "At equal KV memory: the uncompressed server's KV for its N slots, and how many compressed slots "
                "of the same logical context fit in it.", "",
                "| N uncompressed | logical context per slot | uncompressed KV MiB | compressed KV MiB per slot "
                "| compressed slots in that memory |", "| --- | --- | --- | --- | --- |", *eq]
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--parallel", default="1,4,8", help="comma-separated N: parallel requests and slots")
    ap.add_argument("--tokens", type=int, default=8192, help="generated tokens per request")
    ap.add_argument("--ctx", type=int, default=32768, help="-c, raised where a slot could not hold a request")
    ap.add_argument("--budget", type=int, default=1024)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only", choices=["compressed", "uncompressed"])
    ap.add_argument("--out", default=str(ROOT / "build/measure-server"),
                    help="folder of results.jsonl (resumed) and the servers' logs")
    args = ap.parse_args()
    try:
        ns = [int(x) for x in args.parallel.split(",")]
    except ValueError:
        ap.error(f"--parallel: expected comma-separated integers, got {args.parallel!r}")
    if any(n < 1 for n in ns) or args.tokens < 1 or args.budget < 1:
        ap.error("--parallel, --tokens and --budget must be positive")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    store = out / "results.jsonl"
    configs = [c for c in ("compressed", "uncompressed") if args.only in (None, c)]
    stored = load(store)
    rows = []
    for n in ns:
        for config in configs:
            key = settings(args, n, config)
            row = next((r for r in stored if all(r.get(k) == v for k, v in key.items())), None)
            if row is None:
                row = run(args, n, config)
                with open(store, "a") as f:
                    f.write(json.dumps(row) + "\n")
            else:
                print(f"[measure] {config}, {n} parallel: stored in {store} ({row['date']})", flush=True)
            rows.append(row)
            print(tables(args, [row]).splitlines()[-1], flush=True)
    print()
    print(tables(args, rows))


if __name__ == "__main__":
    main()
