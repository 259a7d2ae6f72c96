"""Load and save WeNet-style model directories.

A directory holds::

    train.yaml    encoder/encoder_conf, decoder/decoder_conf, model_conf, cmvn_file (WeNet 2.x keys) and the
                  WeNet 3.x equivalents (cmvn_conf, tokenizer_conf, vocab_size) so either WeNet reads it
    final.pt      the model's state_dict (WeNet parameter names)
    units.txt     symbol table (<blank> 0, <unk> 1, ..., <sos/eos> last)
    global_cmvn   JSON CMVN statistics
    bpe.model     sentencepiece model (optional; WeNet calls it train_*_unigram5000.model or similar)
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import torch

from ..features.cmvn import CmvnStats, load_cmvn, save_json_cmvn
from ..features.fbank import FbankConfig
from .model import ModelConfig, U2Model
from .decoder import DecoderConfig
from .embedding import PositionalEncoding
from .encoder import ENCODER_TYPES, WENET_ENCODER_DEFAULTS, EncoderConfig, GlobalCMVN
from ..units import SymbolTable, Tokenizer


@dataclass
class LoadedModel:
    model: U2Model                 # in eval mode
    symbols: SymbolTable
    tokenizer: Tokenizer
    fbank: FbankConfig             # the features the model was trained on
    config: dict                   # the parsed train.yaml
    directory: Path


def _yaml():
    try:
        import yaml
    except ImportError as e:  # PyYAML is needed to read WeNet's train.yaml
        raise ImportError("reading train.yaml needs PyYAML (pip install pyyaml)") from e
    return yaml


def _resolve(directory: Path, value: str | None, default: str) -> Path | None:
    """WeNet stores paths relative to the recipe dir; fall back to the file's name inside the model dir."""
    for cand in ([Path(value), directory / value, directory / Path(value).name] if value else []) + [directory / default]:
        if cand.is_file():
            return cand
    return None


def build_model(config: dict, cmvn: CmvnStats | None = None) -> U2Model:
    """A randomly initialised U2Model from a parsed train.yaml dict (WeNet 2.x or 3.x keys).

    Keys a train.yaml leaves out take WeNet's constructor defaults (they differ between its conformer and
    transformer encoders), so a model builds here as WeNet builds it."""
    encoder_type = config.get("encoder", "conformer")
    if encoder_type not in ENCODER_TYPES:
        raise ValueError(f"encoder {encoder_type!r} is not implemented (only {', '.join(ENCODER_TYPES)})")
    decoder_type = config.get("decoder", "bitransformer")
    if decoder_type not in ("bitransformer", "transformer"):
        raise ValueError(f"decoder {decoder_type!r} is not implemented (only bitransformer, transformer; a "
                         "CTC-only WeNet model keeps its decoder with ctc_weight 1.0)")
    vocab = int(config.get("output_dim") or config.get("vocab_size") or 0)
    mc = dict(config.get("model_conf") or {})
    if mc.get("apply_non_blank_embedding"):
        raise ValueError("model_conf apply_non_blank_embedding: true is not implemented (rescoring would see "
                         "the blank frames WeNet drops)")
    model_cfg = ModelConfig(input_dim=int(config.get("input_dim", 80)), vocab_size=vocab,
                            decoder_type=decoder_type, encoder_type=encoder_type,
                            **{k: v for k, v in mc.items() if k in ModelConfig.__dataclass_fields__
                               and k not in ("input_dim", "vocab_size", "decoder_type", "encoder_type")})
    unknown = set(mc) - set(ModelConfig.__dataclass_fields__) - ModelConfig.IGNORED
    if unknown:
        raise ValueError(f"unsupported model_conf keys: {sorted(unknown)}")
    gcmvn = None
    if cmvn is not None:
        mean, istd = cmvn.mean_istd()
        gcmvn = GlobalCMVN(torch.from_numpy(mean), torch.from_numpy(istd))
    encoder_conf = {**WENET_ENCODER_DEFAULTS[encoder_type], **(config.get("encoder_conf") or {})}
    return U2Model(model_cfg, EncoderConfig.from_dict(encoder_conf),
                   DecoderConfig.from_dict(config.get("decoder_conf") or {}), gcmvn)


