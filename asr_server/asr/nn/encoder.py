"""Conformer encoder (WeNet ``ConformerEncoder`` parameter layout) with a batched, explicit-cache forward_chunk."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from .attention import CachedSelfAttention, RelPositionMultiHeadedAttention
from .embedding import SUBSAMPLING, PositionalEncoding
from .masks import add_optional_chunk_mask, make_pad_mask
from ..windows import WindowConfig

LAYER_NORM_EPS = 1e-5  # WeNet's LayerNorm eps


def activation(name: str) -> nn.Module:
    return {"swish": nn.SiLU(), "relu": nn.ReLU(), "gelu": nn.GELU(), "tanh": nn.Tanh()}[name]


class GlobalCMVN(nn.Module):
    """x -> (x - mean) * istd, the statistics stored in the checkpoint as ``encoder.global_cmvn.{mean,istd}``."""

    def __init__(self, mean: torch.Tensor, istd: torch.Tensor, norm_var: bool = True):
        super().__init__()
        self.norm_var = norm_var
        self.register_buffer("mean", mean.float())  # (D,)
        self.register_buffer("istd", istd.float())  # (D,)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x - self.mean
        return x * self.istd if self.norm_var else x


class PositionwiseFeedForward(nn.Module):
    def __init__(self, idim: int, hidden: int, dropout_rate: float, act: nn.Module):
        super().__init__()
        self.w_1 = nn.Linear(idim, hidden)
        self.activation = act
        self.dropout = nn.Dropout(dropout_rate)
        self.w_2 = nn.Linear(hidden, idim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w_2(self.dropout(self.activation(self.w_1(x))))


class ConvolutionModule(nn.Module):
    """Pointwise conv + GLU, depthwise conv, norm, activation, pointwise conv.

    Causal: the depthwise conv is left-padded with ``kernel-1`` frames, which streaming replaces with the last
    ``kernel-1`` input frames of the previous chunk (``cnn_cache``), so chunks see exactly what the full pass sees.
    """

    def __init__(self, channels: int, kernel_size: int, act: nn.Module, norm: str = "batch_norm",
                 causal: bool = False, bias: bool = True):
        super().__init__()
        self.pointwise_conv1 = nn.Conv1d(channels, 2 * channels, 1, bias=bias)
        if causal:
            self.lorder, padding = kernel_size - 1, 0
        else:
            assert (kernel_size - 1) % 2 == 0, "a non-causal kernel must be odd"
            self.lorder, padding = 0, (kernel_size - 1) // 2
        self.depthwise_conv = nn.Conv1d(channels, channels, kernel_size, padding=padding, groups=channels, bias=bias)
        self.use_layer_norm = norm == "layer_norm"
        self.norm = nn.LayerNorm(channels, eps=LAYER_NORM_EPS) if self.use_layer_norm else nn.BatchNorm1d(channels)
        self.pointwise_conv2 = nn.Conv1d(channels, channels, 1, bias=bias)
        self.activation = act

    def forward(self, x: torch.Tensor, mask_pad: torch.Tensor, cache: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """x: (B, T, C), mask_pad: (B, 1, T) bool valid, cache: (B, C, kernel-1) or None (zeros).

        returns: (B, T, C), new_cache (B, C, kernel-1) (empty (B, C, 0) when not causal)
        """
        x = x.transpose(1, 2).masked_fill(~mask_pad, 0.0)    # (B, C, T); padded frames must not leak in
        if self.lorder > 0:
            if cache is None or cache.size(2) == 0:
                x = nn.functional.pad(x, (self.lorder, 0))
            else:
                x = torch.cat([cache.to(x.dtype), x], dim=2)
            new_cache = x[:, :, -self.lorder:]
        else:
            new_cache = x[:, :, :0]
        x = nn.functional.glu(self.pointwise_conv1(x), dim=1)
        x = self.depthwise_conv(x)
        if self.use_layer_norm:
            x = self.activation(self.norm(x.transpose(1, 2))).transpose(1, 2)
        else:
            x = self.activation(self.norm(x))
        x = self.pointwise_conv2(x).masked_fill(~mask_pad, 0.0)
        return x.transpose(1, 2), new_cache


class ConformerEncoderLayer(nn.Module):
    """Macaron FFN/2 -> rel-pos MHSA -> conv module -> FFN/2 -> LayerNorm (pre-norm residual blocks)."""

    def __init__(self, size: int, self_attn: RelPositionMultiHeadedAttention, feed_forward: nn.Module,
                 feed_forward_macaron: nn.Module | None, conv_module: ConvolutionModule | None,
                 dropout_rate: float):
        super().__init__()
        self.self_attn = self_attn
        self.feed_forward = feed_forward
        self.feed_forward_macaron = feed_forward_macaron
        self.conv_module = conv_module
        self.norm_ff = nn.LayerNorm(size, eps=LAYER_NORM_EPS)
        self.norm_mha = nn.LayerNorm(size, eps=LAYER_NORM_EPS)
        if feed_forward_macaron is not None:
            self.norm_ff_macaron = nn.LayerNorm(size, eps=LAYER_NORM_EPS)
            self.ff_scale = 0.5
        else:
            self.ff_scale = 1.0
        if conv_module is not None:
            self.norm_conv = nn.LayerNorm(size, eps=LAYER_NORM_EPS)
            self.norm_final = nn.LayerNorm(size, eps=LAYER_NORM_EPS)
        self.dropout = nn.Dropout(dropout_rate)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, pos_emb: torch.Tensor, mask_pad: torch.Tensor,
                att_cache: torch.Tensor | None = None, cnn_cache: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x: (B, T, d); mask: (B, 1|T, C+T) attention mask; pos_emb: (1|B, C+T, d); mask_pad: (B, 1, T);
        att_cache: (B, h, C, 2*d_k) | None; cnn_cache: (B, d, kernel-1) | None.

        returns: x (B, T, d), new_att_cache (B, h, C+T, 2*d_k), new_cnn_cache (B, d, kernel-1)
        """
        if self.feed_forward_macaron is not None:
            x = x + self.ff_scale * self.dropout(self.feed_forward_macaron(self.norm_ff_macaron(x)))
        att, new_att_cache = self.self_attn(*(3 * (self.norm_mha(x),)), mask, pos_emb, att_cache)
        x = x + self.dropout(att)
        new_cnn_cache = x.new_zeros(x.size(0), x.size(2), 0)
        if self.conv_module is not None:
            conv, new_cnn_cache = self.conv_module(self.norm_conv(x), mask_pad, cnn_cache)
            x = x + self.dropout(conv)
        x = x + self.ff_scale * self.dropout(self.feed_forward(self.norm_ff(x)))
        if self.conv_module is not None:
            x = self.norm_final(x)
        return x, new_att_cache, new_cnn_cache


