"""ONNX export of a tiny random U2++ model: ORT == torch for every graph, the promised I/O, and the graphs
build into a Triton model repository whose configs parse."""

from __future__ import annotations

import contextlib
import dataclasses
import io
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="export needs torch")
onnx = pytest.importorskip("onnx", reason="export needs onnx")
pytest.importorskip("onnxruntime", reason="the parity checks need onnxruntime")

from asr_server.asr.export import decoder, encoders, export_all, onnx_io, options, sherpa  # noqa: E402
from asr_server.asr.nn.checkpoint import save_model_dir  # noqa: E402
from asr_server.asr.units import SymbolTable  # noqa: E402

from tests.helpers.scripts import load_script  # noqa: E402

from .conftest import CHUNK, LEFT_CHUNKS, VOCAB, tiny_model  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
BEAM = 4
OPTS = options.ExportOptions(chunk_size=CHUNK, left_chunks=LEFT_CHUNKS, beam=BEAM)
F, I32, I64, B = onnx.TensorProto.FLOAT, onnx.TensorProto.INT32, onnx.TensorProto.INT64, onnx.TensorProto.BOOL


def _symbols() -> SymbolTable:
    return SymbolTable(["<blank>", "<unk>", *[chr(ord("a") + i) for i in range(VOCAB - 4)], "▁", "<sos/eos>"])


def _io(path: Path) -> dict[str, tuple[int, list]]:
    m = onnx.load(str(path))
    return {v.name: (v.type.tensor_type.elem_type,
                     [d.dim_value if d.HasField("dim_value") else d.dim_param for d in v.type.tensor_type.shape.dim])
            for v in list(m.graph.input) + list(m.graph.output)}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    model = tiny_model(seed=5)
    out = tmp_path_factory.mktemp("onnx")
    lines: list[str] = []
    result = export_all.export_all(model, out, OPTS, sherpa_symbols=_symbols(), log=lines.append)
    return model, out, result, lines


def test_every_graph_matches_torch(exported):
    _, out, result, lines = exported
    names = [r.graph for r in result.reports]
    assert names == ["encoder.onnx", "streaming_encoder.onnx", "decoder.onnx", "sherpa/model.onnx"]
    for r in result.reports:
        assert r.checked and r.ok, r.line()
        assert r.max_abs_diff <= 1e-4, r.line()
        assert r.details, r.line()
    assert len(lines) == 4 and all(": OK " in line for line in lines)
    # the decoder check also held the graph to rescoring.py's combine_scores formula
    assert result.reports[2].details["rescoring_formula"] <= 1e-4


def test_encoder_io(exported):
    model, out, _, _ = exported
    d = model.encoder_cfg.output_size
    io_ = _io(out / "encoder.onnx")
    assert list(io_) == [*encoders.ENCODER_INPUTS, *encoders.ENCODER_OUTPUTS]
    assert io_["speech"] == (F, ["B", "T", 80]) and io_["speech_lengths"] == (I32, ["B"])
    assert io_["encoder_out"][0] == F and io_["encoder_out"][1][0] == "B" and io_["encoder_out"][1][2] == d
    assert io_["encoder_out_lens"] == (I32, ["B"])
    assert io_["ctc_log_probs"][0] == F and io_["ctc_log_probs"][1][2] == VOCAB
    assert io_["beam_log_probs"][0] == F and io_["beam_log_probs"][1][2] == BEAM
    assert io_["beam_log_probs_idx"][0] == I64 and io_["beam_log_probs_idx"][1][2] == BEAM
    assert isinstance(io_["encoder_out"][1][1], str)   # T' dynamic


def test_streaming_encoder_io_only_batch_dynamic(exported):
    model, out, _, _ = exported
    e = model.encoder_cfg
    c, w, dk2, k = CHUNK * LEFT_CHUNKS, model.encoder.window_config(CHUNK).window, 2 * e.output_size // e.attention_heads, \
        e.cnn_module_kernel - 1
    want = {"chunk_xs": (F, [w, 80]), "chunk_lens": (I32, []), "offset": (I64, [1]),
            "att_cache": (F, [e.num_blocks, e.attention_heads, c, dk2]), "cnn_cache": (F, [e.num_blocks, e.output_size, k]),
            "cache_mask": (F, [1, c]), "log_probs": (F, [CHUNK, BEAM]), "log_probs_idx": (I64, [CHUNK, BEAM]),
            "chunk_out": (F, [CHUNK, e.output_size]), "chunk_out_lens": (I32, [])}
    for name in ("offset", "att_cache", "cnn_cache", "cache_mask"):
        want["r_" + name] = want[name]
    io_ = _io(out / "streaming_encoder.onnx")
    assert list(io_) == [*encoders.STREAMING_INPUTS, *encoders.STREAMING_OUTPUTS]
    for name, (dtype, dims) in want.items():
        assert io_[name] == (dtype, ["B", *dims]), name
    assert onnx_io.dynamic_dims(out / "streaming_encoder.onnx") == {n: [0] for n in want}