def drop_position_tables(model: U2Model, state: dict, source: Path) -> dict:
    """WeNet keeps each PositionalEncoding's sin/cos table in its state_dict (``encoder.embed.pos_enc.pe``,
    ``decoder.*.embed.1.pe``, (1, max_len, d)); here it is a non-persistent buffer. Drop those entries after
    checking that the rows they hold are the table this model computes (another encoding must not load)."""
    tables = {name + ".pe": m.pe for name, m in model.named_modules() if isinstance(m, PositionalEncoding)}
    out = {}
    for key, value in state.items():
        if key not in tables:
            out[key] = value
            continue
        ours = tables[key]
        theirs = value.reshape(-1, value.shape[-1]).float()
        rows = min(theirs.size(0), ours.size(0))
        if theirs.size(1) != ours.size(1) or not torch.allclose(theirs[:rows], ours[:rows], atol=1e-3, rtol=0):
            raise ValueError(f"{source}: {key} is not the sinusoidal position table of WeNet's "
                             "PositionalEncoding (a different positional encoding is not supported)")
    return out


def load_model_dir(directory: str | Path, checkpoint: str = "final.pt", device: str = "cpu") -> LoadedModel:
    """Load a WeNet (or our) model dir; raises if the state_dict does not match the config exactly."""
    directory = Path(directory)
    config = _yaml().safe_load((directory / "train.yaml").read_text()) or {}
    cmvn_conf = config.get("cmvn_conf") or {}
    cmvn_path = _resolve(directory, config.get("cmvn_file") or cmvn_conf.get("cmvn_file"), "global_cmvn")
    if "cmvn" in config and config["cmvn"] is None:  # WeNet 3.x: `cmvn: null` builds no GlobalCMVN
        cmvn_path = None
    state = torch.load(directory / checkpoint, map_location=device, weights_only=True)
    if isinstance(state, dict) and "model" in state and isinstance(state["model"], dict):
        state = state["model"]  # some trainers wrap the state_dict
    state = {k[len("module."):] if k.startswith("module.") else k: v for k, v in state.items()}
    has_cmvn = "encoder.global_cmvn.mean" in state
    if cmvn_path is not None:
        cmvn = load_cmvn(cmvn_path, config.get("is_json_cmvn", cmvn_conf.get("is_json_cmvn")))
    elif has_cmvn:  # the statistics live in the state_dict anyway; the file only sizes the module
        dim = state["encoder.global_cmvn.mean"].numel()
        cmvn = CmvnStats(torch.zeros(dim).double().numpy(), torch.ones(dim).double().numpy(), 1)
    else:
        cmvn = None
    model = build_model(config, cmvn if has_cmvn or cmvn_path is not None else None)
    state = drop_position_tables(model, state, directory / checkpoint)
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise ValueError(f"{directory / checkpoint}: state_dict mismatch: missing {missing[:8]}, "
                         f"unexpected {unexpected[:8]}")
    model.eval()
    tok_conf = config.get("tokenizer_conf") or {}
    units_path = _resolve(directory, tok_conf.get("symbol_table_path"), "units.txt")
    if units_path is None:
        raise FileNotFoundError(f"{directory}: no units.txt")
    symbols = SymbolTable.load(units_path)
    if len(symbols) != model.vocab_size:
        raise ValueError(f"units.txt has {len(symbols)} symbols, the model {model.vocab_size}")
    bpe = _resolve(directory, tok_conf.get("bpe_path") or config.get("bpe_model"), "bpe.model")
    fb = ((config.get("dataset_conf") or {}).get("fbank_conf") or {})
    fbank = FbankConfig(num_mel_bins=int(fb.get("num_mel_bins", model.model_cfg.input_dim)),
                        frame_length_ms=float(fb.get("frame_length", 25)),
                        frame_shift_ms=float(fb.get("frame_shift", 10)))
    return LoadedModel(model, symbols, Tokenizer(symbols, bpe), fbank, config, directory)


