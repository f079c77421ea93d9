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


def paired_row(first: tuple, second: tuple, outcome: dict, counts: dict) -> str:
    """One row of a paired table of two cells (policy, budget): the units (`outcome`: {unit: ok})
    only one of them gets right with the exact McNemar test, then the units (`counts`: {unit:
    number}) where each has the larger number with the sign test (exact binomial on the units where
    the two differ, the same test on a finer outcome)."""
    both, lost, won = discordant(outcome[first], outcome[second], lambda x, y: x and not y)
    _, more, fewer = discordant(counts[first], counts[second], lambda x, y: x > y)
    return (f"| {policy_label(first[0])} | {policy_label(second[0])} | {second[1]} | {len(both)} | {lost} | "
            f"{won} | {p_value(mcnemar_exact(lost, won))} | {more} | {fewer} | "
            f"{p_value(mcnemar_exact(more, fewer))} |")


def paired_table(columns: str, pairs: list, outcome: dict, counts: dict) -> str:
    """A table of `paired_row`s under `columns` (the seven after first, second and budget); a pair
    with a cell not measured yet has no row."""
    out = [f"| first | second | budget | {columns} |", "| --- | --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | --- |"]
    out += [paired_row(first, second, outcome, counts) for first, second in pairs
            if first in outcome and second in outcome]
    return "\n".join(out) + "\n"


def reason_pairs(name: str, pairs: list) -> str:
    """Paired comparisons of a `beaconkv-bench reason` folder, each ((policy, budget), (policy,
    budget)): the turns only one of the two gets right, with the exact McNemar test (turns of one
    conversation are not independent, so this understates the spread), and the same on the
    conversations' numbers of turns right (sign test)."""
    turns, per_conv = {}, {}
    with open(RESULTS / name / "results.jsonl") as f:
        for line in f:
            r = json.loads(line)
            key = (r["policy"], int(r["budget"]))
            right = [g == e for g, e in zip(r["given"], r["expected"])]
            cell = turns.setdefault(key, {})
            cell.update({(r["conversation"], i): ok for i, ok in enumerate(right)})
            per_conv.setdefault(key, {})[r["conversation"]] = sum(right)
    return paired_table("turns | only the first gets right | only the second does | exact McNemar | "
                        "conversations: the first gets more turns right | the second does | sign test",
                        pairs, turns, per_conv)


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


def trace_prompt_scores(name: str) -> OrderedDict:
    """{policy: {budget: {prompt: (top-1, KL)}}} over the whole answer, from a trace folder's
    per-bucket rows (`trace.csv`), the full cache left out."""
    acc = OrderedDict()
    for r in read_csv(RESULTS / name / "trace.csv"):
        if r["policy"] == "none":
            continue
        policy = r["config"].split(":")[0] + "".join("/" + k for k in r["config"].split("/")[1:])
        cell = acc.setdefault(policy, OrderedDict()).setdefault(int(r["budget"]), OrderedDict())
        n, top1, kl = cell.get(r["prompt"], (0, 0.0, 0.0))
        k = int(r["n"])
        cell[r["prompt"]] = (n + k, top1 + float(r["top1"]) * k, kl + float(r["kl"]) * k)
    return OrderedDict((p, OrderedDict((b, {q: (t / n, kl / n) for q, (n, t, kl) in c.items()})
                                       for b, c in by.items())) for p, by in acc.items())


def trace_prompts_table(name: str) -> str:
    """Per policy and budget over many prompts: mean top-1 and KL (each prompt weighs the same),
    and the lowest prompt's top-1."""
    scores = trace_prompt_scores(name)
    budgets = sorted({b for by in scores.values() for b in by})
    out = ["| policy | prompts | " + " | ".join(f"{b:,} cells: top-1 / KL (lowest top-1)" for b in budgets) + " |",
           "| --- | ---: |" + " --- |" * len(budgets)]
    for policy, by in scores.items():
        vals, n = [], 0
        for b in budgets:
            c = by.get(b)
            if not c:
                vals.append("–")
                continue
            n = max(n, len(c))
            top1 = [t for t, _ in c.values()]
            vals.append(f"{sum(top1) / len(top1):.3f} / {sum(k for _, k in c.values()) / len(c):.3f} "
                        f"({min(top1):.3f})")
        out.append(f"| {policy_label(policy)} | {n} | " + " | ".join(vals) + " |")
    return "\n".join(out) + "\n"


def trace_prompts_pairs(name: str, pairs: list) -> str:
    """Paired over prompts, each (first, second) policy at every budget both ran: the prompts on
    which each is closer to the full cache (higher top-1; lower KL), with the sign test."""
    scores = trace_prompt_scores(name)
    out = ["| first | second | budget | prompts | first's top-1 higher | second's higher | sign test | "
           "first's KL lower | second's lower | sign test |",
           "| --- | --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | --- |"]
    for first, second in pairs:
        for b in sorted(set(scores.get(first, {})) & set(scores.get(second, {}))):
            a, c = scores[first][b], scores[second][b]
            both, t_first, t_second = discordant(a, c, lambda x, y: x[0] > y[0])
            _, k_first, k_second = discordant(a, c, lambda x, y: x[1] < y[1])
            out.append(f"| {policy_label(first)} | {policy_label(second)} | {b} | {len(both)} | {t_first} | "
                       f"{t_second} | {p_value(mcnemar_exact(t_first, t_second))} | {k_first} | {k_second} | "
                       f"{p_value(mcnemar_exact(k_first, k_second))} |")
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


