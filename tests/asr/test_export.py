"""Export a tiny random model and check every graph: ONNX Runtime == PyTorch within 1e-4 (fp32)."""

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs torch")
onnx = pytest.importorskip("onnx", reason="needs onnx")
ort = pytest.importorskip("onnxruntime", reason="needs onnxruntime")
pytest.importorskip("yaml", reason="train.yaml needs PyYAML")

from asr_server.asr.checkpoint import save_model_dir  # noqa: E402
from asr_server.asr.cmvn import CmvnStats  # noqa: E402
from asr_server.asr.units import SymbolTable  # noqa: E402

from .conftest import VOCAB, tiny_model  # noqa: E402

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "export_onnx.py"
CHUNK, LEFT, BEAM = 4, 2, 5
FP32_GRAPHS = ["encoder.onnx", "encoder_streaming.onnx", "encoder_streaming.onnx (batch+1)", "decoder.onnx",
               "decoder_scores.onnx", "model.onnx", "model_offline.onnx"]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    spec = importlib.util.spec_from_file_location("export_onnx", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["export_onnx"] = mod
    spec.loader.exec_module(mod)
    d = tmp_path_factory.mktemp("model")
    st = CmvnStats.zeros(80)
    st.accumulate(np.random.default_rng(0).normal(10.0, 3.0, size=(200, 80)))
    save_model_dir(d, tiny_model(seed=21), SymbolTable.from_units([f"u{i}" for i in range(VOCAB - 3)]), st)
    out = d / "onnx"
    report = mod.export_all(d, out, beam=BEAM, chunk=CHUNK, left_chunks=LEFT, fp16=True)
    return out, report, mod


def test_every_fp32_graph_matches_torch(exported):
    _, report, mod = exported
    assert mod.FP32_TOL <= 1e-4
    for g in FP32_GRAPHS:
        assert report[g]["ok"], (g, report[g])
        for name, v in report[g]["max_abs_diff"].items():
            if isinstance(v, float):
                assert v <= 1e-4, (g, name, v)
            else:
                assert v == "0 differ", (g, name, v)


def test_fp16_graphs_run_and_are_close(exported):
    _, report, _ = exported
    for g in ["encoder_fp16.onnx", "encoder_streaming_fp16.onnx", "decoder_fp16.onnx"]:
        assert report[g]["ok"], (g, report[g])
    assert report["ok"]


def test_wenet_tensor_names_and_static_streaming_dims(exported):
    out, _, _ = exported
    s = ort.InferenceSession(str(out / "encoder_streaming.onnx"), providers=["CPUExecutionProvider"])
    assert [i.name for i in s.get_inputs()] == ["chunk_xs", "chunk_lens", "offset", "att_cache", "cnn_cache",
                                                "cache_mask"]
    assert [o.name for o in s.get_outputs()] == ["log_probs", "log_probs_idx", "chunk_out", "chunk_out_lens",
                                                 "r_offset", "r_att_cache", "r_cnn_cache", "r_cache_mask"]
    shapes = {i.name: i.shape for i in s.get_inputs()}
    window = (CHUNK - 1) * 4 + 7
    assert shapes["chunk_xs"][1:] == [window, 80]
    assert shapes["att_cache"][1:] == [2, 4, CHUNK * LEFT, 16]
    assert shapes["cnn_cache"][1:] == [2, 32, 4]
    assert shapes["cache_mask"][1:] == [1, CHUNK * LEFT]
    assert all(isinstance(v[0], str) for v in shapes.values())  # batch axis is dynamic
    e = ort.InferenceSession(str(out / "encoder.onnx"), providers=["CPUExecutionProvider"])
    assert [o.name for o in e.get_outputs()] == ["encoder_out", "encoder_out_lens", "ctc_log_probs",
                                                 "beam_log_probs", "beam_log_probs_idx"]
    d = ort.InferenceSession(str(out / "decoder.onnx"), providers=["CPUExecutionProvider"])
    assert [i.name for i in d.get_inputs()] == ["encoder_out", "encoder_out_lens", "hyps_pad_sos_eos",
                                                "hyps_lens_sos", "r_hyps_pad_sos_eos", "ctc_score"]
    assert [o.name for o in d.get_outputs()] == ["best_index"]


def test_sherpa_contract(exported):
    out, _, _ = exported
    m = onnx.load(str(out / "sherpa" / "model.onnx"))
    meta = {p.key: p.value for p in m.metadata_props}
    for key, value in {"head": "4", "num_blocks": "2", "output_size": "32", "cnn_module_kernel": "5",
                       "right_context": "6", "subsampling_factor": "4", "vocab_size": str(VOCAB)}.items():
        assert meta[key] == value
    s = ort.InferenceSession(str(out / "sherpa" / "model.onnx"), providers=["CPUExecutionProvider"])
    assert [i.name for i in s.get_inputs()] == ["x", "offset", "required_cache_size", "attn_cache", "conv_cache",
                                                "attn_mask"]
    types = {i.name: i.type for i in s.get_inputs()}
    assert types["attn_mask"] == "tensor(bool)" and types["offset"] == "tensor(int64)"
    assert (out / "sherpa" / "tokens.txt").read_text().startswith("<blank> 0\n")
