"""Generate tests/fixtures/wenet/ by running WeNet's own code on tiny random models.

    python scripts/make_wenet_fixtures.py --wenet /path/to/wenet-checkout [--out tests/fixtures/wenet]

WeNet is imported from the checkout given on the command line (nothing of it is copied into this project). Only
its model code runs; the imports it makes for training/data (torchaudio, librosa, whisper, deepspeed, ...) are
replaced by empty stub modules, since they do not load beside this project's torch.

For each configuration below (WeNet recipe shapes, scaled down) the script writes a model folder
    train.yaml  final.pt (torch.save(model.state_dict()))  units.txt  global_cmvn  [bpe.model]
and ``expected.npz`` with WeNet's outputs on the shared seeded features of ``inputs.npz``:
    ctc_log_probs       (B, T', V) fp32   offline (full context) CTC log-probs
    ctc_lens            (B,)
    stream_chunk_out    (T', d)    fp32   encoder.forward_chunk_by_chunk(utt 0, chunk 16, 4 left chunks)
    stream_ctc_log_probs (T', V)   fp32   CTC log-probs of those chunk outputs
    {offline,stream}_nbest        (B, beam, L) int32, -1 padded   CTC prefix beam search n-best
    {offline,stream}_nbest_scores (B, beam)    fp32
    {offline,stream}_rescore_scores (B, beam)  fp32  WeNet's attention_rescoring score of each n-best entry
    {offline,stream}_prefix_tokens / _rescoring_tokens (B, L) int32, -1 padded: WeNet's decode() results
("stream" is WeNet's simulate_streaming decode with decoding_chunk_size 16, num_decoding_left_chunks 4, which
runs one utterance at a time.) Weights are rounded to fp16 before WeNet runs, so fp16 state_dicts (half the
size) hold exactly the weights the outputs were computed with; the ``pe`` tables WeNet keeps in its
state_dicts are cut to their first rows for the same reason (they are sin/cos of the position).

``wenet_onnx/{offline,streaming}/`` hold WeNet's own wenet/bin/export_onnx_gpu.py export of the ``onnx_tiny``
model (gzipped; see ``wenet_onnx_export`` for how the script is run). Its --fp16 graphs are kept only if
ONNX Runtime loads them (FP16_FAILED.txt says why not). ``onnx_tiny/served.npz`` holds a seeded waveform and
WeNet's decode of its fbank, for the served-pipeline test.

The fp16 export needs onnxmltools and onnxconverter-common (``pip install --target DIR onnxmltools
onnxconverter-common``, then run this script with ``PYTHONPATH=DIR``). Output is deterministic: rerunning rewrites the same bytes.
"""

from __future__ import annotations

import argparse
import copy
import functools
import gzip
import importlib.abc
import importlib.machinery
import json
import runpy
import shutil
import subprocess
import sys
import types
import typing
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parent.parent
STUBBED = ("torchaudio", "librosa", "whisper", "deepspeed", "langid", "tiktoken", "transformers", "peft",
           "torch_npu", "jieba")
CHUNK, LEFT_CHUNKS, BEAM = 16, 4, 10
INPUT_DIM = 40
LENGTHS = (420, 260)  # fbank frames of the two utterances of inputs.npz
PE_ROWS = 64          # rows of WeNet's positional-encoding buffers kept in the fixture state_dicts
ONNX_PE_ROWS = 256    # positional table of the committed WeNet ONNX export (see wenet_onnx_export)


# ------------------------------------------------------------------------------------------- importing WeNet
class _Placeholder:
    def __class_getitem__(cls, item):
        return cls

    def __init__(self, *args, **kwargs):
        raise RuntimeError("a stubbed dependency of WeNet was called")


class _StubModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        if hasattr(typing, name):          # e.g. torchaudio.compliance.kaldi.Tuple used as an annotation
            return getattr(typing, name)
        if name == "LANGUAGES":            # whisper.tokenizer.LANGUAGES, iterated at import time
            return {}
        return _Placeholder


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path, target=None):
        if fullname.split(".")[0] in STUBBED:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _StubModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass


