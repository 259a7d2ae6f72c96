"""encoder.onnx (offline, full context) and streaming_encoder.onnx (a batched chunk step with explicit caches),
each checked against PyTorch: the offline one on other batch sizes and lengths than traced, the streaming one
over a batch of streams of different ages carried through several chunks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from ..nn.model import U2Model
from .graphs import OfflineEncoderGraph, StreamingEncoderGraph
from .onnx_io import check_io, dynamic_dims, export_module, float_dtype, half_model, set_output_dims
from .options import FP16_ATOL, ExportMismatch, ExportOptions, cache_frames, verify_options
from .parity import Diff, ParityReport, session, to_numpy
from ..graph_names import (OFFLINE_ENCODER_INPUTS, OFFLINE_ENCODER_OUTPUTS, STREAMING_ENCODER_INPUTS,
                           STREAMING_ENCODER_OUTPUTS, STREAMING_STATES)


ENCODER_INPUTS = OFFLINE_ENCODER_INPUTS
ENCODER_OUTPUTS = OFFLINE_ENCODER_OUTPUTS


def export_encoder(model: U2Model, path: Path, opts: ExportOptions = ExportOptions(), fp16: bool = False,
                   check: bool = True) -> ParityReport | None:
    """check=False skips the ORT-vs-torch check (the caller compares the graph with reference outputs)."""
    verify_options(model, opts)
    graph_model = half_model(model) if fp16 else model
    dt = float_dtype(fp16)
    feat = model.model_cfg.input_dim
    g = torch.Generator().manual_seed(opts.seed)
    example = (torch.randn(2, 97, feat, generator=g).to(dt), torch.tensor([97, 61], dtype=torch.int32))
    axes = {"speech": {0: "B", 1: "T"}, "speech_lengths": {0: "B"}, "encoder_out": {0: "B", 1: "T_out"},
            "encoder_out_lens": {0: "B"}, "ctc_log_probs": {0: "B", 1: "T_out"},
            "beam_log_probs": {0: "B", 1: "T_out"}, "beam_log_probs_idx": {0: "B", 1: "T_out"}}
    export_module(OfflineEncoderGraph(graph_model, opts.beam), example, path, ENCODER_INPUTS, ENCODER_OUTPUTS, axes,
            opts.opset)
    check_io(path, ENCODER_INPUTS, ENCODER_OUTPUTS)
    return _check_encoder(model, path, opts, fp16) if check else None


def _check_encoder(model: U2Model, path: Path, opts: ExportOptions, fp16: bool) -> ParityReport:
    sess = session(path)
    ref_graph = OfflineEncoderGraph(model, opts.beam).eval()
    g = torch.Generator().manual_seed(opts.seed + 1)
    feat = model.model_cfg.input_dim
    diff = Diff()
    # other batch sizes and lengths than the traced example: catches shapes frozen into the graph
    for lens in ([150, 150, 37], [203], [64, 200, 113, 9]):
        t = max(lens)
        speech = torch.randn(len(lens), t, feat, generator=g)
        speech_lengths = torch.tensor(lens, dtype=torch.int32)
        with torch.no_grad():
            enc, enc_lens, lp, top, _ = ref_graph(speech, speech_lengths)
        feeds = {"speech": to_numpy(speech).astype(np.float16 if fp16 else np.float32),
                 "speech_lengths": to_numpy(speech_lengths)}
        o_enc, o_lens, o_lp, o_top, o_idx = sess.run(list(ENCODER_OUTPUTS), feeds)
        if o_lens.dtype != np.int32 or o_idx.dtype != np.int64:
            raise ExportMismatch(f"{path.name}: encoder_out_lens {o_lens.dtype}, beam_log_probs_idx {o_idx.dtype}")
        diff.add("encoder_out_lens", o_lens, enc_lens)
        # only the valid frames: padded frames are never read downstream (and differ in fp16)
        valid = (torch.arange(enc.size(1))[None, :] < enc_lens[:, None]).numpy()[..., None]
        diff.add("encoder_out", np.where(valid, o_enc, 0), np.where(valid, to_numpy(enc), 0))
        diff.add("ctc_log_probs", np.where(valid, o_lp, 0), np.where(valid, to_numpy(lp), 0))
        diff.add("beam_log_probs", np.where(valid, o_top, 0), np.where(valid, to_numpy(top), 0))
        picked = torch.gather(lp, 2, torch.from_numpy(o_idx.astype(np.int64))).numpy()
        diff.add("beam_log_probs_idx", np.where(valid, picked, 0), np.where(valid, to_numpy(top), 0))
    return diff.report(path.name, FP16_ATOL if fp16 else opts.atol, "vs fp32 torch" if fp16 else "")


STREAMING_INPUTS = STREAMING_ENCODER_INPUTS
STREAMING_OUTPUTS = (*STREAMING_ENCODER_OUTPUTS, *STREAMING_STATES.values())


def require_streamable(model: U2Model) -> None:
    if model.encoder.cnn_cache_frames == 0 and model.encoder_cfg.use_cnn_module:
        raise ValueError("the streaming graphs need a causal conv module (encoder_conf.causal: true): a "
                         "non-causal conformer has no conv cache and cannot stream exactly")


def streaming_inputs(model: U2Model) -> tuple[str, ...]:
    """The streaming graph's inputs: without a conv module (transformer encoder) the empty cnn_cache is
    unused and the exporter drops it, as in WeNet's export (its Triton config then has no cnn_cache state)."""
    if model.encoder_cfg.use_cnn_module:
        return STREAMING_INPUTS
    return tuple(n for n in STREAMING_INPUTS if n != "cnn_cache")


