"""Reading a Triton python model's `parameters` into the recogniser's settings.

The model folders' config.pbtxt carry everything the python models need as string parameters (written by
`scripts/build_model_repo.py`), so the models load without torch and without reading train.yaml.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Callable, Mapping

from ..decoding.endpoint import EndpointRules
from ..decoding import token_lm
from ..decoding.hotwords import Hotwords
from ..model_files import file_in_folder
from ..features.fbank import FbankConfig, batch_fbank_computer
from .pipeline import DecodingSettings
from ..windows import WindowConfig
from ..units import SymbolTable, Tokenizer
from asr_server.truthy import truthy


def parameters(args: Mapping[str, str]) -> dict[str, str]:
    """{key: string_value} of the config's parameters, from Triton's initialize() args."""
    config = json.loads(args["model_config"])
    return {key: value.get("string_value", "") for key, value in config.get("parameters", {}).items()}


def _path(model_repository: str, value: str) -> Path:
    """Paths in parameters are relative to the model's folder (so the repository can move as a whole)."""
    path = Path(value)
    return path if path.is_absolute() else (Path(model_repository) / path).resolve()


def tokenizer(args: Mapping[str, str], params: Mapping[str, str]) -> Tokenizer:
    symbols = SymbolTable.load(_path(args["model_repository"], params["units"]))
    bpe = params.get("bpe_model", "")
    return Tokenizer(symbols, _path(args["model_repository"], bpe) if bpe else None)


def hotwords(args: Mapping[str, str], params: Mapping[str, str], tokenizer: Tokenizer) -> Hotwords:
    """The model's hotwords (parameters ``hotwords_file``, inside the model's folder, and ``hotwords_score``)."""
    return Hotwords.from_parameters(params, Path(args["model_repository"]), tokenizer.encode)


def fusion_lm(args: Mapping[str, str], params: Mapping[str, str], symbols: SymbolTable) -> token_lm.TokenLm | None:
    """The token n-gram fused into the beam search: parameter ``lm_file`` (an ARPA over the model's units, .gz
    allowed, inside the model's folder), weighted by ``lm_weight`` with ``lm_bonus`` per token; None without.
    With it the n-best scores (DETAILS' ``nbest``, and the CTC score attention rescoring weighs) include the
    fusion term."""
    name = params.get("lm_file", "")
    if not name:
        return None
    path = file_in_folder(args["model_repository"], name, "lm_file")
    return token_lm.load_arpa(path, symbols.id_to_symbol, params.get("lm_weight", token_lm.DEFAULT_WEIGHT),
                              params.get("lm_bonus", token_lm.DEFAULT_BONUS))


def decoding_settings(params: Mapping[str, str], symbols: SymbolTable) -> DecodingSettings:
    return DecodingSettings(
        beam_size=int(params.get("beam_size", 10)),
        sos=symbols.sos_eos_id,
        eos=symbols.sos_eos_id,
        bidirectional=truthy(params.get("bidecoder", "1")),
        rescoring=truthy(params.get("rescoring", "1")),
        search_method=params.get("search", "prefix_beam"),
        cutoff_prob=float(params.get("cutoff_prob", 1.0)),
        idle_seconds=float(params.get("idle_seconds", 5.0)),
        # 40 ms encoder frames (10 ms fbank shift x4 subsampling)
        endpoint=EndpointRules().updated(params),
        timestamp_shift=tuple(float(v) / 1000 for v in params.get("timestamp_shift_ms", "0,0").split(",")),
        frame_seconds=float(params.get("frame_shift_ms", 10)) * int(params.get("subsampling_rate", 4)) / 1000,
        max_rescoring_frames=int(float(params.get("max_rescoring_seconds", 60)) * 1000
                                 / (float(params.get("frame_shift_ms", 10)) * int(params.get("subsampling_rate", 4)))),
    )


def fbank_config(params: Mapping[str, str]) -> FbankConfig:
    return FbankConfig(
        sample_rate=int(params.get("sample_rate", 16000)),
        num_mel_bins=int(params.get("num_mel_bins", 80)),
        frame_length_ms=float(params.get("frame_length_ms", 25)),
        frame_shift_ms=float(params.get("frame_shift_ms", 10)),
    )


DEFAULT_MAX_AUDIO_SECONDS = 60.0  # offline requests: encoder attention memory grows with the square of this


