"""The report: throughput against p99 latency for every measured configuration (PNG, matplotlib) and an HTML
page with the best configurations next to the shipped one."""

from __future__ import annotations

import html
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

TOP = 10  # configurations drawn and listed (besides the shipped one)


@dataclass(frozen=True)
class CandidateSummary:
    name: str  # config path as in the CSV
    description: str  # the knob values
    points: tuple[tuple[str, float, float], ...]  # (load, p99 ms, throughput) per measured load point
    satisfies: bool
    score: str  # the objective's best value, formatted
    shipped: bool
    best: bool


def plot(summaries: Sequence[CandidateSummary], path: Path, title: str, x_label: str = "p99 latency (ms)",
         y_label: str = "throughput (infer/s)") -> Optional[Path]:
    """The PNG, or None without matplotlib (the `analyzer` extra)."""
    try:
        import matplotlib
    except ImportError:
        return None

    matplotlib.use("Agg")  # no display here, and none needed
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 6))
    for s in summaries:
        # in load order (concurrency rising), as Model Analyzer draws it: the line shows what more load buys
        pts = [(p, t) for _, p, t in s.points if p == p and p != float("inf")]
        if not pts:
            continue
        style = dict(linewidth=2.5, color="black") if s.shipped else dict(linewidth=2.5, color="tab:red") \
            if s.best else dict(linewidth=1, alpha=0.7)
        # an ensemble's name lists every step's config: the legend keeps the ensemble's, the HTML the rest
        label = ("shipped: " if s.shipped else "best: " if s.best else "") + s.name.split(":")[0]
        ax.plot([p for p, _ in pts], [t for _, t in pts], marker="o", label=label, **style)
    ax.set_xlabel(x_label)
    ax.set_ylabel(y_label)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def write_html(summaries: Sequence[CandidateSummary], path: Path, title: str, notes: Sequence[str],
               image: Optional[str]) -> Path:
    rows = []
    for s in summaries:
        loads = "<br>".join(f"{html.escape(l)}: {t:.1f}/s, p99 {p:.1f} ms" for l, p, t in s.points)
        tag = "shipped" if s.shipped else "best" if s.best else ""
        rows.append(f"<tr><td>{tag}</td><td>{html.escape(s.name)}</td><td>{html.escape(s.description)}</td>"
                    f"<td>{'Yes' if s.satisfies else 'No'}</td><td>{html.escape(s.score)}</td><td>{loads}</td></tr>")
    body = "\n".join(rows)
    picture = f'<img src="{html.escape(image)}" alt="throughput vs p99 latency">' if image else ""
    items = "".join(f"<li>{html.escape(n)}</li>" for n in notes)
    path.write_text(f"""<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif}} td,th{{border:1px solid #ccc;padding:3px 6px;font-size:13px;vertical-align:top}}
table{{border-collapse:collapse}}</style></head><body>
<h1>{html.escape(title)}</h1><ul>{items}</ul>{picture}
<table><tr><th></th><th>Model Config Path</th><th>knobs</th><th>Satisfies Constraints</th><th>objective</th>
<th>load points</th></tr>
{body}
</table></body></html>
""")
    return path
