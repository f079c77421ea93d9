"""The Python side of scripts/gpu-check.sh: step records, the comparison with the CPU reference,
time estimates of the speed steps, the report (gpu-check.json, gpu-check.md), and the pack's file
timestamps. The pack carries it next to gpu-check.sh; it needs the Python standard library only.

    gpu_check_report.py COMMAND ARGS...   (gpu-check.sh says which, with what)
"""
import glob, json, os, re, sys

def load(p, default=None):
    try:
        with open(p) as f:
            return json.load(f)
    except Exception:
        return default

def read(p, mode="r"):
    try:
        with open(p, mode) as f:
            return f.read()
    except Exception:
        return b"" if "b" in mode else ""

def steps(work):
    out = []
    for p in sorted(glob.glob(os.path.join(work, "steps", "*.json"))):
        s = load(p)
        if s:
            out.append(s)
    return out

def step(a):
    # step NAME KIND STATUS SECONDS NOTE [DATA.json]: one record in WORK/steps
    work, n, name, kind, status, secs, note = a[:7]
    rec = {"n": int(n), "name": name, "kind": kind, "status": status, "seconds": round(float(secs), 1), "note": note}
    if len(a) > 7 and a[7]:
        rec.update(load(a[7], {}) or {})
    with open(os.path.join(work, "steps", "%03d-%s.json" % (int(n), re.sub(r"[^A-Za-z0-9_.-]", "_", name))), "w") as f:
        json.dump(rec, f, indent=1)

def machine(a):
    out, smi, nvcc, cpu, cores, mem, mode = a
    lines = [l.strip() for l in read(smi).splitlines() if l.strip()]
    gpus = []
    for l in lines:
        p = [x.strip() for x in l.split(",")]
        if len(p) >= 5:
            gpus.append({"name": p[0], "compute_cap": p[1], "memory_total_mib": p[2], "driver": p[3], "memory_used_mib": p[4]})
    nv = [l for l in read(nvcc).splitlines() if "release" in l]
    json.dump({"mode": mode, "gpus": gpus, "nvcc": nv[0].strip() if nv else "", "cpu": cpu, "cores": int(cores),
               "memory_gib": mem}, open(out, "w"))

def tokens_after_prompt(txt, prompt):
    b = txt
    p = prompt.encode()
    return list(b[len(p):]) if b.startswith(p) else list(b)

def diff(a, b):
    n = sum(1 for x, y in zip(a, b) if x != y) + abs(len(a) - len(b))
    first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
    if first is None and len(a) != len(b):
        first = min(len(a), len(b))
    return n, first

def completion_summary(log):
    m = re.search(r"kv compression summary: cells peak (\d+) over all sequences, (\d+) cells evicted in (\d+) passes, plugin ([\d.]+) ms", log)
    return {"cells_peak": int(m.group(1)), "evicted": int(m.group(2)), "compress_events": int(m.group(3)),
            "plugin_ms": float(m.group(4))} if m else {}

def gen_budget(cfg):
    return {"beacon64": 64, "completion64": 64, "beacon256": 256}.get(cfg, 0)