def import_wenet(checkout: Path):
    import torch
    import torch.nn.modules.conv as conv

    sys.meta_path.insert(0, _StubFinder())
    # wenet/__init__.py imports the CLI (and through it the data pipeline); register the package without it
    pkg = types.ModuleType("wenet")
    pkg.__path__ = [str(checkout / "wenet")]
    sys.modules["wenet"] = pkg
    # wenet/models/squeezeformer/conv2d.py imports names torch 2.13 no longer re-exports from this module
    for name in ("Union", "Optional"):
        setattr(conv, name, getattr(typing, name))
    conv.Tensor = torch.Tensor
    from wenet.utils.init_model import init_model  # noqa: F401  (fails here if WeNet does not import)


def wenet_commit(checkout: Path) -> str:
    try:
        return subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (subprocess.CalledProcessError, FileNotFoundError):
        return (checkout / "WENET_COMMIT").read_text().strip() if (checkout / "WENET_COMMIT").exists() else "?"


# -------------------------------------------------------------------------------------------- configurations
def conformer_conf(**kw) -> dict:
    conf = {"output_size": 16, "attention_heads": 2, "linear_units": 24, "num_blocks": 2, "dropout_rate": 0.1,
            "positional_dropout_rate": 0.1, "attention_dropout_rate": 0.0, "input_layer": "conv2d",
            "normalize_before": True, "cnn_module_kernel": 15, "use_cnn_module": True, "activation_type": "swish",
            "pos_enc_layer_type": "rel_pos", "selfattention_layer_type": "rel_selfattn", "causal": True,
            "use_dynamic_chunk": True, "cnn_module_norm": "layer_norm", "use_dynamic_left_chunk": False}
    conf.update(kw)
    return conf


def decoder_conf(**kw) -> dict:
    conf = {"attention_heads": 2, "linear_units": 24, "num_blocks": 1, "dropout_rate": 0.1,
            "positional_dropout_rate": 0.1, "self_attention_dropout_rate": 0.0, "src_attention_dropout_rate": 0.0}
    conf.update(kw)
    return conf


# name -> train.yaml generation (2 or 3), units (char/bpe), CMVN format (json/kaldi), encoder, decoder, seed,
# half (store the state_dict in fp16)
CONFIGS = {
    # librispeech/s0 train_u2++_conformer.yaml: bitransformer, causal conv, layer-norm conv module, BPE, 3.x keys
    "u2pp_conformer_bpe": dict(style=3, units="bpe", cmvn="json", encoder="conformer", encoder_conf=conformer_conf(),
                               decoder="bitransformer", decoder_conf=decoder_conf(r_num_blocks=1),
                               model_conf={"ctc_weight": 0.3, "lsm_weight": 0.1, "length_normalized_loss": False,
                                           "reverse_weight": 0.3}, seed=1, half=True),
    # aishell u2++ with conv2d6 subsampling, batch-norm conv module, Kaldi CMVN, characters, 2.x keys
    "u2pp_conformer_conv2d6_v2": dict(style=2, units="char", cmvn="kaldi", encoder="conformer",
                                      encoder_conf=conformer_conf(input_layer="conv2d6", cnn_module_kernel=7,
                                                                  cnn_module_norm="batch_norm"),
                                      decoder="bitransformer", decoder_conf=decoder_conf(r_num_blocks=1),
                                      model_conf={"ctc_weight": 0.3, "lsm_weight": 0.1,
                                                  "length_normalized_loss": False, "reverse_weight": 0.5},
                                      seed=2, half=True),
    # U2 conformer with conv2d8, absolute positions, non-causal conv, left-to-right decoder only
    "u2_conformer_conv2d8_abspos": dict(style=3, units="char", cmvn="json", encoder="conformer",
                                        encoder_conf=conformer_conf(input_layer="conv2d8", pos_enc_layer_type="abs_pos",
                                                                    selfattention_layer_type="selfattn",
                                                                    causal=False, cnn_module_kernel=7,
                                                                    cnn_module_norm="batch_norm"),
                                        decoder="transformer", decoder_conf=decoder_conf(num_blocks=2),
                                        model_conf={"ctc_weight": 0.5, "lsm_weight": 0.1,
                                                    "length_normalized_loss": False},
                                        seed=3, half=True),
    # aishell train_unified_transformer.yaml: transformer encoder (abs_pos), bitransformer decoder, 2.x keys
    "u2_transformer": dict(style=2, units="char", cmvn="json", encoder="transformer",
                           encoder_conf={"output_size": 16, "attention_heads": 2, "linear_units": 24, "num_blocks": 2,
                                         "dropout_rate": 0.1, "positional_dropout_rate": 0.1,
                                         "attention_dropout_rate": 0.0, "input_layer": "conv2d",
                                         "normalize_before": True, "use_dynamic_chunk": True,
                                         "use_dynamic_left_chunk": False},
                           decoder="bitransformer", decoder_conf=decoder_conf(r_num_blocks=1),
                           model_conf={"ctc_weight": 0.3, "lsm_weight": 0.1, "length_normalized_loss": False,
                                       "reverse_weight": 0.3}, seed=4, half=True),
    # CTC only: ctc_weight 1.0, decoded with CTC alone (WeNet main cannot build `decoder: null`: its
    # ASRModel.tie_or_clone_weights calls the missing decoder), so a 1-block decoder sits unused in the checkpoint
    "conformer_ctc_only": dict(style=3, units="char", cmvn="json", encoder="conformer",
                               encoder_conf=conformer_conf(cnn_module_kernel=5), decoder="transformer",
                               decoder_conf=decoder_conf(),
                               model_conf={"ctc_weight": 1.0, "lsm_weight": 0.1, "length_normalized_loss": False},
                               seed=5, half=True),
    # the smallest U2++ model: its WeNet ONNX export is committed (wenet_onnx/) and served in a test
    "onnx_tiny": dict(style=3, units="char", cmvn="json", encoder="conformer",
                      encoder_conf=conformer_conf(linear_units=16, num_blocks=1, cnn_module_kernel=3),
                      decoder="bitransformer", decoder_conf=decoder_conf(linear_units=16, r_num_blocks=1),
                      model_conf={"ctc_weight": 0.3, "lsm_weight": 0.1, "length_normalized_loss": False,
                                  "reverse_weight": 0.3}, seed=6, half=True),
}
CHARS = list("abcdefghijklmnopqrstuvwxyz'") + ["\u2581"]
BPE_TEXT = ["the cat sat on the mat", "a dog ran to the park", "she sells sea shells", "we went home at night",
            "it is what it is", "the rain in spain stays mainly"]


