"""ONNX export of a U2Model: graph wrappers, export functions and ONNX Runtime vs PyTorch parity checks.

The wrappers only adapt the model's own methods (``encode``, ``ctc_log_probs``, ``forward_chunk``,
``score_hyps_both``) to the tensor names, dtypes and layouts the consumers expect; none of them re-implements
the network, so an exported graph cannot drift from the PyTorch model.

Graphs (B = batch, the only dynamic axis of the streaming graphs):
  encoder.onnx            WeNet export_onnx_gpu.py's offline encoder (full context)
  streaming_encoder.onnx  batched chunk step with explicit caches (Triton implicit state)
  decoder.onnx            attention rescoring -> best_index, ctc_weight / reverse_weight baked in
  sherpa/model.onnx       sherpa-onnx OnlineRecognizer.from_wenet_ctc contract (batch 1, caches without B)

Every ``export_*`` function runs ONNX Runtime on random inputs against PyTorch and raises ``ExportMismatch``
when they differ by more than ``ExportOptions.atol``.
"""

from __future__ import annotations

import io
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from torch import nn

from ..nn.model import U2Model
from ..decoding.rescoring import RescoringOptions, build_decoder_inputs, combine_scores, decoder_scores_from_log_probs

OPSET = 17          # LayerNormalization is a single op from 17 on; Trilu (decoder mask) needs >= 14
SHERPA_OPSET = 13   # what the sherpa-onnx 2.0.1 peer was measured with (perf_anchors.md)
FP16_ATOL = 5e-2    # fp16 graphs vs the fp32 model: 10-bit mantissa over a few layers


class ExportMismatch(RuntimeError):
    """ONNX Runtime and PyTorch disagree beyond the tolerance (or a graph's I/O is not the promised one)."""


@dataclass(frozen=True)
class ExportOptions:
    """What the exported graphs are sized for. Validated in ``verify_options``."""

    chunk_size: int = 16     # encoder frames per streaming chunk (40 ms each with x4 subsampling)
    left_chunks: int = 4     # chunks of attention history the streaming cache holds (fixed: C = chunk*left)
    beam: int = 10           # top-k of the CTC log-probs returned by the encoders
    opset: int = OPSET       # ONNX opset of encoder/streaming_encoder/decoder
    atol: float = 1e-4       # max |ORT - torch| accepted for fp32 graphs
    seed: int = 0            # random parity inputs


def verify_options(model: U2Model, opts: ExportOptions) -> None:
    if opts.chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {opts.chunk_size}")
    if opts.left_chunks < 1:
        raise ValueError("left_chunks must be >= 1: the streaming graph needs a fixed, non-empty cache "
                         f"(got {opts.left_chunks})")
    if not 1 <= opts.beam <= model.vocab_size:
        raise ValueError(f"beam must be in 1..vocab_size ({model.vocab_size}), got {opts.beam}")
    if opts.atol <= 0:
        raise ValueError(f"atol must be > 0, got {opts.atol}")


def cache_frames(opts: ExportOptions) -> int:
    """C: encoder frames of attention cache per layer."""
    return opts.chunk_size * opts.left_chunks


# ----------------------------------------------------------------------------------------------- wrappers
class OfflineEncoderGraph(nn.Module):
    """speech (B, T, F) f32, speech_lengths (B,) i32 -> encoder_out (B, T', d), encoder_out_lens (B,) i32,
    ctc_log_probs (B, T', V), beam_log_probs (B, T', beam), beam_log_probs_idx (B, T', beam) i64."""

    def __init__(self, model: U2Model, beam: int):
        super().__init__()
        self.model, self.beam = model, beam

    def forward(self, speech: torch.Tensor, speech_lengths: torch.Tensor):
        enc, enc_lens = self.model.encode(speech, speech_lengths.to(torch.int64), decoding_chunk_size=-1)
        lp = self.model.ctc_log_probs(enc)
        top, idx = torch.topk(lp, self.beam, dim=2)
        return enc, enc_lens.to(torch.int32), lp, top, idx


