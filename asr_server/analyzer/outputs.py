"""What an analysis run leaves behind: results/metrics-model-inference.csv, best_model_repository/ and
reports/ (summary.html, throughput_vs_latency.png), from the Analyzer's measured candidates."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from asr_server.analyzer import objectives, report, results
from asr_server.analyzer.checkpoint import CONFIRM
from asr_server.analyzer.options import Summary
from asr_server.analyzer.search import SHIPPED, Candidate
from asr_server.analyzer.variants import apply_variant, instance_group_text, to_pbtxt

if TYPE_CHECKING:
    from asr_server.analyzer.run import Analyzer


def _rows(analyzer: Analyzer) -> list[tuple[tuple, results.Row]]:
    rows = []
    for key, candidate in analyzer.candidates.items():
        # The cells show what ran: the server's completed config (onnxruntime gets 2 CPU instances by default)
        configs = [apply_variant(analyzer.effective[m], candidate.variant(m)) for m in analyzer.tuned]
        for record in (r for r in analyzer.checkpoint.records if r.candidate == key and CONFIRM not in r.load):
            m = record.measured()
            load = (f"{record.request_rate:g}" if record.request_rate is not None else str(record.concurrency))
            rows.append(((analyzer.o.constraints.satisfied(m), objectives.value(analyzer.o.objective, m)), results.Row(
                model=analyzer.o.model, batch=analyzer.workload.batch_size, load=load,
                config_path=analyzer.config_path(candidate),
                instance_group=",".join(instance_group_text(c) for c in configs),
                max_batch_size=",".join(str(c.max_batch_size) for c in configs),
                satisfies=analyzer.o.constraints.satisfied(m), throughput=record.throughput, p99_ms=record.p99_ms,
                avg_ms=record.avg_ms, p95_ms=record.p95_ms, memory_mb=record.memory_mb,
                final_p99_ms=record.final_p99_ms, generator=record.generator if not record.error
                else f"{record.generator} (error: {record.error[:120]})")))
    rows.sort(key=lambda kr: kr[0], reverse=True)
    return rows

def write_best_repository(analyzer: Analyzer, best: Candidate) -> Path:
    """best_model_repository/: the best candidate's configs beside the model folders' files, ready to serve."""
    out = analyzer.export / "best_model_repository"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    models = {m: analyzer.config_of(m, best.variant(m)) for m in analyzer.tuned}
    top = analyzer.ensemble_config(best)
    if top is not None:
        models[analyzer.o.model] = top
    for name, config in models.items():
        folder = out / name
        if analyzer.o.repository is not None:
            _link_tree(Path(analyzer.o.repository) / name, folder)
            (folder / "config.pbtxt").unlink(missing_ok=True)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.pbtxt").write_text(to_pbtxt(config))
    return out

def write_outputs(analyzer: Analyzer, best: Candidate, best_key: tuple, confirmation: dict) -> Summary:
    """The CSV of every measured point, the best repository and the HTML report; the run's Summary."""
    rows = _rows(analyzer)
    csv_path = results.write_csv([r for _, r in rows], analyzer.export / "results" / results.FILENAME,
                                 request_rate=bool(analyzer.o.request_rate)
                                 and analyzer.o.objective != objectives.PACED_STREAMS)
    best_repo = write_best_repository(analyzer, best)
    ranked = []
    for key, candidate in analyzer.candidates.items():
        recs = [r for r in analyzer.checkpoint.records
                if r.candidate == key and not r.error and CONFIRM not in r.load]
        score = analyzer.scores.get(key, (0, 0.0))
        ranked.append((score, report.CandidateSummary(
            name=analyzer.config_path(candidate), description=candidate.describe(),
            points=tuple((r.load, r.p99_ms, r.throughput) for r in recs), satisfies=score[0] == 1,
            score=f"{score[1]:.2f}" if score[0] == 1 else "no point meets the constraints",
            shipped=candidate == SHIPPED, best=candidate == best)))
    ranked.sort(key=lambda sr: sr[0], reverse=True)
    summaries = [s for _, s in ranked]
    shown = [s for s in summaries[:report.TOP]] + [s for s in summaries[report.TOP:] if s.shipped]
    reports = analyzer.export / "reports"
    reports.mkdir(parents=True, exist_ok=True)
    paced = analyzer.o.objective == objectives.PACED_STREAMS
    png = report.plot(shown, reports / "throughput_vs_latency.png", f"{analyzer.o.model}: {analyzer.o.objective}",
                      "chunk p99 latency (ms)" if paced else "p99 latency (ms)",
                      "chunks/s" if paced else "throughput (infer/s)")
    shipped_key = analyzer.scores.get(SHIPPED.key(), (0, 0.0))
    notes = [f"objective: {analyzer.o.objective}; constraints: {analyzer.o.constraints}",
             f"search: {analyzer.o.search}, {len(analyzer.candidates)} configurations, load points "
             f"{', '.join(k for k, _ in analyzer.load_points)}",
             f"best: {analyzer.config_path(best)} ({best.describe()}), objective {best_key[1]:.2f}"
             f" vs shipped {shipped_key[1]:.2f}",
             f"tuned models: {', '.join(analyzer.tuned)}"]
    if confirmation and best == SHIPPED:
        notes.append("the search's pick did not beat the shipped config when both were measured again "
                     "(confirmation rounds below): the shipped config is kept as the best")
    for load in (k for k, _ in analyzer.load_points):
        if load in confirmation.get("best", {}) and load in confirmation.get("shipped", {}):
            (bt, bp, n), (st, sp, _) = confirmation["best"][load], confirmation["shipped"][load]
            notes.append(f"confirmed at {load} (median of {n} alternating rounds): search pick {bt:.1f}/s p99 {bp:.0f} ms"
                         f" vs shipped {st:.1f}/s p99 {sp:.0f} ms ({100 * (bt / st - 1):+.0f}% throughput)")
    html_path = report.write_html(shown, reports / "summary.html", f"asr-model-analyzer: {analyzer.o.model}",
                                  notes, png.name if png else None)
    return Summary(best, analyzer.config_path(best), best_key, shipped_key, csv_path, html_path, best_repo,
                   confirmation, analyzer.measured, analyzer.resumed)



def _link_tree(src: Path, dst: Path) -> None:
    """Copy a model folder, hard-linking files where the file system allows (graphs are large)."""
    def link_or_copy(a, b):
        try:
            os.link(a, b)
        except OSError:
            shutil.copy2(a, b)

    shutil.copytree(src, dst, copy_function=link_or_copy, ignore=shutil.ignore_patterns("__pycache__"))