def write_units(cfg: dict, folder: Path) -> list[str]:
    if cfg["units"] == "char":
        body = CHARS
    else:
        import sentencepiece as spm

        spm.SentencePieceTrainer.train(sentence_iterator=iter(BPE_TEXT), model_prefix=str(folder / "bpe"),
                                       vocab_size=40, model_type="bpe", character_coverage=1.0, bos_id=-1,
                                       eos_id=-1, unk_id=0, unk_piece="<unk>", normalization_rule_name="identity",
                                       minloglevel=2)
        (folder / "bpe.vocab").unlink()
        sp = spm.SentencePieceProcessor(model_file=str(folder / "bpe.model"))
        body = [sp.id_to_piece(i) for i in range(sp.get_piece_size()) if not sp.is_unknown(i)]
    units = ["<blank>", "<unk>", *body, "<sos/eos>"]
    (folder / "units.txt").write_text("".join(f"{u} {i}\n" for i, u in enumerate(units)), encoding="utf-8")
    return units


def write_cmvn(kind: str, folder: Path, rng: np.random.Generator) -> None:
    frames = 1000
    mean = rng.normal(0.0, 1.0, INPUT_DIM)
    std = rng.uniform(0.5, 2.0, INPUT_DIM)
    mean_stat = mean * frames
    var_stat = (std ** 2 + mean ** 2) * frames
    if kind == "json":
        (folder / "global_cmvn").write_text(json.dumps({"mean_stat": mean_stat.tolist(), "var_stat": var_stat.tolist(),
                                                        "frame_num": frames}))
    else:  # Kaldi text matrix, as `compute-cmvn-stats --binary=false` writes it
        first = " ".join(f"{v:.6f}" for v in mean_stat) + f" {frames}"
        second = " ".join(f"{v:.6f}" for v in var_stat) + " 0"
        (folder / "global_cmvn").write_text(f" [\n  {first} \n  {second} ]\n")


