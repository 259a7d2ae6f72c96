"""`asr-client`: stream one utterance, or batch-transcribe files, against a Triton(-compatible) gRPC server.

    asr-client stream FILE.wav|- [--url 127.0.0.1:8001] [--model streaming_wenet] [--chunk-ms 640] [--realtime]
    asr-client stream --microphone [--duration 10]
    asr-client transcribe INPUT... [--concurrency N] [--streaming] [--output results.jsonl]
    asr-client transcribe --wavscp wav.scp --trans text --model_name attention_rescoring   (WeNet's flags)

Machine-readable output goes to stdout (or --output); partials, progress, skipped files and the summary go to
stderr, so a progress bar never mixes into results.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Optional, Sequence, TextIO

import tritonclient.grpc.aio as grpcclient
from tqdm import tqdm

from asr_client import chunking, longform, preflight, report, subtitles, writers
from asr_client.audio import (SNIFF_BYTES, AudioError, decode_audio_bytes, load_audio,
                              looks_like_container, read_pcm16_blocks)
from asr_client.batch import BatchResult, TranscribeOptions, UtteranceResult, transcribe_files
from asr_client.inputs import InputError, Utterance, collect_utterances
from asr_client.microphone import (MicrophoneUnavailable, check_input_device, microphone_blocks,
                                  require_sounddevice)
from asr_client.offline import DEFAULT_OFFLINE_MODEL
from asr_client.streaming import (
    DEFAULT_CHUNK_MS,
    DEFAULT_STREAMING_MODEL,
    DEFAULT_URL,
    Partial,
    StreamingClient,
    StreamingError,
    StreamOptions,
)

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def hotwords_argument(value: str) -> str:
    """--hotwords: the text of a file when it names one, else the inline list; the server's parser reads both
    (phrases separated by '|' or new lines, 'phrase:score' or 'phrase<TAB>score')."""
    path = Path(value)
    try:
        is_file = path.is_file()
    except OSError:  # an inline list longer than a file name can be
        is_file = False
    if is_file:
        text = path.read_text(encoding="utf-8")
        lines = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]
        if not lines:
            raise argparse.ArgumentTypeError(f"hotwords file {value} holds no phrase")
        return "\n".join(lines)
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="asr-client", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)

    def common(sub: argparse.ArgumentParser, default_model: str) -> None:
        sub.add_argument("-u", "--url", default=DEFAULT_URL, help=f"gRPC host:port (default {DEFAULT_URL})")
        sub.add_argument("-m", "--model", "--model_name", dest="model", default=None,
                         help=f"model to call (default {default_model})")
        sub.add_argument("--chunk-ms", type=float, default=DEFAULT_CHUNK_MS,
                         help="audio per streaming request, ms (default 640; the server buffers any length)")
        sub.add_argument("--wenet-chunks", action="store_true",
                         help="stream WeNet's zero-padded chunks: 11040 samples, then 10240")
        sub.add_argument("--lookahead-ms", type=float, default=chunking.LOOKAHEAD_MS,
                         help="extra audio in the first streamed chunk, ms (default 50: each 640 ms chunk then "
                              "completes one decoding window of the demo model; 0: all chunks equal)")
        sub.add_argument("--realtime", action="store_true", help="pace streamed chunks at the speed of speech")
        sub.add_argument("--hotwords", default=None, type=hotwords_argument,
                         help="phrases to favour: a file (one phrase per line, optional ':score' or a tab and the "
                              "score, as sherpa-onnx's --hotwords-file) or an inline list 'a|b c:3' (score per token)")

    stream = commands.add_parser("stream", help="stream one utterance and print partial and final transcripts")
    stream.add_argument("audio", nargs="?", help="audio file, or - for stdin: an audio file piped in (WAV, FLAC, "
                                                 "MP3, Ogg, m4a, ...), or raw s16le mono PCM with --pcm-rate")
    common(stream, DEFAULT_STREAMING_MODEL)
    stream.add_argument("--pcm-rate", type=int, default=None,
                        help="stdin is raw s16le mono PCM at this rate (without it, stdin must be an audio file)")
    stream.add_argument("--microphone", action="store_true", help="stream the default input device (Ctrl-C ends)")
    stream.add_argument("--duration", type=float, default=None, help="with --microphone: stop after this many s")
    stream.add_argument("--sequence-id", type=int, default=None, help="sequence id (default: random)")
    stream.add_argument("--json", action="store_true", help="print the result as JSON (partials and latencies)")
    stream.add_argument("--endpoint", action="store_true",
                        help="end a segment at each pause and print it as it ends (the stream goes on)")
    stream.add_argument("--endpoint-silence", type=float, default=None,
                        help="seconds of quiet trailing silence that end a segment (default: the model's, 0.5)")
    stream.add_argument("--words", action="store_true", help="print each segment's words with their times")

    batch = commands.add_parser("transcribe", help="transcribe files, folders, wav.scp lists or JSONL manifests")
    batch.add_argument("inputs", nargs="*", help="audio files, folders, wav.scp, *.jsonl manifests")
    common(batch, f"{DEFAULT_OFFLINE_MODEL}, or {DEFAULT_STREAMING_MODEL} with --streaming")
    batch.add_argument("--wavscp", action="append", default=[], help="Kaldi/WeNet wav.scp (key path per line)")
    batch.add_argument("--trans", default=None, help="references: key transcript per line (Kaldi text)")
    batch.add_argument("--data_dir", "--data-dir", dest="data_dir", default=None,
                       help="folder that relative paths in lists are under (default: the list's folder)")
    batch.add_argument("-c", "--concurrency", type=int, default=4, help="utterances in flight (default 4)")
    batch.add_argument("--connections", type=int, default=1,
                       help="gRPC connections the utterances in flight are spread over (default 1); a server run "
                            "with --workers N serves each connection on one worker, so give it N or more")
    batch.add_argument("--streaming", action="store_true", help="stream each utterance in chunks")
    batch.add_argument("-o", "--output", default=None, help="write per-utterance JSONL here (default stdout)")
    batch.add_argument("--summary-json", default=None, help="also write the summary as JSON here")
    batch.add_argument("--no-progress", action="store_true", help="no progress bar")
    batch.add_argument("--no-server-stats", action="store_true", help="skip ModelStatistics before/after")
    batch.add_argument("--long", action="store_true",
                       help="files of any length: cut at pauses, pieces transcribed in parallel, words stitched")
    batch.add_argument("--words", action="store_true", help="each result carries its words with start/end times")
    batch.add_argument("--output-dir", default=None,
                       help="also write each input's result to OUTPUT_DIR/<key>.<format> (see --output-format)")
    batch.add_argument("--output-format", default="all",
                       help="with --output-dir: comma-separated txt, json, srt, vtt, tsv, or all (default all)")
    batch.add_argument("--format", choices=("jsonl", "srt", "vtt"), default="jsonl",
                       help="jsonl (default), or subtitles of one input file (srt/vtt; implies --words)")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "stream" and args.microphone == (args.audio is not None):
        parser.error("stream needs exactly one of FILE, - (stdin PCM) or --microphone")
    if args.command == "transcribe" and not args.inputs and not args.wavscp:
        parser.error("transcribe needs INPUT... or --wavscp")
    if args.command == "transcribe" and args.format != "jsonl" and (len(args.inputs) != 1 or args.wavscp):
        parser.error("--format srt/vtt writes the subtitles of one audio file: give exactly one")
    try:
        if args.command == "stream":
            return asyncio.run(_stream_command(args))
        return asyncio.run(_transcribe_command(args))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # `asr-client ... | head`: the reader left. Point stdout at devnull so the exit flush stays quiet.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILED


# --------------------------------------------------------------------------------------------------
# stream


class PartialPrinter:
    """Shows partials on stderr as they change: rewriting one line on a terminal, one line each otherwise."""

    def __init__(self, out: TextIO):
        self._out = out
        self._tty = out.isatty()
        self._last = None

    def __call__(self, partial: Partial) -> None:
        if partial.text == self._last:
            return
        self._last = partial.text
        if self._tty:
            self._out.write(f"\r\033[K{partial.text}")
        else:
            self._out.write(f"partial {partial.audio_end_s:7.2f}s: {partial.text}\n")
        self._out.flush()

    def finish(self) -> None:
        if self._tty and self._last is not None:
            self._out.write("\r\033[K")
            self._out.flush()


async def _stream_command(args: argparse.Namespace) -> int:
    parameters = {}
    if args.hotwords:
        parameters["hotwords"] = args.hotwords
    if args.endpoint:
        parameters["endpoint"] = True
        if args.endpoint_silence is not None:
            parameters["endpoint_rule2_silence"] = args.endpoint_silence
    if args.words:
        parameters["details"] = True
    options = StreamOptions(
        model=args.model or DEFAULT_STREAMING_MODEL, chunk_ms=args.chunk_ms,
        wenet_chunks=args.wenet_chunks, lookahead_ms=args.lookahead_ms, realtime=args.realtime,
        parameters=parameters or None,
        details=args.endpoint or args.words,
    )
    stop = asyncio.Event()
    stops_on_ctrl_c = False
    try:
        if args.microphone:
            check_input_device(require_sounddevice())
            source = microphone_blocks(args.chunk_ms, stop, args.duration)
            # Ctrl-C ends the utterance (END is sent, the final printed) rather than killing the stream.
            stops_on_ctrl_c = _on_sigint(stop.set)
        elif args.audio == "-":
            source = await _stdin_source(args, options)
        else:
            source = (await asyncio.to_thread(load_audio, args.audio)).samples
        printer = PartialPrinter(sys.stderr)
        if options.details:
            printer = SegmentPrinter(printer, sys.stdout, args.words, as_json=args.json)
        args.url = preflight.grpc_url(args.url)
        async with grpcclient.InferenceServerClient(args.url) as grpc_client:
            if not await _reachable(grpc_client, args.url):
                return EXIT_FAILED
            await preflight.check_model(grpc_client, options.model, streaming=True)
        async with StreamingClient(args.url, options) as client:
            result = await client.transcribe(source, sequence_id=args.sequence_id, on_partial=printer)
        printer.finish()
    except (AudioError, MicrophoneUnavailable, StreamingError, preflight.PreflightError) as error:
        print(f"asr-client: {error}", file=sys.stderr)
        return EXIT_FAILED
    finally:
        if stops_on_ctrl_c:
            asyncio.get_running_loop().remove_signal_handler(signal.SIGINT)
    if args.json:  # the last line: the whole result (with --endpoint/--words, each segment had its own line)
        print(json.dumps(dict(
            type="result", text=result.text, sequence_id=result.sequence_id, audio_s=round(result.audio_s, 3),
            elapsed_s=round(result.elapsed_s, 4),
            segments=[_segment_record(s) for p in result.partials for s in p.finals if s.get("text")],
            partials=[dict(text=p.text, audio_end_s=round(p.audio_end_s, 3), latency_ms=round(p.latency_s * 1e3, 2))
                      for p in result.partials],
        ), ensure_ascii=False))
    elif not options.details:  # with segments, each final was printed as it ended
        print(result.text)
    latency = report.percentiles_ms(result.chunk_latencies_s)
    print(f"{len(result.partials)} chunks, {result.audio_s:.2f} s audio in {result.elapsed_s:.2f} s; latency ms "
          + ", ".join(f"{k} {v:.1f}" for k, v in latency.items()), file=sys.stderr)
    return EXIT_OK


async def _stdin_source(args: argparse.Namespace, options: StreamOptions):
    """stdin as audio: a container (sniffed from its first bytes) is read whole and decoded; raw PCM is
    streamed as it arrives, and only when --pcm-rate says its rate (raw bytes have no header to tell it)."""
    if args.pcm_rate is not None:  # the user said it is raw PCM: no guessing from its first bytes
        return read_pcm16_blocks(sys.stdin.buffer, options.plan.next_samples, args.pcm_rate)
    head = await asyncio.to_thread(sys.stdin.buffer.read, SNIFF_BYTES)
    if looks_like_container(head):
        rest = await asyncio.to_thread(sys.stdin.buffer.read)
        return decode_audio_bytes(head + rest, "stdin").samples
    raise AudioError("stdin is not an audio file this client knows (WAV, FLAC, MP3, Ogg, m4a, WebM): for raw "
                     "s16le mono PCM give its rate with --pcm-rate (e.g. --pcm-rate 16000)")


def _segment_record(segment: dict) -> dict:
    """A segment's JSON line: its index, times, text and words (with times and confidence when asked for)."""
    record = {"type": "segment", "segment": segment.get("segment", 0), "start": segment.get("start", 0.0),
              "end": segment.get("end", 0.0), "text": segment.get("text", "")}
    if segment.get("words"):
        record["words"] = [{k: w[k] for k in ("word", "start", "end", "confidence") if k in w}
                           for w in segment["words"]]
    return record


