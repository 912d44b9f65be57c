"""The validation report: JSON for machines, HTML (summary, plot, per-task list) for people.

The HTML is one self-contained file: the mutation-score histogram is an inline SVG
drawn here, so the report needs no plotting library and no network to view.
"""

from __future__ import annotations

import html
import json
from collections import Counter
from pathlib import Path
from typing import Any

from execgym.tasks.models import Task
from execgym.validation.base import Outcome
from execgym.validation.engine import CHECKS, TaskReport, ValidationReport

WEAKEST = 20
"""How many of the lowest mutation scores the report lists."""


def summary(report: ValidationReport) -> dict[str, Any]:
    """Counts per check and outcome, kept/dropped totals and mutation-score statistics."""
    per_check = {
        name: dict(
            Counter(r.outcome.value for t in report.tasks for r in t.results if r.check == name)
        )
        for name in CHECKS
    }
    scores = sorted(s for t in report.tasks if (s := t.mutation_score) is not None)
    mutants = sum(
        r.details.get("judged", 0) for t in report.tasks if (r := t.result("mutation")) is not None
    )
    return {
        "tasks": len(report.tasks),
        "kept": sum(t.kept for t in report.tasks),
        "dropped": sum(not t.kept for t in report.tasks),
        "checks": per_check,
        "mutation": {
            "tasks_scored": len(scores),
            "mutants_judged": mutants,
            "mean_score": round(sum(scores) / len(scores), 4) if scores else None,
            "median_score": scores[len(scores) // 2] if scores else None,
        },
        "wall_time_s": round(report.wall_time_s, 2),
        "sandbox_runs": report.runs,
    }


def weakest(report: ValidationReport, count: int = WEAKEST) -> list[TaskReport]:
    """The tasks with the lowest mutation scores, weakest first."""
    scored = [t for t in report.tasks if t.mutation_score is not None]
    return sorted(scored, key=lambda t: (t.mutation_score, t.task_id))[:count]


def to_json(report: ValidationReport) -> dict[str, Any]:
    """The whole report as one JSON-serialisable object."""
    return {
        "summary": summary(report),
        "settings": dict(report.settings),
        "weakest": [t.task_id for t in weakest(report)],
        "tasks": [t.to_json() for t in report.tasks],
    }


def write_json(report: ValidationReport, path: str | Path) -> None:
    """Write :func:`to_json` to ``path``."""
    Path(path).write_text(
        json.dumps(to_json(report), indent=1, ensure_ascii=False), encoding="utf-8"
    )


def write_clean(report: ValidationReport, tasks: list[Task], path: str | Path) -> int:
    """Write the kept tasks as JSONL to ``path``, in input order; return how many.

    Each task is one line for every reader, ``str.splitlines()`` included (raw U+2028,
    U+2029 and U+0085 in a prompt are written as JSON escapes).
    """
    from execgym._results_file import json_line

    kept = set(report.kept_ids())
    lines = [
        json_line(t.model_dump(mode="json", exclude_none=True)) for t in tasks if t.task_id in kept
    ]
    Path(path).write_bytes(b"".join(lines))
    return len(lines)


def _text(x: float, y: float, text: str) -> str:
    return f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="middle">{html.escape(text)}</text>'


def histogram_svg(scores: list[float], bins: int = 10, width: int = 520, height: int = 220) -> str:
    """An SVG bar chart of ``scores`` (fractions in [0, 1]) in ``bins`` equal bins."""
    counts = [0] * bins
    for score in scores:
        counts[min(bins - 1, int(score * bins))] += 1
    top = max(counts, default=0) or 1
    left, bottom, plot_w, plot_h = 40, height - 30, width - 60, height - 50
    bar_w = plot_w / bins
    mid = f"{bottom - plot_h / 2:.1f}"
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
        'aria-label="mutation score distribution" font-family="sans-serif" font-size="11">',
        f'<line x1="{left}" y1="{bottom}" x2="{left + plot_w}" y2="{bottom}" stroke="#333"/>',
    ]
    for i, count in enumerate(counts):
        h = plot_h * count / top
        x = left + i * bar_w
        label = f"{i / bins:.1f}-{(i + 1) / bins:.1f}: {count} tasks"
        parts += [
            f'<rect x="{x + 2:.1f}" y="{bottom - h:.1f}" width="{bar_w - 4:.1f}" '
            f'height="{h:.1f}" fill="#4a78b5"><title>{label}</title></rect>',
            _text(x + bar_w / 2, bottom - h - 3, str(count)),
            _text(x, bottom + 14, f"{i / bins:.1f}"),
        ]
    parts += [
        _text(left + plot_w, bottom + 14, "1.0"),
        _text(left + plot_w / 2, height - 2, "mutation score (killed / judged mutants)"),
        f'<text x="10" y="{mid}" transform="rotate(-90 10 {mid})" text-anchor="middle">'
        "tasks</text>",
    ]
    parts.append("</svg>")
    return "".join(parts)


