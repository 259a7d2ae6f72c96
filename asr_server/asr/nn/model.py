"""U2++ conformer recogniser: encoder + CTC head + (bi)transformer attention decoder, WeNet-compatible names.

State-dict layout (WeNet ``ASRModel``): ``encoder.global_cmvn.{mean,istd}``, ``encoder.embed.conv.{0,2}``,
``encoder.embed.out.0``, ``encoder.encoders.N.{self_attn,feed_forward,feed_forward_macaron,conv_module,norm_*}``,
``encoder.after_norm``, ``ctc.ctc_lo``, ``decoder.{left,right}_decoder.*`` (or ``decoder.*`` for a plain
transformer decoder).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from .decoder import BiTransformerDecoder, DecoderConfig, TransformerDecoder
from .encoder import ConformerEncoder, EncoderConfig, GlobalCMVN
from .masks import make_pad_mask
from ..training.restricted_ctc import restricted_ctc_loss

IGNORE_ID = -1  # padding label in targets (WeNet's IGNORE_ID)


@dataclass(frozen=True)
class ModelConfig:
    """WeNet ``model_conf`` keys plus the sizes WeNet stores at the top of train.yaml."""

    input_dim: int = 80                 # fbank bins
    vocab_size: int = 0                 # units incl. <blank> (0) and <sos/eos> (last)
    ctc_weight: float = 0.3             # loss = w * ctc + (1 - w) * attention
    lsm_weight: float = 0.1             # label smoothing of the attention loss
    length_normalized_loss: bool = False
    reverse_weight: float = 0.3         # share of the right-to-left decoder in the attention loss / score
    decoder_type: str = "bitransformer"  # or "transformer"
    encoder_type: str = "conformer"     # or "transformer" (train.yaml's top-level ``encoder``)

    IGNORED = frozenset({"special_tokens", "ignore_id", "add_sos_eos", "apply_non_blank_embedding"})


class CTC(nn.Module):
    def __init__(self, vocab_size: int, encoder_output_size: int, blank_id: int = 0):
        super().__init__()
        self.ctc_lo = nn.Linear(encoder_output_size, vocab_size)
        self.blank_id = blank_id

    def log_softmax(self, hs: torch.Tensor) -> torch.Tensor:
        """(B, T, d) -> (B, T, V) log-probabilities."""
        return torch.log_softmax(self.ctc_lo(hs), dim=-1)

    def forward(self, hs, hs_lens, ys, ys_lens, earliest: torch.Tensor | None = None) -> torch.Tensor:
        """Summed CTC loss / batch size. ys: (B, L) padded with IGNORE_ID. ``earliest`` (B, L): the frame
        before which each token may not be emitted (``restricted_ctc``); None = plain CTC."""
        targets = ys.masked_fill(ys == IGNORE_ID, 0)
        if earliest is not None:
            per_utt = restricted_ctc_loss(self.log_softmax(hs), hs_lens, targets, ys_lens, earliest, self.blank_id)
            return torch.where(torch.isfinite(per_utt), per_utt, 0.0).sum() / hs.size(0)  # as zero_infinity
        lp = self.log_softmax(hs).transpose(0, 1).float()     # (T, B, V)
        loss = nn.functional.ctc_loss(lp, targets, hs_lens, ys_lens, blank=self.blank_id, reduction="sum",
                                      zero_infinity=True)
        return loss / hs.size(0)


def label_smoothing_loss(logits: torch.Tensor, target: torch.Tensor, smoothing: float,
                         normalize_length: bool) -> torch.Tensor:
    """KL(smoothed one-hot || softmax) summed over tokens, divided by batch size (or token count).

    logits (B, L, V), target (B, L) with IGNORE_ID padding.
    """
    b, _, v = logits.shape
    logits = logits.reshape(-1, v).float()
    target = target.reshape(-1)
    ignore = target == IGNORE_ID
    tgt = target.masked_fill(ignore, 0)
    true_dist = torch.full_like(logits, smoothing / (v - 1))
    true_dist.scatter_(1, tgt.unsqueeze(1), 1.0 - smoothing)
    logp = torch.log_softmax(logits, dim=1)
    kl = nn.functional.kl_div(logp, true_dist, reduction="none").sum(dim=1).masked_fill(ignore, 0.0)
    denom = (~ignore).sum() if normalize_length else b
    return kl.sum() / denom


def add_sos_eos(ys: torch.Tensor, ys_lens: torch.Tensor, sos: int, eos: int) -> tuple[torch.Tensor, torch.Tensor]:
    """ys (B, L) padded with IGNORE_ID -> ys_in (B, L+1) [sos]+y padded with eos, ys_out (B, L+1) y+[eos]
    padded with IGNORE_ID."""
    b, L = ys.shape
    pos = torch.arange(L + 1, device=ys.device).unsqueeze(0)
    body = torch.cat([ys, ys.new_full((b, 1), IGNORE_ID)], dim=1).masked_fill(pos >= ys_lens.unsqueeze(1),
                                                                              IGNORE_ID)
    ys_out = body.clone()
    ys_out[torch.arange(b), ys_lens] = eos
    ys_in = torch.cat([ys.new_full((b, 1), sos), body[:, :-1]], dim=1)
    ys_in = ys_in.masked_fill(ys_in == IGNORE_ID, eos)
    return ys_in, ys_out


def reverse_padded(ys: torch.Tensor, ys_lens: torch.Tensor) -> torch.Tensor:
    """Reverse each row's first ys_lens[i] entries; padding (IGNORE_ID) stays at the end."""
    L = ys.size(1)
    pos = torch.arange(L, device=ys.device).unsqueeze(0)
    idx = (ys_lens.unsqueeze(1) - 1 - pos).clamp(min=0)
    return torch.gather(ys, 1, idx).masked_fill(pos >= ys_lens.unsqueeze(1), IGNORE_ID)