def e2e(a):
    # e2e REF GOT FA TESTS GENS PROMPT OUT.json: compare one flash-attention setting with the CPU reference
    ref, got, fa, tests, gens, prompt, out = a
    res = {"fa": fa, "tests": [], "generations": []}
    ok_all = True
    for t in tests.split():
        base = "test-" + t.replace(":", "-")
        def one(d):
            o = read(os.path.join(d, fa, base + ".out"))
            rc = read(os.path.join(d, fa, base + ".rc")).strip()
            detail = [l for l in o.splitlines() if l and not l.startswith("ok ") and not l.startswith("FAILED ")]
            fail = [l for l in read(os.path.join(d, fa, base + ".log")).splitlines() if l.startswith("FAIL")]
            return {"ok": rc == "0" and ("ok " + t) in o, "rc": rc, "detail": (detail or fail or [""])[0]}
        g, r = one(got), one(ref)
        ok_all &= g["ok"]
        res["tests"].append({"test": t, "ok": g["ok"], "rc": g["rc"], "detail": g["detail"],
                             "reference_ok": r["ok"], "reference_detail": r["detail"],
                             "same_detail": g["detail"] == r["detail"]})
    for cfg in gens.split():
        base = "gen-" + cfg
        gj = load(os.path.join(got, fa, base + ".json"), {}) or {}
        rj = load(os.path.join(ref, fa, base + ".json"), {}) or {}
        if cfg.startswith("completion"):
            gj = completion_summary(read(os.path.join(got, fa, base + ".log")))
            rj = completion_summary(read(os.path.join(ref, fa, base + ".log")))
            gt = list(read(os.path.join(got, fa, base + ".txt"), "rb"))
            rt = list(read(os.path.join(ref, fa, base + ".txt"), "rb"))
            unit = "bytes of stdout"
        else:
            gt = tokens_after_prompt(read(os.path.join(got, fa, base + ".txt"), "rb"), prompt)
            rt = tokens_after_prompt(read(os.path.join(ref, fa, base + ".txt"), "rb"), prompt)
            unit = "tokens"
        rc = read(os.path.join(got, fa, base + ".rc")).strip()
        n, first = diff(gt, rt)
        budget = gen_budget(cfg)
        peak = gj.get("cells_peak")
        # the default prompt=keep holds up to `budget` prompt cells beside the budget
        within = None if not budget else (peak is not None and peak <= 2 * budget)
        ok = rc == "0" and (within is not False) and len(gt) > 0
        ok_all &= ok
        res["generations"].append({"config": cfg, "ok": ok, "rc": rc, "unit": unit, "n": len(gt), "n_reference": len(rt),
                                   "differing": n, "first_difference": first, "budget": budget, "cells_peak": peak,
                                   "within_budget": within, "evicted": gj.get("evicted"),
                                   "evicted_reference": rj.get("evicted"),
                                   "compress_events": gj.get("compress_events"),
                                   "compress_events_reference": rj.get("compress_events"),
                                   "plugin_ms": gj.get("plugin_ms"),
                                   "tries": read(os.path.join(got, fa, base + ".tries")).strip() or "1"})
    res["all_ok"] = bool(ok_all)
    json.dump(res, open(out, "w"), indent=1)
    print("ok" if ok_all else "failed")

def kv_from_log(log):
    bufs = re.findall(r"llama_kv_cache:\s+(\S+) KV buffer size =\s+([\d.]+) MiB", log)
    return [{"buffer": b, "mib": float(m)} for b, m in bufs]

def speed(a):
    # speed EVAL.json LOG SMI MODEL FA OUT.json: rows of one beaconkv-eval --mode speed run
    ej, lg, smi, model, fa, out = a
    e = load(ej, {}) or {}
    bufs = kv_from_log(read(lg))
    peak = None
    for l in read(smi).splitlines():
        v = l.split(",")[0].strip()
        if v.isdigit():
            peak = max(peak or 0, int(v))
    rows = []
    for r in e.get("results", []):
        r = dict(r)
        r["model"], r["fa"] = model, fa
        r["kv_mib_device_log"] = round(sum(b["mib"] for b in bufs), 2) if bufs else None
        r["kv_mib_cells"] = round(r.get("cells_physical", 0) * r.get("kv_bytes_per_cell", 0) / 2**20, 2)
        r["gpu_mib_used_peak"] = peak
        rows.append(r)
    json.dump({"rows": rows, "kv_buffers": bufs, "gpu_mib_used_peak": peak}, open(out, "w"), indent=1)
    print(len(rows))

def estimate(a):
    # estimate WORK MODEL FA CONFIG TOKENS MODEL_BYTES CPU: seconds a speed step is expected to take
    work, model, fa, config, tokens, mbytes, cpu = a
    tokens, mbytes, cpu = int(tokens), int(mbytes), cpu == "1"
    known = {}
    for s in steps(work):
        if s.get("kind") != "speed" or s.get("status") != "ok":
            continue
        for r in s.get("rows", []):
            if r.get("context", 0) > 0 and r.get("decode_ms"):
                known[(r["model"], r["fa"], r["config"])] = (r["decode_ms"] / r["context"], r["context"])
    own = known.get((model, fa, config))
    base = None
    for (m, f, c), v in known.items():
        if m == model and c.startswith("none:") and (base is None or f == fa):
            base = v[0]
    if base is None:
        base = 2.0 if cpu else 1.0 + mbytes / 2.5e9   # ms/token guess: the weights read once per token
    slope = 0.6 if fa == "on" else 1.2               # full-cache growth per 32K tokens of context
    if own:
        ms, ctx = own   # mean ms/token from the start to ctx
        if config == "none":
            ms *= 1 + slope * max(0, tokens - ctx) / 2 / 32768
        else:
            ms *= 1.05
    elif config.startswith("none:"):
        ms = base
    elif config == "none":
        ms = base * (1 + slope * tokens / 2 / 32768)
    else:
        ms = base * 2.5                              # compressed: allow for a large plugin share
    load_s = 1 if cpu else 3 + mbytes / 2e9
    print(int(load_s + tokens * ms / 1000 * 1.15 + 2))

