#!/usr/bin/env python3
"""Summarise scripts/upstream-server-suite.sh runs: counts per mode and the tests that pass plain
but fail compressed (or the reverse), from pytest's JUnit XML files.

usage: summarize.py RESULTS_DIR MODE...     (RESULTS_DIR/MODE/junit.xml; writes RESULTS_DIR/summary.md)
"""
import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def load(path: Path) -> dict[str, tuple[str, str]]:
    """test id -> (outcome, message); outcome in passed|failed|error|skipped"""
    out: dict[str, tuple[str, str]] = {}
    root = ET.parse(path).getroot()
    for tc in root.iter("testcase"):
        cls = tc.get("classname", "")
        name = tc.get("name", "")
        tid = cls.replace("unit.", "unit/", 1).replace(".", "/") + ".py::" + name if cls.startswith("unit.") else f"{cls}::{name}"
        outcome, msg = "passed", ""
        for child in tc:
            if child.tag in ("failure", "error"):
                outcome = "failed" if child.tag == "failure" else "error"
                msg = (child.get("message") or "").strip()
                break
            if child.tag == "skipped":
                outcome = "skipped"
                msg = (child.get("message") or "").strip()
        out[tid] = (outcome, msg)
    return out


def first_line(msg: str, n: int = 160) -> str:
    line = msg.splitlines()[0] if msg else ""
    return (line[: n - 3] + "...") if len(line) > n else line


def main() -> int:
    results = Path(sys.argv[1])
    modes = [m for m in sys.argv[2:] if (results / m / "junit.xml").exists()]
    runs = {m: load(results / m / "junit.xml") for m in modes}
    lines = ["# upstream server suite: summary", ""]
    lines.append("| mode | run | passed | failed | errors | skipped |")
    lines.append("| --- | ---: | ---: | ---: | ---: | ---: |")
    for m, r in runs.items():
        c = {k: sum(1 for o, _ in r.values() if o == k) for k in ("passed", "failed", "error", "skipped")}
        lines.append(f"| {m} | {c['passed'] + c['failed'] + c['error']} | {c['passed']} | {c['failed']} | {c['error']} | {c['skipped']} |")
    lines.append("")

    for m, r in runs.items():
        bad = [(t, msg) for t, (o, msg) in sorted(r.items()) if o in ("failed", "error")]
        lines.append(f"## failed in {m} ({len(bad)})")
        lines += [f"- `{t}`: {first_line(msg)}" for t, msg in bad] or ["- none"]
        lines.append("")

    if "plain" in runs:
        for m in [m for m in runs if m != "plain"]:
            p, c = runs["plain"], runs[m]
            regress = sorted(t for t in p if p[t][0] == "passed" and c.get(t, ("missing", ""))[0] in ("failed", "error"))
            fixed = sorted(t for t in p if p[t][0] in ("failed", "error") and c.get(t, ("missing", ""))[0] == "passed")
            both = sorted(t for t in p if p[t][0] in ("failed", "error") and c.get(t, ("missing", ""))[0] in ("failed", "error"))
            differ = [t for t in both if first_line(p[t][1]) != first_line(c[t][1])]
            lines.append(f"## pass plain, fail {m} ({len(regress)})")
            lines += [f"- `{t}`: {first_line(c[t][1])}" for t in regress] or ["- none"]
            lines.append("")
            lines.append(f"## fail plain, pass {m} ({len(fixed)})")
            lines += [f"- `{t}`" for t in fixed] or ["- none"]
            lines.append("")
            lines.append(f"## fail in both, with a different message in {m} ({len(differ)})")
            for t in differ:
                lines.append(f"- `{t}`")
                lines.append(f"  - plain: {first_line(p[t][1])}")
                lines.append(f"  - {m}: {first_line(c[t][1])}")
            if not differ:
                lines.append("- none")
            lines.append("")

    skipped: dict[str, list[str]] = {}
    for r in runs.values():
        for t, (o, msg) in r.items():
            if o == "skipped":
                skipped.setdefault(msg, [])
                if t not in skipped[msg]:
                    skipped[msg].append(t)
    lines.append("## skipped (reason: tests)")
    for msg, tests in sorted(skipped.items()):
        lines.append(f"- {msg} ({len(tests)}): " + ", ".join(f"`{t.split('::', 1)[-1]}`" for t in sorted(tests)[:12])
                     + (" ..." if len(tests) > 12 else ""))
    lines.append("")

    text = "\n".join(lines)
    (results / "summary.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