def export_streaming_encoder(model: U2Model, path: Path, opts: ExportOptions = ExportOptions(),
                             fp16: bool = False, check: bool = True) -> ParityReport | None:
    verify_options(model, opts)
    require_streamable(model)
    graph_model = half_model(model) if fp16 else model
    dt = float_dtype(fp16)
    window = model.encoder.window_config(opts.chunk_size).window
    state = graph_model.init_stream_state(2, cache_frames(opts), dtype=dt)
    example = (torch.randn(2, window, model.model_cfg.input_dim).to(dt),
               torch.tensor([window, window], dtype=torch.int32), state["offset"], state["att_cache"],
               state["cnn_cache"], state["cache_mask"])
    axes = {n: {0: "B"} for n in STREAMING_INPUTS + STREAMING_OUTPUTS}
    graph = StreamingEncoderGraph(graph_model, opts.beam).eval()
    export_module(graph, example, path, STREAMING_INPUTS, STREAMING_OUTPUTS, axes, opts.opset)
    with torch.no_grad():
        shapes = [tuple(o.shape[1:]) for o in graph(*example)]
    # the tracer leaves the outputs' time/cache dims symbolic; Triton's implicit state needs them fixed
    set_output_dims(path, dict(zip(STREAMING_OUTPUTS, shapes)))
    check_io(path, streaming_inputs(model), STREAMING_OUTPUTS)
    dynamic = dynamic_dims(path)
    if any(dims != [0] for dims in dynamic.values()):
        raise ExportMismatch(f"{path.name}: only the batch axis may be dynamic, got {dynamic}")
    return _check_streaming(model, path, opts, fp16) if check else None