def train_yaml(cfg: dict, vocab: int) -> dict:
    """The train.yaml a WeNet recipe of that generation would write (2.x or 3.x keys)."""
    conf = {"encoder": cfg["encoder"], "encoder_conf": copy.deepcopy(cfg["encoder_conf"]),
            "decoder": cfg["decoder"], "decoder_conf": copy.deepcopy(cfg["decoder_conf"]),
            "model_conf": copy.deepcopy(cfg["model_conf"]), "input_dim": INPUT_DIM, "output_dim": vocab,
            "dataset_conf": {"fbank_conf": {"num_mel_bins": INPUT_DIM, "frame_shift": 10, "frame_length": 25,
                                            "dither": 1.0}}}
    if cfg["style"] == 2:
        conf.update({"cmvn_file": "global_cmvn", "is_json_cmvn": cfg["cmvn"] == "json"})
    else:
        bpe = cfg["units"] == "bpe"
        conf.update({"model": "asr_model", "cmvn": "global_cmvn",
                     "cmvn_conf": {"cmvn_file": "global_cmvn", "is_json_cmvn": cfg["cmvn"] == "json"},
                     "ctc": "ctc", "ctc_conf": {"ctc_blank_id": 0}, "vocab_size": vocab,
                     "tokenizer": "bpe" if bpe else "char",
                     "tokenizer_conf": {"symbol_table_path": "units.txt", "split_with_space": False,
                                        "bpe_path": "bpe.model" if bpe else None, "non_lang_syms_path": None,
                                        "is_multilingual": False, "num_languages": 1,
                                        "special_tokens": {"<blank>": 0, "<unk>": 1, "<sos>": vocab - 1,
                                                           "<eos>": vocab - 1}}})
    return conf


def runtime_configs(conf: dict, folder: Path) -> dict:
    """What WeNet's current init_model reads (a 2.x file is migrated the way WeNet 3.x expects it)."""
    conf = copy.deepcopy(conf)
    if "cmvn_file" in conf:
        conf["cmvn"] = "global_cmvn"
        conf["cmvn_conf"] = {"cmvn_file": conf.pop("cmvn_file"), "is_json_cmvn": conf.pop("is_json_cmvn")}
    conf["cmvn_conf"]["cmvn_file"] = str(folder / conf["cmvn_conf"]["cmvn_file"])
    return conf


def build_wenet_model(conf: dict, folder: Path, seed: int, half: bool):
    import torch
    from wenet.utils.init_model import init_model

    torch.manual_seed(seed)
    model, _ = init_model(argparse.Namespace(checkpoint=None), runtime_configs(conf, folder))
    with torch.no_grad():
        for name, p in model.named_parameters():
            # norms start at 1/0 and pos biases at 0: randomise so a wrong wiring cannot hide behind them
            if "norm" in name or "pos_bias" in name:
                p.add_(0.2 * torch.randn_like(p))
            if name.startswith("ctc.ctc_lo"):
                p.mul_(6.0)  # peaky CTC posteriors: decoded tokens are not decided by float noise
        for name, b in model.named_buffers():
            if name.endswith("running_var"):
                b.copy_(0.5 + torch.rand_like(b))
            elif name.endswith("running_mean"):
                b.copy_(0.1 * torch.randn_like(b))
        if half:  # the fixture stores fp16; WeNet then runs with exactly those values
            for p in model.parameters():
                p.copy_(p.half().float())
            for name, b in model.named_buffers():
                if "running_" in name:
                    b.copy_(b.half().float())
    return model.eval()


def save_state_dict(model, path: Path, half: bool) -> None:
    import torch

    state = model.state_dict()
    small = {}
    for k, v in state.items():
        if k.endswith(".pe"):
            v = v[:, :PE_ROWS].clone()
        elif half and v.is_floating_point() and "global_cmvn" not in k:
            v = v.half()
        small[k] = v
    torch.save(small, path)


def pad(rows, width: int | None = None, fill: int = -1) -> np.ndarray:
    width = max([len(r) for r in rows] + [0]) if width is None else width
    out = np.full((len(rows), width), fill, np.int16)
    for i, r in enumerate(rows):
        out[i, :len(r)] = list(r)
    return out


