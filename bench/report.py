"""The run's table (terminal and Markdown), its JSON, and the copy in ``docs/performance.md``."""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path
from typing import Any

from bench.goals import GOALS
from bench.record import Recorder

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "latest.json"
DOC = ROOT / "docs" / "performance.md"
BEGIN, END = "<!-- bench:table:begin -->", "<!-- bench:table:end -->"


def _fmt(v: float | None) -> str:
    if v is None:
        return "-"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    if abs(v) >= 100:
        return f"{v:.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def metric_rows(rec: Recorder) -> list[list[str]]:
    rows = []
    for m in rec.metrics.values():
        if not m.values:
            continue
        rows.append(
            [
                m.scenario,
                m.name,
                _fmt(m.median),
                _fmt(min(m.values)),
                _fmt(max(m.values)),
                m.unit,
                str(len(m.values)),
            ]
        )
    return rows


def goal_rows(rec: Recorder) -> list[list[str]]:
    rows = []
    for g in GOALS:
        got, want, ok = g.check(rec)
        verdict = "n/a" if ok is None else ("met" if ok else "NOT met")
        rows.append([g.text, _fmt(got), ("≥ " if g.higher_is_better else "≤ ") + _fmt(want), g.unit, verdict])
    return rows


METRIC_HEAD = ["scenario", "metric", "median", "min", "max", "unit", "runs"]
GOAL_HEAD = ["goal", "measured (median)", "target", "unit", "verdict"]


def text_table(head: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    line = lambda r: "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()  # noqa: E731
    return "\n".join([line(head), line(["-" * w for w in widths]), *map(line, rows)])


def md_table(head: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def render_text(rec: Recorder) -> str:
    parts = [text_table(METRIC_HEAD, metric_rows(rec)), "", text_table(GOAL_HEAD, goal_rows(rec))]
    if rec.notes:
        parts += ["", *[f"note [{s}]: {n}" for s, n in rec.notes]]
    return "\n".join(parts)


def render_markdown(rec: Recorder, meta: dict[str, Any]) -> str:
    parts = [
        f"Run of {meta['date']} at {meta['revision']} on {meta['machine']} (`{meta['args']}`, "
        f"{meta['seconds']:.0f} s).",
        "",
        md_table(METRIC_HEAD, metric_rows(rec)),
        "",
        md_table(GOAL_HEAD, goal_rows(rec)),
    ]
    if rec.notes:
        parts += ["", *[f"- **{s}**: {n}" for s, n in rec.notes]]
    return "\n".join(parts)


def machine() -> str:
    load = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    return (
        f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, load average before the run {load}"
    )


def revision() -> str:
    """The commit measured, and whether libs/ or services/ differed from it (read-only git)."""
    import subprocess

    def git(*args: str) -> str:
        p = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10)
        return p.stdout.strip() if p.returncode == 0 else ""

    head = git("rev-parse", "--short", "HEAD") or "unknown"
    changed = git("diff", "--name-only", "HEAD", "--", "libs", "services").splitlines()
    return f"{head} + {len(changed)} changed files in libs/ and services/" if changed else head


def write_json(rec: Recorder, meta: dict[str, Any]) -> Path:
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    goals = []
    for g in GOALS:
        got, want, ok = g.check(rec)
        goals.append({"goal": g.text, "measured": got, "target": want, "unit": g.unit, "met": ok})
    RESULTS.write_text(json.dumps({"meta": meta, **rec.to_dict(), "goals": goals}, indent=2) + "\n")
    return RESULTS


def write_doc(rec: Recorder, meta: dict[str, Any]) -> bool:
    """Replace the table between the markers in docs/performance.md; False when they are absent."""
    if not DOC.exists():
        return False
    text = DOC.read_text()
    if BEGIN not in text or END not in text:
        return False
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    DOC.write_text(f"{head}{BEGIN}\n{render_markdown(rec, meta)}\n{END}{tail}")
    return True
