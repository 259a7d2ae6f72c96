"""WER of band-limited audio (8 kHz, 8 kHz float, u-law, 11.025 kHz) against the 16 kHz originals, through
every client path, on one model repository.

    python -m bench.band_limited [--repo model_repo] [--data tests/data/demo_utts]

Each utterance is written at the lower rate (soundfile), then sent by: asr-client's file transcription
(offline and streaming; it decodes and resamples), raw tritonclient with the samples a user resampled to
16 kHz, and WeNet's streaming request pattern (11040 then 10240 samples, zero-padded, WAV_LENS the real count).
The target: every variant within 1.5x of the 16 kHz WER on every path.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

import jiwer
import numpy as np
import soundfile
import soxr

ROOT = Path(__file__).resolve().parent.parent
VARIANTS = {  # name: (file rate, soundfile subtype)
    "16k": (16000, "PCM_16"),
    "8k": (8000, "PCM_16"),
    "8k float": (8000, "FLOAT"),
    "8k u-law": (8000, "ULAW"),
    "11.025k": (11025, "PCM_16"),
}
MAX_RATIO = 1.5
WER_FLOOR = 0.02  # a 16 kHz WER near 0 would make one error "infinitely" worse: compare with at least this


def write_variants(data: Path, folder: Path) -> dict[str, list[tuple[Path, np.ndarray, str]]]:
    """Every utterance in every variant: (file, its samples resampled back to 16 kHz, reference)."""
    from asr_client.audio import load_audio

    texts = dict(line.split(" ", 1) for line in (data / "text").read_text().splitlines() if line.strip())
    out = {name: [] for name in VARIANTS}
    for line in (data / "wav.scp").read_text().splitlines():
        if not line.strip():
            continue
        utt, rel = line.split(maxsplit=1)
        samples = load_audio(data / rel).samples
        for name, (rate, subtype) in VARIANTS.items():
            path = folder / name.replace(" ", "_") / f"{utt}.wav"
            path.parent.mkdir(exist_ok=True)
            soundfile.write(path, soxr.resample(samples, 16000, rate) if rate != 16000 else samples, rate,
                            subtype=subtype)
            stored, _ = soundfile.read(path, dtype="float32")
            back = soxr.resample(stored, rate, 16000).astype(np.float32) if rate != 16000 else stored
            out[name].append((path, back, texts[utt].strip()))
    return out


async def wenet_stream(client, samples: np.ndarray, sequence_id: int) -> str:
    import tritonclient.grpc.aio as aioclient

    text, pos, first = "", 0, True
    while pos < samples.size:
        size = 11040 if first else 10240
        piece = samples[pos:pos + size]
        padded = np.zeros(size, np.float32)
        padded[:piece.size] = piece
        wav = aioclient.InferInput("WAV", [1, size], "FP32")
        wav.set_data_from_numpy(padded[None])
        lens = aioclient.InferInput("WAV_LENS", [1, 1], "INT32")
        lens.set_data_from_numpy(np.array([[piece.size]], np.int32))
        pos += size
        result = await client.infer("streaming_wenet", [wav, lens], sequence_id=sequence_id, sequence_start=first,
                                    sequence_end=pos >= samples.size)
        text, first = result.as_numpy("TRANSCRIPTS")[0].decode("utf-8"), False
    return text


async def measure(url: str, variants) -> dict[str, dict[str, float]]:
    import tritonclient.grpc.aio as aioclient

    from asr_client.batch import TranscribeOptions, transcribe_files
    from asr_client.offline import recognize

    table = {}
    async with aioclient.InferenceServerClient(url) as client:
        for name, items in variants.items():
            refs = [text for _, _, text in items]
            row = table[name] = {}
            for streaming in (False, True):
                batch = await transcribe_files([path for path, _, _ in items], url,
                                               TranscribeOptions(streaming=streaming))
                row["asr-client streaming" if streaming else "asr-client"] = jiwer.wer(
                    refs, [r.hypothesis or "" for r in batch.results])
            row["tritonclient"] = jiwer.wer(refs, [(await recognize(client, s)).text for _, s, _ in items])
            row["wenet pattern"] = jiwer.wer(refs, [await wenet_stream(client, s, 7000 + i)
                                                    for i, (_, s, _) in enumerate(items)])
    return table


def main() -> int:
    from bench._server import serve_repository, server_process

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repo", type=Path, default=ROOT / "model_repo")
    p.add_argument("--data", type=Path, default=ROOT / "tests" / "data" / "demo_utts")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        variants = write_variants(args.data, Path(folder))
        with server_process(serve_repository, str(args.repo)) as (_, port):
            table = asyncio.run(measure(f"127.0.0.1:{port}", variants))
    paths = list(table["16k"])
    print(f"WER by variant and client path ({args.repo}, {args.data}):")
    print(f"  {'variant':9s}  " + "  ".join(f"{p:>20s}" for p in paths))
    within = True
    for name, row in table.items():
        ratios = [row[p] / max(table["16k"][p], WER_FLOOR) for p in paths]
        within &= all(r <= MAX_RATIO for r in ratios)
        print(f"  {name:9s}  " + "  ".join(f"{row[p]:13.3f} ({r:4.1f}x)" for p, r in zip(paths, ratios)))
    print(f"every variant within {MAX_RATIO}x of 16 kHz on every path: {'yes' if within else 'NO'}")
    return 0 if within else 1


if __name__ == "__main__":
    sys.exit(main())
