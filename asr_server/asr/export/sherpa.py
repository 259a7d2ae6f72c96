"""sherpa/model.onnx + tokens.txt: the streaming encoder under sherpa-onnx's WeNet CTC contract (batch of one,
its offset, mask and cache layout), checked by driving it as sherpa-onnx does."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from ..nn.model import U2Model
from .encoders import require_streamable
from .graphs import SherpaStreamingGraph
from .onnx_io import check_io, export_module
from .options import SHERPA_OPSET, ExportOptions, cache_frames, verify_options
from .parity import Diff, ParityReport, session, to_numpy
from ..graph_names import STREAMING_STATES


SHERPA_INPUTS = ("x", "offset", "required_cache_size", "attn_cache", "conv_cache", "attn_mask")
SHERPA_OUTPUTS = ("log_probs", "next_att_cache", "next_conv_cache")


def sherpa_metadata(model: U2Model, opts: ExportOptions) -> dict[str, str]:
    e = model.encoder_cfg
    return {"model_type": "wenet_ctc", "version": "1", "comment": "streaming",
            "chunk_size": str(opts.chunk_size), "left_chunks": str(opts.left_chunks),
            "head": str(e.attention_heads), "num_blocks": str(e.num_blocks), "output_size": str(e.output_size),
            "cnn_module_kernel": str(e.cnn_module_kernel), "right_context": str(model.encoder.right_context),
            "subsampling_factor": str(model.encoder.subsampling_rate), "vocab_size": str(model.vocab_size)}


def sherpa_attn_mask(offset: int, opts: ExportOptions) -> np.ndarray:
    """The mask sherpa-onnx builds before each chunk from its offset (which starts at C)."""
    c = cache_frames(opts)
    done = offset // opts.chunk_size - opts.left_chunks
    mask = np.ones((1, 1, c + opts.chunk_size), dtype=bool)
    if done < opts.left_chunks:
        mask[:, :, :c - done * opts.chunk_size] = False
    return mask


def export_sherpa(model: U2Model, out_dir: Path, symbols, opts: ExportOptions = ExportOptions(),
                  opset: int = SHERPA_OPSET) -> ParityReport:
    """out_dir/model.onnx + out_dir/tokens.txt (sherpa-onnx's "<symbol> <id>" lines)."""
    import onnx

    verify_options(model, opts)
    require_streamable(model)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "model.onnx"
    e = model.encoder_cfg
    c = cache_frames(opts)
    window = model.encoder.window_config(opts.chunk_size).window
    example = (torch.randn(1, window, model.model_cfg.input_dim), torch.tensor([c], dtype=torch.int64),
               torch.tensor([c], dtype=torch.int64),
               torch.zeros(e.num_blocks, e.attention_heads, c, 2 * e.output_size // e.attention_heads),
               torch.zeros(e.num_blocks, 1, e.output_size, model.encoder.cnn_cache_frames),
               torch.from_numpy(sherpa_attn_mask(c, opts)))
    export_module(SherpaStreamingGraph(model), example, path, SHERPA_INPUTS, SHERPA_OUTPUTS, {}, opset)
    m = onnx.load(str(path))
    del m.metadata_props[:]
    for k, v in sherpa_metadata(model, opts).items():
        m.metadata_props.add(key=k, value=v)
    onnx.save(m, str(path))
    check_io(path, SHERPA_INPUTS, SHERPA_OUTPUTS)
    if len(symbols) != model.vocab_size:
        raise ValueError(f"{len(symbols)} symbols for a vocabulary of {model.vocab_size}")
    symbols.save(out_dir / "tokens.txt")
    return _check_sherpa(model, path, opts)


def _check_sherpa(model: U2Model, path: Path, opts: ExportOptions) -> ParityReport:
    """Drive the graph the way sherpa-onnx does (offset from C, its mask, its cache layout) for
    left_chunks + 3 chunks and compare the log-probs with forward_chunk run from a zero state."""
    sess = session(path)
    c = cache_frames(opts)
    geometry = model.encoder.window_config(opts.chunk_size)
    window, stride = geometry.window, geometry.stride
    steps = opts.left_chunks + 3
    g = torch.Generator().manual_seed(opts.seed + 5)
    feats = torch.randn(1, steps * stride + window, model.model_cfg.input_dim, generator=g)
    e = model.encoder_cfg
    att = np.zeros((e.num_blocks, e.attention_heads, c, 2 * e.output_size // e.attention_heads), np.float32)
    conv = np.zeros((e.num_blocks, 1, e.output_size, model.encoder.cnn_cache_frames), np.float32)
    offset = c
    state = model.init_stream_state(1, c)
    diff = Diff()
    for k in range(steps):
        x = feats[:, k * stride:k * stride + window]
        lp, att, conv = sess.run(list(SHERPA_OUTPUTS), {
            "x": to_numpy(x), "offset": np.array([offset], np.int64), "required_cache_size": np.array([c], np.int64),
            "attn_cache": att, "conv_cache": conv, "attn_mask": sherpa_attn_mask(offset, opts)})
        offset += lp.shape[1]
        with torch.no_grad():
            ref_lp, _, _, *new = model.forward_chunk(x, torch.tensor([window]), **state)
        state = dict(zip(STREAMING_STATES, new))
        diff.add("log_probs", lp, ref_lp)
        diff.add("next_att_cache", att, state["att_cache"][0])
        diff.add("next_conv_cache", conv, state["cnn_cache"].transpose(0, 1))
    return diff.report(f"sherpa/{path.name}", opts.atol, f"{steps} chunks driven as sherpa-onnx does")