class SegmentPrinter:
    """Prints every segment's final (endpointing, or END) on `out` as it ends: `[start - end] text`, and with
    `words` one `  word start end confidence` line per word; partials still go to the PartialPrinter."""

    def __init__(self, partials: PartialPrinter, out: TextIO, words: bool, as_json: bool = False):
        self._partials = partials
        self._out = out
        self._words = words
        self._json = as_json  # one JSON object per segment line instead of text

    def __call__(self, partial: Partial) -> None:
        finals = partial.finals
        if finals:
            self._partials.finish()
        for segment in finals:
            if not segment.get("text"):
                continue
            if self._json:
                self._out.write(json.dumps(_segment_record(segment), ensure_ascii=False) + "\n")
                self._out.flush()
                continue
            self._out.write(f"[{segment.get('start', 0.0):8.2f} - {segment.get('end', 0.0):8.2f}] "
                            f"{segment['text']}\n")
            if self._words:
                for w in segment.get("words", []):
                    self._out.write(f"  {w['word']} {w['start']:.2f} {w['end']:.2f} {w['confidence']:.2f}\n")
            self._out.flush()
        self._partials(partial)

    def finish(self) -> None:
        self._partials.finish()


def _on_sigint(callback) -> bool:
    """Route SIGINT to `callback`; False where the loop cannot (not the main thread, or no signals)."""
    try:
        asyncio.get_running_loop().add_signal_handler(signal.SIGINT, callback)
    except (RuntimeError, NotImplementedError, ValueError):
        return False
    return True


