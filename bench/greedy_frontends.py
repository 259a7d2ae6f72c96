"""Streaming CTC greedy WER of one checkpoint under different fbank front ends (the accuracy gap).

    python -m bench.greedy_frontends --model-dir models/demo_en --data tests/data/demo_utts [--data DIR ...]

Decodes every utterance whole, through the checkpoint's encoder under the streaming chunk mask (what the
served streaming_wenet computes chunk by chunk; tests/e2e/test_greedy_streaming_reference.py checks that they
agree), with best-path search, and prints the WER for:

- "wenet": Kaldi fbank as WeNet trains and serves it (snip_edges=True, mel banks up to Nyquist): what we serve;
- "sherpa-onnx": sherpa-onnx's front end (snip_edges=False, high_freq=-400, i.e. banks up to 7.6 kHz); on the
  demo utterances this reproduces sherpa-onnx's own greedy transcripts 12/12;
- "wenet, +N ms lead-in": our front end after N ms of prepended silence, which moves every frame and chunk
  boundary by a fraction of a frame: the spread shows how much WER a set moves by chunk phase alone;
- "full context": the same checkpoint without the chunk mask (offline greedy).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def kaldi_fbank(samples: np.ndarray, snip_edges: bool, high_freq: float) -> np.ndarray:
    import kaldi_native_fbank as knf

    from asr_server.asr.features.fbank import INT16_SCALE

    opts = knf.FbankOptions()
    opts.frame_opts.dither = 0.0
    opts.frame_opts.snip_edges = snip_edges
    opts.mel_opts.num_bins = 80
    opts.mel_opts.high_freq = high_freq
    opts.energy_floor = 0.0
    computer = knf.OnlineFbank(opts)
    computer.accept_waveform(16000.0, (samples * INT16_SCALE).astype(np.float32))
    computer.input_finished()
    return np.stack([computer.get_frame(i) for i in range(computer.num_frames_ready)])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model-dir", type=Path, default=ROOT / "models" / "demo_en")
    parser.add_argument("--data", type=Path, action="append", help="Kaldi-style data dir (wav.scp, text)")
    parser.add_argument("--chunk-size", type=int, default=16, help="encoder frames per chunk")
    parser.add_argument("--left-chunks", type=int, default=4)
    parser.add_argument("--lead-in-ms", default="2.5,5,7.5,10,15", help="silence prepended, comma-separated")
    args = parser.parse_args()

    import torch

    from asr_server.asr.nn.checkpoint import load_model_dir
    from asr_server.asr.decoding.ctc_search import ctc_greedy
    from asr_server.asr.units import SymbolTable, Tokenizer
    from asr_client.report import error_rates
    from bench.vs_sherpa import load_data

    torch.set_num_threads(1)
    loaded = load_model_dir(args.model_dir)
    model = loaded.model.eval()
    bpe = args.model_dir / "bpe.model"
    tokenizer = Tokenizer(SymbolTable.load(args.model_dir / "units.txt"), bpe if bpe.exists() else None)

    def decode(feats: np.ndarray, chunk: int, left: int) -> str:
        x = torch.from_numpy(feats)[None]
        with torch.no_grad():
            enc, lens = model.encode(x, torch.tensor([x.shape[1]]), chunk, left)
            return tokenizer.decode(ctc_greedy(model.ctc_log_probs(enc).numpy(), lens.numpy())[0])

    c, left = args.chunk_size, args.left_chunks
    variants = [("wenet (served)", lambda s: decode(kaldi_fbank(s, True, 0.0), c, left)),
                ("sherpa-onnx front end", lambda s: decode(kaldi_fbank(s, False, -400.0), c, left))]
    for ms in (float(x) for x in args.lead_in_ms.split(",") if x):
        pad = np.zeros(int(round(ms * 16)), np.float32)
        variants.append((f"wenet, +{ms:g} ms lead-in",
                         lambda s, pad=pad: decode(kaldi_fbank(np.concatenate([pad, s]), True, 0.0), c, left)))
    variants.append(("full context", lambda s: decode(kaldi_fbank(s, True, 0.0), -1, -1)))
    for folder in args.data or [ROOT / "tests" / "data" / "demo_utts"]:
        items = load_data(folder)
        print(f"{folder}: {len(items)} utterances, chunk {c} frames, {left} left chunks, greedy", flush=True)
        for name, fn in variants:
            rates = error_rates([(ref, fn(samples)) for _, samples, ref in items])
            print(f"  {name:28s} WER {100 * rates.wer:5.2f}% ({rates.word_errors}/{rates.words})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
