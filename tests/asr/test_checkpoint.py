import json

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs torch")
pytest.importorskip("yaml", reason="train.yaml needs PyYAML")

from asr_server.asr.nn.checkpoint import load_model_dir, save_model_dir  # noqa: E402
from asr_server.asr.features.cmvn import CmvnStats  # noqa: E402
from asr_server.asr.units import SymbolTable  # noqa: E402

from .conftest import VOCAB, tiny_model  # noqa: E402

# What a WeNet 2.x U2++ recipe writes (abridged to a tiny model; the extra training keys must be tolerated).
WENET_TRAIN_YAML = """\
accum_grad: 1
cmvn_file: exp/u2pp/global_cmvn
dataset_conf:
  batch_conf: {batch_size: 16, batch_type: static}
  fbank_conf: {dither: 0.1, frame_length: 25, frame_shift: 10, num_mel_bins: 80}
  spec_aug: true
decoder: bitransformer
decoder_conf:
  attention_heads: 4
  dropout_rate: 0.1
  linear_units: 48
  num_blocks: 1
  positional_dropout_rate: 0.1
  r_num_blocks: 1
  self_attention_dropout_rate: 0.0
  src_attention_dropout_rate: 0.0
encoder: conformer
encoder_conf:
  activation_type: swish
  attention_dropout_rate: 0.0
  attention_heads: 4
  causal: true
  cnn_module_kernel: 5
  cnn_module_norm: layer_norm
  dropout_rate: 0.1
  input_layer: conv2d
  linear_units: 48
  normalize_before: true
  num_blocks: 2
  output_size: 32
  pos_enc_layer_type: rel_pos
  positional_dropout_rate: 0.1
  selfattention_layer_type: rel_selfattn
  use_cnn_module: true
  use_dynamic_chunk: true
  use_dynamic_left_chunk: false
grad_clip: 5
input_dim: 80
is_json_cmvn: true
max_epoch: 360
model_conf:
  ctc_weight: 0.3
  length_normalized_loss: false
  lsm_weight: 0.1
  reverse_weight: 0.3
optim: adam
optim_conf: {lr: 0.001}
output_dim: 23
scheduler: warmuplr
scheduler_conf: {warmup_steps: 25000}
"""


def _cmvn() -> CmvnStats:
    st = CmvnStats.zeros(80)
    st.accumulate(np.random.default_rng(0).normal(5.0, 3.0, size=(300, 80)))
    return st


def _symbols() -> SymbolTable:
    return SymbolTable.from_units([f"\u2581w{i}" for i in range(VOCAB - 3)])


def test_round_trip(tmp_path):
    model = tiny_model(seed=11)
    cmvn = _cmvn()
    mean, istd = cmvn.mean_istd()
    model.encoder.global_cmvn.mean.copy_(torch.from_numpy(mean))
    model.encoder.global_cmvn.istd.copy_(torch.from_numpy(istd))
    save_model_dir(tmp_path, model, _symbols(), cmvn)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["final.pt", "global_cmvn", "train.yaml", "units.txt"]
    assert set(json.loads((tmp_path / "global_cmvn").read_text())) == {"mean_stat", "var_stat", "frame_num"}
    loaded = load_model_dir(tmp_path)
    assert loaded.model.encoder_cfg == model.encoder_cfg
    assert loaded.model.decoder_cfg == model.decoder_cfg
    assert loaded.symbols.id_to_symbol == _symbols().id_to_symbol
    x = torch.randn(2, 100, 80)
    lens = torch.tensor([100, 70])
    with torch.no_grad():
        a, al = model.encode(x, lens)
        b, bl = loaded.model.encode(x, lens)
    assert torch.equal(al, bl)
    assert torch.allclose(a, b, atol=1e-6)


def test_loads_a_wenet_recipe_dir(tmp_path):
    """WeNet's layout: recipe-relative cmvn path, DDP 'module.' prefix, extra training keys in train.yaml."""
    src = tiny_model(seed=12)
    (tmp_path / "train.yaml").write_text(WENET_TRAIN_YAML)
    cmvn = _cmvn()
    (tmp_path / "global_cmvn").write_text(json.dumps({"mean_stat": cmvn.mean_stat.tolist(),
                                                      "var_stat": cmvn.var_stat.tolist(),
                                                      "frame_num": cmvn.frame_num}))
    _symbols().save(tmp_path / "units.txt")
    torch.save({"module." + k: v for k, v in src.state_dict().items()}, tmp_path / "final.pt")
    loaded = load_model_dir(tmp_path)
    assert loaded.model.encoder_cfg.causal and loaded.model.has_right_decoder
    assert loaded.model.model_cfg.reverse_weight == 0.3
    # WeNet's key names: spot-check the layout the state_dict uses
    keys = set(src.state_dict())
    for k in ["encoder.global_cmvn.mean", "encoder.global_cmvn.istd", "encoder.embed.conv.0.weight",
              "encoder.embed.conv.2.weight", "encoder.embed.out.0.weight",
              "encoder.encoders.0.self_attn.pos_bias_u", "encoder.encoders.0.self_attn.linear_pos.weight",
              "encoder.encoders.0.feed_forward_macaron.w_1.weight", "encoder.encoders.1.conv_module.depthwise_conv.weight",
              "encoder.encoders.0.norm_final.weight", "encoder.after_norm.weight", "ctc.ctc_lo.weight",
              "decoder.left_decoder.embed.0.weight", "decoder.right_decoder.decoders.0.src_attn.linear_k.weight",
              "decoder.left_decoder.output_layer.weight"]:
        assert k in keys, k
    x = torch.randn(1, 80, 80)
    with torch.no_grad():
        a, _ = src.encode(x, torch.tensor([80]))
        b, _ = loaded.model.encode(x, torch.tensor([80]))
    assert torch.allclose(a, b, atol=1e-6)


def test_state_dict_mismatch_is_an_error(tmp_path):
    model = tiny_model()
    save_model_dir(tmp_path, model, _symbols(), _cmvn())
    sd = torch.load(tmp_path / "final.pt", weights_only=True)
    sd.pop("ctc.ctc_lo.weight")
    torch.save(sd, tmp_path / "final.pt")
    with pytest.raises(ValueError, match="ctc.ctc_lo.weight"):
        load_model_dir(tmp_path)


def test_unknown_encoder_key_is_an_error(tmp_path):
    (tmp_path / "train.yaml").write_text(WENET_TRAIN_YAML.replace("  use_cnn_module: true",
                                                                  "  use_cnn_module: true\n  warp_speed: 9"))
    torch.save(tiny_model().state_dict(), tmp_path / "final.pt")
    _symbols().save(tmp_path / "units.txt")
    with pytest.raises(ValueError, match="warp_speed"):
        load_model_dir(tmp_path)


def test_half_precision_weights_load_into_fp32_model(tmp_path):
    model = tiny_model(seed=13)
    save_model_dir(tmp_path, model, _symbols(), _cmvn(), half_precision=True)
    sd = torch.load(tmp_path / "final.pt", weights_only=True)
    assert sd["ctc.ctc_lo.weight"].dtype == torch.float16
    loaded = load_model_dir(tmp_path)
    assert loaded.model.ctc.ctc_lo.weight.dtype == torch.float32
    torch.testing.assert_close(loaded.model.ctc.ctc_lo.weight, model.ctc.ctc_lo.weight.half().float())
