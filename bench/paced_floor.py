"""The bare floor of streaming work at a given load: what a server with no overhead at all would spend.

    python -m bench.paced_floor --onnx-dir DIR [--data tests/data/demo_utts] [--streams 32,128,224]

``bench.vs_sherpa.neural_floor`` times the encoder in a tight loop, where every call finds the weights (14 MB
for the demo encoder) still in the caches. A server at partial load runs windows as they come, with idle
gaps between rounds, and on this VM a gap makes the next call dearer: part one prints it (bare ORT, one
thread, the same batch timed with and without sleeps between calls).

Part two is the floor at a load: S paced real-time streams (640 ms chunks, starts staggered over one chunk,
the utterances back to back, as the benchmarks' clients send them) served by the least a server must do, in
one thread: each round takes the chunks that arrived, up to ``max_batch``, once the oldest has waited
``delay_s`` (the sequence batcher's rule; sherpa-onnx's is delay 0, max batch 8), computes their fbank (numpy,
one call), runs the streaming encoder on them as one batch, and with rescoring runs decoder.onnx on the
utterances that ended; then sleeps until the next round. No network, no requests, no Python per stream
beyond this loop. Its thread's CPU time per audio-second is the floor of the same work at that load.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SAMPLE_RATE = 16000
WINDOW_S = 0.64  # one streaming encoder window per 640 ms chunk (16 frames after 4x subsampling)


def encoder_feeds(enc, batch: int, rng) -> dict:
    """Inputs for ``batch`` windows from zero caches: the encoder's cost does not depend on the values."""
    inputs = enc.get_inputs()
    window = next(i for i in inputs if i.name == "chunk_xs").shape[1]  # feature frames per window
    feeds = {}
    for i in inputs:
        shape = [batch] + [d if isinstance(d, int) else 1 for d in i.shape[1:]]
        if "int64" in i.type:
            feeds[i.name] = np.zeros(shape, np.int64)
        elif "int32" in i.type:
            feeds[i.name] = np.full(shape, window, np.int32)
        else:
            feeds[i.name] = (rng.normal(size=shape) if i.name == "chunk_xs" else np.zeros(shape)).astype(np.float32)
    return feeds


def encoder_frames(seconds: float) -> int:
    """Encoder output frames of ``seconds`` of audio (40 ms each: 10 ms fbank shift, 4x subsampling)."""
    return max(1, int(np.ceil(seconds / 0.04)))


def decoder_feeds(dec, frames, rng, padded: int = 0, beam: int = 10, hyp: int = 12) -> dict:
    """One n-best list per utterance of ``frames`` encoder frames each (padded to ``padded`` if longer),
    12-token hypotheses."""
    batch, width = len(frames), dec.get_inputs()[0].shape[-1]
    feeds = {"encoder_out": rng.normal(size=(batch, max(max(frames), padded), width)).astype(np.float32),
             "encoder_out_lens": np.array(frames, np.int32),
             "hyps_pad_sos_eos": rng.integers(2, 50, size=(batch, beam, hyp + 2)).astype(np.int64),
             "hyps_lens_sos": np.full((batch, beam), hyp + 1, np.int32),
             "r_hyps_pad_sos_eos": rng.integers(2, 50, size=(batch, beam, hyp + 2)).astype(np.int64),
             "ctc_score": rng.normal(size=(batch, beam)).astype(np.float32)}
    names = {i.name for i in dec.get_inputs()}
    return {k: v for k, v in feeds.items() if k in names}