def max_audio_samples(params: Mapping[str, str], config: FbankConfig) -> int:
    """The longest offline utterance accepted, in samples (parameter ``max_audio_seconds``; 0: no limit).
    The offline encoder attends over the whole utterance, so its memory grows with the square of the length
    (190 s cost 2.8 GB for one request), and its positional table ends at 200 s."""
    seconds = float(params.get("max_audio_seconds", DEFAULT_MAX_AUDIO_SECONDS))
    if seconds < 0:
        raise ValueError(f"max_audio_seconds must be >= 0, got {seconds:g}")
    return int(seconds * config.sample_rate) if seconds else 0


def too_long(length: int, max_samples: int, config: FbankConfig) -> str:
    """Why an utterance of `length` samples is refused, or "" when it is accepted."""
    if not max_samples or length <= max_samples:
        return ""
    return (f"WAV_LENS is {length} samples ({length / config.sample_rate:.1f} s), longer than the "
            f"{max_samples / config.sample_rate:g} s this model accepts (parameter max_audio_seconds): "
            "split the audio or stream it")


def fbank_computer(args: Mapping[str, str], params: Mapping[str, str], config: FbankConfig):
    """The ``fbank_backend`` parameter's batch fbank function ("kaldi-native-fbank", the default, or
    "kaldifeat"), on the instance's GPU when the instance is KIND_GPU."""
    gpu = args.get("model_instance_kind") == "GPU"
    device = f"cuda:{args.get('model_instance_device_id', '0')}" if gpu else "cpu"
    return batch_fbank_computer(params.get("fbank_backend", "kaldi-native-fbank"), config, device)


def window_config(params: Mapping[str, str]) -> WindowConfig:
    return WindowConfig(
        chunk_size=int(params.get("chunk_size", 16)),
        subsampling=int(params.get("subsampling_rate", 4)),
        right_context=int(params.get("right_context", 6)),
    )


@dataclasses.dataclass(frozen=True)
class FeatureSetup:
    """What a feature extractor (feature_extractor, streaming_feature_extractor) reads from its config."""

    params: dict[str, str]  # the config's parameters
    config: FbankConfig
    compute_fbank: Callable  # list of waveforms -> list of (frames, num_mel_bins) arrays, on the instance's device


def feature_setup(args: Mapping[str, str]) -> FeatureSetup:
    """The feature extractors' initialize(): Triton's ``args`` -> fbank settings and the batch fbank function."""
    params = parameters(args)
    config = fbank_config(params)
    return FeatureSetup(params, config, fbank_computer(args, params, config))


@dataclasses.dataclass(frozen=True)
class DecoderSetup:
    """What a decoding model (scoring, wenet) reads from its config."""

    params: dict[str, str]  # the config's parameters
    tokenizer: Tokenizer
    settings: DecodingSettings
    hotwords: Hotwords  # the model's own list (a request's ``hotwords`` parameter replaces it)


def decoder_setup(args: Mapping[str, str]) -> DecoderSetup:
    """The decoding models' initialize(): Triton's ``args`` -> tokenizer, decoding settings and hotwords."""
    params = parameters(args)
    tok = tokenizer(args, params)
    settings = decoding_settings(params, tok.symbols)
    if settings.search_method != "greedy":  # greedy search has no beam for an LM to rerank
        settings = dataclasses.replace(settings, lm=fusion_lm(args, params, tok.symbols))
    return DecoderSetup(params, tok, settings, hotwords(args, params, tok))


def inline_graphs(args: Mapping[str, str], params: Mapping[str, str], settings: DecodingSettings, streams=None):
    """(encoder runner, decoder function) run in this process for the parameters ``encoder_onnx`` and
    ``decoder_onnx`` (graph paths, relative to the model's folder; ``inline_threads``: onnxruntime intra-op
    threads, 1 by default; with one, the instances of a process share each graph's session); None for each
    one that is not set, which then goes to its model through BLS.
    Without rescoring the decoder is never called, so its graph is not loaded. ``streams``: the model's
    stream_state.Streams, where the encoder keeps each sequence's caches."""
    from .inline_onnx import InlineDecoder, InlineStreamingEncoder, shared_onnx_session

    threads = int(params.get("inline_threads", 1))
    encoder = decoder = None
    if params.get("encoder_onnx"):
        encoder = InlineStreamingEncoder(shared_onnx_session(
            _path(args["model_repository"], params["encoder_onnx"]), threads), settings.idle_seconds,
            streams=streams)
    if params.get("decoder_onnx") and settings.rescoring:
        decoder = InlineDecoder(shared_onnx_session(_path(args["model_repository"], params["decoder_onnx"]),
                                                    threads))
    return encoder, decoder
