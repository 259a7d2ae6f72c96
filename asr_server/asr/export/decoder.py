"""decoder.onnx: attention rescoring of a CTC n-best -> best_index, checked against PyTorch and against
``decoding.rescoring``'s formula over the decoders' own per-position log-probs."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import torch

from ..decoding.rescoring import RescoringOptions, build_decoder_inputs, combine_scores, decoder_scores_from_log_probs
from ..nn.model import U2Model
from .graphs import decoder_graph
from .onnx_io import check_io, export_module, float_dtype, half_model
from .options import FP16_ATOL, ExportMismatch, ExportOptions, verify_options
from .parity import Diff, ParityReport, session, to_numpy


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
    graph_model = half_model(model) if fp16 else model
    dt = float_dtype(fp16)
    ins, outs = decoder_io(model)
    g = torch.Generator().manual_seed(opts.seed + 3)
    enc, enc_lens, inputs = _decoder_example(model, 2, opts.beam, 40, 7, g, dt)
    example = _decoder_args(model, enc, enc_lens, inputs, dt)
    axes = {"encoder_out": {0: "B", 1: "T"}, "encoder_out_lens": {0: "B"}, "hyps_pad_sos_eos": {0: "B", 2: "L"},
            "r_hyps_pad_sos_eos": {0: "B", 2: "L"}, "hyps_lens_sos": {0: "B"}, "ctc_score": {0: "B"},
            "best_index": {0: "B"}, "score": {0: "B"}}
    axes = {k: v for k, v in axes.items() if k in ins + outs + ("score",)}
    export_module(decoder_graph(graph_model, cw, rw), example, path, ins, outs, axes, opts.opset)
    check_io(path, ins, outs)
    if not check:
        return None
    # the same graph with the (B, beam) score as output, so the check can compare numbers, not only argmaxes
    buf = io.BytesIO()
    export_module(decoder_graph(graph_model, cw, rw, output="score"), example, buf, ins, ("score",),
            {k: v for k, v in axes.items() if k != "best_index"}, opts.opset)
    return _check_decoder(model, path, buf.getvalue(), opts, cw, rw, fp16)


def _check_decoder(model: U2Model, path: Path, score_graph: bytes, opts: ExportOptions, cw: float, rw: float,
                   fp16: bool) -> ParityReport:
    sess, score_sess = session(path), session(score_graph)
    ins, _ = decoder_io(model)
    ref = decoder_graph(model, cw, rw, output="score").eval()
    rw_eff = rw if model.has_right_decoder else 0.0
    g = torch.Generator().manual_seed(opts.seed + 4)
    diff = Diff()
    for batch, t, longest in ((3, 57, 11), (1, 20, 3), (4, 90, 1)):
        enc, enc_lens, inputs = _decoder_example(model, batch, opts.beam, t, longest, g)
        args = _decoder_args(model, enc, enc_lens, inputs)
        feeds = {n: to_numpy(a) for n, a in zip(ins, args)}
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
        diff.add("score", np.where(valid, o_score, 0), np.where(valid, to_numpy(score), 0))
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