def discordant(a: dict, b: dict, better) -> tuple:
    """The keys both cells measured, and how many of them `better(first, second)` holds for each way
    round: the discordant pairs a paired test takes."""
    both = sorted(set(a) & set(b))
    return both, sum(1 for t in both if better(a[t], b[t])), sum(1 for t in both if better(b[t], a[t]))


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
        both, lost, won = discordant(a, b, lambda x, y: x and not y)
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
    cpu = {}  # (policy, budget): [CPU seconds, requests] over the runs that logged their CPU time
    with open(RESULTS / name / "runs.jsonl") as f:
        for line in f:
            r = json.loads(line)
            c = cpu.setdefault((r["policy"], int(r["budget"])), [0.0, 0])
            c[0] += r["cpu_s"]
            c[1] += len([b for b in r["bundles"] if b.startswith("tune-")])
    out = ["| policy | budget | requests answered | pass@1 | answers cut | generated tokens per answer | CPU s per request |",
           "| --- | ---: | ---: | --- | ---: | ---: | ---: |"]
    for (policy, budget), c in cells.items():
        b = "–" if policy == "none" else str(budget)
        seconds, timed = cpu.get((policy, budget), (0.0, 0))
        per = "–" if not timed else f"{seconds / timed:.0f}" + ("" if timed == c["bundles"] else f" ({timed} timed)")
        out.append(f"| {policy_label(policy)} | {b} | {c['bundles']} of {len(requests)} | {pct(c['passed'], c['n'])} | "
                   f"{c['cut']} | {thousands(c['gen'] / c['bundles'])} | {per} |")
    return "\n".join(out) + "\n"


def humaneval_sizing(name: str) -> str:
    """The full cache's requests of a humaneval folder (tuning problems): per request its functions
    passed and its lengths, then the mean, and each budget the folder ran as a share of the mean
    prompt + answer."""
    rows, budgets = [], set()
    with open(RESULTS / name / "results.jsonl") as f:
        for line in f:
            r = json.loads(line)
            if r.get("split") != "tune":
                continue
            if r["policy"] == "none":
                rows.append(r)
            else:
                budgets.add(int(r["budget"]))
    rows.sort(key=lambda r: int(r["bundle"].split("-")[1]))
    out = ["| request | functions | passed | prompt tokens | generated tokens | prompt + answer | answer cut |",
           "| --- | --- | ---: | ---: | ---: | ---: | --- |"]
    for r in rows:
        first, last = (t.split("/")[1] for t in (r["tasks"][0], r["tasks"][-1]))
        out.append(f"| {r['bundle']} | {first}–{last} | {sum(r['passed'])}/{len(r['passed'])} | {thousands(r['n_prompt'])} | "
                   f"{thousands(r['n_gen'])} | {thousands(r['n_prompt'] + r['n_gen'])} | {'yes' if r['cut'] else 'no'} |")
    n = len(rows)
    mean = sum(r["n_prompt"] + r["n_gen"] for r in rows) / n
    passed, functions = sum(sum(r["passed"]) for r in rows), sum(len(r["passed"]) for r in rows)
    out.append(f"| all {n}, mean | | {pct(passed, functions)} | {thousands(sum(r['n_prompt'] for r in rows) / n)} | "
               f"{thousands(sum(r['n_gen'] for r in rows) / n)} | {thousands(mean)} | {sum(bool(r['cut']) for r in rows)} of {n} |")
    answer = sum(r["n_gen"] for r in rows) / n
    shares = "; ".join(f"{b} cells: {100 * b / mean:.0f}% and {100 * b / answer:.0f}%" for b in sorted(budgets))
    return "\n".join(out) + f"\n\nBudgets run, as a share of the mean prompt + answer and of the mean answer: {shares}.\n"


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


def own_values_rows(name: str, split: str = "tune") -> list:
    """The rows of one split (`tune`: problems 0-99, `heldout`: 100-163) of a `beaconkv-bench
    humaneval --own-values` folder that checked own values."""
    with open(RESULTS / name / "results.jsonl") as f:
        rows = [json.loads(line) for line in f]
    return [r for r in rows if r.get("split") == split and r.get("own")]