_STYLE = (
    "body{font-family:sans-serif;margin:2em;max-width:1100px}table{border-collapse:collapse}"
    "td,th{border:1px solid #ccc;padding:3px 8px;text-align:left;vertical-align:top}"
    ".fail{color:#b00020;font-weight:bold}.warn{color:#a06000}.pass{color:#2e7d32}.skip{color:#777}"
)


def _cell(text: object, css: str = "") -> str:
    return f'<td class="{css}">{html.escape(str(text))}</td>'


def _summary_table(data: dict[str, Any]) -> str:
    outcomes = [o.value for o in Outcome]
    rows = ["<tr><th>check</th>" + "".join(f"<th>{o}</th>" for o in outcomes) + "</tr>"]
    for name, counts in data["checks"].items():
        rows.append(
            "<tr>" + _cell(name) + "".join(_cell(counts.get(o, 0), o) for o in outcomes) + "</tr>"
        )
    return "<table>" + "".join(rows) + "</table>"


def _task_rows(report: ValidationReport) -> str:
    rows = [
        "<tr><th>task</th><th>kept</th><th>mutation score</th>"
        + "".join(f"<th>{c}</th>" for c in CHECKS)
        + "</tr>"
    ]
    for task in report.tasks:
        cells = [
            _cell(task.task_id),
            _cell("yes" if task.kept else "dropped", "pass" if task.kept else "fail"),
        ]
        score = task.mutation_score
        cells.append(_cell("" if score is None else f"{score:.2f}"))
        for name in CHECKS:
            found = task.result(name)
            if found is None:
                cells.append(_cell(""))
            else:
                label = found.outcome.value + (f": {found.reason}" if found.reason else "")
                cells.append(_cell(label, found.outcome.value))
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return "<table>" + "".join(rows) + "</table>"


def _weakest_rows(report: ValidationReport) -> str:
    rows = ["<tr><th>task</th><th>score</th><th>survivors (operator: change, line)</th></tr>"]
    for task in weakest(report):
        found = task.result("mutation")
        survivors = found.details.get("survivors", []) if found else []
        text = "; ".join(
            f"{s['operator']}: {s['change']} (line {s['line']}, {s['class']})" for s in survivors
        )
        rows.append(
            "<tr>"
            + _cell(task.task_id)
            + _cell(f"{task.mutation_score:.2f}")
            + _cell(text)
            + "</tr>"
        )
    return "<table>" + "".join(rows) + "</table>"


def to_html(report: ValidationReport, title: str = "execgym task validation") -> str:
    """The report as one self-contained HTML page."""
    data = summary(report)
    scores = [s for t in report.tasks if (s := t.mutation_score) is not None]
    mutation = data["mutation"]
    dropped = [t for t in report.tasks if not t.kept]
    dropped_list = "".join(
        f"<li><b>{html.escape(t.task_id)}</b>: {html.escape('; '.join(t.reasons))}</li>"
        for t in dropped
    )
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{_STYLE}</style></head><body><h1>{html.escape(title)}</h1>"
        f"<p>{data['tasks']} tasks: <b>{data['kept']} kept</b>, <b>{data['dropped']} dropped</b>; "
        f"{mutation['mutants_judged']} mutants judged, mean mutation score "
        f"{mutation['mean_score']}, median {mutation['median_score']}; "
        f"{data['sandbox_runs']} sandbox runs in {data['wall_time_s']} s.</p>"
        f"<h2>Summary per check</h2>{_summary_table(data)}"
        f"<h2>Mutation score distribution</h2>{histogram_svg(scores)}"
        f"<h2>Weakest tasks</h2>{_weakest_rows(report)}"
        f"<h2>Dropped tasks</h2><ul>{dropped_list or '<li>none</li>'}</ul>"
        f"<h2>Every task</h2>{_task_rows(report)}"
        f"<h2>Settings</h2><pre>{html.escape(json.dumps(dict(report.settings), indent=1))}</pre>"
        "</body></html>"
    )


def write_html(report: ValidationReport, path: str | Path) -> None:
    """Write :func:`to_html` to ``path``."""
    Path(path).write_text(to_html(report), encoding="utf-8")
