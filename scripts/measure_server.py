#!/usr/bin/env python3
"""llama-server under load, compressed vs uncompressed: N parallel requests of L generated tokens.

    build/venv/bin/python scripts/measure_server.py MODEL [--parallel 4] [--tokens 8000] [--ctx 32768]
        [--budget 1024] [--threads 2]

Prints one table row per configuration: peak RSS of the server process, KV MiB (llama.cpp's own
size line), aggregate generated tokens/s, and the plugin's share of decode time (from /metrics).
"""

import argparse
import re
import subprocess
import sys
import threading
import time
import urllib.request

from server_util import ROOT, free_port, post, wait_healthy


def rss_mib(pid: int) -> float:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def run(args, kv_flags):
    port = free_port()
    log_path = ROOT / f"build/measure-server-{port}.log"
    cmd = [str(ROOT / "build/bin/llama-server"), "-m", args.model, "--port", str(port), "--host", "127.0.0.1",
           "-c", str(args.ctx), "-np", str(args.parallel), "-t", str(args.threads), "--metrics", "--no-ui",
           "-lv", "4", *kv_flags]
    log = open(log_path, "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc)
        peak = [0.0]
        done = threading.Event()

        def sample():
            while not done.is_set():
                peak[0] = max(peak[0], rss_mib(proc.pid))
                time.sleep(0.5)

        sampler = threading.Thread(target=sample)
        sampler.start()
        results = [None] * args.parallel
        prompts = ["Write a long, detailed story about a lighthouse keeper.",
                   "Explain, step by step, how a compiler turns source code into machine code.",
                   "Describe the history of the printing press in great detail.",
                   "Plan a three-month expedition across a desert, day by day."]

        def one(i):
            results[i] = post(url + "/completion", {"prompt": prompts[i % len(prompts)], "n_predict": args.tokens,
                                                   "ignore_eos": True, "temperature": 0.7, "seed": i,
                                                   "id_slot": i}, timeout=7200)

        t0 = time.time()
        threads = [threading.Thread(target=one, args=(i,)) for i in range(args.parallel)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.time() - t0
        done.set()
        sampler.join()
        with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
            metrics = r.read().decode()
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        log.close()
    text = log_path.read_text(errors="replace")
    kv = re.search(r"llama_kv_cache: size = +([\d.]+) MiB \( *(\d+) cells", text)
    m = dict(re.findall(r"^llamacpp:(\S+) (\S+)$", metrics, re.M))
    n_gen = sum(r["tokens_predicted"] for r in results)
    decode_s = float(m.get("tokens_predicted_seconds_total", 0))
    plugin_s = float(m.get("kv_plugin_seconds_total", 0))
    return {
        "config": " ".join(kv_flags) or "uncompressed",
        "generated": n_gen,
        "wall_s": wall,
        "agg_tok_s": n_gen / wall,
        "rss_peak_mib": peak[0],
        "kv_mib": float(kv.group(1)) if kv else float("nan"),
        "kv_cells": int(kv.group(2)) if kv else 0,
        "plugin_share": plugin_s / decode_s if decode_s > 0 and plugin_s > 0 else 0.0,
        "max_cells": max(r["timings"].get("kv_cells", -1) for r in results),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=8000)
    ap.add_argument("--ctx", type=int, default=32768)
    ap.add_argument("--budget", type=int, default=1024)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only", choices=["compressed", "uncompressed"])
    args = ap.parse_args()
    rows = []
    if args.only != "uncompressed":
        rows.append(run(args, ["--kv-compress", "beacon", "--kv-budget", str(args.budget)]))
    if args.only != "compressed":
        rows.append(run(args, []))
    print(f"\n{args.parallel} parallel requests x {args.tokens} generated tokens, -c {args.ctx}, -t {args.threads}")
    print("| config | generated | wall s | aggregate tok/s | peak RSS MiB | KV MiB (cells) | plugin share | max kv_cells |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['config']} | {r['generated']} | {r['wall_s']:.0f} | {r['agg_tok_s']:.1f} | {r['rss_peak_mib']:.0f} "
              f"| {r['kv_mib']:.1f} ({r['kv_cells']}) | {100 * r['plugin_share']:.1f}% | {r['max_cells']} |")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