def gap_table(enc, batches=(1, 4, 16), gaps_ms=(0, 5, 30), calls: int = 256) -> dict:
    """{(batch, gap ms): encoder CPU-s per audio-s}, the calls' own thread CPU time, sleeping gap between."""
    rng = np.random.default_rng(0)
    out = {}
    for batch in batches:
        feeds = encoder_feeds(enc, batch, rng)
        enc.run(None, feeds)
        for gap in gaps_ms:
            spent, n = 0.0, max(16, calls // batch)
            for _ in range(n):
                if gap:
                    time.sleep(gap / 1000)
                start = time.thread_time()
                enc.run(None, feeds)
                spent += time.thread_time() - start
            out[(batch, gap)] = spent / (n * batch * WINDOW_S)
    return out


@dataclass
class Chunk:
    arrival: float
    stream: int
    samples: np.ndarray
    utterance_s: float = 0.0  # > 0 on an utterance's last chunk: its length, for the rescoring call


def paced_chunks(items, streams: int, seconds: float, chunk_s: float = WINDOW_S) -> list[Chunk]:
    """The chunks S paced streams send, by arrival time: stream i starts at i/S of a chunk and plays the
    utterances from the i-th on, back to back, each cut in chunk_s pieces (the last one shorter)."""
    chunk = int(round(chunk_s * SAMPLE_RATE))
    out = []
    for i in range(streams):
        t, k, audio = i / streams * chunk_s, i, 0.0
        while audio < seconds:
            samples = items[k % len(items)][1]
            for start in range(0, samples.size, chunk):
                piece = samples[start:start + chunk]
                last = start + chunk >= samples.size
                out.append(Chunk(t, i, piece, samples.size / SAMPLE_RATE if last else 0.0))
                t += chunk_s
            audio += samples.size / SAMPLE_RATE
            k += 1
    out.sort(key=lambda c: (c.arrival, c.stream))
    return out


def next_round(chunks: list[Chunk], first: int, now: float, delay_s: float, max_batch: int):
    """The sequence batcher's rule over chunks sorted by arrival, ``first`` the oldest not yet run: (end, now)
    when chunks[first:end] leave now (max_batch of them have arrived, or the oldest has waited delay_s), else
    (None, the time to look again)."""
    end = first
    while end < len(chunks) and end - first < max_batch and chunks[end].arrival <= now:
        end += 1
    wake = chunks[first].arrival + delay_s
    if end - first == max_batch or (end > first and now >= wake):
        return end, now
    return None, wake


def paced_floor(onnx_dir: Path, items, streams: int, seconds: float, delay_s: float = 0.02, max_batch: int = 64,
                rescoring: bool = False, threads: int = 1) -> dict:
    """CPU-s per audio-s of the bare work of ``streams`` paced streams (module docstring), by part, and the
    mean batch. Runs in real time: about ``seconds`` plus one chunk."""
    from asr_server.asr.features.fbank import FbankConfig, batch_fbank_computer
    from asr_server.asr.serving.inline_onnx import onnx_session

    rng = np.random.default_rng(0)
    enc = onnx_session(onnx_dir / "streaming_encoder.onnx", threads)  # as the server's scorers make them
    dec = onnx_session(onnx_dir / "decoder.onnx", threads) if rescoring else None
    config = FbankConfig()
    fbank = batch_fbank_computer("numpy", config)
    feeds_by_batch: dict[int, dict] = {}
    chunks = paced_chunks(items, streams, seconds)
    enc.run(None, encoder_feeds(enc, 1, rng))  # load-time work out of the figures
    spent = {"fbank": 0.0, "encoder": 0.0, "decoder": 0.0}
    audio = rounds = 0
    # the samples of the previous chunk a streaming fbank keeps (a window less a shift: 15 ms)
    overlap = np.zeros(config.window_samples - config.shift_samples, np.float32)
    t0, i = time.monotonic(), 0
    while i < len(chunks):
        now = time.monotonic() - t0
        end, wake = next_round(chunks, i, now, delay_s, max_batch)
        if end is None:
            time.sleep(wake - now)
            continue
        batch = chunks[i:end]
        i = end
        start = time.thread_time()
        fbank([np.concatenate([overlap, c.samples]) for c in batch])
        mid = time.thread_time()
        if len(batch) not in feeds_by_batch:
            feeds_by_batch[len(batch)] = encoder_feeds(enc, len(batch), rng)
        enc.run(None, feeds_by_batch[len(batch)])
        done = time.thread_time()
        spent["fbank"] += mid - start
        spent["encoder"] += done - mid
        ended = [c.utterance_s for c in batch if c.utterance_s]
        if dec is not None and ended:
            feeds = decoder_feeds(dec, [encoder_frames(s) for s in ended], rng)
            start = time.thread_time()
            dec.run(None, feeds)
            spent["decoder"] += time.thread_time() - start
        audio += sum(c.samples.size for c in batch) / SAMPLE_RATE
        rounds += 1
    out = {part: value / audio for part, value in spent.items()}
    out.update(streams=streams, mean_batch=len(chunks) / max(1, rounds), delay_s=delay_s, max_batch=max_batch,
               neural=out["encoder"] + out["decoder"], wall_s=time.monotonic() - t0)
    return out


def main() -> int:
    from asr_server.asr.serving.inline_onnx import onnx_session
    from bench.vs_sherpa import load_data

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--onnx-dir", type=Path, required=True, help="streaming_encoder.onnx and decoder.onnx")
    parser.add_argument("--data", type=Path, default=ROOT / "tests" / "data" / "demo_utts")
    parser.add_argument("--streams", default="32,128,224")
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--delay-ms", type=float, default=20.0)
    args = parser.parse_args()
    items = load_data(args.data)
    enc = onnx_session(args.onnx_dir / "streaming_encoder.onnx")
    table = gap_table(enc)
    print("bare streaming encoder, one thread, CPU-s per audio-s, by batch and idle gap before each call:")
    for batch in sorted({b for b, _ in table}):
        row = "  ".join(f"gap {g:2d} ms {v:.4f}" for (b, g), v in table.items() if b == batch)
        longest = max(g for b, g in table if b == batch)
        print(f"  batch {batch:2d}: {row}  (x{table[(batch, longest)] / table[(batch, 0)]:.2f} after {longest} ms)")
    for streams in (int(s) for s in args.streams.split(",")):
        for label, delay, max_batch, rescoring in (("sherpa-like (delay 0, batch <= 8)", 0.0, 8, False),
                                                   (f"batched (delay {args.delay_ms:g} ms)", args.delay_ms / 1000,
                                                    64, False),
                                                   ("batched + rescoring", args.delay_ms / 1000, 64, True)):
            r = paced_floor(args.onnx_dir, items, streams, args.seconds, delay, max_batch, rescoring)
            print(f"S={streams:3d} {label:>34}: mean batch {r['mean_batch']:5.1f}; encoder {r['encoder']:.4f}"
                  f" decoder {r['decoder']:.4f} fbank {r['fbank']:.4f} CPU-s per audio-s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
