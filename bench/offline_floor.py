"""The neural floor of the offline `attention_rescoring` pipeline: bare ONNX Runtime doing its work.

    python -m bench.offline_floor [--repo model_repo] [--data tests/data/demo_utts]

On the same utterances and the repository's own graphs, one thread each (the server's default on this
machine): encoder.onnx on each utterance's fbank at batch 1, and decoder.onnx on that utterance's real n-best
(our CTC prefix beam search over the encoder's top-k, done outside the timing). Prints CPU-seconds per
audio-second of the encoder and of encoder + decoder; bench/asr.py prints the server's figure beside it.
Feature extraction and the search are left out: they are Python work of the server's own (the floor is what
the networks cost, whatever serves them).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent

from bench.vs_sherpa import cpu_seconds


def _params(repo: Path, model: str) -> dict[str, str]:
    from asr_server.repository.config import read_config

    config = read_config(repo / model)
    return {key: value.string_value for key, value in config.parameters.items()}


def offline_floor(repo: Path, items, threads: int = 1) -> dict:
    """{"encoder": CPU-s per audio-s, "encoder_decoder": CPU-s per audio-s, "audio_s": seconds}.

    items: (name, float32 samples at 16 kHz, reference) as bench/asr.py loads them."""
    import onnxruntime as ort

    from asr_server.asr.serving import serving_config
    from asr_server.asr.decoding.ctc_search import make_search
    from asr_server.asr.features.fbank import batch_fbank_computer
    from asr_server.asr.decoding.rescoring import build_decoder_inputs
    from asr_server.asr.units import SymbolTable

    def session(model: str) -> ort.InferenceSession:
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        path = repo / model / "1" / f"{model}.onnx"
        return ort.InferenceSession(str(path.resolve()), options, providers=["CPUExecutionProvider"])

    fbank_params = _params(repo, "feature_extractor")
    fbank = batch_fbank_computer("numpy", serving_config.fbank_config(fbank_params))
    scoring = _params(repo, "scoring")
    settings = serving_config.decoding_settings(scoring, SymbolTable.load(repo / "scoring" / scoring["units"]))
    encoder, decoder = session("encoder"), session("decoder")
    decoder_inputs = {i.name for i in decoder.get_inputs()}

    feats = fbank([samples for _, samples, _ in items])
    encoder.run(None, {"speech": feats[0][None], "speech_lengths": np.array([feats[0].shape[0]], np.int32)})
    encoded, start = [], cpu_seconds()
    for f in feats:
        encoded.append(encoder.run(None, {"speech": f[None], "speech_lengths": np.array([f.shape[0]], np.int32)}))
    encoder_s = cpu_seconds() - start

    names = [o.name for o in encoder.get_outputs()]
    feeds = []
    for outputs in encoded:  # the n-best each utterance's rescoring gets (untimed)
        out = dict(zip(names, outputs))
        n = int(np.asarray(out["encoder_out_lens"]).reshape(-1)[0])
        search = make_search(settings.search_options())
        search.advance(out["beam_log_probs"][0, :n], out["beam_log_probs_idx"][0, :n])
        nbest = [(h.tokens, h.score) for h in search.nbest()]
        inputs = build_decoder_inputs([nbest], settings.beam_size, settings.sos, settings.eos,
                                      bidirectional=settings.bidirectional)
        feed = {"encoder_out": out["encoder_out"], "encoder_out_lens": np.array([n], np.int32), **inputs.feeds()}
        feeds.append({k: v for k, v in feed.items() if k in decoder_inputs})
    decoder.run(None, feeds[0])
    start = cpu_seconds()
    for feed in feeds:
        decoder.run(None, feed)
    decoder_s = cpu_seconds() - start
    audio = sum(samples.size for _, samples, _ in items) / 16000
    return {"encoder": encoder_s / audio, "encoder_decoder": (encoder_s + decoder_s) / audio, "audio_s": audio}


def main() -> int:
    from bench.asr import load_data  # bench/asr.py

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repo", type=Path, default=ROOT / "model_repo")
    parser.add_argument("--data", type=Path, default=ROOT / "tests" / "data" / "demo_utts")
    args = parser.parse_args()
    floor = offline_floor(args.repo, load_data(args.data))
    print(f"offline neural floor ({floor['audio_s']:.1f} s of audio, bare ONNX Runtime, 1 thread): encoder "
          f"{floor['encoder']:.4f}, encoder + decoder {floor['encoder_decoder']:.4f} CPU-s per audio-s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