class StreamingEncoderGraph(nn.Module):
    """One batched chunk step; shapes as ``ConformerEncoder.forward_chunk`` with offset (B, 1) i64,
    chunk_lens (B,) i32 and cache_mask float. Returns top-k CTC log-probs, not the full (B, chunk, V)."""

    def __init__(self, model: U2Model, beam: int):
        super().__init__()
        self.model, self.beam = model, beam

    def forward(self, chunk_xs, chunk_lens, offset, att_cache, cnn_cache, cache_mask):
        lp, out, out_lens, r_offset, r_att, r_cnn, r_mask = self.model.forward_chunk(
            chunk_xs, chunk_lens.to(torch.int64), offset, att_cache, cnn_cache, cache_mask)
        top, idx = torch.topk(lp, self.beam, dim=2)
        return top, idx, out, out_lens.to(torch.int32), r_offset, r_att, r_cnn, r_mask


class DecoderGraph(nn.Module):
    """Attention rescoring of a CTC n-best (rescoring.py's layout) -> best_index (B,) i64.

    score = (1 - rw) * left + rw * right + ctc_weight * ctc_score, rw = 0 without a right decoder: the formula
    of ``rescoring.combine_scores``. ``output="score"`` returns that (B, beam) score instead (parity checks).
    """

    def __init__(self, model: U2Model, ctc_weight: float, reverse_weight: float, output: str = "best_index"):
        super().__init__()
        if output not in ("best_index", "score"):
            raise ValueError(output)
        self.model, self.output = model, output
        self.ctc_weight = float(ctc_weight)
        self.reverse_weight = float(reverse_weight) if model.has_right_decoder else 0.0

    def _score(self, encoder_out, encoder_out_lens, hyps, hyps_lens, r_hyps, ctc_score):
        left, right = self.model.score_hyps_both(encoder_out, encoder_out_lens, hyps, hyps_lens,
                                                 r_hyps if self.reverse_weight > 0 else None)
        score = left if right is None else (1 - self.reverse_weight) * left + self.reverse_weight * right
        score = score + self.ctc_weight * ctc_score.to(score.dtype)
        return score if self.output == "score" else torch.argmax(score, dim=1)


class UniDecoderGraph(DecoderGraph):
    def forward(self, encoder_out, encoder_out_lens, hyps_pad_sos_eos, hyps_lens_sos, ctc_score):
        return self._score(encoder_out, encoder_out_lens, hyps_pad_sos_eos, hyps_lens_sos, None, ctc_score)


class BiDecoderGraph(DecoderGraph):
    def forward(self, encoder_out, encoder_out_lens, hyps_pad_sos_eos, hyps_lens_sos, r_hyps_pad_sos_eos,
                ctc_score):
        return self._score(encoder_out, encoder_out_lens, hyps_pad_sos_eos, hyps_lens_sos, r_hyps_pad_sos_eos,
                           ctc_score)


def decoder_graph(model: U2Model, ctc_weight: float, reverse_weight: float, output: str = "best_index"
                  ) -> DecoderGraph:
    cls = BiDecoderGraph if model.has_right_decoder else UniDecoderGraph
    return cls(model, ctc_weight, reverse_weight, output)


class SherpaStreamingGraph(nn.Module):
    """sherpa-onnx's WeNet streaming CTC contract around ``U2Model.forward_chunk`` (batch of one).

    x (1, W, F) f32; offset (1,) i64 and required_cache_size (1,) i64 as sherpa-onnx keeps them: its offset
    starts at required_cache_size (= C) and grows by chunk_size, so the encoder's own frame count is
    offset - required_cache_size; attn_cache (L, h, C, 2*d_k); conv_cache (L, 1, d, kernel-1);
    attn_mask bool (1, 1, C + chunk) whose first C columns mark the real cache frames.
    -> log_probs (1, chunk, V), next_att_cache, next_conv_cache (shapes of the inputs).
    """

    def __init__(self, model: U2Model):
        super().__init__()
        self.model = model

    def forward(self, x, offset, required_cache_size, attn_cache, conv_cache, attn_mask):
        c = attn_cache.size(2)
        lens = torch.full((x.size(0),), x.size(1), dtype=torch.int64)
        frames = (offset - required_cache_size).reshape(-1, 1)
        lp, _, _, _, r_att, r_cnn, _ = self.model.forward_chunk(
            x, lens, frames, attn_cache.unsqueeze(0), conv_cache.transpose(0, 1), attn_mask[:, :, :c])
        return lp, r_att.squeeze(0), r_cnn.transpose(0, 1)