def _check_streaming(model: U2Model, path: Path, opts: ExportOptions, fp16: bool) -> ParityReport:
    """Carry a batch of 3 streams through ``steps`` chunks with ORT's own returned caches. Stream i joins the
    batch at step starts[i] (its row is reset to zero state then, as Triton's implicit state does), and
    stream 1 ends with a short window. Checks (a) ORT == torch on the same batched inputs, every step, and
    (b) each stream's ORT outputs == that stream run alone through torch from its start."""
    sess = session(path)
    ref = StreamingEncoderGraph(model, opts.beam).eval()
    np_float = np.float16 if fp16 else np.float32
    geometry = model.encoder.window_config(opts.chunk_size)
    window, stride = geometry.window, geometry.stride
    c = cache_frames(opts)
    starts, steps = [0, 2, opts.left_chunks + 1], opts.left_chunks + 4
    g = torch.Generator().manual_seed(opts.seed + 2)
    feats = [torch.randn(1, steps * stride + window, model.model_cfg.input_dim, generator=g) for _ in starts]
    last_valid = {1: window // 2}      # stream 1's final window holds fewer frames
    zero = model.init_stream_state(1, c)

    def window_of(i: int, step: int) -> tuple[torch.Tensor, int]:
        k = step - starts[i]
        if k < 0:      # not started yet: its row holds another request's data
            return torch.randn(1, window, model.model_cfg.input_dim, generator=g), window
        n = last_valid.get(i, window) if step == steps - 1 else window
        x = feats[i][:, k * stride:k * stride + window].clone()
        x[:, n:] = 0
        return x, n

    diff = Diff()
    solo_state = [dict(zero) for _ in starts]
    ort_state = {k: np.concatenate([to_numpy(v)] * len(starts)) for k, v in zero.items()}
    ort_state = {k: v.astype(np_float) if v.dtype == np.float32 else v for k, v in ort_state.items()}
    for step in range(steps):
        xs, lens = zip(*(window_of(i, step) for i in range(len(starts))))
        for i, s in enumerate(starts):
            if step == s:       # sequence start: zero state for this row only
                for k, v in zero.items():
                    ort_state[k][i] = to_numpy(v[0]).astype(ort_state[k].dtype)
        chunk_xs = torch.cat(xs)
        chunk_lens = torch.tensor(lens, dtype=torch.int32)
        feeds = {"chunk_xs": to_numpy(chunk_xs).astype(np_float), "chunk_lens": to_numpy(chunk_lens), **ort_state}
        feeds = {k: v for k, v in feeds.items() if k in streaming_inputs(model)}
        outs = dict(zip(STREAMING_OUTPUTS, sess.run(list(STREAMING_OUTPUTS), feeds)))
        # (a) same batch through torch, from the very state ORT carried (fp32)
        with torch.no_grad():
            st = {k: torch.from_numpy(v.astype(np.float32) if v.dtype == np.float16 else v)
                  for k, v in ort_state.items()}
            r = dict(zip(STREAMING_OUTPUTS, ref(chunk_xs, chunk_lens, st["offset"], st["att_cache"],
                                                st["cnn_cache"], st["cache_mask"])))
            full_lp = model.forward_chunk(chunk_xs, chunk_lens.long(), st["offset"], st["att_cache"],
                                          st["cnn_cache"], st["cache_mask"])[0]
        for name in ("chunk_out", "chunk_out_lens", *STREAMING_STATES.values()):
            diff.add(name, outs[name], r[name])
        diff.add_topk("log_probs", outs["log_probs"], outs["log_probs_idx"], full_lp, r["log_probs"])
        for name in ("log_probs_idx", "chunk_out_lens", "r_offset"):
            want = {"log_probs_idx": np.int64, "chunk_out_lens": np.int32, "r_offset": np.int64}[name]
            if outs[name].dtype != want:
                raise ExportMismatch(f"{path.name}: {name} is {outs[name].dtype}, expected {want}")
        # (b) stream alone, from its start, in torch
        for i, s in enumerate(starts):
            if step < s:
                continue
            with torch.no_grad():
                lp, out, out_lens, *new = model.forward_chunk(xs[i], torch.tensor([lens[i]]), **solo_state[i])
            solo_state[i] = dict(zip(STREAMING_STATES, new))
            n = int(out_lens)
            diff.add("solo_chunk_out", outs["chunk_out"][i:i + 1, :n], out[:, :n])
            diff.add("solo_log_probs", outs["log_probs"][i:i + 1, :n], torch.topk(lp, opts.beam, 2)[0][:, :n])
        ort_state = {k: outs["r_" + k] for k in ort_state}
    return diff.report(path.name, FP16_ATOL if fp16 else opts.atol,
                       f"{steps} chunks, batch of {len(starts)} at offsets {starts}" + (", vs fp32 torch" if fp16 else ""))