def decode_outputs(model, feats, lens, conf: dict, prefix: str, **decode_kw) -> dict:
    """WeNet's decode() for ctc_prefix_beam_search (+ attention_rescoring), and the rescoring score of every
    n-best entry (WeNet's attention_rescoring run on that entry alone)."""
    import torch
    from wenet.models.transformer.search import DecodeResult, attention_rescoring

    mc = conf["model_conf"]
    cw, rw = mc.get("ctc_weight", 0.5), mc.get("reverse_weight", 0.0)
    has_decoder = conf["model_conf"].get("ctc_weight", 0.5) < 1.0
    methods = ["ctc_prefix_beam_search"] + (["attention_rescoring"] if has_decoder else [])
    res = model.decode(methods, feats, lens, beam_size=BEAM, ctc_weight=cw, reverse_weight=rw, **decode_kw)
    prefix_res = res["ctc_prefix_beam_search"]
    out = {f"{prefix}_prefix_tokens": pad([r.tokens for r in prefix_res])}
    nbest = np.full((len(prefix_res), BEAM, max(len(h) for r in prefix_res for h in r.nbest) or 1), -1, np.int16)
    scores = np.full((len(prefix_res), BEAM), -np.inf, np.float32)
    for b, r in enumerate(prefix_res):
        for j, (h, s) in enumerate(zip(r.nbest, r.nbest_scores)):
            nbest[b, j, :len(h)] = h
            scores[b, j] = s
    out[f"{prefix}_nbest"], out[f"{prefix}_nbest_scores"] = nbest, scores
    if has_decoder:
        out[f"{prefix}_rescoring_tokens"] = pad([r.tokens for r in res["attention_rescoring"]])
        out[f"{prefix}_rescoring_best_score"] = np.array([r.score for r in res["attention_rescoring"]], np.float32)
        enc, mask = model._forward_encoder(feats, lens, decode_kw.get("decoding_chunk_size", -1),
                                           decode_kw.get("num_decoding_left_chunks", -1),
                                           decode_kw.get("simulate_streaming", False))
        enc_lens = mask.squeeze(1).sum(1)
        per_hyp = np.full((len(prefix_res), BEAM), -np.inf, np.float32)
        for b, r in enumerate(prefix_res):
            for j, (h, s) in enumerate(zip(r.nbest, r.nbest_scores)):
                one = DecodeResult(tokens=h, nbest=[h], nbest_scores=[s], nbest_times=[[]])
                with torch.no_grad():
                    (best,) = attention_rescoring(model, [one], enc[b:b + 1], enc_lens[b:b + 1], cw, rw)
                per_hyp[b, j] = best.score
        out[f"{prefix}_rescore_scores"] = per_hyp
    return out


def make_config(name: str, cfg: dict, out: Path, feats_np: np.ndarray, lens_np: np.ndarray) -> None:
    import torch

    folder = out / name
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    rng = np.random.default_rng(cfg["seed"])
    units = write_units(cfg, folder)
    write_cmvn(cfg["cmvn"], folder, rng)
    conf = train_yaml(cfg, len(units))
    (folder / "train.yaml").write_text(yaml.safe_dump(conf, sort_keys=False))
    model = build_wenet_model(conf, folder, cfg["seed"], cfg["half"])
    save_state_dict(model, folder / "final.pt", cfg["half"])

    feats, lens = torch.from_numpy(feats_np.astype(np.float32)), torch.from_numpy(lens_np.astype(np.int64))
    exp = {}
    with torch.no_grad():
        enc, mask = model._forward_encoder(feats, lens, -1, -1)
        exp["ctc_log_probs"] = model.ctc_logprobs(enc).numpy().astype(np.float32)
        exp["ctc_lens"] = mask.squeeze(1).sum(1).numpy().astype(np.int32)
        chunk_out, _ = model.encoder.forward_chunk_by_chunk(feats[:1, :lens_np[0]], CHUNK, LEFT_CHUNKS)
        exp["stream_chunk_out"] = chunk_out[0].numpy().astype(np.float32)
        exp["stream_ctc_log_probs"] = model.ctc_logprobs(chunk_out)[0].numpy().astype(np.float32)
        exp.update(decode_outputs(model, feats, lens, conf, "offline"))
        streams = [decode_outputs(model, feats[i:i + 1, :lens_np[i]], lens[i:i + 1], conf, "stream",
                                  decoding_chunk_size=CHUNK, num_decoding_left_chunks=LEFT_CHUNKS,
                                  simulate_streaming=True) for i in range(len(lens_np))]
    for key in streams[0]:
        parts = [s[key] for s in streams]
        if parts[0].ndim == 1:
            exp[key] = np.concatenate(parts)
        else:  # pad the last axis to the longest
            width = max(p.shape[-1] for p in parts)
            fill = -1 if parts[0].dtype.kind == "i" else -np.inf
            exp[key] = np.concatenate([np.pad(p, [(0, 0)] * (p.ndim - 1) + [(0, width - p.shape[-1])],
                                              constant_values=fill) for p in parts])
    np.savez_compressed(folder / "expected.npz", **exp)
    return model, conf