# ------------------------------------------------------------------------------------------------ reports
@dataclass
class ParityReport:
    """ORT vs torch for one graph."""

    graph: str                                   # file name
    max_abs_diff: float                          # over every float output compared
    tolerance: float
    details: dict[str, float] = field(default_factory=dict)   # output name -> max |diff|
    note: str = ""
    checked: bool = True    # False: ORT could not run the graph here (fp16 kernels missing on CPU)

    @property
    def ok(self) -> bool:
        return not self.checked or (np.isfinite(self.max_abs_diff) and self.max_abs_diff <= self.tolerance)

    def line(self) -> str:
        if not self.checked:
            return f"{self.graph}: NOT CHECKED {self.note}"
        worst = ", ".join(f"{k} {v:.2e}" for k, v in self.details.items())
        status = "OK" if self.ok else "MISMATCH"
        return (f"{self.graph}: {status} max|ort-torch| {self.max_abs_diff:.2e} (tol {self.tolerance:.0e})"
                f"{' [' + worst + ']' if worst else ''}{' ' + self.note if self.note else ''}")


class _Diff:
    """Collects max |a - b| per output name."""

    def __init__(self):
        self.worst: dict[str, float] = {}

    def add(self, name: str, ort: np.ndarray, ref: torch.Tensor | np.ndarray) -> None:
        ref = ref.detach().float().numpy() if isinstance(ref, torch.Tensor) else np.asarray(ref)
        ort = np.asarray(ort)
        if ort.shape != ref.shape:
            raise ExportMismatch(f"{name}: ORT shape {ort.shape} != torch {ref.shape}")
        if ort.dtype.kind in "iub":
            d = float(np.abs(ort.astype(np.int64) - ref.astype(np.int64)).max()) if ort.size else 0.0
            d = 0.0 if d == 0 else float("inf")   # integers must match exactly
        else:
            d = float(np.abs(ort.astype(np.float64) - ref.astype(np.float64)).max()) if ort.size else 0.0
            if not np.isfinite(ort).all():
                d = float("inf")
        self.worst[name] = max(self.worst.get(name, 0.0), d)

    def add_topk(self, name: str, values: np.ndarray, idx: np.ndarray, ref_lp: torch.Tensor,
                 ref_values: torch.Tensor) -> None:
        """Top-k indices may swap between near-equal log-probs: check that ORT's indices pick the values
        torch ranks there instead of comparing the indices themselves."""
        self.add(name, values, ref_values)
        picked = torch.gather(ref_lp, 2, torch.from_numpy(np.asarray(idx, dtype=np.int64)))
        self.add(name + "_idx", picked.numpy(), ref_values)

    def report(self, graph: str, tol: float, note: str = "") -> ParityReport:
        return ParityReport(graph, max(self.worst.values(), default=0.0), tol, dict(self.worst), note)


def _session(path_or_bytes) -> "ort.InferenceSession":  # noqa: F821
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1   # parity, not speed; leave the cores to whatever else runs
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    src = str(path_or_bytes) if isinstance(path_or_bytes, Path) else path_or_bytes
    return ort.InferenceSession(src, so, providers=["CPUExecutionProvider"])


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().numpy()


def _export(module: nn.Module, args: tuple, path: Path | io.BytesIO, input_names: Sequence[str],
            output_names: Sequence[str], dynamic_axes: dict, opset: int) -> None:
    module.eval()
    with torch.no_grad(), warnings.catch_warnings():
        # the tracer warns about every Python-level shape use; parity on other shapes is the real check
        warnings.simplefilter("ignore")
        torch.onnx.export(module, args, path if isinstance(path, io.BytesIO) else str(path),
                          input_names=list(input_names), output_names=list(output_names),
                          dynamic_axes=dynamic_axes, opset_version=opset, do_constant_folding=True,
                          dynamo=False)