def own_values_table(name: str, split: str = "tune") -> str:
    """Per cell: requests with every own value written again, values written again, the gap,
    pass@1 of the functions, answers cut, generated tokens."""
    rows = own_values_rows(name, split)
    cells = {}
    for r in rows:
        o = r["own"]
        c = cells.setdefault((r["policy"], int(r["budget"])), dict.fromkeys(
            ("bundles", "all", "values", "asked", "gap", "gaps", "passed", "n", "cut", "gen"), 0))
        c["bundles"] += 1
        c["all"] += o["asked"] > 0 and o["reason"] == ""
        c["values"] += o["recalled"]
        c["asked"] += o["asked"]
        if o["gap_chars"] > 0 and o["answer_chars"] > 0:
            c["gap"] += r["n_gen"] * o["gap_chars"] / o["answer_chars"]
            c["gaps"] += 1
        c["passed"] += sum(r["passed"])
        c["n"] += len(r["passed"])
        c["cut"] += bool(r["cut"])
        c["gen"] += r["n_gen"]
    out = ["| policy | budget | requests | every value written again | values written again | gap (tokens) | "
           "functions pass@1 | answers cut | generated tokens per request |",
           "| --- | ---: | ---: | --- | ---: | ---: | --- | ---: | ---: |"]
    for (policy, budget), c in cells.items():
        b = "–" if policy == "none" else str(budget)
        gap = thousands(c["gap"] / c["gaps"]) if c["gaps"] else "–"
        out.append(f"| {policy_label(policy)} | {b} | {c['bundles']} | {pct(c['all'], c['bundles'])} | "
                   f"{100 * c['values'] / c['asked']:.1f}% | {gap} | {pct(c['passed'], c['n'])} | {c['cut']} | "
                   f"{thousands(c['gen'] / c['bundles'])} |")
    return "\n".join(out) + "\n"


def own_values_pairs(name: str, keys: str, split: str = "tune") -> str:
    """Paired comparisons on the requests (every own value written again or not): the full cache
    against each compressed cell, the default against each baseline and beacons against the recent
    queries alone with each scorer, at every budget measured (`keys`: the settings every compressed
    policy carries)."""
    outcome, recalled = {}, {}
    for r in own_values_rows(name, split):
        o = r["own"]
        key = (r["policy"], int(r["budget"]))
        outcome.setdefault(key, {})[r["bundle"]] = o["asked"] > 0 and o["reason"] == ""
        recalled.setdefault(key, {})[r["bundle"]] = o["recalled"]
    budgets = sorted({b for (_, b) in outcome if b > 0})
    pairs = []
    for budget in budgets:
        cell = lambda p: (f"{p}/{keys}", budget)  # noqa: E731
        for p in ("beacon/score=prob", "streaming", "rkv", "recent/score=prob", "beacon/score=logit"):
            pairs.append((("none", 0), cell(p)))
        for p in ("streaming", "rkv", "recent/score=prob", "beacon/score=logit"):
            pairs.append((cell("beacon/score=prob"), cell(p)))
        pairs.append((cell("beacon/score=logit"), cell("recent/score=logit")))
        # the method's own ablation: the archive on, more beacons
        pairs.append((cell("beacon/score=prob"), cell("beacon+archive/score=prob")))
        for n in (8, 32):
            pairs.append((cell("beacon/score=prob"), (f"beacon/score=prob/{keys}/beacons={n}", budget)))
    return paired_table("requests | only the first writes every value | only the second does | "
                        "exact McNemar | the first writes more values | the second does | sign test",
                        pairs, outcome, recalled)


def eval_doc(name: str, file: str) -> dict:
    """One beaconkv-eval JSON file that `beaconkv-bench` wrote into a results folder."""
    with open(RESULTS / name / file) as f:
        return json.load(f)


def config_label(config: str) -> str:
    """`beacon:256/score=logit` -> `beacon` score=logit; the budget goes to the table's columns."""
    if config == "none":
        return "none (full cache)"
    head, _, rest = config.partition(":")
    keys = rest.split("/")[1:]
    return f"`{head}`" + "".join(f" {k}" for k in keys)


def by_config_and_budget(rows: list) -> tuple:
    """{label: {budget: row}} in first-seen order, and the budgets seen."""
    cells = OrderedDict()
    for r in rows:
        if r["config"] != "none":
            cells.setdefault(config_label(r["config"]), {})[int(r["budget"])] = r
    budgets = sorted({b for c in cells.values() for b in c})
    return cells, budgets


def budget_grid(cells: OrderedDict, budgets: list, fmt) -> list:
    out = ["| policy | " + " | ".join(str(b) for b in budgets) + " |",
           "| --- |" + " ---: |" * len(budgets)]
    for label, row in cells.items():
        out.append(f"| {label} | " + " | ".join(fmt(row[b]) if b in row else "–" for b in budgets) + " |")
    return out


def agree_table(name: str) -> str:
    """Top-1 agreement / mean KL against the full cache per policy and budget, one table per text
    of a `beaconkv-bench --only agree` folder."""
    with open(RESULTS / name / "results.json") as f:
        texts = {r["file"]: Path(r["text"] or "").name for r in json.load(f)["runs"]}
    out = []
    for path in sorted((RESULTS / name).glob("agree*.json")):
        doc = eval_doc(name, path.name)
        text = texts.get(path.name) or path.stem
        cells, budgets = by_config_and_budget(doc["results"])
        out.append(f"{text} ({doc['n_tokens']:,} tokens; full cache perplexity {doc['ppl_ref']:.2f}):")
        out.append("")
        out += budget_grid(cells, budgets, lambda r: f"{r['top1']:.3f} / {r['kl']:.4f}"
                           + (f" ({r['recalled']:,} recalled)" if r.get("archived") else ""))
        out.append("")
    return "\n".join(out)


