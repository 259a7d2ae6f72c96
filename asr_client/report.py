"""Summaries of a batch run: WER/CER (jiwer), RTF, throughput, latency percentiles, server-side statistics.

Scoring normalises both sides the same, lightly: case-folded, whitespace collapsed. CER counts characters
without spaces, so it is meaningful for scripts written without word boundaries (Chinese) too.
Server statistics are the difference between ModelStatistics before and after the run, so they describe this
run only (on a shared server, other clients' requests in the same window are counted too).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Optional, Sequence

import jiwer
import numpy as np
import tritonclient.grpc.aio as grpcclient

from asr_client.batch import BatchResult, UtteranceResult

PERCENTILES = (50, 90, 99)
NS_PER_MS = 1e6


@dataclass(frozen=True)
class ErrorRates:
    utterances: int  # scored utterances (those with a reference and a hypothesis)
    words: int  # reference words
    word_errors: int  # substitutions + deletions + insertions
    chars: int  # reference characters, spaces excluded
    char_errors: int

    @property
    def wer(self) -> Optional[float]:
        return self.word_errors / self.words if self.words else None

    @property
    def cer(self) -> Optional[float]:
        return self.char_errors / self.chars if self.chars else None


@dataclass(frozen=True)
class ModelStats:
    model: str  # "name" or "name:version"
    requests: int  # successful inference requests in the window
    executions: int  # model executions (batches) in the window
    avg_queue_ms: float  # per request
    avg_compute_ms: float  # per request: input + infer + output


@dataclass(frozen=True)
class Summary:
    model: str
    streaming: bool
    utterances: int  # attempted
    failed: int  # unreadable or refused
    audio_s: float  # seconds of audio recognised
    wall_s: float  # whole run
    rtf: Optional[float]  # wall_s / audio_s: below 1 is faster than real time
    throughput_utt_s: float  # utterances per wall second
    latency_ms: dict[str, float]  # "p50"/"p90"/"p99" of per-chunk (streaming) or per-request (offline) latency
    error_rates: Optional[ErrorRates]  # None when no utterance has a reference
    server: tuple[ModelStats, ...] = ()  # models that ran during the window

    def as_dict(self) -> dict:
        data = asdict(self)
        if self.error_rates is not None:
            data["error_rates"].update(wer=self.error_rates.wer, cer=self.error_rates.cer)
        return data


def normalize(text: str) -> str:
    return " ".join(text.casefold().split())


def error_rates(pairs: Sequence[tuple[str, str]]) -> Optional[ErrorRates]:
    """pairs: (reference, hypothesis); corpus-level counts, so long utterances weigh more, as usual for WER."""
    pairs = [(normalize(r), normalize(h)) for r, h in pairs]
    if not pairs:
        return None
    words = sum(len(r.split()) for r, _ in pairs)
    chars = sum(len(r.replace(" ", "")) for r, _ in pairs)
    references, hypotheses = [r for r, _ in pairs], [h for _, h in pairs]
    word_errors = _edit_errors(jiwer.process_words, str.split, references, hypotheses)
    char_errors = _edit_errors(
        jiwer.process_characters, list, [r.replace(" ", "") for r in references], [h.replace(" ", "") for h in hypotheses]
    )
    return ErrorRates(len(pairs), words, word_errors, chars, char_errors)


def _edit_errors(process, tokens, references: list[str], hypotheses: list[str]) -> int:
    """Substitutions + deletions + insertions; jiwer refuses empty references, so an empty reference
    costs one insertion per hypothesis token."""
    errors = sum(len(tokens(h)) for r, h in zip(references, hypotheses) if not r)
    kept = [(r, h) for r, h in zip(references, hypotheses) if r]
    if kept:
        out = process([r for r, _ in kept], [h for _, h in kept])
        errors += out.substitutions + out.deletions + out.insertions
    return errors


def percentiles_ms(latencies_s: Sequence[float]) -> dict[str, float]:
    if not latencies_s:
        return {}
    values = np.percentile(np.asarray(latencies_s, dtype=np.float64) * 1000.0, PERCENTILES)
    return {f"p{p}": round(float(v), 3) for p, v in zip(PERCENTILES, values)}


def summarize(batch: BatchResult, server: Sequence[ModelStats] = ()) -> Summary:
    done = [r for r in batch.results if r.ok]
    audio_s = sum(r.duration_s for r in done)
    scored = [(r.reference, r.hypothesis) for r in done if r.reference is not None]
    return Summary(
        model=batch.model,
        streaming=batch.streaming,
        utterances=len(batch.results),
        failed=len(batch.results) - len(done),
        audio_s=audio_s,
        wall_s=batch.wall_s,
        rtf=batch.wall_s / audio_s if audio_s else None,
        throughput_utt_s=len(done) / batch.wall_s if batch.wall_s > 0 else 0.0,
        latency_ms=percentiles_ms([latency for r in done for latency in r.chunk_latencies_s]),
        error_rates=error_rates(scored),
        server=tuple(server),
    )


async def statistics_snapshot(grpc_client: grpcclient.InferenceServerClient) -> dict[str, dict[str, int]]:
    """Cumulative ModelStatistics of every model: {"name:version": {counter: value}}."""
    response = await grpc_client.get_inference_statistics()
    snapshot = {}
    for stats in response.model_stats:
        inference = stats.inference_stats
        snapshot[f"{stats.name}:{stats.version}"] = dict(
            requests=inference.success.count,
            executions=stats.execution_count,
            queue_ns=inference.queue.ns,
            compute_ns=inference.compute_input.ns + inference.compute_infer.ns + inference.compute_output.ns,
        )
    return snapshot


def statistics_delta(before: dict[str, dict[str, int]], after: dict[str, dict[str, int]]) -> tuple[ModelStats, ...]:
    """Models whose request count grew between the snapshots, sorted by name."""
    rows = []
    for model in sorted(after):
        earlier = before.get(model, {})
        change = {k: v - earlier.get(k, 0) for k, v in after[model].items()}
        if change["requests"] <= 0:
            continue
        rows.append(ModelStats(
            model=model,
            requests=change["requests"],
            executions=change["executions"],
            avg_queue_ms=round(change["queue_ns"] / change["requests"] / NS_PER_MS, 3),
            avg_compute_ms=round(change["compute_ns"] / change["requests"] / NS_PER_MS, 3),
        ))
    return tuple(rows)


def format_summary(summary: Summary) -> str:
    mode = "streaming" if summary.streaming else "offline"
    lines = [
        f"model {summary.model} ({mode}): {summary.utterances - summary.failed}/{summary.utterances} utterances, "
        f"{summary.failed} failed",
        f"audio {summary.audio_s:.2f} s, wall {summary.wall_s:.2f} s, "
        f"RTF {f'{summary.rtf:.4f}' if summary.rtf is not None else 'n/a'}, {summary.throughput_utt_s:.2f} utt/s",
    ]
    if summary.latency_ms:
        what = "chunk" if summary.streaming else "request"
        lines.append(f"{what} latency ms: " + ", ".join(f"{k} {v:.1f}" for k, v in summary.latency_ms.items()))
    rates = summary.error_rates
    if rates is not None:
        wer = f"{rates.wer:.2%}" if rates.wer is not None else "n/a"
        cer = f"{rates.cer:.2%}" if rates.cer is not None else "n/a"
        lines.append(
            f"WER {wer} ({rates.word_errors}/{rates.words} words), CER {cer} ({rates.char_errors}/{rates.chars} chars)"
            f" over {rates.utterances} utterances"
        )
    for row in summary.server:
        lines.append(
            f"server {row.model}: {row.requests} requests in {row.executions} executions, "
            f"queue {row.avg_queue_ms:.2f} ms, compute {row.avg_compute_ms:.2f} ms per request"
        )
    return "\n".join(lines)


def result_record(result: UtteranceResult) -> dict:
    """One JSONL line of the results file."""
    record = dict(key=result.key, path=result.path, text=result.hypothesis, reference=result.reference,
                  duration_s=round(result.duration_s, 3), elapsed_s=round(result.elapsed_s, 4))
    if result.chunk_latencies_s:
        record["latency_ms"] = [round(v * 1000.0, 2) for v in result.chunk_latencies_s]
    if result.words:
        record["words"] = [dict(word=w, start=s, end=e, confidence=c) for w, s, e, c in result.words]
    if result.untranscribed:
        record["untranscribed"] = [dict(start=s, end=e, reason=why) for s, e, why in result.untranscribed]
    if result.error is not None:
        record["error"] = result.error
    return record
