"""Compare a TensorRT engine's outputs with ONNX Runtime's on real features (scripts/build_trt.py's check).

Feeds are built from the bundled test utterances (tests/data/demo_utts), so the check sees speech, not noise:
the offline encoder gets a padded batch of their fbank features, the streaming encoder their first chunk with
zero caches, the decoder the encoder's outputs and hypotheses read off the encoder's best CTC path.
Float outputs are held to `float_atol`; integer outputs (token ids, best_index) to an agreement fraction on
their first column (near-ties may swap lower ranks).

UNVERIFIED: written without TensorRT; the feed builders run on CPU (tests/gpu/test_build_trt.py).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from asr_server.gpu.profiles import engine_inputs, load_config

DATA = Path(__file__).resolve().parents[2] / "tests" / "data" / "demo_utts"
_NUMPY = {"TYPE_FP32": np.float32, "TYPE_FP16": np.float16, "TYPE_INT32": np.int32, "TYPE_INT64": np.int64,
          "TYPE_BOOL": np.bool_}


@dataclasses.dataclass(frozen=True)
class CheckReport:
    model: str
    float_diff: float  # largest |engine - ORT| over float outputs
    agreement: float  # smallest first-column agreement over integer outputs (1.0 when none)
    ok: bool

    def line(self) -> str:
        verdict = "ok" if self.ok else "MISMATCH"
        return f"check {self.model}: max |engine - ORT| {self.float_diff:.2e}, int agreement {self.agreement:.4f}: {verdict}"


def utterance_features(count: int = 4) -> tuple[np.ndarray, np.ndarray]:
    """(B, T, 80) float32 padded fbank of the first `count` test utterances, (B,) int32 lengths."""
    from asr_server.asr.features.fbank import batch_fbank
    from asr_client.audio import load_audio

    paths = sorted(DATA.glob("*.flac"))[:count]
    return batch_fbank([load_audio(path).samples for path in paths])


def check_feeds(model: str, config_path: Path, onnx_dir: Path) -> dict[str, np.ndarray]:
    """Real-feature inputs for one of encoder / streaming_encoder / decoder."""
    from google.protobuf.json_format import MessageToDict
    from tritonclient.grpc import model_config_pb2 as mc

    config = load_config(config_path)
    speech, lengths = utterance_features()
    if model == "encoder":
        return {"speech": speech, "speech_lengths": lengths}
    if model == "streaming_encoder":
        window = config.input[0].dims[0]
        feeds = {"chunk_xs": np.ascontiguousarray(speech[:, :window]),
                 "chunk_lens": np.full(len(speech), window, np.int32)}
        for state in config.sequence_batching.state:
            dtype = _NUMPY[mc.DataType.Name(state.data_type)]
            feeds[state.input_name] = np.zeros((len(speech), *state.dims), dtype)
        return feeds
    if model == "decoder":
        import onnxruntime as ort

        encoder = ort.InferenceSession(str(onnx_dir / "encoder.onnx"), providers=["CPUExecutionProvider"])
        out, out_lens, ctc, _, top_ids = encoder.run(None, {"speech": speech, "speech_lengths": lengths})
        inputs = {io.name: MessageToDict(io) for io in config.input}
        beam = int(inputs["hyps_lens_sos"]["dims"][0])
        sos = ctc.shape[-1] - 1  # WeNet: <sos> = <eos> = the last unit
        # Hypothesis k: the best path with its k-th token dropped (distinct, plausible, as long as real ones).
        best = [_collapse(top_ids[b, :out_lens[b], 0]) for b in range(len(speech))]
        hyps = [[tokens[:k] + tokens[k + 1:] or tokens for k in range(beam)] for tokens in best]
        width = max(len(h) for row in hyps for h in row) + 2  # <sos> tokens <eos>
        pad = np.full((len(speech), beam, width), sos, np.int64)  # WeNet pads with <eos>
        r_pad = pad.copy()
        lens = np.zeros((len(speech), beam), np.int32)
        for b, row in enumerate(hyps):
            for k, tokens in enumerate(row):
                seq = [sos] + tokens
                pad[b, k, :len(seq)], pad[b, k, len(seq)] = seq, sos
                r_pad[b, k, :len(seq)], r_pad[b, k, len(seq)] = [sos] + tokens[::-1], sos
                lens[b, k] = len(seq)
        feeds = {"encoder_out": out, "encoder_out_lens": out_lens.astype(np.int32), "hyps_pad_sos_eos": pad,
                 "hyps_lens_sos": lens, "ctc_score": np.zeros((len(speech), beam), np.float32)}
        if "r_hyps_pad_sos_eos" in inputs:
            feeds["r_hyps_pad_sos_eos"] = r_pad
        return feeds
    raise ValueError(f"no check feeds for model '{model}'")


def _collapse(ids: np.ndarray) -> list[int]:
    """CTC collapse: drop repeats and blanks (id 0)."""
    out, last = [], -1
    for token in ids.tolist():
        if token != last and token != 0:
            out.append(int(token))
        last = token
    return out or [1]


def compare(reference: dict[str, np.ndarray], engine: dict[str, np.ndarray], tolerances: dict,
            model: str = "") -> CheckReport:
    float_diff, agreement = 0.0, 1.0
    for name, want in reference.items():
        got = np.asarray(engine[name])
        if want.dtype.kind == "f":
            float_diff = max(float_diff, float(np.abs(got.astype(np.float64) - want).max()) if want.size else 0.0)
        else:
            first = (lambda a: a.reshape(a.shape[0], -1, a.shape[-1])[..., 0]) if want.ndim > 2 else (lambda a: a)
            agreement = min(agreement, float(np.mean(first(got.astype(np.int64)) == first(want.astype(np.int64)))))
    ok = float_diff <= tolerances["float_atol"] and agreement >= tolerances["top1_agreement"]
    return CheckReport(model, float_diff, agreement, ok)


def check_engine(model: str, config_path: Path, onnx: Path, plan: Path, tolerances: dict) -> CheckReport:
    """Run ORT and the engine (through the tensorrt backend) on the same feeds and compare."""
    import onnxruntime as ort

    from asr_server.backends.base import ModelContext
    from asr_server.backends.tensorrt import TensorRTBackend

    feeds = check_feeds(model, config_path, onnx.parent.parent.parent / "encoder" / "1")
    session = ort.InferenceSession(str(onnx), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    reference = dict(zip(names, session.run(None, {k: v for k, v in feeds.items()
                                                    if k in {i.name for i in session.get_inputs()}})))
    config = load_config(config_path)
    config.default_model_filename = plan.name
    backend = TensorRTBackend(ModelContext(name=model, version=1, config=config, model_dir=plan.parent,
                                           version_dir=plan.parent, instance_kind="KIND_GPU"))
    backend.load()
    try:
        engine = backend._run({name: feeds[name] for name in engine_inputs(config) if name in feeds})
    finally:
        backend.unload()
    return compare(reference, engine, tolerances, model)
