#!/usr/bin/env python3
"""Export a WeNet-style model dir to ONNX, with WeNet export_onnx_gpu.py's tensor names, and check every graph
against PyTorch with ONNX Runtime (exit status 1 on a mismatch).

Graphs written to OUT/ (fp32; with --fp16 also the *_fp16.onnx encoder/decoder variants):
  encoder.onnx            speech (B,T,80), speech_lengths (B,) int32 ->
                          encoder_out (B,T',d), encoder_out_lens (B,) int32, ctc_log_probs (B,T',V),
                          beam_log_probs (B,T',beam), beam_log_probs_idx (B,T',beam) int64
  encoder_streaming.onnx  chunk_xs (B,W,80), chunk_lens (B,) int32, offset (B,1) int64,
                          att_cache (B,L,h,C,2*d_k), cnn_cache (B,L,d,k-1), cache_mask (B,1,C) ->
                          log_probs (B,chunk,beam), log_probs_idx (B,chunk,beam) int64, chunk_out (B,chunk,d),
                          chunk_out_lens (B,) int32, r_offset, r_att_cache, r_cnn_cache, r_cache_mask
                          (only the batch axis is dynamic, as WeNet's Triton configs expect)
  decoder.onnx            encoder_out, encoder_out_lens, hyps_pad_sos_eos (B,beam,L+2) int64,
                          hyps_lens_sos (B,beam) int32, r_hyps_pad_sos_eos, ctc_score (B,beam) -> best_index (B,)
  decoder_scores.onnx     the same inputs -> best_index, decoder_score (B,beam), r_decoder_score (B,beam)
  sherpa/model.onnx       sherpa-onnx OnlineRecognizer.from_wenet_ctc contract (positional inputs x, offset,
                          required_cache_size, attn_cache, conv_cache, attn_mask; metadata_props), + tokens.txt
  sherpa/model_offline.onnx  OfflineRecognizer.from_wenet_ctc: x, x_lens -> log_probs, log_probs_lens
  config.yaml             the sizes the Triton model repository needs (decoding_window, cache sizes, beam...)

Every graph imports and calls the model's own methods (``encode``, ``forward_chunk``, ``score_hyps_both``):
nothing here re-implements the network.

    python scripts/export_onnx.py --model models/demo_en --out models/demo_en/onnx --fp16
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

import numpy as np
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from asr_server.asr.checkpoint import load_model_dir  # noqa: E402
from asr_server.asr.model import U2Model  # noqa: E402

OPSET = 17
FP32_TOL = 1e-4  # max |ORT - torch| accepted for fp32 graphs
FP16_TOL = 5e-2  # fp16 graphs against the fp32 torch model (half precision rounding over the layers)


# ----------------------------------------------------------------------------- graph wrappers
class OfflineEncoder(nn.Module):
    def __init__(self, model: U2Model, beam: int):
        super().__init__()
        self.model, self.beam = model, beam

    def forward(self, speech, speech_lengths):
        enc, enc_lens = self.model.encode(speech, speech_lengths.to(torch.int64))
        lp = self.model.ctc_log_probs(enc)
        top, idx = torch.topk(lp, self.beam, dim=2)
        return enc, enc_lens.to(torch.int32), lp, top, idx


class StreamingEncoder(nn.Module):
    def __init__(self, model: U2Model, beam: int):
        super().__init__()
        self.model, self.beam = model, beam

    def forward(self, chunk_xs, chunk_lens, offset, att_cache, cnn_cache, cache_mask):
        lp, out, out_lens, r_offset, r_att, r_cnn, r_mask = self.model.forward_chunk(
            chunk_xs, chunk_lens, offset, att_cache, cnn_cache, cache_mask)
        top, idx = torch.topk(lp, self.beam, dim=2)
        return top, idx, out, out_lens.to(torch.int32), r_offset, r_att, r_cnn, r_mask


class RescoringDecoder(nn.Module):
    """best_index = argmax((1-rw)*left + rw*right + ctc_weight*ctc_score) over the beam (WeNet's decoder.onnx)."""

    def __init__(self, model: U2Model, ctc_weight: float, reverse_weight: float, with_scores: bool):
        super().__init__()
        self.model, self.ctc_weight, self.with_scores = model, ctc_weight, with_scores
        self.reverse_weight = reverse_weight if model.has_right_decoder else 0.0

    def forward(self, encoder_out, encoder_out_lens, hyps_pad_sos_eos, hyps_lens_sos, r_hyps_pad_sos_eos,
                ctc_score):
        left, right = self.model.score_hyps_both(encoder_out, encoder_out_lens, hyps_pad_sos_eos, hyps_lens_sos,
                                                 r_hyps_pad_sos_eos if self.reverse_weight > 0 else None)
        score = left if right is None else (1 - self.reverse_weight) * left + self.reverse_weight * right
        best = torch.argmax(score + self.ctc_weight * ctc_score.float(), dim=1)
        if not self.with_scores:
            return best
        return best, left, left * 0 if right is None else right


class SherpaStreamingCtc(nn.Module):
    """sherpa-onnx's WeNet CTC contract, mapped onto forward_chunk.

    sherpa starts ``offset`` at required_cache_size and marks invalid cache frames in ``attn_mask``
    (1, 1, C+chunk); our offset counts real encoder frames, so offset - required_cache_size is passed on.
    Caches have no batch axis there (sherpa decodes one stream per call).
    """

    def __init__(self, model: U2Model):
        super().__init__()
        self.model = model

    def forward(self, x, offset, required_cache_size, attn_cache, conv_cache, attn_mask):
        c = attn_cache.size(2)
        lens = torch.full((1,), x.size(1), dtype=torch.int64)
        our_offset = (offset - required_cache_size).reshape(1, 1)
        lp, _, _, _, r_att, r_cnn, _ = self.model.forward_chunk(
            x, lens, our_offset, attn_cache.unsqueeze(0), conv_cache.transpose(0, 1),
            attn_mask[:, :, :c].to(torch.float32))
        return lp, r_att.squeeze(0), r_cnn.transpose(0, 1)


class SherpaOfflineCtc(nn.Module):
    def __init__(self, model: U2Model):
        super().__init__()
        self.model = model

    def forward(self, x, x_lens):
        enc, enc_lens = self.model.encode(x, x_lens)
        return self.model.ctc_log_probs(enc), enc_lens


# ----------------------------------------------------------------------------- export + check
def _export(module, args, path: Path, inputs, outputs, dynamic_axes, metadata: dict | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # A wrapper left in training mode would be restored to it after export, and with it the whole model
    # (dropout on in the torch reference): keep everything in eval mode.
    module.eval()
    with warnings.catch_warnings():
        # dynamo=False is deliberate (the TorchScript exporter handles the cache slicing and TensorRT-friendly
        # ops we need); its deprecation notice and the tracer's notes about Python-side shape checks, which are
        # static per graph here, are expected.
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        warnings.simplefilter("ignore", UserWarning)
        torch.onnx.export(module, args, str(path), input_names=inputs, output_names=outputs,
                          dynamic_axes=dynamic_axes, opset_version=OPSET, do_constant_folding=True, dynamo=False)
    if metadata:
        import onnx

        m = onnx.load(str(path))
        for k, v in metadata.items():
            p = m.metadata_props.add()
            p.key, p.value = k, str(v)
        onnx.save(m, str(path))


def _check(path: Path, module, args, inputs, outputs, tol: float, report: dict, int_outputs=()) -> bool:
    """Run ORT and torch on the same inputs; every float output within tol, every int output equal."""
    import onnxruntime as ort

    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feed_names = [i.name for i in sess.get_inputs()]
    feeds = {n: a.numpy() for n, a in zip(inputs, args) if n in feed_names}
    got = sess.run(outputs, feeds)
    with torch.no_grad():
        ref = module.eval()(*args)
    ref = ref if isinstance(ref, tuple) else (ref,)
    ok, worst = True, {}
    for name, g, r in zip(outputs, got, ref):
        r = r.float().numpy() if r.is_floating_point() else r.numpy()
        if g.shape != r.shape:
            worst[name] = f"shape {g.shape} != {r.shape}"
            ok = False
            continue
        if name in int_outputs or not np.issubdtype(g.dtype, np.floating):
            bad = int(np.sum(g != r))
            worst[name] = f"{bad} differ"
            # a top-k index may swap between two equal-valued entries; count those as equal
            ok &= bad == 0 or name.endswith("idx")
        else:
            d = float(np.max(np.abs(g.astype(np.float32) - r))) if g.size else 0.0
            worst[name] = d
            ok &= d <= tol
    report[path.name] = {"ok": bool(ok), "max_abs_diff": worst}
    return ok


def export_all(model_dir: Path, out: Path, beam: int = 10, chunk: int = 16, left_chunks: int = 4,
               fp16: bool = False, batch: int = 2, ctc_weight: float | None = None,
               reverse_weight: float | None = None, seed: int = 0) -> dict:
    """Export and check every graph; returns the check report ({graph: {ok, max_abs_diff}})."""
    lm = load_model_dir(model_dir)
    model = lm.model.eval()
    enc = model.encoder
    e = model.encoder_cfg
    mc = model.model_cfg
    ctc_weight = mc.ctc_weight if ctc_weight is None else ctc_weight
    reverse_weight = mc.reverse_weight if reverse_weight is None else reverse_weight
    beam = min(beam, model.vocab_size)
    g = torch.Generator().manual_seed(seed)
    report: dict = {}
    ok = True
    d, L, h = e.output_size, e.num_blocks, e.attention_heads
    cache = chunk * left_chunks
    window = enc.decoding_window(chunk)
    kcache = enc.cnn_cache_frames

    # -- offline encoder
    T = 203
    speech = torch.randn(batch, T, mc.input_dim, generator=g) * 3 + 10
    speech_lengths = torch.tensor([T] + [T - 40 * (i + 1) for i in range(batch - 1)], dtype=torch.int32)
    off = OfflineEncoder(model, beam)
    names_in = ["speech", "speech_lengths"]
    names_out = ["encoder_out", "encoder_out_lens", "ctc_log_probs", "beam_log_probs", "beam_log_probs_idx"]
    dyn = {"speech": {0: "B", 1: "T"}, "speech_lengths": {0: "B"}, "encoder_out": {0: "B", 1: "T_OUT"},
           "encoder_out_lens": {0: "B"}, "ctc_log_probs": {0: "B", 1: "T_OUT"},
           "beam_log_probs": {0: "B", 1: "T_OUT"}, "beam_log_probs_idx": {0: "B", 1: "T_OUT"}}
    _export(off, (speech, speech_lengths), out / "encoder.onnx", names_in, names_out, dyn)
    # check on a different length than the export trace, so the dynamic axes are really dynamic
    T2 = 157
    speech2 = torch.randn(batch + 1, T2, mc.input_dim, generator=g) * 3 + 10
    lens2 = torch.tensor([T2, T2 - 30, T2 - 77][:batch + 1], dtype=torch.int32)
    ok &= _check(out / "encoder.onnx", off, (speech2, lens2), names_in, names_out, FP32_TOL, report)

    # -- streaming encoder (state from a few real chunks, so caches and masks are not all zeros)
    st = model.init_stream_state(batch, cache)
    with torch.no_grad():
        for k in range(left_chunks + 1):
            # stream 0 is older than the others: sequences of different ages share the batch
            xs = torch.randn(batch, window, mc.input_dim, generator=g)
            lp, _, _, *new = model.forward_chunk(xs, torch.full((batch,), window), **st)
            new = dict(zip(("offset", "att_cache", "cnn_cache", "cache_mask"), new))
            keep = torch.zeros(batch, dtype=torch.bool)
            keep[0] = True
            if k >= left_chunks - 1:
                keep[:] = True
            for n in st:
                m = keep.view(-1, *([1] * (st[n].dim() - 1)))
                st[n] = torch.where(m, new[n], st[n])
    s_args = (torch.randn(batch, window, mc.input_dim, generator=g) * 3 + 10,
              torch.tensor([window] + [window - 20] * (batch - 1), dtype=torch.int32),
              st["offset"], st["att_cache"], st["cnn_cache"], st["cache_mask"])
    s_in = ["chunk_xs", "chunk_lens", "offset", "att_cache", "cnn_cache", "cache_mask"]
    s_out = ["log_probs", "log_probs_idx", "chunk_out", "chunk_out_lens", "r_offset", "r_att_cache",
             "r_cnn_cache", "r_cache_mask"]
    s_dyn = {n: {0: "B"} for n in s_in + s_out}
    senc = StreamingEncoder(model, beam)
    _export(senc, s_args, out / "encoder_streaming.onnx", s_in, s_out, s_dyn)
    ok &= _check(out / "encoder_streaming.onnx", senc, s_args, s_in, s_out, FP32_TOL, report)
    # and at a batch size other than the traced one
    s_args3 = tuple(torch.cat([a, a[:1]]) for a in s_args)
    rep3: dict = {}
    ok &= _check(out / "encoder_streaming.onnx", senc, s_args3, s_in, s_out, FP32_TOL, rep3)
    report["encoder_streaming.onnx (batch+1)"] = rep3["encoder_streaming.onnx"]

    # -- decoders
    with torch.no_grad():
        enc_out, enc_lens = model.encode(speech2[:batch], lens2[:batch].to(torch.int64))
    Lh = 7
    hyps = torch.randint(2, model.vocab_size - 1, (batch, beam, Lh + 2), generator=g)
    hyps_lens = torch.randint(1, Lh + 2, (batch, beam), generator=g).to(torch.int32)
    hyps[:, :, 0] = model.sos
    pos = torch.arange(Lh + 2).view(1, 1, -1)
    hyps = torch.where(pos >= hyps_lens.unsqueeze(-1), torch.full_like(hyps, model.eos), hyps)
    r_hyps = hyps.clone()
    for b in range(batch):
        for j in range(beam):
            n = int(hyps_lens[b, j]) - 1
            r_hyps[b, j, 1:n + 1] = hyps[b, j, 1:n + 1].flip(0)
    ctc_score = torch.randn(batch, beam, generator=g) * 5
    d_args = (enc_out, enc_lens.to(torch.int32), hyps, hyps_lens, r_hyps, ctc_score)
    d_in = ["encoder_out", "encoder_out_lens", "hyps_pad_sos_eos", "hyps_lens_sos", "r_hyps_pad_sos_eos",
            "ctc_score"]
    d_dyn = {"encoder_out": {0: "B", 1: "T"}, "encoder_out_lens": {0: "B"}, "hyps_pad_sos_eos": {0: "B", 2: "T2"},
             "hyps_lens_sos": {0: "B"}, "r_hyps_pad_sos_eos": {0: "B", 2: "T2"}, "ctc_score": {0: "B"},
             "best_index": {0: "B"}, "decoder_score": {0: "B"}, "r_decoder_score": {0: "B"}}
    if not model.has_right_decoder or reverse_weight == 0:
        d_in.remove("r_hyps_pad_sos_eos")  # pruned from the graph, like WeNet's config_template2
    for name, with_scores in (("decoder.onnx", False), ("decoder_scores.onnx", True)):
        dec = RescoringDecoder(model, ctc_weight, reverse_weight, with_scores)
        d_out = ["best_index"] + (["decoder_score", "r_decoder_score"] if with_scores else [])
        args = d_args if "r_hyps_pad_sos_eos" in d_in else d_args[:4] + d_args[5:]
        wrapped = dec if "r_hyps_pad_sos_eos" in d_in else _NoRightHyps(dec)
        _export(wrapped, args, out / name, d_in, d_out, {k: v for k, v in d_dyn.items() if k in d_in + d_out})
        # check with longer hypotheses than traced
        hyps_b = torch.cat([hyps, torch.full((batch, beam, 3), model.eos)], dim=2)
        r_b = torch.cat([r_hyps, torch.full((batch, beam, 3), model.eos)], dim=2)
        check_args = (enc_out, enc_lens.to(torch.int32), hyps_b, hyps_lens, r_b, ctc_score)
        check_args = check_args if "r_hyps_pad_sos_eos" in d_in else check_args[:4] + check_args[5:]
        ok &= _check(out / name, wrapped, check_args, d_in, d_out, FP32_TOL, report, int_outputs=("best_index",))

    # -- sherpa-onnx streaming + offline CTC
    meta = {"model_type": "wenet_ctc", "head": h, "num_blocks": L, "output_size": d,
            "cnn_module_kernel": e.cnn_module_kernel, "right_context": enc.right_context,
            "subsampling_factor": enc.subsampling_rate, "vocab_size": model.vocab_size,
            "chunk_size": chunk, "left_chunks": left_chunks, "comment": "asr_server demo export"}
    sh = SherpaStreamingCtc(model)
    n_valid = min(int(st["cache_mask"][0].sum()), cache)
    attn_mask = torch.ones(1, 1, cache + chunk, dtype=torch.bool)
    attn_mask[:, :, :cache - n_valid] = False
    sh_args = (s_args[0][:1], st["offset"][0] + cache, torch.tensor([cache], dtype=torch.int64),
               st["att_cache"][0], st["cnn_cache"][0].unsqueeze(1), attn_mask)
    sh_in = ["x", "offset", "required_cache_size", "attn_cache", "conv_cache", "attn_mask"]
    sh_out = ["log_probs", "next_att_cache", "next_conv_cache"]
    _export(sh, sh_args, out / "sherpa" / "model.onnx", sh_in, sh_out, None, meta)
    ok &= _check(out / "sherpa" / "model.onnx", sh, sh_args, sh_in, sh_out, FP32_TOL, report)
    sho = SherpaOfflineCtc(model)
    sho_args = (speech, speech_lengths.to(torch.int64))
    _export(sho, sho_args, out / "sherpa" / "model_offline.onnx", ["x", "x_lens"], ["log_probs", "log_probs_lens"],
            {"x": {0: "N", 1: "T"}, "x_lens": {0: "N"}, "log_probs": {0: "N", 1: "T_OUT"},
             "log_probs_lens": {0: "N"}}, {k: v for k, v in meta.items() if k in ("model_type", "vocab_size",
                                                                                  "subsampling_factor", "comment")})
    ok &= _check(out / "sherpa" / "model_offline.onnx", sho, (speech2, lens2.to(torch.int64)), ["x", "x_lens"],
                 ["log_probs", "log_probs_lens"], FP32_TOL, report)
    lm.symbols.save(out / "sherpa" / "tokens.txt")

    # -- fp16 variants (checked against the fp32 torch model with a half-precision tolerance)
    if fp16:
        half = _half_copy(model)
        h_off = OfflineEncoder(half, beam)
        _export(h_off, (speech.half(), speech_lengths), out / "encoder_fp16.onnx", names_in, names_out, dyn)
        ok &= _check_fp16(out / "encoder_fp16.onnx", off, (speech2, lens2), names_in, names_out, report)
        h_s = StreamingEncoder(half, beam)
        h_args = tuple(a.half() if a.is_floating_point() else a for a in s_args)
        _export(h_s, h_args, out / "encoder_streaming_fp16.onnx", s_in, s_out, s_dyn)
        ok &= _check_fp16(out / "encoder_streaming_fp16.onnx", senc, s_args, s_in, s_out, report)
        h_dec = RescoringDecoder(half, ctc_weight, reverse_weight, True)
        h_dec = h_dec if "r_hyps_pad_sos_eos" in d_in else _NoRightHyps(h_dec)
        fd_args = tuple(a.half() if a.is_floating_point() else a for a in d_args)
        fd_args = fd_args if "r_hyps_pad_sos_eos" in d_in else fd_args[:4] + fd_args[5:]
        _export(h_dec, fd_args, out / "decoder_fp16.onnx", d_in, ["best_index", "decoder_score", "r_decoder_score"],
                {k: v for k, v in d_dyn.items()})
        ref_dec = RescoringDecoder(model, ctc_weight, reverse_weight, True)
        ref_dec = ref_dec if "r_hyps_pad_sos_eos" in d_in else _NoRightHyps(ref_dec)
        ok &= _check_fp16(out / "decoder_fp16.onnx", ref_dec, d_args if "r_hyps_pad_sos_eos" in d_in
                          else d_args[:4] + d_args[5:], d_in, ["best_index", "decoder_score", "r_decoder_score"],
                          report, relative=True)

    (out / "config.yaml").write_text("".join(f"{k}: {json.dumps(v)}\n" for k, v in {
        "subsampling_rate": enc.subsampling_rate, "context": enc.right_context + 1,
        "decoding_chunk_size": chunk, "num_decoding_left_chunks": left_chunks, "required_cache_size": cache,
        "decoding_window": window, "beam_size": beam, "feat_size": mc.input_dim, "output_size": d,
        "num_blocks": L, "head": h, "att_cache_output_size": 2 * d // h, "cnn_module_kernel_cache": kcache,
        "vocab_size": model.vocab_size, "ctc_weight": ctc_weight, "reverse_weight": reverse_weight,
        "bidecoder": int("r_hyps_pad_sos_eos" in d_in), "fp16": fp16}.items()))
    lm.symbols.save(out / "units.txt")
    report["ok"] = bool(ok)
    return report


class _NoRightHyps(nn.Module):
    """Decoder wrapper without the r_hyps input (unidirectional decoder or reverse_weight 0)."""

    def __init__(self, dec: RescoringDecoder):
        super().__init__()
        self.dec = dec

    def forward(self, encoder_out, encoder_out_lens, hyps_pad_sos_eos, hyps_lens_sos, ctc_score):
        return self.dec(encoder_out, encoder_out_lens, hyps_pad_sos_eos, hyps_lens_sos, None, ctc_score)


def _half_copy(model: U2Model) -> U2Model:
    import copy

    m = copy.deepcopy(model).half().eval()
    # CMVN statistics stay in fp32 would mix dtypes; half is fine for fbank-range values
    return m


def _check_fp16(path: Path, ref_module, args32, inputs, outputs, report: dict, relative: bool = False) -> bool:
    """fp16 ORT graph vs the fp32 torch model: float outputs within FP16_TOL (relative to scale if asked)."""
    import onnxruntime as ort

    try:
        sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        in_types = {i.name: i.type for i in sess.get_inputs()}
        feeds = {}
        for n, a in zip(inputs, args32):
            if n in in_types:
                arr = a.numpy()
                feeds[n] = arr.astype(np.float16) if in_types[n] == "tensor(float16)" else arr
        got = sess.run(outputs, feeds)
    except Exception as exc:  # an ORT build without some fp16 CPU kernel: say so, do not hide it as a pass
        report[path.name] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:300]}
        return False
    with torch.no_grad():
        ref = ref_module.eval()(*args32)
    ref = ref if isinstance(ref, tuple) else (ref,)
    ok, worst = True, {}
    for name, gv, r in zip(outputs, got, ref):
        if not np.issubdtype(gv.dtype, np.floating):
            worst[name] = f"{int(np.sum(gv != r.numpy()))} differ"
            continue  # argmax / top-k ids may legitimately flip at fp16 precision
        r = r.float().numpy()
        diff = np.abs(gv.astype(np.float32) - r)
        if relative:
            diff = diff / np.maximum(1.0, np.abs(r))
        worst[name] = float(diff.max()) if diff.size else 0.0
        ok &= worst[name] <= FP16_TOL
    report[path.name] = {"ok": bool(ok), "max_abs_diff": worst, "tolerance": FP16_TOL}
    return ok


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, required=True, help="WeNet-style dir: train.yaml, final.pt, units.txt")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--beam", type=int, default=10, help="top-k of the encoders, beam of the decoder")
    ap.add_argument("--chunk", type=int, default=16, help="streaming chunk in encoder frames (16 = 640 ms)")
    ap.add_argument("--left-chunks", type=int, default=4, help="cache = chunk * left_chunks frames")
    ap.add_argument("--fp16", action="store_true", help="also write *_fp16.onnx encoders and decoder")
    ap.add_argument("--ctc-weight", type=float, default=None, help="default: model_conf.ctc_weight")
    ap.add_argument("--reverse-weight", type=float, default=None, help="default: model_conf.reverse_weight")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    report = export_all(args.model, args.out, args.beam, args.chunk, args.left_chunks, args.fp16,
                        ctc_weight=args.ctc_weight, reverse_weight=args.reverse_weight)
    print(json.dumps(report, indent=2))
    if not report["ok"]:
        print("ONNX Runtime does not match PyTorch (see above)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
