"""asr-model-analyzer: measure configurations of a model or a whole ensemble and keep the best.

    asr-model-analyzer --model-repository model_repo --model attention_rescoring --audio tests/data/demo_utts \\
        --bls-composing-models decoder --grid instance_count=1,2 --grid encoder.max_queue_delay_us=0,2000 \\
        --concurrency 1,4 --search hill --max-candidates 8 --export-path analysis/

(attention_rescoring's scoring step calls `decoder` through BLS, which an ensemble's steps do not show: name
such models with --bls-composing-models, as with Triton's model-analyzer.)

Grid syntax: [MODEL.]KNOB=V1,V2,... (no MODEL: every tuned model that has the knob). Knobs: instance_count,
max_batch_size, preferred_batch_size (sizes joined by '/', 'none' for no preferred sizes: 8/16,none),
max_queue_delay_us, max_candidate_sequences (oldest-strategy sequence batching). Use --url instead of
--model-repository to tune a running server started with --model-control-mode=explicit.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from pathlib import Path
from typing import Optional, Sequence

from asr_server.analyzer import objectives, perf
from asr_server.analyzer.objectives import Constraints
from asr_server.analyzer.options import BRUTE, HILL, AnalyzerOptions
from asr_server.analyzer.run import Analyzer
from asr_server.analyzer.variants import KNOBS, PREFERRED_BATCH_SIZE


def parse_grid(items: Sequence[str]) -> dict:
    grid: dict = {}
    for item in items:
        target, sep, values = item.partition("=")
        if not sep or not values:
            raise ValueError(f"--grid {item!r}: expected [MODEL.]KNOB=V1,V2")
        model, _, knob = target.rpartition(".")
        if knob not in KNOBS:
            raise ValueError(f"--grid {item!r}: unknown knob '{knob}' (known: {', '.join(KNOBS)})")
        if knob == PREFERRED_BATCH_SIZE:
            parsed = [() if v in ("none", "") else tuple(int(x) for x in v.split("/")) for v in values.split(",")]
        else:
            parsed = [int(v) for v in values.split(",")]
        grid.setdefault(model or "*", {})[knob] = tuple(parsed)
    return grid


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x)


def _floats(text: str) -> tuple[float, ...]:
    return tuple(float(x) for x in text.split(",") if x)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="asr-model-analyzer", description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--model-repository", type=Path, help="start our server on a copy of this repository")
    where.add_argument("--url", help="a running server (gRPC host:port) with --model-control-mode=explicit")
    p.add_argument("--model", required=True, help="model or ensemble to analyse")
    p.add_argument("--bls-composing-models", default="", help="comma-separated models the tuned ones call (BLS)")
    p.add_argument("--export-path", type=Path, default=Path("analysis"))
    p.add_argument("--checkpoint", type=Path, default=None, help="default: <export-path>/checkpoints/0.ckpt")
    p.add_argument("--grid", action="append", default=[], help="[MODEL.]KNOB=V1,V2 (repeatable)")
    p.add_argument("--search", choices=(BRUTE, HILL), default=HILL)
    p.add_argument("--max-candidates", type=int, default=12, help="configurations measured at most")
    p.add_argument("--min-gain", type=float, default=0.02, help="hill climbing: relative gain needed to move")
    p.add_argument("--objective", choices=objectives.OBJECTIVES, default=objectives.THROUGHPUT)
    p.add_argument("--latency-budget-ms", type=float, default=None, help="constraint on p99 (chunk p99 when paced)")
    p.add_argument("--max-memory-mb", type=float, default=None, help="constraint on the server's resident memory")
    p.add_argument("--min-throughput", type=float, default=None, help="constraint, infer/sec")
    p.add_argument("--concurrency", type=_ints, default=(1, 4), help="perf_analyzer concurrencies, e.g. 1,4,8")
    p.add_argument("--request-rate", type=_floats, default=(), help="perf_analyzer request rates instead")
    p.add_argument("--paced-streams", type=_ints, default=(2, 4, 8), help="paced_streams objective: stream counts")
    p.add_argument("--paced-seconds", type=float, default=10.0, help="audio seconds per paced stream and point")
    p.add_argument("--chunk-ms", type=float, default=640.0)
    p.add_argument("--audio", type=Path, default=None, help="real audio for WAV/WAV_LENS inputs (folder)")
    p.add_argument("--audio-limit", type=int, default=6, help="utterances taken from --audio")
    p.add_argument("--shape", action="append", default=[], help="perf_analyzer --shape NAME:dims")
    p.add_argument("--input-data", type=Path, default=None, help="perf_analyzer --input-data file")
    p.add_argument("--sequence-length", type=int, default=None)
    p.add_argument("--perf-analyzer", default=None, help="perf_analyzer executable")
    p.add_argument("--measurement-interval", type=int, default=1000, help="ms per perf_analyzer window")
    p.add_argument("--max-trials", type=int, default=4, help="perf_analyzer windows per point")
    p.add_argument("--stability-percentage", type=float, default=999.0)
    p.add_argument("--request-count", type=int, default=0,
                   help="measure each point by this many requests instead of windows (not for sequence models)")
    p.add_argument("--confirm-rounds", type=int, default=0,
                   help="measure shipped and best again, alternately, N times after the search (medians reported)")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("-v", "--verbose", action="store_true")
    return p


def options_from_args(args: argparse.Namespace) -> AnalyzerOptions:
    needs_perf = args.objective != objectives.PACED_STREAMS
    settings = perf.PerfSettings(
        binary=perf.find_binary(args.perf_analyzer) if needs_perf else Path(args.perf_analyzer or "perf_analyzer"),
        measurement_interval_ms=args.measurement_interval, max_trials=args.max_trials,
        stability_percentage=args.stability_percentage, request_count=args.request_count)
    return AnalyzerOptions(
        model=args.model, export_path=args.export_path, repository=args.model_repository, url=args.url,
        bls_composing_models=tuple(m for m in args.bls_composing_models.split(",") if m),
        grid=parse_grid(args.grid), search=args.search, max_candidates=args.max_candidates, min_gain=args.min_gain,
        objective=args.objective,
        constraints=Constraints(args.latency_budget_ms, args.max_memory_mb, args.min_throughput),
        concurrency=args.concurrency, request_rate=args.request_rate, paced_streams=args.paced_streams,
        paced_seconds=args.paced_seconds, chunk_ms=args.chunk_ms, audio=args.audio, audio_limit=args.audio_limit,
        shape=tuple(args.shape), input_data=args.input_data, sequence_length=args.sequence_length, perf=settings,
        checkpoint=args.checkpoint, confirm_rounds=args.confirm_rounds, progress=not args.no_progress)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname).1s %(name)s] %(message)s")
    if args.model_repository is not None:
        for name in [args.model, *(m for m in args.bls_composing_models.split(",") if m)]:
            if not (args.model_repository / name).is_dir():
                parser.error(f"no model folder '{name}' in {args.model_repository}")
    try:
        options = options_from_args(args)
    except (ValueError, FileNotFoundError) as exc:
        parser.error(str(exc))
    # SIGTERM (timeout, a CI cancel) unwinds like Ctrl-C: the server is stopped and its repository copy removed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        summary = Analyzer(options).run()
    except RuntimeError as exc:
        print(f"asr-model-analyzer: {exc}", file=sys.stderr)
        return 1
    print(f"best: {summary.best_name} ({summary.best.describe()})  objective {summary.best_score[1]:.2f}"
          f"{'' if summary.best_score[0] else ' (no configuration meets the constraints)'}"
          f"; shipped {summary.shipped_score[1]:.2f}")
    for load, (bt, bp, n) in summary.confirmation.get("best", {}).items():
        st, sp, _ = summary.confirmation["shipped"].get(load, (float("nan"), float("nan"), 0))
        print(f"confirmed at {load} (median of {n} alternating rounds): search pick {bt:.1f}/s p99 {bp:.0f} ms, "
              f"shipped {st:.1f}/s p99 {sp:.0f} ms")
    if summary.confirmation and not summary.best.variants:
        print("the search's best did not beat the shipped configuration when measured again: shipped kept")
    print(f"measured {summary.measured_points} points, {summary.resumed_points} from the checkpoint")
    print(f"results: {summary.csv_path}\nreport: {summary.report_path}\nbest configs: {summary.best_repository}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