def check_io(path: Path | bytes, inputs: Sequence[str], outputs: Sequence[str]) -> None:
    """The graph has exactly these inputs and outputs, in this order."""
    import onnx

    m = onnx.load_from_string(path) if isinstance(path, bytes) else onnx.load(str(path))
    got_in = [v.name for v in m.graph.input]
    got_out = [v.name for v in m.graph.output]
    if got_in != list(inputs) or got_out != list(outputs):
        raise ExportMismatch(f"{path if not isinstance(path, bytes) else 'graph'}: I/O {got_in} -> {got_out}, "
                             f"expected {list(inputs)} -> {list(outputs)}")


def _set_output_dims(path: Path, shapes: dict[str, tuple[int, ...]]) -> None:
    """Declare outputs as (B, *shape) with fixed non-batch dims."""
    import onnx

    m = onnx.load(str(path))
    for out in m.graph.output:
        dims = out.type.tensor_type.shape.dim
        want = shapes[out.name]
        if len(dims) != len(want) + 1:
            raise ExportMismatch(f"{path.name}: {out.name} has rank {len(dims)}, expected {len(want) + 1}")
        for d, size in zip(list(dims)[1:], want):
            d.Clear()
            d.dim_value = int(size)
    onnx.checker.check_model(m)
    onnx.save(m, str(path))


def dynamic_dims(path: Path) -> dict[str, list[int]]:
    """name -> the axes of that input/output that are not fixed sizes."""
    import onnx

    m = onnx.load(str(path))
    return {v.name: [i for i, d in enumerate(v.type.tensor_type.shape.dim) if not d.HasField("dim_value")]
            for v in list(m.graph.input) + list(m.graph.output)}


def _half_model(model: U2Model) -> U2Model:
    import copy

    return copy.deepcopy(model).half().eval()


def _float_dtype(half: bool) -> torch.dtype:
    return torch.float16 if half else torch.float32


# ----------------------------------------------------------------------------------------- offline encoder
ENCODER_INPUTS = ("speech", "speech_lengths")
ENCODER_OUTPUTS = ("encoder_out", "encoder_out_lens", "ctc_log_probs", "beam_log_probs", "beam_log_probs_idx")


def export_encoder(model: U2Model, path: Path, opts: ExportOptions = ExportOptions(), fp16: bool = False,
                   check: bool = True) -> ParityReport | None:
    """check=False skips the ORT-vs-torch check (the caller compares the graph with reference outputs)."""
    verify_options(model, opts)
    graph_model = _half_model(model) if fp16 else model
    dt = _float_dtype(fp16)
    feat = model.model_cfg.input_dim
    g = torch.Generator().manual_seed(opts.seed)
    example = (torch.randn(2, 97, feat, generator=g).to(dt), torch.tensor([97, 61], dtype=torch.int32))
    axes = {"speech": {0: "B", 1: "T"}, "speech_lengths": {0: "B"}, "encoder_out": {0: "B", 1: "T_out"},
            "encoder_out_lens": {0: "B"}, "ctc_log_probs": {0: "B", 1: "T_out"},
            "beam_log_probs": {0: "B", 1: "T_out"}, "beam_log_probs_idx": {0: "B", 1: "T_out"}}
    _export(OfflineEncoderGraph(graph_model, opts.beam), example, path, ENCODER_INPUTS, ENCODER_OUTPUTS, axes,
            opts.opset)
    check_io(path, ENCODER_INPUTS, ENCODER_OUTPUTS)
    return _check_encoder(model, path, opts, fp16) if check else None


