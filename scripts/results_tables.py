#!/usr/bin/env python3
"""The result tables of docs/results.md and README.md, rendered from the committed result files.

Each generated block in a page sits between two markers:

    <!-- generated: NAME -->
    ...
    <!-- end generated -->

and NAME is one of the renderers below, each reading files under docs/results/. With no argument
the blocks are rewritten in place (`make results-tables`); with --check nothing is written and the
exit status is 1 when a page's block differs from what its files give (tests/results_pages.rs,
`make lint`), so a figure on a page cannot drift from the files it came from.
"""

import argparse
import csv
import json
import math
import re
import sys
from collections import OrderedDict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "results"
PAGES = [ROOT / "docs" / "results.md", ROOT / "README.md"]
BLOCK = re.compile(r"(<!-- generated: ([\w.-]+) -->\n)(.*?)(<!-- end generated -->)", re.S)


def read_csv(path: Path) -> list:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def wilson(k: int, n: int, z: float = 1.959964) -> tuple:
    """Wilson score interval of k successes in n, as fractions."""
    if n == 0:
        return 0.0, 1.0
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return max(0.0, c - h), min(1.0, c + h)


def pct(k: int, n: int) -> str:
    """`36% [27–45] (40/112)`: the share, its Wilson 95% interval, the counts."""
    lo, hi = wilson(k, n)
    return f"{round(100 * k / n)}% [{round(100 * lo)}–{round(100 * hi)}] ({k}/{n})"


def thousands(x: float) -> str:
    return f"{round(x):,}"


def p_value(p: float) -> str:
    if p < 0.001:
        return "p < 0.001"
    return f"p = {p:.2f}" if p >= 0.01 else f"p = {p:.3f}"


# ---- renderers ----------------------------------------------------------------------------------

def policy_label(policy: str, implicit: str = "") -> str:
    """A bench policy string as the pages name it (`beacon/score=prob` -> `beacon` score=prob).
    `implicit`: a key the run's build gave `beacon` and `recent` when the string names none of
    that key (runs older than a change of default), written out so the label says what ran."""
    if policy == "none":
        return "none (full cache)"
    head, *keys = policy.split("/")
    if implicit and head in ("beacon", "recent") and not any(k.split("=")[0] == implicit.split("=")[0] for k in keys):
        keys.append(implicit)
    return f"`{head}`" + "".join(f" {k}" for k in keys)


def reason_table(name: str) -> str:
    """Turns right per policy and budget of a `beaconkv-bench reason` folder."""
    rows = read_csv(RESULTS / name / "accuracy.csv")
    budgets = sorted({int(r["budget"]) for r in rows if r["policy"] != "none"})
    cells = OrderedDict()
    for r in rows:
        cells.setdefault(r["policy"], {})[int(r["budget"])] = r
    out = ["| policy | " + " | ".join(f"{b} cells" for b in budgets) + " |",
           "| --- |" + " --- |" * len(budgets)]
    for policy, by_budget in cells.items():
        line = []
        for b in budgets:
            r = by_budget.get(0 if policy == "none" else b)
            if r is None:
                line.append("–")
                continue
            line.append(f"{pct(int(r['turns_right']), int(r['turns']))}; back {r['back_right']}/{r['back']}; "
                        f"{thousands(float(r['mean_tokens']))} tok; cut {r['cut']}")
        out.append(f"| {policy_label(policy)} | " + " | ".join(line) + " |")
    return "\n".join(out) + "\n"