# --------------------------------------------------------------------------------------------------
# transcribe


async def _transcribe_command(args: argparse.Namespace) -> int:
    try:
        utterances = collect_utterances([*args.inputs, *args.wavscp], args.trans, args.data_dir)
        if args.long and args.streaming:
            raise ValueError("--long cuts files for the offline model: it does not go with --streaming")
        options = TranscribeOptions(
            streaming=args.streaming, model=args.model, concurrency=args.concurrency, connections=args.connections,
            stream=StreamOptions(chunk_ms=args.chunk_ms, wenet_chunks=args.wenet_chunks,
                                 lookahead_ms=args.lookahead_ms, realtime=args.realtime),
            parameters={"hotwords": args.hotwords} if args.hotwords else None,
            words=args.words or args.format != "jsonl" or bool(
                args.output_dir and set(writers.parse_formats(args.output_format)) & writers.NEEDS_WORDS),
            long=args.long,
        )
    except (InputError, OSError, ValueError) as error:
        print(f"asr-client: {error}", file=sys.stderr)
        return EXIT_USAGE
    if not utterances:
        print("asr-client: no audio found in the inputs", file=sys.stderr)
        return EXIT_USAGE

    try:
        args.url = preflight.grpc_url(args.url)
    except preflight.PreflightError as error:
        print(f"asr-client: {error}", file=sys.stderr)
        return EXIT_USAGE
    async with grpcclient.InferenceServerClient(args.url) as grpc_client:
        if not await _reachable(grpc_client, args.url):
            return EXIT_FAILED
        try:
            await preflight.check_model(grpc_client, options.model_name, streaming=options.streaming)
        except preflight.PreflightError as error:
            print(f"asr-client: {error}", file=sys.stderr)
            return EXIT_FAILED
        before = await _statistics(grpc_client, args.no_server_stats)
        batch = await _run_batch(args, utterances, options, grpc_client)
        after = await _statistics(grpc_client, args.no_server_stats)
    summary = report.summarize(batch, report.statistics_delta(before, after) if before and after else ())
    print(report.format_summary(summary), file=sys.stderr)
    if args.summary_json:
        Path(args.summary_json).write_text(json.dumps(summary.as_dict(), indent=2, ensure_ascii=False) + "\n")
    return EXIT_OK if summary.failed == 0 else EXIT_FAILED