def _check_encoder(model: U2Model, path: Path, opts: ExportOptions, fp16: bool) -> ParityReport:
    sess = _session(path)
    ref_graph = OfflineEncoderGraph(model, opts.beam).eval()
    g = torch.Generator().manual_seed(opts.seed + 1)
    feat = model.model_cfg.input_dim
    diff = _Diff()
    # other batch sizes and lengths than the traced example: catches shapes frozen into the graph
    for lens in ([150, 150, 37], [203], [64, 200, 113, 9]):
        t = max(lens)
        speech = torch.randn(len(lens), t, feat, generator=g)
        speech_lengths = torch.tensor(lens, dtype=torch.int32)
        with torch.no_grad():
            enc, enc_lens, lp, top, _ = ref_graph(speech, speech_lengths)
        feeds = {"speech": _np(speech).astype(np.float16 if fp16 else np.float32),
                 "speech_lengths": _np(speech_lengths)}
        o_enc, o_lens, o_lp, o_top, o_idx = sess.run(list(ENCODER_OUTPUTS), feeds)
        if o_lens.dtype != np.int32 or o_idx.dtype != np.int64:
            raise ExportMismatch(f"{path.name}: encoder_out_lens {o_lens.dtype}, beam_log_probs_idx {o_idx.dtype}")
        diff.add("encoder_out_lens", o_lens, enc_lens)
        # only the valid frames: padded frames are never read downstream (and differ in fp16)
        valid = (torch.arange(enc.size(1))[None, :] < enc_lens[:, None]).numpy()[..., None]
        diff.add("encoder_out", np.where(valid, o_enc, 0), np.where(valid, _np(enc), 0))
        diff.add("ctc_log_probs", np.where(valid, o_lp, 0), np.where(valid, _np(lp), 0))
        diff.add("beam_log_probs", np.where(valid, o_top, 0), np.where(valid, _np(top), 0))
        picked = torch.gather(lp, 2, torch.from_numpy(o_idx.astype(np.int64))).numpy()
        diff.add("beam_log_probs_idx", np.where(valid, picked, 0), np.where(valid, _np(top), 0))
    return diff.report(path.name, FP16_ATOL if fp16 else opts.atol, "vs fp32 torch" if fp16 else "")


# --------------------------------------------------------------------------------------- streaming encoder
STREAMING_INPUTS = ("chunk_xs", "chunk_lens", "offset", "att_cache", "cnn_cache", "cache_mask")
STREAMING_OUTPUTS = ("log_probs", "log_probs_idx", "chunk_out", "chunk_out_lens", "r_offset", "r_att_cache",
                     "r_cnn_cache", "r_cache_mask")


def _require_streamable(model: U2Model) -> None:
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
    _require_streamable(model)
    graph_model = _half_model(model) if fp16 else model
    dt = _float_dtype(fp16)
    window = model.encoder.window_config(opts.chunk_size).window
    state = graph_model.init_stream_state(2, cache_frames(opts), dtype=dt)
    example = (torch.randn(2, window, model.model_cfg.input_dim).to(dt),
               torch.tensor([window, window], dtype=torch.int32), state["offset"], state["att_cache"],
               state["cnn_cache"], state["cache_mask"])
    axes = {n: {0: "B"} for n in STREAMING_INPUTS + STREAMING_OUTPUTS}
    graph = StreamingEncoderGraph(graph_model, opts.beam).eval()
    _export(graph, example, path, STREAMING_INPUTS, STREAMING_OUTPUTS, axes, opts.opset)
    with torch.no_grad():
        shapes = [tuple(o.shape[1:]) for o in graph(*example)]
    # the tracer leaves the outputs' time/cache dims symbolic; Triton's implicit state needs them fixed
    _set_output_dims(path, dict(zip(STREAMING_OUTPUTS, shapes)))
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
    sess = _session(path)
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

    diff = _Diff()
    solo_state = [dict(zero) for _ in starts]
    ort_state = {k: np.concatenate([_np(v)] * len(starts)) for k, v in zero.items()}
    ort_state = {k: v.astype(np_float) if v.dtype == np.float32 else v for k, v in ort_state.items()}
    for step in range(steps):
        xs, lens = zip(*(window_of(i, step) for i in range(len(starts))))
        for i, s in enumerate(starts):
            if step == s:       # sequence start: zero state for this row only
                for k, v in zero.items():
                    ort_state[k][i] = _np(v[0]).astype(ort_state[k].dtype)
        chunk_xs = torch.cat(xs)
        chunk_lens = torch.tensor(lens, dtype=torch.int32)
        feeds = {"chunk_xs": _np(chunk_xs).astype(np_float), "chunk_lens": _np(chunk_lens), **ort_state}
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
        for name in ("chunk_out", "chunk_out_lens", "r_offset", "r_att_cache", "r_cnn_cache", "r_cache_mask"):
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
            solo_state[i] = dict(zip(("offset", "att_cache", "cnn_cache", "cache_mask"), new))
            n = int(out_lens)
            diff.add("solo_chunk_out", outs["chunk_out"][i:i + 1, :n], out[:, :n])
            diff.add("solo_log_probs", outs["log_probs"][i:i + 1, :n], torch.topk(lp, opts.beam, 2)[0][:, :n])
        ort_state = {k: outs["r_" + k] for k in ort_state}
    return diff.report(path.name, FP16_ATOL if fp16 else opts.atol,
                       f"{steps} chunks, batch of {len(starts)} at offsets {starts}" + (", vs fp32 torch" if fp16 else ""))