def revisit_table(name: str) -> str:
    """Perplexity over the revisited passage per policy and budget (cells recalled by the archive
    in brackets) of a `beaconkv-bench --only revisit` folder."""
    doc = eval_doc(name, "revisit.json")
    cells, budgets = by_config_and_budget(doc["results"])

    def fmt(r):
        ppl = f"{r['ppl']:.2f}"
        return f"{ppl} ({r['recalled']:,} recalled)" if r.get("archived") else ppl
    out = [f"Full cache: {doc['ppl_ref']:.2f}.", ""] + budget_grid(cells, budgets, fmt)
    return "\n".join(out) + "\n"


def speed_table(name: str) -> str:
    """Decode ms/token, KV and archive memory and the plugin's share per context length and config
    of a `beaconkv-bench --only speed` folder."""
    rows = eval_doc(name, "speed.json")["results"]
    out = ["| context | config | ms/token | tok/s | KV MiB | archive MiB | plugin share |",
           "| ---: | --- | ---: | ---: | ---: | ---: | ---: |"]
    for r in sorted(rows, key=lambda r: r["context"]):
        kv = r["cells_physical"] * r["kv_bytes_per_cell"] / 2**20
        share = 100 * r["plugin_ms"] / r["decode_ms"] if r["decode_ms"] else 0.0
        out.append(f"| {r['context']:,} | {r['config']} | {r['ms_per_token']:.2f} | {1000 / r['ms_per_token']:.1f} | "
                   f"{kv:.2f} | {r['archive_bytes'] / 2**20:.2f} | {share:.1f}% |")
    return "\n".join(out) + "\n"