def fmt(v, nd=2):
    return "–" if v is None else ("%.*f" % (nd, v))

def report(a):
    work, outdir, wall = a
    ss = steps(work)
    mach = next((s for s in ss if s["kind"] == "machine"), {})
    build = next((s for s in ss if s["kind"] == "build"), {})
    e2es = [s for s in ss if s["kind"] == "e2e"]
    sp = [s for s in ss if s["kind"] == "speed"]
    rows = [r for s in sp if s["status"] == "ok" for r in s.get("rows", [])]
    # a longer run of the same config measures the shorter lengths again: keep the row of the longest run
    best = {}
    for s in sp:
        if s["status"] != "ok":
            continue
        for r in s.get("rows", []):
            k = (r["model"], r["fa"], r["config"], r["context"])
            if k not in best or s.get("tokens", 0) >= best[k][0]:
                best[k] = (s.get("tokens", 0), r)
    table = [v[1] for v in best.values()]
    order = {m: i for i, m in enumerate(os.environ.get("GPU_CHECK_MODELS", "").split(","))}
    rank = lambda r: 0 if r["policy"] != "none" else (2 if r["budget"] else 1)   # beacon, full cache, limit
    table.sort(key=lambda r: (order.get(r["model"], 99), r["fa"] != "on", r["context"], rank(r)))
    res = {"wall_limit_s": int(wall), "machine": mach, "build": build, "e2e": e2es, "speed_rows": rows,
           "speed_table": table, "steps": [{k: s.get(k) for k in ("n", "name", "kind", "status", "seconds", "note")} for s in ss],
           "manifest": read(os.path.join(os.environ.get("GPU_CHECK_DIR", ""), "MANIFEST"))}
    json.dump(res, open(os.path.join(outdir, "gpu-check.json"), "w"), indent=1)

    L = ["# BeaconKV GPU check", ""]
    g = (mach.get("gpus") or [{}])[0]
    L.append("machine: %s (compute %s, %s MiB, driver %s), %s; CPU %s, %s cores; mode %s" % (
        g.get("name", "no GPU"), g.get("compute_cap", "–"), g.get("memory_total_mib", "–"), g.get("driver", "–"),
        mach.get("nvcc", "") or "no nvcc", mach.get("cpu", "?"), mach.get("cores", "?"), mach.get("mode", "?")))
    L.append("build: %s in %s s (%s)" % (build.get("status", "not run"), build.get("seconds", "–"), build.get("note", "")))
    t0 = int(os.environ.get("GPU_CHECK_T0", "0") or 0)
    if t0:
        import time
        L.append("wall: %d s so far; no step starts after %s s (counted from the %s)" % (
            int(time.time()) - t0, wall, os.environ.get("GPU_CHECK_DEADLINE_FROM", "start")))
    L.append("")
    L.append("## End-to-end on the tiny model (against the CPU reference)")
    L.append("")
    L.append("| FA | check | result | detail | CPU reference |")
    L.append("| --- | --- | --- | --- | --- |")
    for s in e2es:
        for t in s.get("tests", []):
            L.append("| %s | %s | %s | %s | %s |" % (s.get("fa"), t["test"], "ok" if t["ok"] else "FAILED (rc %s)" % t["rc"],
                     t["detail"], "same" if t["same_detail"] else (t["reference_detail"] or ("ok" if t["reference_ok"] else "failed"))))
    L.append("")
    L.append("| FA | generation | result | generated | differing from CPU | first difference | evicted (CPU) | passes (CPU) | cells peak / budget |")
    L.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for s in e2es:
        for r in s.get("generations", []):
            L.append("| %s | %s | %s | %d %s | %d | %s | %s (%s) | %s (%s) | %s / %s |" % (
                s.get("fa"), r["config"], "ok" if r["ok"] else "FAILED (rc %s)" % r["rc"], r["n"], r["unit"], r["differing"],
                "–" if r["first_difference"] is None else r["first_difference"], r["evicted"], r["evicted_reference"],
                r["compress_events"], r["compress_events_reference"], r["cells_peak"], r["budget"] or "–"))
    L.append("")
    L.append("## Decode speed (greedy, batch 1; ms/token over the 64 tokens before each length)")
    L.append("")
    L.append("| model | FA | context | config | ms/token | tok/s | cells | KV MiB (device log) | KV MiB (cells x bytes) | plugin share | capture ms/tok | score ms/tok | K scored | reads/pass | KiB to host/token | GPU MiB used (peak) |")
    L.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in table:
        ctx = r["context"]
        share = 100.0 * r["plugin_ms"] / r["decode_ms"] if r.get("decode_ms") else None
        passes = r.get("compress_events") or 0
        to_host = (r.get("bytes_pass", 0) + r.get("bytes_capture", 0)) / 1024.0 / ctx
        L.append("| %s | %s | %d | %s | %s | %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r["model"], r["fa"], ctx, r["config"], fmt(r["ms_per_token"]), fmt(1000.0 / r["ms_per_token"] if r["ms_per_token"] else None, 1),
            r["cells"], fmt(r.get("kv_mib_device_log")), fmt(r.get("kv_mib_cells")), fmt(share, 1) + "%",
            fmt(r["plugin_ms_capture"] / ctx, 3), fmt(r["plugin_ms_score"] / ctx, 3), r.get("scoring") or "–",
            fmt(r.get("reads_pass", 0) / passes, 1) if passes else "–", fmt(to_host, 2),
            r.get("gpu_mib_used_peak") or "–"))
    L.append("")
    L.append("## Steps")
    L.append("")
    L.append("| # | step | status | s | note |")
    L.append("| --- | --- | --- | --- | --- |")
    for s in ss:
        L.append("| %d | %s | %s | %s | %s |" % (s["n"], s["name"], s["status"], s["seconds"], s.get("note", "")))
    with open(os.path.join(outdir, "gpu-check.md"), "w") as f:
        f.write("\n".join(L) + "\n")