def test_decoder_io(exported):
    model, out, _, _ = exported
    io_ = _io(out / "decoder.onnx")
    assert list(io_) == ["encoder_out", "encoder_out_lens", "hyps_pad_sos_eos", "hyps_lens_sos", "r_hyps_pad_sos_eos",
                         "ctc_score", "best_index"]
    assert io_["encoder_out"] == (F, ["B", "T", model.encoder_cfg.output_size])
    assert io_["encoder_out_lens"] == (I32, ["B"])
    assert io_["hyps_pad_sos_eos"] == (I64, ["B", BEAM, "L"]) == io_["r_hyps_pad_sos_eos"]
    assert io_["hyps_lens_sos"] == (I32, ["B", BEAM]) and io_["ctc_score"] == (F, ["B", BEAM])
    assert io_["best_index"] == (I64, ["B"])


def test_sherpa_contract(exported):
    model, out, _, _ = exported
    e = model.encoder_cfg
    c = CHUNK * LEFT_CHUNKS
    io_ = _io(out / "sherpa" / "model.onnx")
    assert list(io_) == [*sherpa.SHERPA_INPUTS, *sherpa.SHERPA_OUTPUTS]
    assert io_["x"] == (F, [1, model.encoder.window_config(CHUNK).window, 80])
    assert io_["offset"] == io_["required_cache_size"] == (I64, [1])
    assert io_["attn_cache"] == io_["next_att_cache"] == (F, [e.num_blocks, e.attention_heads, c, 16])
    assert io_["conv_cache"] == io_["next_conv_cache"] == (F, [e.num_blocks, 1, e.output_size, 4])
    assert io_["attn_mask"] == (B, [1, 1, c + CHUNK]) and io_["log_probs"] == (F, [1, CHUNK, VOCAB])
    meta = {p.key: p.value for p in onnx.load(str(out / "sherpa" / "model.onnx")).metadata_props}
    assert {k: meta[k] for k in ("head", "num_blocks", "output_size", "cnn_module_kernel", "right_context",
                                 "subsampling_factor", "vocab_size")} == {
        "head": "4", "num_blocks": "2", "output_size": "32", "cnn_module_kernel": "5", "right_context": "6",
        "subsampling_factor": "4", "vocab_size": str(VOCAB)}
    tokens = (out / "sherpa" / "tokens.txt").read_text(encoding="utf-8").splitlines()
    assert tokens[0] == "<blank> 0" and tokens[-1] == f"<sos/eos> {VOCAB - 1}" and len(tokens) == VOCAB


def test_a_different_model_is_a_mismatch(exported):
    """The checks are not vacuous: the exported encoder against another model's weights fails."""
    _, out, _, _ = exported
    report = encoders._check_encoder(tiny_model(seed=6), out / "encoder.onnx", OPTS, fp16=False)
    assert not report.ok and "MISMATCH" in report.line()


def test_unidirectional_decoder(tmp_path):
    model = tiny_model(seed=7, bidecoder=False)
    report = decoder.export_decoder(model, tmp_path / "decoder.onnx", OPTS)
    assert report.ok, report.line()
    assert "r_hyps_pad_sos_eos" not in _io(tmp_path / "decoder.onnx")
    assert "reverse_weight 0.0" in report.note


def test_fp16_encoder(tmp_path):
    report = encoders.export_encoder(tiny_model(seed=5), tmp_path / "encoder_fp16.onnx", OPTS, fp16=True)
    io_ = _io(tmp_path / "encoder_fp16.onnx")
    assert io_["speech"][0] == io_["encoder_out"][0] == onnx.TensorProto.FLOAT16
    assert io_["speech_lengths"][0] == I32 and io_["beam_log_probs_idx"][0] == I64
    assert report.ok, report.line()     # runs on CPU ORT 1.32; within FP16_ATOL of the fp32 model