def trace_table(name: str, implicit: str = "") -> str:
    """Top-1 / KL over the whole answer per policy and budget of a trace folder (`trace.csv`)."""
    rows = read_csv(RESULTS / name / "trace.csv")
    acc = OrderedDict()
    for r in rows:
        if r["policy"] == "none":
            continue
        policy = r["config"].split(":")[0] + "".join("/" + k for k in r["config"].split("/")[1:])
        a = acc.setdefault(policy, {}).setdefault(int(r["budget"]), {"n": 0, "top1": 0.0, "kl": 0.0})
        n = int(r["n"])
        a["n"] += n
        a["top1"] += float(r["top1"]) * n
        a["kl"] += float(r["kl"]) * n
        a["free"] = r["diverge_free"] or f"≥{r['free_limit']}"
        a["limit"] = r["free_limit"]
    budgets = sorted({b for v in acc.values() for b in v})
    out = ["| policy | " + " | ".join(f"{b:,} cells" for b in budgets)
           + " | free run before divergence (" + " / ".join(f"{b:,}" for b in budgets) + ") |",
           "| --- |" + " --- |" * (len(budgets) + 1)]
    for policy, by_budget in acc.items():
        vals, free = [], []
        for b in budgets:
            a = by_budget.get(b)
            if a is None:
                vals.append("–")
                free.append("–")
                continue
            vals.append(f"{a['top1'] / a['n']:.3f} / {a['kl'] / a['n']:.3f}")
            f = a["free"]
            free.append(f"≥{a['limit']}" if f == a["limit"] else f)
        out.append(f"| {policy_label(policy, implicit)} | " + " | ".join(vals) + " | " + " / ".join(free) + " |")
    return "\n".join(out) + "\n"