def served_fixture(model, conf: dict, folder: Path) -> None:
    """A seeded waveform and WeNet's decode of its fbank (this project's kaldi-native-fbank features, the
    features the served pipelines compute), offline and simulate_streaming."""
    import torch

    from asr_server.asr.features.fbank import FbankConfig, fbank

    rng = np.random.default_rng(11)
    t = np.arange(int(1.2 * 16000)) / 16000
    wave = sum(0.2 * np.sin(2 * np.pi * f * t) for f in rng.uniform(150, 900, 3)) + 0.05 * rng.normal(size=t.size)
    wav = np.round(np.clip(wave, -1, 1) * 32767).astype(np.int16)
    feats = fbank(wav.astype(np.float32) / 32768.0, FbankConfig(num_mel_bins=INPUT_DIM))
    x = torch.from_numpy(np.asarray(feats, np.float32))[None]
    lens = torch.tensor([x.size(1)])
    with torch.no_grad():
        off = decode_outputs(model, x, lens, conf, "offline")
        st = decode_outputs(model, x, lens, conf, "stream", decoding_chunk_size=CHUNK,
                            num_decoding_left_chunks=LEFT_CHUNKS, simulate_streaming=True)
    np.savez_compressed(folder / "served.npz", wav=wav, **off, **st)


def _drop_broken_fp16(folder: Path) -> None:
    """Keep WeNet's fp16 graphs only if ONNX Runtime loads them; else say why in FP16_FAILED.txt."""
    import onnxruntime as ort

    problems = []
    for graph in sorted(folder.glob("*_fp16.onnx")):
        try:
            ort.InferenceSession(str(graph), providers=["CPUExecutionProvider"])
        except Exception as e:  # noqa: BLE001 - recorded, not hidden
            problems.append(f"{graph.name}: ONNX Runtime cannot load it: "
                            f"{str(e).splitlines()[0].replace(str(folder) + '/', '')}")
    if problems:
        for graph in folder.glob("*_fp16.onnx"):
            graph.unlink()
        with open(folder / "FP16_FAILED.txt", "a") as note:
            note.write("wenet/bin/export_onnx_gpu.py --fp16 (onnxconverter-common's convert_float_to_float16) "
                       "wrote invalid graphs, removed:\n" + "\n".join(problems) + "\n")