def test_script_and_model_repository(tmp_path):
    """scripts/export_onnx.py on a WeNet-style dir, then the repository builder on its graphs."""
    text_format = pytest.importorskip("google.protobuf.text_format")
    model_config_pb2 = pytest.importorskip("tritonclient.grpc.model_config_pb2")
    model_dir = save_model_dir(tmp_path / "model", tiny_model(seed=8), _symbols(), None)
    onnx_dir = tmp_path / "onnx"
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = load_script("export_onnx").main(["--model-dir", str(model_dir), "--out-dir", str(onnx_dir),
                                          "--chunk-size", str(CHUNK), "--left-chunks", str(LEFT_CHUNKS),
                                          "--beam", str(BEAM)])
    lines = buf.getvalue().splitlines()
    assert rc == 0, buf.getvalue()
    assert [line.split(":")[0] for line in lines[:3]] == ["encoder.onnx", "streaming_encoder.onnx", "decoder.onnx"]
    assert lines[-1].endswith("all match")

    from asr_server.repo_builder.pipelines import BuildOptions, build

    repo = tmp_path / "repo"
    options = BuildOptions(beam=BEAM, chunk_size=CHUNK, max_batch=16)
    build(model_dir, onnx_dir, repo, options)
    configs = sorted(repo.glob("*/config.pbtxt"))
    assert {p.parent.name for p in configs} >= {"encoder", "streaming_encoder", "decoder", "wenet", "scoring"}
    parsed = {}
    for path in configs:
        cfg = model_config_pb2.ModelConfig()
        text_format.Parse(path.read_text(), cfg)
        parsed[path.parent.name] = cfg
    states = {s.input_name: list(s.dims) for s in parsed["streaming_encoder"].sequence_batching.state}
    e = tiny_model().encoder_cfg
    assert states == {"offset": [1], "att_cache": [e.num_blocks, e.attention_heads, CHUNK * LEFT_CHUNKS, 16],
                      "cnn_cache": [e.num_blocks, e.output_size, 4], "cache_mask": [1, CHUNK * LEFT_CHUNKS]}
    assert all(-1 not in t.dims for t in parsed["streaming_encoder"].output)
    assert (repo / "streaming_encoder" / "1" / "streaming_encoder.onnx").is_file()
    assert np.array_equal(sorted(i.name for i in parsed["decoder"].input),
                          sorted(["encoder_out", "encoder_out_lens", "hyps_pad_sos_eos", "hyps_lens_sos",
                                  "r_hyps_pad_sos_eos", "ctc_score"]))

    # The decoding the scorers are built with: prefix beam + rescoring by default, or as chosen.
    from asr_server.asr.serving.serving_config import decoding_settings

    def settings(cfg):
        return decoding_settings({k: v.string_value for k, v in cfg.parameters.items()}, _symbols())

    greedy_repo = tmp_path / "greedy_repo"
    build(model_dir, onnx_dir, greedy_repo, dataclasses.replace(options, search="greedy", rescoring=False))
    for name in ("scoring", "wenet"):
        default = settings(parsed[name])
        assert (default.search_method, default.rescoring) == ("prefix_beam", True)
        cfg = model_config_pb2.ModelConfig()
        text_format.Parse((greedy_repo / name / "config.pbtxt").read_text(), cfg)
        chosen = settings(cfg)
        assert (chosen.search_method, chosen.rescoring) == ("greedy", False)


def test_exported_streaming_encoder_runs_past_its_positional_table(tmp_path):
    """The clamp of the position lives inside the graph: ORT streams 3x past a 40-row table (the bundled
    model's 5000 rows failed with a Gather error after ~200 s) and matches torch on every chunk."""
    import onnxruntime as ort

    model = tiny_model(seed=5)
    model.encoder.embed.pos_enc.pe = model.encoder.embed.pos_enc.pe[:40].clone()
    path = tmp_path / "streaming_encoder.onnx"
    assert encoders.export_streaming_encoder(model, path, OPTS).ok
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    geometry = model.encoder.window_config(CHUNK)
    window, stride = geometry.window, geometry.stride
    state = {k: v.numpy() for k, v in model.init_stream_state(1, CHUNK * LEFT_CHUNKS).items()}
    torch_state = model.init_stream_state(1, CHUNK * LEFT_CHUNKS)
    feats = torch.randn(1, 30 * stride + window, 80, generator=torch.Generator().manual_seed(1))
    for k in range(30):
        xs = feats[:, k * stride:k * stride + window]
        outs = dict(zip(encoders.STREAMING_OUTPUTS, sess.run(None, {
            "chunk_xs": xs.numpy(), "chunk_lens": np.array([window], np.int32), **state})))
        with torch.no_grad():
            _, out, _, *new = model.forward_chunk(xs, torch.tensor([window]), **torch_state)
        torch_state = dict(zip(("offset", "att_cache", "cnn_cache", "cache_mask"), new))
        np.testing.assert_allclose(outs["chunk_out"], out.numpy(), atol=1e-4)
        state = {name: outs["r_" + name] for name in state}
    assert int(state["offset"].reshape(-1)[0]) == 30 * CHUNK