def humaneval_table(name: str) -> str:
    """Pass@1 per policy and budget of a `beaconkv-bench humaneval` folder (tuning problems), with
    the paired test against the full cache."""
    acc = [r for r in read_csv(RESULTS / name / "accuracy.csv") if r["split"] == "tune"]
    mc = {(r["second"], r["budget"]): r for r in read_csv(RESULTS / name / "mcnemar.csv")
          if r["split"] == "tune" and r["first"] == "none@0"}
    out = ["| policy | budget | pass@1 | against the full cache (lost / won, exact McNemar) | answers cut | CPU s per bundle |",
           "| --- | ---: | --- | --- | ---: | ---: |"]
    for r in acc:
        m = mc.get((r["policy"], r["budget"]))
        paired = f"−{m['lost']} +{m['won']}, {p_value(float(m['p']))}" if m else "–"
        budget = "–" if r["policy"] == "none" else r["budget"]
        out.append(f"| {policy_label(r['policy'])} | {budget} | {pct(int(r['passed']), int(r['functions']))} | "
                   f"{paired} | {r['cut']} of {r['bundles']} | {float(r['cpu_s_per_bundle']):.0f} |")
    return "\n".join(out) + "\n"


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar test: binomial(b + c, 1/2) on the discordant pairs."""
    n, k = b + c, min(b, c)
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def humaneval_passed(name: str) -> dict:
    """{(policy, budget): {task: passed}} over the tuning problems of a humaneval folder."""
    out = {}
    with open(RESULTS / name / "results.jsonl") as f:
        for line in f:
            r = json.loads(line)
            if r.get("split") != "tune":
                continue
            cell = out.setdefault((r["policy"], int(r["budget"])), {})
            cell.update(zip(r["tasks"], r["passed"]))
    return out


def humaneval_pairs(name: str, pairs: list) -> str:
    """Paired comparisons of a humaneval folder, each ((policy, budget), (policy, budget)): the
    functions only one of the two passes, and the exact McNemar test."""
    passed = humaneval_passed(name)
    out = ["| first | second | budget | functions | only the first passes | only the second passes | exact McNemar |",
           "| --- | --- | ---: | ---: | ---: | ---: | --- |"]
    for first, second in pairs:
        a, b = passed.get(first), passed.get(second)
        if a is None or b is None:
            continue  # a cell not measured yet
        both = sorted(set(a) & set(b))
        lost = sum(1 for t in both if a[t] and not b[t])
        won = sum(1 for t in both if b[t] and not a[t])
        out.append(f"| {policy_label(first[0])} | {policy_label(second[0])} | {second[1]} | {len(both)} | {lost} | "
                   f"{won} | {p_value(mcnemar_exact(lost, won))} |")
    return "\n".join(out) + "\n"


def humaneval_cells(name: str) -> str:
    """Pass@1 per cell of a humaneval folder from its rows, with how many of the tuning requests
    each cell has answered (a resumed run fills the rest)."""
    cells, requests = {}, set()
    with open(RESULTS / name / "results.jsonl") as f:
        for line in f:
            r = json.loads(line)
            if r.get("split") != "tune":
                continue
            requests.add(r["bundle"])
            c = cells.setdefault((r["policy"], int(r["budget"])), {"passed": 0, "n": 0, "bundles": 0, "cut": 0, "gen": 0})
            c["passed"] += sum(r["passed"])
            c["n"] += len(r["passed"])
            c["bundles"] += 1
            c["cut"] += bool(r["cut"])
            c["gen"] += r["n_gen"]
    out = ["| policy | budget | requests answered | pass@1 | answers cut | generated tokens per answer |",
           "| --- | ---: | ---: | --- | ---: | ---: |"]
    for (policy, budget), c in cells.items():
        b = "–" if policy == "none" else str(budget)
        out.append(f"| {policy_label(policy)} | {b} | {c['bundles']} of {len(requests)} | {pct(c['passed'], c['n'])} | "
                   f"{c['cut']} | {thousands(c['gen'] / c['bundles'])} |")
    return "\n".join(out) + "\n"


# the request kept whole (up to 1,024 cells) in every compressed cell of humaneval-budgets
KEEP = "prompt=keep/prompt_max=1024"


def budgets_pairs() -> str:
    """The default against each baseline, and the method's ablation (beacons against the recent
    queries alone, with each scorer), at every budget measured."""
    pairs = []
    for budget in (200, 400, 700):
        d = (f"beacon/score=prob/{KEEP}", budget)
        for p in ("beacon/score=prob", "streaming", "rkv", "recent/score=prob"):
            pairs.append((("none", 0), (f"{p}/{KEEP}", budget)))
        for other in ("streaming", "rkv", "recent/score=prob", "beacon/score=logit"):
            pairs.append((d, (f"{other}/{KEEP}", budget)))
        pairs.append(((f"beacon/score=logit/{KEEP}", budget), (f"recent/score=logit/{KEEP}", budget)))
    return humaneval_pairs("humaneval-budgets", pairs)


RENDERERS = {
    "reason-qwen2.5-coder-1.5b": lambda: reason_table("reason-qwen2.5-coder-1.5b"),
    # run when `beacon` and `recent` scored logits by default
    "trace-qwen2.5-coder-1.5b": lambda: trace_table("trace-qwen2.5-coder-1.5b", "score=logit"),
    "humaneval-prompt-policy": lambda: humaneval_table("humaneval-prompt-policy"),
    "humaneval-budgets": lambda: humaneval_cells("humaneval-budgets"),
    "humaneval-budgets-pairs": budgets_pairs,
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 if a page differs from its files")
    args = ap.parse_args()
    stale, seen = [], set()
    for page in PAGES:
        text = page.read_text()

        def render(m):
            name = m.group(2)
            if name not in RENDERERS:
                sys.exit(f"results_tables: {page.relative_to(ROOT)}: no renderer named {name!r} "
                         f"(known: {', '.join(RENDERERS)})")
            seen.add(name)
            body = RENDERERS[name]()
            if body != m.group(3):
                stale.append(f"{page.relative_to(ROOT)}: {name}")
            return m.group(1) + body + m.group(4)

        new = BLOCK.sub(render, text)
        if not args.check and new != text:
            page.write_text(new)
    if args.check and stale:
        print("results_tables: these blocks differ from their result files (run `make results-tables`):",
              *stale, sep="\n  ", file=sys.stderr)
        return 1
    print(f"results_tables: {len(seen)} tables {'checked' if args.check else 'written'}"
          + (f", {len(stale)} {'stale' if args.check else 'updated'}" if stale else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