# ------------------------------------------------------------------------------------------------- decoder
def decoder_io(model: U2Model) -> tuple[tuple[str, ...], tuple[str, ...]]:
    ins = ("encoder_out", "encoder_out_lens", "hyps_pad_sos_eos", "hyps_lens_sos")
    ins += ("r_hyps_pad_sos_eos",) if model.has_right_decoder else ()
    return ins + ("ctc_score",), ("best_index",)


def _decoder_example(model: U2Model, batch: int, beam: int, t: int, longest: int, g: torch.Generator,
                     dtype: torch.dtype = torch.float32):
    """Random encoder output and n-best lists in rescoring.py's layout (some utterances with fewer hyps)."""
    d = model.encoder_cfg.output_size
    enc = torch.randn(batch, t, d, generator=g).to(dtype)
    enc_lens = torch.randint(max(1, t // 2), t + 1, (batch,), generator=g).to(torch.int32)
    enc_lens[0] = t
    rng = np.random.default_rng(int(torch.randint(0, 2**31, (1,), generator=g)))
    nbests = []
    for b in range(batch):
        n = beam if b % 2 == 0 else max(1, beam - 2)
        nbests.append([(rng.integers(1, model.vocab_size - 1, rng.integers(0, longest + 1)).tolist(),
                        float(rng.normal(-5, 3))) for _ in range(n)])
    nbests[0][0] = (rng.integers(1, model.vocab_size - 1, longest).tolist(), -1.0)  # pins L = longest
    inputs = build_decoder_inputs(nbests, beam, model.sos, model.eos, bidirectional=model.has_right_decoder)
    return enc, enc_lens, inputs


def _decoder_args(model: U2Model, enc, enc_lens, inputs, dtype=torch.float32) -> tuple:
    args = [enc, enc_lens, torch.from_numpy(inputs.hyps_pad_sos_eos), torch.from_numpy(inputs.hyps_lens_sos)]
    if model.has_right_decoder:
        args.append(torch.from_numpy(inputs.r_hyps_pad_sos_eos))
    return tuple(args) + (torch.from_numpy(inputs.ctc_score).to(dtype),)


def export_decoder(model: U2Model, path: Path, opts: ExportOptions = ExportOptions(),
                   ctc_weight: float | None = None, reverse_weight: float | None = None, fp16: bool = False,
                   check: bool = True) -> ParityReport | None:
    """ctc_weight / reverse_weight default to the model's model_conf (train.yaml)."""
    verify_options(model, opts)
    cw = model.model_cfg.ctc_weight if ctc_weight is None else ctc_weight
    rw = model.model_cfg.reverse_weight if reverse_weight is None else reverse_weight
    RescoringOptions(cw, rw if model.has_right_decoder else 0.0)    # same validation as the runtime
    graph_model = _half_model(model) if fp16 else model
    dt = _float_dtype(fp16)
    ins, outs = decoder_io(model)
    g = torch.Generator().manual_seed(opts.seed + 3)
    enc, enc_lens, inputs = _decoder_example(model, 2, opts.beam, 40, 7, g, dt)
    example = _decoder_args(model, enc, enc_lens, inputs, dt)
    axes = {"encoder_out": {0: "B", 1: "T"}, "encoder_out_lens": {0: "B"}, "hyps_pad_sos_eos": {0: "B", 2: "L"},
            "r_hyps_pad_sos_eos": {0: "B", 2: "L"}, "hyps_lens_sos": {0: "B"}, "ctc_score": {0: "B"},
            "best_index": {0: "B"}, "score": {0: "B"}}
    axes = {k: v for k, v in axes.items() if k in ins + outs + ("score",)}
    _export(decoder_graph(graph_model, cw, rw), example, path, ins, outs, axes, opts.opset)
    check_io(path, ins, outs)
    if not check:
        return None
    # the same graph with the (B, beam) score as output, so the check can compare numbers, not only argmaxes
    buf = io.BytesIO()
    _export(decoder_graph(graph_model, cw, rw, output="score"), example, buf, ins, ("score",),
            {k: v for k, v in axes.items() if k != "best_index"}, opts.opset)
    return _check_decoder(model, path, buf.getvalue(), opts, cw, rw, fp16)


def _check_decoder(model: U2Model, path: Path, score_graph: bytes, opts: ExportOptions, cw: float, rw: float,
                   fp16: bool) -> ParityReport:
    sess, score_sess = _session(path), _session(score_graph)
    ins, _ = decoder_io(model)
    ref = decoder_graph(model, cw, rw, output="score").eval()
    rw_eff = rw if model.has_right_decoder else 0.0
    g = torch.Generator().manual_seed(opts.seed + 4)
    diff = _Diff()
    for batch, t, longest in ((3, 57, 11), (1, 20, 3), (4, 90, 1)):
        enc, enc_lens, inputs = _decoder_example(model, batch, opts.beam, t, longest, g)
        args = _decoder_args(model, enc, enc_lens, inputs)
        feeds = {n: _np(a) for n, a in zip(ins, args)}
        if fp16:
            feeds = {n: v.astype(np.float16) if v.dtype == np.float32 else v for n, v in feeds.items()}
        (best,) = sess.run(["best_index"], feeds)
        (o_score,) = score_sess.run(["score"], feeds)
        with torch.no_grad():
            score = ref(*args)
            # B: rescoring.py's formula over per-position decoder log-probs of the model's own decoders
            left, right = _position_log_probs(model, enc, enc_lens, inputs)
        l_score = decoder_scores_from_log_probs(left, inputs.hyps_pad_sos_eos, inputs.hyps_lens_sos)
        r_score = (decoder_scores_from_log_probs(right, inputs.r_hyps_pad_sos_eos, inputs.hyps_lens_sos)
                   if right is not None else None)
        formula = combine_scores(inputs.ctc_score, l_score, r_score, RescoringOptions(cw, rw_eff))
        if best.dtype != np.int64:
            raise ExportMismatch(f"{path.name}: best_index is {best.dtype}, expected int64")
        # real rows only: padding rows carry ctc_weight * PAD_CTC_SCORE (thousands), where one fp32 ulp
        # is already above the tolerance; that they never win is what best_index checks
        valid = inputs.valid
        diff.add("score", np.where(valid, o_score, 0), np.where(valid, _np(score), 0))
        diff.add("rescoring_formula", np.where(valid, formula, 0), np.where(valid, score.double().numpy(), 0))
        # argmax of nearly tied scores may flip: accept an ORT pick whose torch score is within tolerance
        picked = score.gather(1, torch.from_numpy(best).view(-1, 1)).squeeze(1)
        diff.add("best_index", picked.numpy(), score.max(1).values)
    return diff.report(path.name, FP16_ATOL if fp16 else opts.atol, f"ctc_weight {cw}, reverse_weight {rw_eff}"
                       + (", vs fp32 torch" if fp16 else ""))


def _position_log_probs(model: U2Model, enc, enc_lens, inputs):
    """(B, beam, L+1, V) log-softmax of each decoder direction at every position after sos."""
    from ..nn.decoder import BiTransformerDecoder
    from ..nn.masks import make_pad_mask

    b, n, l2 = inputs.hyps_pad_sos_eos.shape
    memory = enc.unsqueeze(1).expand(b, n, *enc.shape[1:]).reshape(b * n, enc.size(1), -1)
    mask = (~make_pad_mask(enc_lens.long(), enc.size(1))).unsqueeze(1).repeat_interleave(n, 0)
    lens = torch.from_numpy(inputs.hyps_lens_sos).reshape(-1).long()

    def run(dec, hyps):
        hyps = torch.from_numpy(hyps).reshape(b * n, l2)[:, :-1]
        return torch.log_softmax(dec(memory, mask, hyps, lens).float(), -1).reshape(b, n, l2 - 1, -1).numpy()

    bi = isinstance(model.decoder, BiTransformerDecoder)
    left = run(model.decoder.left_decoder if bi else model.decoder, inputs.hyps_pad_sos_eos)
    right = run(model.decoder.right_decoder, inputs.r_hyps_pad_sos_eos) if model.has_right_decoder else None
    return left, right


# -------------------------------------------------------------------------------------------------- sherpa
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
    _require_streamable(model)
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
    _export(SherpaStreamingGraph(model), example, path, SHERPA_INPUTS, SHERPA_OUTPUTS, {}, opset)
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
    sess = _session(path)
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
    diff = _Diff()
    for k in range(steps):
        x = feats[:, k * stride:k * stride + window]
        lp, att, conv = sess.run(list(SHERPA_OUTPUTS), {
            "x": _np(x), "offset": np.array([offset], np.int64), "required_cache_size": np.array([c], np.int64),
            "attn_cache": att, "conv_cache": conv, "attn_mask": sherpa_attn_mask(offset, opts)})
        offset += lp.shape[1]
        with torch.no_grad():
            ref_lp, _, _, *new = model.forward_chunk(x, torch.tensor([window]), **state)
        state = dict(zip(("offset", "att_cache", "cnn_cache", "cache_mask"), new))
        diff.add("log_probs", lp, ref_lp)
        diff.add("next_att_cache", att, state["att_cache"][0])
        diff.add("next_conv_cache", conv, state["cnn_cache"].transpose(0, 1))
    return diff.report(f"sherpa/{path.name}", opts.atol, f"{steps} chunks driven as sherpa-onnx does")


# ------------------------------------------------------------------------------------------------ all
@dataclass
class ExportResult:
    files: list[Path]
    reports: list[ParityReport]

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.reports)


def export_all(model: U2Model, out_dir: Path, opts: ExportOptions = ExportOptions(), fp16: bool = False,
               sherpa_symbols=None, log=print) -> ExportResult:
    """Write every graph into out_dir (sherpa/ when ``sherpa_symbols`` is given) and check each one."""
    out_dir.mkdir(parents=True, exist_ok=True)
    model.eval()
    res = ExportResult([], [])

    def run(name: str, fn, half: bool = False) -> None:
        try:
            report = fn()
        except Exception as e:  # noqa: BLE001 - only ORT's own errors are tolerated, and only for fp16
            if not (half and type(e).__module__.startswith("onnxruntime")):
                raise
            report = ParityReport(name, float("nan"), FP16_ATOL, note=f"(ONNX Runtime CPU cannot run it: {e})",
                                  checked=False)
        res.files.append(out_dir / name)
        res.reports.append(report)
        log(report.line())

    for half in ([False, True] if fp16 else [False]):
        sfx = "_fp16" if half else ""
        run(f"encoder{sfx}.onnx", lambda: export_encoder(model, out_dir / f"encoder{sfx}.onnx", opts, half), half)
        run(f"streaming_encoder{sfx}.onnx",
            lambda: export_streaming_encoder(model, out_dir / f"streaming_encoder{sfx}.onnx", opts, half), half)
        run(f"decoder{sfx}.onnx", lambda: export_decoder(model, out_dir / f"decoder{sfx}.onnx", opts, fp16=half),
            half)
    if sherpa_symbols is not None:
        run("sherpa/model.onnx", lambda: export_sherpa(model, out_dir / "sherpa", sherpa_symbols, opts))
    return res
