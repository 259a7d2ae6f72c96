"""The graph wrappers: ``torch.nn.Module``s that adapt the model's own methods (``encode``, ``ctc_log_probs``,
``forward_chunk``, ``score_hyps_both``) to the tensor names, dtypes and layouts the consumers expect.

None of them re-implements the network, so an exported graph (ONNX here, TorchScript in asr_server/repo_builder/torchscript.py)
cannot drift from the PyTorch model.
"""

from __future__ import annotations

import torch
from torch import nn

from ..nn.model import U2Model


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