def wenet_onnx_export(checkout: Path, model, model_dir: Path, out: Path) -> None:
    """Run wenet/bin/export_onnx_gpu.py (offline, then --streaming; both with --fp16) on ``model``'s weights.

    Three things are adjusted around the unchanged script, none of which changes what a graph computes:
    - torch.onnx.export gets dynamo=False: the script relies on the TorchScript exporter, torch's default
      before 2.9;
    - its example token ids, torch.randint(3, 1000), are capped at the vocabulary (they index past 31 units);
    - WeNet's positional tables get max_len ONNX_PE_ROWS instead of 5000: the graphs embed them as constants
      (5000 x d floats, 320 KB per table here); the committed export then serves utterances of up to
      ONNX_PE_ROWS encoder frames (10 s).
    The script gets a temporary full state_dict of the same weights (WeNet's loader needs the whole table)."""
    import tempfile

    import torch
    from wenet.models.transformer import embedding

    script = checkout / "wenet" / "bin" / "export_onnx_gpu.py"
    vocab = len((model_dir / "units.txt").read_text().splitlines())
    original, original_randint = torch.onnx.export, torch.randint
    original_init = embedding.PositionalEncoding.__init__

    def randint(*args, **kwargs):
        if kwargs.get("high") == 1000:
            kwargs["high"] = vocab
        return original_randint(*args, **kwargs)

    def short_table(self, d_model, dropout_rate, max_len=5000, *rest, **kw):
        original_init(self, d_model, dropout_rate, min(max_len, ONNX_PE_ROWS), *rest, **kw)

    # onnxmltools >= 1.12 no longer has utils.float16_converter, which only re-exported onnxconverter_common's
    # float16 module (the older releases need onnx.mapping, gone from onnx 1.23)
    import onnxconverter_common.float16 as float16
    import onnxmltools.utils

    sys.modules["onnxmltools.utils.float16_converter"] = float16
    torch.onnx.export = functools.partial(original, dynamo=False)
    torch.randint = randint
    embedding.PositionalEncoding.__init__ = short_table
    try:
        with tempfile.TemporaryDirectory() as tmp:
            checkpoint = Path(tmp) / "final.pt"
            state = {k: v[:, :ONNX_PE_ROWS] if k.endswith(".pe") else v for k, v in model.state_dict().items()}
            torch.save(state, checkpoint)
            cfg_path = Path(tmp) / "train.yaml"
            cfg_path.write_text(yaml.safe_dump(runtime_configs(yaml.safe_load((model_dir / "train.yaml").read_text()),
                                                               model_dir)))
            for sub, extra in (("offline", []), ("streaming", ["--streaming", "--decoding_chunk_size", str(CHUNK),
                                                              "--num_decoding_left_chunks", str(LEFT_CHUNKS)])):
                target = out / sub
                if target.exists():
                    shutil.rmtree(target)
                target.parent.mkdir(parents=True, exist_ok=True)
                sys.argv = [str(script), "--config", str(cfg_path), "--checkpoint", str(checkpoint),
                            "--output_onnx_dir", str(target), "--beam_size", str(BEAM), "--fp16", *extra]
                try:
                    runpy.run_path(str(script), run_name="__main__")
                except ValueError as e:  # the fp16 conversion, after the fp32 graphs are written
                    if not (target / "encoder.onnx").exists() or not (target / "decoder.onnx").exists():
                        raise
                    (target / "FP16_FAILED.txt").write_text(
                        f"wenet/bin/export_onnx_gpu.py --fp16 failed after writing the fp32 graphs: {e!r}\n")
                _drop_broken_fp16(target)
                for graph in target.glob("*.onnx"):  # gzip: the graphs are mostly repetitive protobuf
                    with open(graph, "rb") as src, gzip.GzipFile(f"{graph}.gz", "wb", 9, mtime=0) as dst:
                        shutil.copyfileobj(src, dst)
                    graph.unlink()
    finally:
        torch.onnx.export, torch.randint = original, original_randint
        embedding.PositionalEncoding.__init__ = original_init


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--wenet", type=Path, required=True, help="a WeNet checkout (the folder holding wenet/)")
    p.add_argument("--out", type=Path, default=ROOT / "tests" / "fixtures" / "wenet")
    p.add_argument("--only", action="append", help="configurations to (re)generate (default: all)")
    args = p.parse_args()
    import torch

    torch.set_num_threads(1)
    import_wenet(args.wenet.resolve())
    args.out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    feats = rng.normal(0.0, 1.0, (len(LENGTHS), max(LENGTHS), INPUT_DIM)) * rng.uniform(0.5, 2.0, INPUT_DIM)
    feats += rng.normal(0.0, 1.0, INPUT_DIM)
    for i, n in enumerate(LENGTHS):
        feats[i, n:] = 0.0
    feats = feats.astype(np.float16)
    lens = np.array(LENGTHS, np.int32)
    np.savez_compressed(args.out / "inputs.npz", feats=feats, lens=lens)
    for name, cfg in CONFIGS.items():
        if args.only and name not in args.only:
            continue
        model, conf = make_config(name, cfg, args.out, feats, lens)
        print(f"{name}: done")
        if name == "onnx_tiny":
            served_fixture(model, conf, args.out / name)
            wenet_onnx_export(args.wenet.resolve(), model, args.out / name, args.out / "wenet_onnx")
    (args.out / "WENET_COMMIT").write_text(wenet_commit(args.wenet) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