class TransformerEncoderLayer(nn.Module):
    """Pre-norm self-attention -> FFN (WeNet ``TransformerEncoderLayer``: ``norm1``, ``norm2``); no conv cache."""

    def __init__(self, size: int, self_attn: nn.Module, feed_forward: nn.Module, dropout_rate: float):
        super().__init__()
        self.self_attn = self_attn
        self.feed_forward = feed_forward
        self.norm1 = nn.LayerNorm(size, eps=LAYER_NORM_EPS)
        self.norm2 = nn.LayerNorm(size, eps=LAYER_NORM_EPS)
        self.dropout = nn.Dropout(dropout_rate)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, pos_emb: torch.Tensor, mask_pad: torch.Tensor,
                att_cache: torch.Tensor | None = None, cnn_cache: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Shapes as ``ConformerEncoderLayer.forward``; the returned cnn cache is (B, d, 0)."""
        t = self.norm1(x)
        att, new_att_cache = self.self_attn(t, t, t, mask, pos_emb, att_cache)
        x = x + self.dropout(att)
        x = x + self.dropout(self.feed_forward(self.norm2(x)))
        return x, new_att_cache, x.new_zeros(x.size(0), x.size(2), 0)


ENCODER_TYPES = ("conformer", "transformer")
# WeNet's constructor defaults where they differ from EncoderConfig's (a train.yaml may leave keys out)
WENET_ENCODER_DEFAULTS = {
    "conformer": {"num_blocks": 6, "pos_enc_layer_type": "rel_pos", "selfattention_layer_type": "rel_selfattn"},
    "transformer": {"num_blocks": 6, "pos_enc_layer_type": "abs_pos", "selfattention_layer_type": "selfattn",
                    "activation_type": "relu", "macaron_style": False, "use_cnn_module": False},
}
POSITION_ATTENTION = {"rel_pos": "rel_selfattn", "abs_pos": "selfattn"}


@dataclass(frozen=True)
class EncoderConfig:
    """WeNet ``encoder_conf`` keys (conformer); unknown keys are rejected by ``from_dict``."""

    output_size: int = 256                # d_model
    attention_heads: int = 4
    linear_units: int = 2048              # FFN hidden size
    num_blocks: int = 12
    dropout_rate: float = 0.1
    positional_dropout_rate: float = 0.1
    attention_dropout_rate: float = 0.0
    input_layer: str = "conv2d"           # conv2d (x4), conv2d6 or conv2d8 subsampling
    pos_enc_layer_type: str = "rel_pos"   # rel_pos (with rel_selfattn) or abs_pos (with selfattn)
    normalize_before: bool = True         # pre-norm (post-norm conformers are not implemented)
    static_chunk_size: int = 0
    use_dynamic_chunk: bool = False       # dynamic chunk training (U2/U2++)
    use_dynamic_left_chunk: bool = False
    macaron_style: bool = True
    activation_type: str = "swish"
    use_cnn_module: bool = True
    cnn_module_kernel: int = 15
    causal: bool = False                  # causal depthwise conv: needed for exact streaming
    cnn_module_norm: str = "batch_norm"   # or layer_norm
    selfattention_layer_type: str = "rel_selfattn"

    # WeNet keys that do not change the network here (accepted so real train.yaml files load)
    IGNORED = frozenset({"global_cmvn", "gradient_checkpointing", "use_sdpa", "query_bias", "key_bias",
                         "value_bias", "conv_bias", "layer_norm_type", "norm_eps", "n_kv_head", "head_dim",
                         "mlp_type", "mlp_bias", "n_expert", "n_expert_activated", "final_norm"})

    @classmethod
    def from_dict(cls, d: dict) -> "EncoderConfig":
        known = set(cls.__dataclass_fields__)
        unknown = set(d) - known - cls.IGNORED
        if unknown:
            raise ValueError(f"unsupported encoder_conf keys: {sorted(unknown)}")
        cfg = cls(**{k: v for k, v in d.items() if k in known})
        validate_encoder_config(cfg)
        return cfg

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def validate_encoder_config(cfg: EncoderConfig) -> None:
    if cfg.input_layer not in SUBSAMPLING:
        raise ValueError(f"input_layer {cfg.input_layer!r} is not implemented (only {', '.join(SUBSAMPLING)})")
    if POSITION_ATTENTION.get(cfg.pos_enc_layer_type) != cfg.selfattention_layer_type:
        raise ValueError(f"pos_enc_layer_type {cfg.pos_enc_layer_type!r} with selfattention_layer_type "
                         f"{cfg.selfattention_layer_type!r} is not implemented (only rel_pos with rel_selfattn, "
                         "abs_pos with selfattn)")
    if not cfg.normalize_before:
        raise ValueError("only pre-norm (normalize_before: true) is implemented")
    if cfg.output_size % cfg.attention_heads:
        raise ValueError("output_size must be a multiple of attention_heads")


class ConformerEncoder(nn.Module):
    """WeNet's ``ConformerEncoder``, or with ``encoder_type="transformer"`` its ``TransformerEncoder`` (same
    front end, caches and streaming step; the layers have no conv module)."""

    def __init__(self, input_size: int, cfg: EncoderConfig, global_cmvn: GlobalCMVN | None = None,
                 encoder_type: str = "conformer"):
        super().__init__()
        validate_encoder_config(cfg)
        if encoder_type not in ENCODER_TYPES:
            raise ValueError(f"encoder {encoder_type!r} is not implemented (only {', '.join(ENCODER_TYPES)})")
        if encoder_type == "transformer" and (cfg.use_cnn_module or cfg.macaron_style):
            raise ValueError("a transformer encoder has no conv module or macaron FFN")
        self.cfg = cfg
        self.encoder_type = encoder_type
        d = cfg.output_size
        self.global_cmvn = global_cmvn
        absolute = cfg.pos_enc_layer_type == "abs_pos"
        self.embed = SUBSAMPLING[cfg.input_layer](
            input_size, d, PositionalEncoding(d, cfg.positional_dropout_rate, add_to_input=absolute))
        attention = CachedSelfAttention if absolute else RelPositionMultiHeadedAttention
        self.encoders = nn.ModuleList()
        for _ in range(cfg.num_blocks):
            ff = lambda: PositionwiseFeedForward(d, cfg.linear_units, cfg.dropout_rate,  # noqa: E731
                                                 activation(cfg.activation_type))
            attn = attention(cfg.attention_heads, d, cfg.attention_dropout_rate)
            if encoder_type == "transformer":
                self.encoders.append(TransformerEncoderLayer(d, attn, ff(), cfg.dropout_rate))
                continue
            self.encoders.append(ConformerEncoderLayer(
                d, attn, ff(), ff() if cfg.macaron_style else None,
                ConvolutionModule(d, cfg.cnn_module_kernel, activation(cfg.activation_type), cfg.cnn_module_norm,
                                  cfg.causal) if cfg.use_cnn_module else None,
                cfg.dropout_rate))
        self.after_norm = nn.LayerNorm(d, eps=LAYER_NORM_EPS)

    # --- sizes the streaming caller needs -------------------------------------------------------------
    @property
    def output_size(self) -> int:
        return self.cfg.output_size

    @property
    def subsampling_rate(self) -> int:
        return self.embed.subsampling_rate

    @property
    def right_context(self) -> int:
        return self.embed.right_context

    @property
    def cnn_cache_frames(self) -> int:
        """kernel-1 for a causal conv module, 0 otherwise."""
        return self.cfg.cnn_module_kernel - 1 if (self.cfg.use_cnn_module and self.cfg.causal) else 0

    def window_config(self, chunk_size: int) -> WindowConfig:
        """The decoding windows of chunks of ``chunk_size`` encoder frames under this subsampling front end."""
        return WindowConfig(chunk_size, self.subsampling_rate, self.right_context)

    def forward(self, xs: torch.Tensor, xs_lens: torch.Tensor, decoding_chunk_size: int = 0,
                num_decoding_left_chunks: int = -1) -> tuple[torch.Tensor, torch.Tensor]:
        """Full-utterance pass.

        xs: (B, T, input_size) fbank; xs_lens: (B,) int
        decoding_chunk_size: >0 chunk mask of that many encoder frames, <0 full context, 0 random chunk while
        training (dynamic chunk) and full context in eval mode.
        returns: encoder_out (B, T', d), masks (B, 1, T') bool valid frames
        """
        masks = ~make_pad_mask(xs_lens, xs.size(1)).unsqueeze(1)
        if self.global_cmvn is not None:
            xs = self.global_cmvn(xs)
        xs, pos_emb, masks = self.embed(xs, masks)
        chunk_masks = add_optional_chunk_mask(xs, masks, self.cfg.use_dynamic_chunk,
                                              self.cfg.use_dynamic_left_chunk, decoding_chunk_size,
                                              self.cfg.static_chunk_size, num_decoding_left_chunks, self.training)
        for layer in self.encoders:
            xs, _, _ = layer(xs, chunk_masks, pos_emb, masks)
        return self.after_norm(xs), masks

    def forward_chunk(self, xs: torch.Tensor, xs_lens: torch.Tensor, offset: torch.Tensor,
                      att_cache: torch.Tensor, cnn_cache: torch.Tensor, cache_mask: torch.Tensor
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """One decoding window for a batch of streams, each at its own position.

        B = streams, W = decoding window (input frames), L = num_blocks, h = heads, d_k = d / h,
        C = cache frames (chunk_size * num_left_chunks, fixed), T' = (W-1)//2-1)//2 = chunk_size.

        xs:         (B, W, input_size) fbank of the window (zero-padded after xs_lens)
        xs_lens:    (B,) int, valid input frames (W except on a stream's last window)
        offset:     (B,) or (B, 1) int64, encoder frames this stream has produced so far
        att_cache:  (B, L, h, C, 2*d_k) keys|values of the last C encoder frames (zeros at start)
        cnn_cache:  (B, L, d, kernel-1) last conv-module inputs (zeros at start; size 0 if not causal)
        cache_mask: (B, 1, C) 1/True where the cache frame is real (zeros at start), any dtype

        returns:
          chunk_out:    (B, T', d) encoder output
          chunk_mask:   (B, 1, T') bool, valid output frames
          r_offset:     same shape as offset, offset + T'
          r_att_cache:  (B, L, h, C, 2*d_k)
          r_cnn_cache:  (B, L, d, kernel-1)
          r_cache_mask: (B, 1, C), dtype of cache_mask: last C columns of [cache_mask, chunk_mask]
        """
        in_mask = ~make_pad_mask(xs_lens.to(torch.int64), xs.size(1)).unsqueeze(1)   # (B, 1, W)
        if self.global_cmvn is not None:
            xs = self.global_cmvn(xs)
        # the offset only matters to an absolute positional encoding, which adds it to the chunk's frames
        xs, _, chunk_mask = self.embed(xs, in_mask, offset.reshape(-1).to(torch.int64))  # (B, T', d), (B, 1, T')
        cache_t = att_cache.size(3)
        t_out = xs.size(1)
        # Key positions of [cache; chunk] are offset-C .. offset+T'-1, per stream.
        pos_emb = self.embed.pos_enc.position_encoding(offset.reshape(-1).to(torch.int64) - cache_t,
                                                       cache_t + t_out).to(xs.dtype)
        att_mask = torch.cat([cache_mask.to(torch.bool), chunk_mask], dim=2)       # (B, 1, C+T')
        new_att, new_cnn = [], []
        for i, layer in enumerate(self.encoders):
            xs, a, c = layer(xs, att_mask, pos_emb, chunk_mask, att_cache[:, i],
                             cnn_cache[:, i] if cnn_cache.size(-1) > 0 else None)
            new_att.append(a[:, :, -cache_t:] if cache_t > 0 else a[:, :, :0])
            new_cnn.append(c)
        xs = self.after_norm(xs)
        r_cache_mask = att_mask[:, :, att_mask.size(2) - cache_t:].to(cache_mask.dtype)
        return (xs, chunk_mask, offset + t_out, torch.stack(new_att, dim=1), torch.stack(new_cnn, dim=1),
                r_cache_mask)