def e2e_ok(a):
    work, exact = a
    bad = []
    for s in steps(work):
        if s["kind"] != "e2e":
            continue
        bad += ["%s %s" % (s["fa"], t["test"]) for t in s.get("tests", []) if not t["ok"]]
        bad += ["%s %s" % (s["fa"], g["config"]) for g in s.get("generations", []) if not g["ok"] or (exact == "1" and g["differing"])]
        if s["status"] != "ok" and not s.get("tests"):
            bad.append(s["name"])
    print(" ".join(bad))


def set_tokens(a):
    # set-tokens ROWS.json N: the tokens a speed step ran to, recorded with its rows
    path, n = a
    d = load(path, {})
    d["tokens"] = int(n)
    with open(path, "w") as f:
        json.dump(d, f)

def mtimes_save(a):
    # mtimes-save DIR: every file's timestamp into DIR/MTIMES
    d = a[0]
    with open(os.path.join(d, "MTIMES"), "w") as f:
        for root, _, files in os.walk(d):
            for n in files:
                p = os.path.join(root, n)
                f.write("%d\t%s\n" % (int(os.stat(p).st_mtime), os.path.relpath(p, d)))

def mtimes_restore(a):
    # mtimes-restore DIR: the timestamps of DIR/MTIMES back on the files still there
    d, n = a[0], 0
    for line in open(os.path.join(d, "MTIMES")):
        t, rel = line.rstrip("\n").split("\t", 1)
        p = os.path.join(d, rel)
        if os.path.isfile(p) and int(os.stat(p).st_mtime) != int(t):
            os.utime(p, (int(t), int(t)))
            n += 1
    print("[gpu-check] restored the timestamps of %d packed files" % n, file=sys.stderr)

if __name__ == "__main__":
    {"step": step, "machine": machine, "e2e": e2e, "speed": speed, "estimate": estimate, "report": report,
     "e2e-ok": e2e_ok, "set-tokens": set_tokens, "mtimes-save": mtimes_save,
     "mtimes-restore": mtimes_restore}[sys.argv[1]](sys.argv[2:])