def prompt_table(name: str) -> str:
    """Prompt processing per config (the batch compression clamps n_ubatch to) of a
    `beaconkv-bench --only speed` folder."""
    rows = eval_doc(name, "speed.json").get("prompt", [])
    base = next((r for r in rows if r["config"] == "none"), None)
    out = ["| config | n_ubatch | prompt tokens | prompt tok/s | vs none | plugin share |",
           "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        rate = 1000 * r["prompt_tokens"] / r["prompt_ms"]
        vs = "–" if base is None or r is base else f"{100 * (base['prompt_ms'] / r['prompt_ms'] - 1):+.0f}%"
        out.append(f"| {r['config']} | {r['n_ubatch']} | {r['prompt_tokens']:,} | {rate:.1f} | {vs} | "
                   f"{100 * r['plugin_ms'] / r['prompt_ms']:.1f}% |")
    return "\n".join(out) + "\n"


def ubatch_table(name: str) -> str:
    """Prompt tok/s of plain llama.cpp per n_ubatch (`llama-bench -o json` in a results folder):
    what the batch clamp that compression applies costs on its own."""
    with open(RESULTS / name / "ubatch.json") as f:
        rows = sorted(json.load(f), key=lambda r: r["n_ubatch"])
    clamps = {32: "≤ 256", 64: "512", 128: "1024", 512: "(upstream default)"}
    top = next((r["avg_ts"] for r in rows if r["n_ubatch"] == 512), None)
    out = ["| n_ubatch | budgets that clamp to it | prompt tok/s (pp2048) | vs 512 |",
           "| ---: | --- | ---: | ---: |"]
    for r in rows:
        vs = "–" if top is None or r["n_ubatch"] == 512 else f"{100 * (r['avg_ts'] / top - 1):+.0f}%"
        out.append(f"| {r['n_ubatch']} | {clamps.get(r['n_ubatch'], '')} | {r['avg_ts']:.1f} | {vs} |")
    return "\n".join(out) + "\n"


LOAD_LINE = re.compile(r"load: (\d+) seqs x (\d+) tokens: beacon budget (\d+): ([\d.]+) tok/s \(max (\d+) "
                       r"cells/seq\); none \((\d+) tokens\): ([\d.]+) tok/s \(max (\d+)\)")


def load_table(name: str) -> str:
    """Sequences decoded together in one context (`test_e2e MODEL load`, its log in a results folder)."""
    m = LOAD_LINE.search((RESULTS / name / "load.log").read_text())
    if not m:
        sys.exit(f"results_tables: docs/results/{name}/load.log has no `load:` line")
    n_seq, n_gen, budget, tok_c, cells_c, n_plain, tok_p, cells_p = m.groups()
    return ("| config | tokens per sequence | decode tok/s, all sequences | cells per sequence, at most |\n"
            "| --- | ---: | ---: | ---: |\n"
            f"| `beacon`, budget {budget} | {int(n_gen):,} | {float(tok_c):.1f} | {int(cells_c):,} |\n"
            f"| no compression | {int(n_plain):,} | {float(tok_p):.1f} | {int(cells_p):,} |\n")


def revisit_texts_table(name: str) -> str:
    """Revisit perplexity with and without the archive on several texts (`revisit-archive-TEXT.json`),
    and its multiple of the full cache's."""
    out, cols = [], ["beacon:512", "beacon:512/archive=4096", "beacon:256", "beacon:256/archive=2048"]
    out.append("| text | full cache | " + " | ".join(f"`{c}`" for c in cols) + " | cells recalled (512 / 256) |")
    out.append("| --- | ---: |" + " ---: |" * len(cols) + " --- |")
    for path in sorted((RESULTS / name).glob("revisit-archive-*.json")):
        doc = eval_doc(name, path.name)
        by = {r["config"]: r for r in doc["results"]}
        ref = doc["ppl_ref"]
        cells = [f"{by[c]['ppl']:.2f} ({by[c]['ppl'] / ref:.2f}×)" if c in by else "–" for c in cols]
        recalled = " / ".join(str(by[c]["recalled"]) if c in by else "–" for c in cols[1::2])
        text = path.stem[len("revisit-archive-"):]
        out.append(f"| {text} | {ref:.2f} | " + " | ".join(cells) + f" | {recalled} |")
    return "\n".join(out) + "\n"


def rpc_table(name: str) -> str:
    """`scripts/measure-rpc.sh` runs (its printed rows, under `# N = TOKENS` lines, each sitting
    under its `# llama.cpp ..., commit C, ...` line) in `docs/results/NAME/measure-rpc.txt`: total
    time, decode speed and llama.cpp's unaccounted share."""
    out = ["| commit | where | tokens | config | total s | decode ms/token | unaccounted | text MD5 |",
           "| --- | --- | ---: | --- | ---: | ---: | ---: | --- |"]
    n = commit = None
    for line in (RESULTS / name / "measure-rpc.txt").read_text().splitlines():
        m = re.match(r"# N = (\d+)", line)
        if m:
            n = int(m.group(1))
            continue
        m = re.match(r"# llama\.cpp .*commit (\w+),", line)
        if m:
            commit = m.group(1)
            continue
        f = line.split()
        if not f or f[0] not in ("rpc", "host"):
            continue
        where, spec, total, eval_ms, unacc, md5 = f[0], f[1], float(f[2]), float(f[3]), f[4], f[6]
        config = "full cache" if spec == "none" else spec.replace("policy=", "").replace(",budget=", ", budget ")
        out.append(f"| {commit} | {'RPC' if where == 'rpc' else 'host'} | {n:,} | {config} | {total:.1f} | {eval_ms:.2f} | "
                   f"{unacc}% | `{md5}` |")
    return "\n".join(out) + "\n"


def scoring_paths_table(name: str) -> str:
    """`beaconkv-eval --mode speed` per config (`docs/results/NAME/speed-host.json`): where K was
    scored, the plugin's time to the longest context, the scoring part, passes, ms per pass."""
    rows = eval_doc(name, "speed-host.json")["results"]
    last = max(r["context"] for r in rows)
    out = ["| config | K scored | plugin ms to " + f"{last:,}" + " | of it scoring | passes | ms per pass |",
           "| --- | --- | ---: | ---: | ---: | ---: |"]
    for r in rows:
        if r["context"] != last:
            continue
        out.append(f"| {r['config']} | {r['scoring']} | {thousands(r['plugin_ms'])} | {thousands(r['plugin_ms_score'])} | "
                   f"{r['compress_events']} | {r['plugin_ms_score'] / r['compress_events']:.1f} |")
    return "\n".join(out) + "\n"


def passkey_table(name: str, files: list) -> str:
    """`beaconkv-eval --mode passkey` runs (`docs/results/NAME/FILE` for each of `files`, in
    order): per config, the depths where the key was found and the needle tokens still held."""
    out = ["| config | budget | found | needle tokens held when asked |",
           "| --- | ---: | --- | --- |"]
    for file in files:
        rows = eval_doc(name, file)["results"]
        for config in OrderedDict((r["config"], None) for r in rows):
            runs = [r for r in rows if r["config"] == config]
            depths = [r["depth"] for r in runs]
            found = [r["depth"] for r in runs if r["found"]]
            run = found and depths[depths.index(found[0]):depths.index(found[0]) + len(found)] == found
            where = (f"{found[0]:g}–{found[-1]:g}" if run and len(found) > 2
                     else ", ".join(f"{d:g}" for d in found))
            held = sorted({r["needle_kept"] for r in runs})
            held_s = f"{held[0]}" if len(held) == 1 else f"{held[0]}–{held[-1]}"
            budget = "–" if config == "none" else f"{int(runs[0]['budget']):,}"
            out.append(f"| {config_label(config)} | {budget} | {len(found)} of {len(runs)}"
                       f"{f' ({where})' if found else ''} | {held_s} of {runs[0]['needle_tokens']} |")
    return "\n".join(out) + "\n"


def scoring_cost_table(name: str) -> str:
    """`beaconkv-eval --mode speed` per config at its longest context (`docs/results/NAME/speed.json`):
    scoring time, the plugin's whole time and its share of decode."""
    rows = eval_doc(name, "speed.json")["results"]
    last = max(r["context"] for r in rows)
    out = [f"| config | scoring time over {last:,} tokens | plugin time (capture + scoring + eviction) "
           "| plugin share of decode |", "| --- | ---: | ---: | ---: |"]
    for r in rows:
        if r["context"] == last:
            out.append(f"| `{r['config']}` | {thousands(r['plugin_ms_score'])} ms | {thousands(r['plugin_ms'])} ms | "
                       f"{100 * r['plugin_ms'] / r['decode_ms']:.1f}% |")
    return "\n".join(out) + "\n"


def document_questions_table(name: str) -> str:
    """`beaconkv-bench tasks --only task` (`docs/results/NAME/tasks.csv`): per config, the questions
    answered right (all tasks, with the Wilson interval, and per task), the most cells held, and
    the exact McNemar test against the full cache on the same questions."""
    rows = read_csv(RESULTS / name / "tasks.csv")
    tasks = list(OrderedDict((r["task"], None) for r in rows))
    right, cells = OrderedDict(), {}
    for r in rows:
        key = (r["task"], r["length"], r["doc"], r["question"])
        right.setdefault(r["config"], {})[key] = r["correct"] == "true"
        cells.setdefault(r["config"], []).append(int(r["cells_peak"]))
    full = right.get("none", {})
    out = ["| policy | budget | questions right | " + " | ".join(tasks) +
           " | cells held (most) | against the full cache (lost / won, exact McNemar) |",
           "| --- | ---: | --- |" + " ---: |" * len(tasks) + " ---: | --- |"]
    for config, got in right.items():
        per_task = [[v for key, v in got.items() if key[0] == t] for t in tasks]
        if config == "none":
            budget, paired = "–", "–"
        else:
            budget = config.split(":")[1].split("/")[0]
            _, lost, won = discordant(full, got, lambda x, y: x and not y)
            paired = f"−{lost} +{won}, {p_value(mcnemar_exact(lost, won))}"
        out.append(f"| {config_label(config)} | {budget} | {pct(sum(got.values()), len(got))} | " +
                   " | ".join(f"{sum(v)}/{len(v)}" for v in per_task) +
                   f" | {thousands(max(cells[config]))} | {paired} |")
    return "\n".join(out) + "\n"


def soak_table(name: str) -> str:
    """A `scripts/soak-server.py` report (report.json, copied from its --out folder into
    docs/results/NAME): each invariant with its checks and failures, then the requests by status and
    the resident-memory figure."""
    with open(RESULTS / name / "report.json") as f:
        d = json.load(f)
    out = [f"{d['minutes']:g} minutes, budget {d['budget']}, {'every invariant holds' if d['pass'] else 'FAILED'}"
           + (f" (stopped early: {d['error']})" if d["error"] else "") + ".", "",
           "| invariant | checks | failures | result |", "| --- | ---: | ---: | --- |"]
    for r in d["invariants"]:
        out.append(f"| {r['what']} | {thousands(r['checks'])} | {r['failures']} | {'pass' if r['pass'] else 'FAIL'} |")
    by_status = OrderedDict()
    for kind, n in d["requests"].items():
        status = kind.rsplit(" ", 1)[-1]
        by_status[status] = by_status.get(status, 0) + n
    rss = d["figures"].get("rss", {})
    out += ["", "| requests by status | " + " | ".join(by_status) + " |",
            "| --- |" + " ---: |" * len(by_status),
            "| count | " + " | ".join(thousands(n) for n in by_status.values()) + " |"]
    if rss:
        out += ["", f"Resident memory less the archives: {rss['adjusted_at_warm_up_mib']} MiB after the "
                f"{rss['warm_up_s']} s warm-up, at most {rss['adjusted_peak_after_mib']} MiB after it "
                f"(+{rss['growth_mib']}, bound {rss['bound_mib']})."]
    return "\n".join(out) + "\n"


def upstream_table(name: str) -> str:
    """`scripts/upstream-server-suite.sh` runs copied into docs/results/NAME/MODE/junit.xml: upstream's
    server tests per mode, run, passed, failed and skipped."""
    import xml.etree.ElementTree as ET
    labels = {"plain": "plain", "compressed": "compressed (`--kv-compress beacon --kv-budget 128`)",
              "tight": "tight (`--kv-budget 48 --kv-window 16`)"}
    out = ["| mode | run | passed | failed | skipped |", "| --- | ---: | ---: | ---: | ---: |"]
    for mode in labels:
        path = RESULTS / name / mode / "junit.xml"
        if not path.exists():
            continue
        suites = ET.parse(path).getroot()
        suites = [suites] if suites.tag == "testsuite" else list(suites)
        total = sum(int(s.get("tests")) for s in suites)
        skipped = sum(int(s.get("skipped")) for s in suites)
        failed = sum(int(s.get("failures")) + int(s.get("errors")) for s in suites)
        run = total - skipped
        out.append(f"| {labels[mode]} | {run} | {run - failed} | {failed} | {skipped} |")
    return "\n".join(out) + "\n"


def demo_block(name: str, table_only: bool = False) -> str:
    """`make demo`'s printed summary, copied from build/demo/summary.txt into docs/results/NAME; with
    `table_only`, its heading and table lines up to the eviction count."""
    text = (RESULTS / name / "summary.txt").read_text()
    if table_only:
        lines = text.splitlines()
        end = next(i for i, line in enumerate(lines) if line.startswith("evicted "))
        text = "\n".join(lines[:end + 1]) + "\n"
    return "```\n" + text + "```\n"


def default_stands() -> str:
    """Every budget of every quality run, the default against the best baseline of that run and the
    method's logit scores, read from the runs' own files; bold: the best of the three per measure."""
    def trace_pooled(name):
        cells = OrderedDict()
        for r in read_csv(RESULTS / name / "trace.csv"):
            policy = r["config"].split(":")[0] + "".join("/" + k for k in r["config"].split("/")[1:])
            n, t, k = cells.setdefault(policy, {}).get(int(r["budget"]), (0, 0.0, 0.0))
            m = int(r["n"])
            cells[policy][int(r["budget"])] = (n + m, t + float(r["top1"]) * m, k + float(r["kl"]) * m)
        return {p: {b: (t / n, k / n) for b, (n, t, k) in by.items()} for p, by in cells.items()}

    def trace_means(name):
        return {p: {b: (sum(t for t, _ in c.values()) / len(c), sum(k for _, k in c.values()) / len(c))
                    for b, c in by.items()} for p, by in trace_prompt_scores(name).items()}

    def own_values(name, split):
        cells = {}
        for r in own_values_rows(name, split):
            c = cells.setdefault(r["policy"].replace("/prompt_max=1024", ""), {}).setdefault(int(r["budget"]), [0, 0])
            c[0] += r["own"]["recalled"]
            c[1] += r["own"]["asked"]
        return {p: {b: (100 * k / n,) for b, (k, n) in by.items()} for p, by in cells.items()}

    def humaneval(name):
        cells = {}
        for (p, b), v in humaneval_passed(name).items():
            cells.setdefault(p.replace(f"/{KEEP}", ""), {})[b] = (sum(v.values()), len(v))
        return cells

    def reason(name):
        cells = {}
        for r in read_csv(RESULTS / name / "accuracy.csv"):
            cells.setdefault(r["policy"], {})[int(r["budget"])] = (int(r["turns_right"]), int(r["turns"]))
        return cells

    def eval_cells(name, file, fields):
        cells = {}
        for r in eval_doc(name, file)["results"]:
            if r["config"] == "none":
                continue
            policy = r["config"].split(":")[0] + "".join("/" + k for k in r["config"].split("/")[1:])
            cells.setdefault(policy, {}).setdefault(int(r["budget"]), [])
            cells[policy][int(r["budget"])].append(tuple(r[f] for f in fields))
        return cells

    def found(name, file):
        return {p: {b: (sum(x[0] for x in v),) for b, v in by.items()}
                for p, by in eval_cells(name, file, ("found",)).items()}

    def single(cells):
        return {p: {b: v[0] for b, v in by.items()} for p, by in cells.items()}

    full = humaneval_passed("humaneval-budgets")[("none", 0)]
    humaneval_full = sum(full.values()) / len(full)
    two = lambda v: f"{v[0]:.3f} / {v[1]:.3f}"  # noqa: E731
    two4 = lambda v: f"{v[0]:.3f} / {v[1]:.4f}"  # noqa: E731
    share = lambda v: pct(*v)  # noqa: E731
    # measure of each column: (index into the value, larger is better)
    top1_kl = [(0, True), (1, False)]
    runs = [
        ("own 4,096-token answer, Qwen2.5-Coder-1.5B: top-1 / KL", trace_pooled("trace-qwen2.5-coder-1.5b"),
         "beacon/score=prob", ["streaming", "random", "rkv"], "beacon", two, top1_kl),
        ("own 1,024-token answers to 20 prompts, Qwen2.5-Coder-1.5B: mean top-1 / KL", trace_means("own-trace-prompts"),
         "beacon", ["streaming", "rkv", "recent/score=prob"], None, two, top1_kl),
        ("an answer's own values about 650 tokens back, Qwen2.5-Coder-1.5B: values written again",
         own_values("humaneval-own-values", "tune"), "beacon/score=prob", ["streaming", "recent/score=prob", "rkv"],
         "beacon/score=logit", lambda v: f"{v[0]:.1f}%", [(0, True)]),
        ("the same, held-out problems (about 820 tokens back)", own_values("humaneval-own-values-heldout", "heldout"),
         "beacon/score=prob", ["streaming", "recent/score=prob", "rkv"], "beacon/score=logit",
         lambda v: f"{v[0]:.1f}%", [(0, True)]),
        ("HumanEval, eight functions per answer, request kept, Qwen2.5-Coder-1.5B: pass@1 (full cache "
         f"{humaneval_full:.0%})",
         humaneval("humaneval-budgets"), "beacon/score=prob", ["streaming", "rkv", "recent/score=prob"],
         "beacon/score=logit", share, [(None, True)]),
        ("14-turn conversations, Qwen2.5-Coder-1.5B: turns right (the default keeps the first prompt; the "
         "baselines without a `prompt` key and the logit scores ran with `prompt=inside`)",
         reason("reason-qwen2.5-coder-1.5b"), "beacon/score=prob/prompt=keep",
         ["streaming", "random", "rkv", "recent/score=logit", "streaming/prompt=keep"], "beacon/score=logit", share,
         [(None, True)]),
        ("GPL-3, SmolLM2: top-1 / KL", single(eval_cells("smollm2", "agree-1-GPL-3.json", ("top1", "kl"))),
         "beacon", ["streaming", "random", "rkv", "recent", "recent/score=logit"], "beacon/score=logit", two4, top1_kl),
        ("MPL-2.0, SmolLM2: top-1 / KL", single(eval_cells("smollm2", "agree-2-MPL-2.json", ("top1", "kl"))),
         "beacon", ["streaming", "random", "rkv", "recent", "recent/score=logit"], "beacon/score=logit", two4, top1_kl),
        ("revisited passage without the archive, SmolLM2: perplexity",
         single(eval_cells("smollm2", "revisit.json", ("ppl",))), "beacon",
         ["streaming", "random", "rkv", "recent", "recent/score=logit"],
         "beacon/score=logit", lambda v: f"{v[0]:.2f}", [(0, False)]),
        ("passkey, SmolLM2: depths found of 5", found("default-smollm2", "passkey.json"), "beacon/score=prob",
         ["streaming", "random", "rkv"], None, lambda v: str(v[0]), [(0, True)]),
    ]

    def measure(v, i):
        return v[0] / v[1] if i is None else v[i]

    out = ["| run | budget | default | best baseline | `score=logit` |", "| --- | ---: | --- | --- | --- |"]
    for label, cells, default, baselines, logit, fmt, measures in runs:
        budgets = sorted(cells.get(default, {}))
        for i, budget in enumerate(budgets):
            d = cells[default][budget]
            lead_i, lead_up = measures[0]
            have = [b for b in baselines if budget in cells.get(b, {})]
            best = max(have, key=lambda b: measure(cells[b][budget], lead_i) * (1 if lead_up else -1)) if have else None
            lg = cells.get(logit, {}).get(budget) if logit else None
            shown = [v for v in (d, cells[best][budget] if best else None, lg) if v is not None]

            def shown_value(v, j):
                # the figure as printed, so that equal-looking figures are bold together
                text = fmt(v)
                part = text.split(" / ")[j] if len(measures) > 1 else text
                return float(re.match(r"[\d.]+", part).group())

            def cell(v):
                text = fmt(v)
                parts = text.split(" / ") if len(measures) > 1 else [text]
                for j, (_, up) in enumerate(measures):
                    top = (max if up else min)(shown_value(x, j) for x in shown)
                    if len(shown) > 1 and shown_value(v, j) == top:
                        parts[j] = f"**{parts[j]}**"
                return " / ".join(parts)
            base = f"{policy_label(best)} {cell(cells[best][budget])}" if best else "–"
            run = f" {label} " if i == 0 else " "
            out.append(f"|{run}| {budget:,} | {cell(d)} | {base} | {cell(lg) if lg else '–'} |")
    return "\n".join(out) + "\n"


RENDERERS = {
    "reason-qwen2.5-coder-1.5b": lambda: reason_table("reason-qwen2.5-coder-1.5b"),
    "reason-qwen2.5-coder-1.5b-pairs": lambda: reason_pairs("reason-qwen2.5-coder-1.5b", [
        ((f"beacon/score=prob{k}", b), (p, b)) for b in (256, 384)
        for k, p in (("/prompt=keep", "beacon/score=prob"), ("", "streaming"), ("", "rkv"),
                     ("/prompt=keep", "streaming/prompt=keep"), ("/prompt=keep", "streaming"), ("/prompt=keep", "rkv"))]),
    # run when `beacon` and `recent` scored logits by default
    "trace-qwen2.5-coder-1.5b": lambda: trace_table("trace-qwen2.5-coder-1.5b", "score=logit"),
    "own-trace-prompts": lambda: trace_prompts_table("own-trace-prompts"),
    "own-trace-prompts-pairs": lambda: trace_prompts_pairs("own-trace-prompts", [
        ("beacon", other) for other in ("beacon/prompt=inside", "streaming", "rkv", "recent/score=prob")]),
    "humaneval-prompt-policy": lambda: humaneval_table("humaneval-prompt-policy"),
    "humaneval-sizing": lambda: humaneval_sizing("humaneval-budgets"),
    "humaneval-budgets": lambda: humaneval_cells("humaneval-budgets"),
    "humaneval-budgets-pairs": budgets_pairs,
    "humaneval-own-values": lambda: own_values_table("humaneval-own-values"),
    "humaneval-own-values-pairs": lambda: own_values_pairs("humaneval-own-values", "prompt_max=1024"),
    "humaneval-own-values-heldout": lambda: own_values_table("humaneval-own-values-heldout", "heldout"),
    "humaneval-own-values-heldout-pairs": lambda: own_values_pairs("humaneval-own-values-heldout",
                                                                   "prompt_max=1024", "heldout"),
    "smollm2-agree": lambda: agree_table("smollm2"),
    "smollm2-revisit": lambda: revisit_table("smollm2"),
    "smollm2-speed": lambda: speed_table("smollm2"),
    "smollm2-prompt": lambda: prompt_table("smollm2"),
    "smollm2-ubatch": lambda: ubatch_table("smollm2"),
    "smollm2-load": lambda: load_table("smollm2"),
    "smollm2-revisit-texts": lambda: revisit_texts_table("smollm2"),
    "gemma3-270m-agree": lambda: agree_table("gemma3-270m"),
    "gemma3-270m-revisit": lambda: revisit_table("gemma3-270m"),
    "default-smollm2-passkey": lambda: passkey_table("default-smollm2", ["passkey.json", "passkey-archive.json"]),
    "default-smollm2-scoring-cost": lambda: scoring_cost_table("default-smollm2"),
    "document-questions": lambda: document_questions_table("document-questions"),
    "rpc": lambda: rpc_table("rpc"),
    "where-the-default-stands": default_stands,
    "soak": lambda: soak_table("soak"),
    "demo": lambda: demo_block("demo"),
    "demo-table": lambda: demo_block("demo", table_only=True),
    "upstream-server": lambda: upstream_table("upstream-server"),
    "rpc-scoring-paths": lambda: scoring_paths_table("rpc"),
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