def model_config_dict(model: U2Model, fbank: FbankConfig = FbankConfig(), bpe: bool = False) -> dict:
    """The train.yaml content describing ``model`` (WeNet 2.x and 3.x keys)."""
    mc = model.model_cfg
    encoder_conf = model.encoder_cfg.to_dict()
    if mc.encoder_type == "transformer":  # WeNet's TransformerEncoder takes none of the conformer's own keys
        for key in ("macaron_style", "use_cnn_module", "cnn_module_kernel", "causal", "cnn_module_norm"):
            encoder_conf.pop(key)
    return {
        "encoder": mc.encoder_type,
        "encoder_conf": encoder_conf,
        "decoder": mc.decoder_type,
        "decoder_conf": model.decoder_cfg.to_dict(),
        "model_conf": {"ctc_weight": mc.ctc_weight, "lsm_weight": mc.lsm_weight,
                       "length_normalized_loss": mc.length_normalized_loss, "reverse_weight": mc.reverse_weight},
        "input_dim": mc.input_dim,
        "output_dim": mc.vocab_size,
        "vocab_size": mc.vocab_size,
        "cmvn_file": "global_cmvn",
        "is_json_cmvn": True,
        "model": "asr_model",
        "cmvn": "global_cmvn",
        "cmvn_conf": {"cmvn_file": "global_cmvn", "is_json_cmvn": True},
        "ctc": "ctc",
        "ctc_conf": {"ctc_blank_id": 0},
        "tokenizer": "bpe" if bpe else "char",
        "tokenizer_conf": {"symbol_table_path": "units.txt", "split_with_space": False,
                           "bpe_path": "bpe.model" if bpe else None, "non_lang_syms_path": None,
                           "is_multilingual": False, "num_languages": 1,
                           "special_tokens": {"<blank>": 0, "<unk>": 1, "<sos>": mc.vocab_size - 1,
                                              "<eos>": mc.vocab_size - 1}},
        "dataset_conf": {"fbank_conf": {"num_mel_bins": fbank.num_mel_bins, "frame_shift": fbank.frame_shift_ms,
                                        "frame_length": fbank.frame_length_ms, "dither": 0.0}},
    }


def save_model_dir(directory: str | Path, model: U2Model, symbols: SymbolTable, cmvn: CmvnStats | None,
                   bpe_model: str | Path | None = None, fbank: FbankConfig = FbankConfig(),
                   extra: dict | None = None, checkpoint: str = "final.pt", half_precision: bool = False) -> Path:
    """Write train.yaml, final.pt, units.txt, global_cmvn (+ bpe.model) the way WeNet lays them out.

    half_precision: store floating-point tensors as fp16 (half the file size); ``load_state_dict`` casts them
    back into the fp32 model, in WeNet as here.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    config = model_config_dict(model, fbank, bpe_model is not None)
    if extra:
        config.update(extra)
    if cmvn is not None:
        save_json_cmvn(cmvn, directory / "global_cmvn")
    else:
        config.pop("cmvn_file"), config.pop("cmvn_conf"), config.pop("cmvn")
    (directory / "train.yaml").write_text(_yaml().safe_dump(config, sort_keys=False))
    symbols.save(directory / "units.txt")
    if bpe_model is not None and Path(bpe_model).resolve() != (directory / "bpe.model").resolve():
        shutil.copyfile(bpe_model, directory / "bpe.model")
    tmp = directory / (checkpoint + ".tmp")
    state = model.state_dict()
    if half_precision:
        state = {k: v.half() if v.is_floating_point() else v for k, v in state.items()}
    torch.save(state, tmp)
    tmp.replace(directory / checkpoint)  # atomic: an interrupted save never leaves a torn final.pt
    return directory