class U2Model(nn.Module):
    """CTC/attention hybrid, trained with dynamic chunks so one model decodes full-context and streaming."""

    def __init__(self, model_cfg: ModelConfig, encoder_cfg: EncoderConfig, decoder_cfg: DecoderConfig,
                 global_cmvn: GlobalCMVN | None = None):
        super().__init__()
        if model_cfg.vocab_size < 3:
            raise ValueError("vocab_size must include <blank>, one unit and <sos/eos>")
        self.model_cfg, self.encoder_cfg, self.decoder_cfg = model_cfg, encoder_cfg, decoder_cfg
        v, d = model_cfg.vocab_size, encoder_cfg.output_size
        self.sos = self.eos = v - 1
        self.encoder = ConformerEncoder(model_cfg.input_dim, encoder_cfg, global_cmvn, model_cfg.encoder_type)
        if model_cfg.decoder_type == "bitransformer":
            self.decoder = BiTransformerDecoder(v, d, decoder_cfg)
        elif model_cfg.decoder_type == "transformer":
            self.decoder = TransformerDecoder(
                v, d, decoder_cfg.attention_heads, decoder_cfg.linear_units, decoder_cfg.num_blocks,
                decoder_cfg.dropout_rate, decoder_cfg.positional_dropout_rate,
                decoder_cfg.self_attention_dropout_rate, decoder_cfg.src_attention_dropout_rate,
                decoder_cfg.activation_type)
        else:
            raise ValueError(f"decoder {model_cfg.decoder_type!r} is not implemented")
        self.ctc = CTC(v, d)

    @property
    def vocab_size(self) -> int:
        return self.model_cfg.vocab_size

    @property
    def has_right_decoder(self) -> bool:
        return isinstance(self.decoder, BiTransformerDecoder) and self.decoder_cfg.r_num_blocks > 0

    # ---------------------------------------------------------------- training
    def forward(self, speech: torch.Tensor, speech_lengths: torch.Tensor, text: torch.Tensor,
                text_lengths: torch.Tensor, decoding_chunk_size: int = 0,
                ctc_earliest: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """speech (B, T, input_dim), speech_lengths (B,), text (B, L) padded with IGNORE_ID, text_lengths (B,).

        returns {"loss", "loss_ctc", "loss_att"} (scalars). With ``decoding_chunk_size`` 0 the encoder draws a
        random chunk per batch when ``use_dynamic_chunk`` is on and the model is in training mode; -1 trains
        full context (a curriculum's first phase), >0 a fixed chunk. ``ctc_earliest`` (B, L) restricts when
        CTC may emit each token (see ``restricted_ctc``).
        """
        enc, masks = self.encoder(speech, speech_lengths, decoding_chunk_size)
        enc_lens = masks.squeeze(1).sum(1)
        cfg = self.model_cfg
        loss_ctc = (self.ctc(enc, enc_lens, text, text_lengths, ctc_earliest) if cfg.ctc_weight > 0
                    else enc.new_zeros(()))
        if cfg.ctc_weight < 1.0:
            ys_in, ys_out = add_sos_eos(text, text_lengths, self.sos, self.eos)
            lens_in = text_lengths + 1
            rw = cfg.reverse_weight if self.has_right_decoder else 0.0
            if isinstance(self.decoder, BiTransformerDecoder):
                r_ys_in, r_ys_out = add_sos_eos(reverse_padded(text, text_lengths), text_lengths, self.sos, self.eos)
                left, right = self.decoder(enc, masks, ys_in, lens_in, r_ys_in, rw)
            else:
                left, right = self.decoder(enc, masks, ys_in, lens_in), None
            loss_att = label_smoothing_loss(left, ys_out, cfg.lsm_weight, cfg.length_normalized_loss)
            if right is not None:
                r_loss = label_smoothing_loss(right, r_ys_out, cfg.lsm_weight, cfg.length_normalized_loss)
                loss_att = (1 - rw) * loss_att + rw * r_loss
        else:
            loss_att = enc.new_zeros(())
        loss = cfg.ctc_weight * loss_ctc + (1 - cfg.ctc_weight) * loss_att
        return {"loss": loss, "loss_ctc": loss_ctc.detach(), "loss_att": loss_att.detach()}

    # ---------------------------------------------------------------- inference
    def encode(self, speech: torch.Tensor, speech_lengths: torch.Tensor, decoding_chunk_size: int = -1,
               num_decoding_left_chunks: int = -1) -> tuple[torch.Tensor, torch.Tensor]:
        """speech (B, T, input_dim) -> encoder_out (B, T', d), encoder_out_lens (B,) int64.

        decoding_chunk_size -1 = full context; >0 = the chunk mask streaming decoding sees.
        """
        enc, masks = self.encoder(speech, speech_lengths, decoding_chunk_size, num_decoding_left_chunks)
        return enc, masks.squeeze(1).sum(1)

    def ctc_log_probs(self, encoder_out: torch.Tensor) -> torch.Tensor:
        """(B, T', d) -> (B, T', V)."""
        return self.ctc.log_softmax(encoder_out)

    def init_stream_state(self, batch: int, cache_frames: int, dtype: torch.dtype = torch.float32,
                          device: torch.device | None = None) -> dict[str, torch.Tensor]:
        """Zero caches for ``batch`` new streams (what Triton's zero_data initial state holds).

        offset (B, 1) int64; att_cache (B, L, h, C, 2*d_k); cnn_cache (B, L, d, kernel-1); cache_mask (B, 1, C).
        """
        e = self.encoder_cfg
        dk2 = 2 * e.output_size // e.attention_heads
        return {"offset": torch.zeros(batch, 1, dtype=torch.int64, device=device),
                "att_cache": torch.zeros(batch, e.num_blocks, e.attention_heads, cache_frames, dk2, dtype=dtype,
                                         device=device),
                "cnn_cache": torch.zeros(batch, e.num_blocks, e.output_size, self.encoder.cnn_cache_frames,
                                         dtype=dtype, device=device),
                "cache_mask": torch.zeros(batch, 1, cache_frames, dtype=dtype, device=device)}

    def forward_chunk(self, xs: torch.Tensor, xs_lens: torch.Tensor, offset: torch.Tensor,
                      att_cache: torch.Tensor, cnn_cache: torch.Tensor, cache_mask: torch.Tensor
                      ) -> tuple[torch.Tensor, ...]:
        """Batched streaming step; see ``ConformerEncoder.forward_chunk`` for every shape.

        returns: ctc_log_probs (B, T', V), chunk_out (B, T', d), chunk_out_lens (B,) int64 (valid frames),
                 r_offset, r_att_cache, r_cnn_cache, r_cache_mask
        """
        out, mask, r_offset, r_att, r_cnn, r_mask = self.encoder.forward_chunk(
            xs, xs_lens, offset, att_cache, cnn_cache, cache_mask)
        return self.ctc_log_probs(out), out, mask.squeeze(1).sum(1), r_offset, r_att, r_cnn, r_mask

    def score_hyps_both(self, encoder_out: torch.Tensor, encoder_out_lens: torch.Tensor,
                        hyps_pad_sos_eos: torch.Tensor, hyps_lens_sos: torch.Tensor,
                        r_hyps_pad_sos_eos: torch.Tensor | None = None
                        ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Attention-decoder log-likelihood of N hypotheses per utterance, per direction.

        encoder_out:        (B, T, d); encoder_out_lens: (B,)
        hyps_pad_sos_eos:   (B, N, L+2) int64: [sos] + hyp + [eos], padded with eos (WeNet's layout)
        hyps_lens_sos:      (B, N) int: len(hyp) + 1
        r_hyps_pad_sos_eos: (B, N, L+2) int64: [sos] + reversed(hyp) + [eos], padded; None = skip right
        returns: left (B, N) float32, right (B, N) float32 or None (no right decoder / no r_hyps); each the
                 sum of log p over the hyp tokens and eos
        """
        b, n, l2 = hyps_pad_sos_eos.shape
        t = encoder_out.size(1)
        # Not repeated N times: the decoder layers attend each utterance's N hypotheses to it at once.
        memory = encoder_out
        mem_mask = (~make_pad_mask(encoder_out_lens.to(torch.int64), t)).unsqueeze(1)          # (B, 1, T)
        lens = hyps_lens_sos.reshape(b * n).to(torch.int64)
        valid = ~make_pad_mask(lens, l2 - 1)                                                   # (BN, L+1)

        def direction(dec: TransformerDecoder, hyps: torch.Tensor) -> torch.Tensor:
            hyps = hyps.reshape(b * n, l2)
            logp = torch.log_softmax(dec(memory, mem_mask, hyps[:, :-1], lens).float(), dim=-1)
            tok = torch.gather(logp, 2, hyps[:, 1:].unsqueeze(2)).squeeze(2)                  # (BN, L+1)
            return (tok * valid).sum(1).reshape(b, n)

        left_dec = self.decoder.left_decoder if isinstance(self.decoder, BiTransformerDecoder) else self.decoder
        left = direction(left_dec, hyps_pad_sos_eos)
        right = None
        if self.has_right_decoder and r_hyps_pad_sos_eos is not None:
            right = direction(self.decoder.right_decoder, r_hyps_pad_sos_eos)
        return left, right

    def score_hyps(self, encoder_out: torch.Tensor, encoder_out_lens: torch.Tensor, hyps_pad_sos_eos: torch.Tensor,
                   hyps_lens_sos: torch.Tensor, r_hyps_pad_sos_eos: torch.Tensor | None = None,
                   reverse_weight: float | None = None) -> torch.Tensor:
        """(B, N) decoder score (1-rw) * left + rw * right (shapes as ``score_hyps_both``); rw defaults to
        model_conf.reverse_weight and is 0 without a right decoder."""
        rw = self.model_cfg.reverse_weight if reverse_weight is None else reverse_weight
        left, right = self.score_hyps_both(encoder_out, encoder_out_lens, hyps_pad_sos_eos, hyps_lens_sos,
                                           r_hyps_pad_sos_eos if rw > 0 else None)
        return left if right is None else (1 - rw) * left + rw * right


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