async def _run_batch(
    args: argparse.Namespace,
    utterances: list[Utterance],
    options: TranscribeOptions,
    grpc_client: grpcclient.InferenceServerClient,
) -> BatchResult:
    """Results go to --output or stdout, one JSON line each as they finish; the bar and skips to stderr."""
    output = open(args.output, "w", encoding="utf-8") if args.output else sys.stdout
    # --long counts pieces, so that one long file shows its progress too; otherwise files
    progress = tqdm(total=None if args.long else len(utterances), unit="piece" if args.long else "utt",
                    file=sys.stderr, disable=args.no_progress, dynamic_ncols=True)
    pieces: dict[str, tuple[int, int]] = {}  # --long: key -> (pieces done, pieces of the file)

    def on_progress(key: str, done: int, total: int) -> None:
        pieces[key] = (done, total)
        progress.total = sum(t for _, t in pieces.values())
        progress.n = sum(d for d, _ in pieces.values())
        progress.refresh()

    def on_result(result: UtteranceResult) -> None:
        if args.format == "jsonl":
            output.write(json.dumps(report.result_record(result), ensure_ascii=False) + "\n")
        elif result.ok:
            timed = [longform.Word(w, s, e, c) for w, s, e, c in result.words]
            render = subtitles.to_srt if args.format == "srt" else subtitles.to_vtt
            output.write(render(subtitles.cues(timed)))
        output.flush()
        if args.output_dir and result.ok:
            writers.write_all(result, Path(args.output_dir), writers.parse_formats(args.output_format))
        if result.error is not None:
            # tqdm.write keeps the bar intact below the message.
            tqdm.write(f"skipped {result.key}: {result.error}", file=sys.stderr)
        for start, end, why in result.untranscribed:
            tqdm.write(f"{result.key}: {start:.2f}-{end:.2f} s not transcribed ({why})", file=sys.stderr)
        if not args.long:
            progress.update(1)

    try:
        return await transcribe_files(utterances, args.url, options, on_result=on_result, grpc_client=grpc_client,
                                      on_progress=on_progress if args.long else None)
    finally:
        progress.close()
        if output is not sys.stdout:
            output.close()


async def _reachable(grpc_client: grpcclient.InferenceServerClient, url: str) -> bool:
    """One clear line for a server that is not there, instead of one failure per utterance."""
    try:
        if await grpc_client.is_server_live():
            return True
        print(f"asr-client: server at {url} is not live", file=sys.stderr)
    except Exception as error:  # InferenceServerException or grpc errors, depending on the failure
        print(f"asr-client: cannot reach server at {url}: {error}{preflight.unreachable_hint(url)}",
              file=sys.stderr)
    return False


async def _statistics(grpc_client: grpcclient.InferenceServerClient, skip: bool) -> dict:
    if skip:
        return {}
    try:
        return await report.statistics_snapshot(grpc_client)
    except Exception as error:  # statistics are a bonus: a server without them must not fail the run
        print(f"asr-client: no server statistics: {error}", file=sys.stderr)
        return {}


if __name__ == "__main__":
    sys.exit(main())
