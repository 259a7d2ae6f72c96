"""The ASR pipelines as Triton model configs (WeNet's layout and tensor names), written into a repository.

Every dimension is read from the exported graphs (encoder.onnx, streaming_encoder.onnx, decoder.onnx), and
each config is a ``ModelConfig`` message written with protobuf's text format, the form Triton parses, the way
WeNet's runtime/gpu/scripts/convert.py fills its templates. The repository is self-contained: the graphs, the
python models' model.py (this project's model_repo/) and the tokenizer files are copied into the model
folders, and every path in a config is relative to its model's folder, so the folder loads wherever it is
written, moved or copied. The python models import `asr_server`, which must be installed where they run.

Models written:
  offline   attention_rescoring (ensemble) = feature_extractor -> encoder -> scoring (+ decoder through BLS)
  streaming streaming_wenet (python)       = fbank + the streaming scorer in one model
            streaming_wenet_ensemble       = streaming_feature_extractor -> wenet (WeNet's layout: one more
                                             model and request per chunk; the same transcripts)
            Both scorers run the streaming_encoder and decoder graphs themselves with onnxruntime (parameters
            encoder_onnx, decoder_onnx), the caches held per sequence; with inline_graphs=False they call
            those models through BLS instead (the streaming_encoder's caches then its implicit state).
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Mapping, Optional, Sequence

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from asr_server.asr.decoding import token_lm
from asr_server.asr.windows import WindowConfig
from asr_server.asr.graph_names import STREAMING_STATES

# The python models' sources: model_repo/<name>/1/model.py of this project, copied into every built repository.
PYTHON_MODEL_SOURCES = Path(__file__).resolve().parents[2] / "model_repo"

ONNX_TO_CONFIG = {1: mc.TYPE_FP32, 10: mc.TYPE_FP16, 6: mc.TYPE_INT32, 7: mc.TYPE_INT64, 9: mc.TYPE_BOOL}
SEQUENCE_IDLE_US = 5_000_000  # per-sequence state is freed after 5 s without a request (WeNet's value)
# Two instances of the streaming scorer and of the streaming encoder: each sequence stays on one instance
# (sequence batcher), so while one scorer instance waits for the encoder the other runs its search; more
# instances did not help on 2 cores (bench/stream_cpu.py).
STREAMING_INSTANCES = 2
# The scorers wait longer for a batch than the step models: they run the encoder graph on every window of a
# batch at once, and bigger batches cost less per window (bench/stream_cpu.py; figures in bench/RESULTS.md).
SCORER_QUEUE_DELAY_US = 20_000
STEP_QUEUE_DELAY_US = 2_000
MAX_AUDIO_SECONDS = 60  # longest offline utterance the feature extractor accepts (encoder memory ~ length^2)
# The offline graphs see inputs of every length: ORT's arena would keep the largest request's memory for
# good, so each run hands it back (Triton's onnxruntime parameter).
ARENA_SHRINKAGE = {"memory.enable_memory_arena_shrinkage": "cpu:0"}
# Every model bounds the -1 dimensions of its inputs by what MAX_AUDIO_SECONDS implies (config parameter
# max_input_dim, checked by the server before any work; Triton ignores it).
MAX_INPUT = "max_input_dim"
# No queue delay for the offline models (as WeNet's configs): an idle instance starts at once, and batches
# form from what queues while it is busy (a delay cost latency at concurrency 1 and gained nothing at 8).
OFFLINE_PREFERRED_BATCH = (8, 16)
CONTROLS = (("START", mc.ModelSequenceBatching.Control.CONTROL_SEQUENCE_START),
            ("READY", mc.ModelSequenceBatching.Control.CONTROL_SEQUENCE_READY),
            ("END", mc.ModelSequenceBatching.Control.CONTROL_SEQUENCE_END))
STATE_NAMES = tuple(STREAMING_STATES)


@dataclasses.dataclass(frozen=True)
class BuildOptions:
    beam: int = 10  # CTC prefix beam width and n-best for rescoring
    chunk_size: int = 16  # encoder frames per streaming chunk
    right_context: int = 6  # input frames the subsampling reads ahead
    subsampling: int = 4  # input frames per encoder frame
    max_batch: int = 64
    search: str = "prefix_beam"  # or "greedy"
    rescoring: bool = True
    hotwords: Optional[Path] = None  # the model's hotword list, copied next to the decoding models
    lm: Optional[Path] = None  # a token n-gram ARPA fused into the beam search, copied next to them too
    lm_weight: float = token_lm.DEFAULT_WEIGHT  # its weight in the beam's ranking, and the per-token bonus
    lm_bonus: float = token_lm.DEFAULT_BONUS
    endpoint: bool = False  # streaming endpointing on by default
    timestamp_shift_ms: str = ""  # "START,END[,ONSET]": how late the model emits words
    inline_graphs: bool = True  # the streaming scorers run the encoder and decoder graphs themselves
    instance_process: bool = False  # each streaming scorer instance in a process of its own

    def __post_init__(self) -> None:
        if self.instance_process and not self.inline_graphs:
            raise ValueError("instance_process needs the inline graphs: a model in its own process cannot call BLS")


Dims = Sequence[int]


def graph_io(path: Path) -> dict[str, tuple[int, list]]:
    """name -> (config data type, dims without the batch dim; -1 for dynamic)."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    out = {}
    for value in list(model.graph.input) + list(model.graph.output):
        tensor = value.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else -1 for d in tensor.shape.dim][1:]
        out[value.name] = (ONNX_TO_CONFIG[tensor.elem_type], dims)
    return out


def tensor(kind, name: str, data_type: int, dims: Dims, scalar: bool = False, optional: bool = False):
    """A ModelInput or ModelOutput; ``scalar``: [1] on the wire, reshaped to a scalar per request inside."""
    t = kind(name=name, data_type=data_type, dims=list(dims))
    if scalar:
        t.reshape.SetInParent()
    if optional:
        t.optional = True
    return t


def graph_tensor(kind, io: dict, name: str, rename: Optional[str] = None, optional: bool = False):
    data_type, dims = io[name]
    if dims == []:  # a (B,) tensor
        return tensor(kind, rename or name, data_type, [1], scalar=True, optional=optional)
    return tensor(kind, rename or name, data_type, dims, optional=optional)


def new_config(name: str, max_batch: int, backend: str = "", platform: str = "",
               parameters: Mapping[str, object] = {}, instances: int = 1) -> mc.ModelConfig:
    config = mc.ModelConfig(name=name, backend=backend, platform=platform, max_batch_size=max_batch)
    for key, value in parameters.items():
        config.parameters[key].string_value = str(value)
    if platform != "ensemble":
        config.instance_group.add(count=instances, kind=mc.ModelInstanceGroup.KIND_CPU)
    return config


def offline_batching(config: mc.ModelConfig) -> mc.ModelConfig:
    config.dynamic_batching.preferred_batch_size.extend(OFFLINE_PREFERRED_BATCH)
    return config


def sequence_batching(config: mc.ModelConfig, queue_delay_us: int, controls: bool = True) -> mc.ModelSequenceBatching:
    batching = config.sequence_batching
    batching.max_sequence_idle_microseconds = SEQUENCE_IDLE_US
    batching.oldest.max_candidate_sequences = 1024
    batching.oldest.preferred_batch_size.extend([8, 16, 32])
    batching.oldest.max_queue_delay_microseconds = queue_delay_us
    if controls:
        for name, kind in CONTROLS:
            batching.control_input.add(name=name).control.add(kind=kind, int32_false_true=[0, 1])
        batching.control_input.add(name="CORRID").control.add(
            kind=mc.ModelSequenceBatching.Control.CONTROL_SEQUENCE_CORRID, data_type=mc.TYPE_UINT64)
    return batching


def ensemble_step(config: mc.ModelConfig, model: str, inputs: Mapping[str, str], outputs: Mapping[str, str]) -> None:
    step = config.ensemble_scheduling.step.add(model_name=model, model_version=-1)
    step.input_map.update(inputs)
    step.output_map.update(outputs)


def write(repo: Path, config: mc.ModelConfig, files: Mapping[str, Path] = {}, assets: Mapping[str, Path] = {}) -> None:
    """<repo>/<name>/config.pbtxt; `files` go into the version folder 1/ (a python model's model.py comes from
    PYTHON_MODEL_SOURCES), `assets` next to config.pbtxt (the paths in parameters are relative to it)."""
    folder = repo / config.name
    (folder / "1").mkdir(parents=True, exist_ok=True)
    (folder / "config.pbtxt").write_text(text_format.MessageToString(config))
    if config.backend == "python":
        files = {"model.py": PYTHON_MODEL_SOURCES / config.name / "1" / "model.py", **files}
    for target, source in [*((folder / "1" / t, s) for t, s in files.items()),
                           *((folder / t, s) for t, s in assets.items())]:
        if not (target.exists() and target.samefile(source)):  # building into model_repo/ itself
            shutil.copyfile(source, target)


def build(model_dir: Path, onnx_dir: Path, repo: Path, options: BuildOptions = BuildOptions()) -> None:
    """Write both pipelines into ``repo`` from ``model_dir`` (units.txt, bpe.model) and the three graphs in
    ``onnx_dir``."""
    o = options
    enc = graph_io(onnx_dir / "encoder.onnx")
    senc = graph_io(onnx_dir / "streaming_encoder.onnx")
    dec = graph_io(onnx_dir / "decoder.onnx")
    window = senc["chunk_xs"][1][0]
    if WindowConfig(o.chunk_size, o.subsampling, o.right_context).window != window:
        raise ValueError(f"streaming encoder window {window} does not match chunk_size {o.chunk_size}, "
                         f"subsampling {o.subsampling}, right_context {o.right_context}")
    mel = enc["speech"][1][-1]
    # The tokenizer files are copied next to the config of each model that decodes; paths in parameters are
    # relative to the model's folder, so the repository does not refer to model_dir once built.
    tokenizer_files = {"units.txt": model_dir / "units.txt"}
    shared = {"units": "units.txt", "beam_size": o.beam, "bidecoder": int("r_hyps_pad_sos_eos" in dec),
              "rescoring": int(o.rescoring), "search": o.search, "frame_shift_ms": 10, "subsampling_rate": o.subsampling}
    if (model_dir / "bpe.model").exists():
        shared["bpe_model"] = "bpe.model"
        tokenizer_files["bpe.model"] = model_dir / "bpe.model"
    if o.timestamp_shift_ms:
        shared["timestamp_shift_ms"] = o.timestamp_shift_ms
    if o.hotwords is not None:
        shared["hotwords_file"] = "hotwords.txt"
        tokenizer_files["hotwords.txt"] = o.hotwords
    if o.lm is not None:
        lm_name = "lm.arpa.gz" if o.lm.name.endswith(".gz") else "lm.arpa"
        shared.update(lm_file=lm_name, lm_weight=o.lm_weight, lm_bonus=o.lm_bonus)
        tokenizer_files[lm_name] = o.lm
    fbank = {"num_mel_bins": mel, "frame_length_ms": 25, "frame_shift_ms": 10, "sample_rate": 16000}
    # twice the accepted audio: a WAV a little over MAX_AUDIO_SECONDS still reaches the feature extractor, whose
    # refusal says what to do (use --long); the bound is for WAV rows padded far past their WAV_LENS
    max_samples = 2 * MAX_AUDIO_SECONDS * fbank["sample_rate"]
    max_frames = MAX_AUDIO_SECONDS * 1000 // fbank["frame_shift_ms"] + o.right_context + 1
    max_encoder_frames = max_frames // o.subsampling + 1
    I, O = mc.ModelInput, mc.ModelOutput

    def audio_in(names=("wav", "wav_lens")):
        return [tensor(I, names[0], mc.TYPE_FP32, [-1]), tensor(I, names[1], mc.TYPE_INT32, [1])]

    def speech(kind):  # the feature extractors' outputs, and the inputs of the scorer that reads them (wenet)
        return [tensor(kind, "speech", mc.TYPE_FP32, [-1, mel]), tensor(kind, "speech_lengths", mc.TYPE_INT32, [1])]

    def text_out(first: str, scalar: bool = False):
        return [tensor(O, first, mc.TYPE_STRING, [1], scalar), tensor(O, "DETAILS", mc.TYPE_STRING, [1], scalar)]

    # ---- offline ---------------------------------------------------------------------------------
    config = offline_batching(new_config("feature_extractor", o.max_batch, "python", parameters={
        **fbank, "min_frames": o.right_context + 1, "fbank_backend": "numpy", "max_audio_seconds": MAX_AUDIO_SECONDS,
        MAX_INPUT: max_samples}))
    config.input.extend(audio_in())
    config.output.extend(speech(O))
    write(repo, config)

    config = offline_batching(new_config("encoder", o.max_batch, "onnxruntime",
                                         parameters={**ARENA_SHRINKAGE, MAX_INPUT: max_frames}))
    config.default_model_filename = "encoder.onnx"
    config.input.extend(graph_tensor(I, enc, n) for n in ("speech", "speech_lengths"))
    config.output.extend(graph_tensor(O, enc, n) for n in ("encoder_out", "encoder_out_lens", "ctc_log_probs",
                                                           "beam_log_probs", "beam_log_probs_idx"))
    write(repo, config, {"encoder.onnx": onnx_dir / "encoder.onnx"})

    config = offline_batching(new_config("decoder", o.max_batch, "onnxruntime",
                                         parameters={**ARENA_SHRINKAGE, MAX_INPUT: max_encoder_frames}))
    config.default_model_filename = "decoder.onnx"
    config.input.extend(graph_tensor(I, dec, n) for n in dec if n in (
        "encoder_out", "encoder_out_lens", "hyps_pad_sos_eos", "hyps_lens_sos", "r_hyps_pad_sos_eos", "ctc_score"))
    config.output.append(graph_tensor(O, dec, "best_index"))
    write(repo, config, {"decoder.onnx": onnx_dir / "decoder.onnx"})

    config = offline_batching(new_config("scoring", o.max_batch, "python",
                                         parameters={**shared, MAX_INPUT: max_encoder_frames}))
    config.input.extend([graph_tensor(I, enc, "encoder_out"), graph_tensor(I, enc, "encoder_out_lens"),
                         graph_tensor(I, enc, "beam_log_probs", "batch_log_probs"),
                         graph_tensor(I, enc, "beam_log_probs_idx", "batch_log_probs_idx"),
                         graph_tensor(I, enc, "ctc_log_probs", optional=True)])
    config.output.extend(text_out("OUTPUT0"))
    write(repo, config, assets=tokenizer_files)

    config = new_config("attention_rescoring", o.max_batch, platform="ensemble", parameters={MAX_INPUT: max_samples})
    config.input.extend(audio_in(("WAV", "WAV_LENS")))
    config.output.extend(text_out("TRANSCRIPTS"))
    ensemble_step(config, "feature_extractor", {"wav": "WAV", "wav_lens": "WAV_LENS"},
                  {"speech": "SPEECH", "speech_lengths": "SPEECH_LENGTHS"})
    ensemble_step(config, "encoder", {"speech": "SPEECH", "speech_lengths": "SPEECH_LENGTHS"},
                  {n: n for n in ("encoder_out", "encoder_out_lens", "beam_log_probs", "beam_log_probs_idx",
                                  "ctc_log_probs")})
    ensemble_step(config, "scoring", {"encoder_out": "encoder_out", "encoder_out_lens": "encoder_out_lens",
                                      "batch_log_probs": "beam_log_probs", "batch_log_probs_idx": "beam_log_probs_idx",
                                      "ctc_log_probs": "ctc_log_probs"},
                  {"OUTPUT0": "TRANSCRIPTS", "DETAILS": "DETAILS"})
    write(repo, config)

    # ---- streaming -------------------------------------------------------------------------------
    config = new_config("streaming_encoder", o.max_batch, "onnxruntime", instances=STREAMING_INSTANCES)
    config.default_model_filename = "streaming_encoder.onnx"
    config.input.extend(graph_tensor(I, senc, n) for n in ("chunk_xs", "chunk_lens"))
    config.output.extend(graph_tensor(O, senc, n) for n in ("log_probs", "log_probs_idx", "chunk_out",
                                                            "chunk_out_lens"))
    batching = sequence_batching(config, STEP_QUEUE_DELAY_US, controls=False)
    for name in (n for n in STATE_NAMES if n in senc):
        data_type, dims = senc[name]
        state = batching.state.add(input_name=name, output_name=f"r_{name}", data_type=data_type, dims=dims or [1])
        state.initial_state.add(data_type=data_type, dims=dims or [1], zero_data=True, name="zeros")
    write(repo, config, {"streaming_encoder.onnx": onnx_dir / "streaming_encoder.onnx"})

    config = new_config("streaming_feature_extractor", o.max_batch, "python", parameters={
        **fbank, "idle_seconds": SEQUENCE_IDLE_US / 1e6, "fbank_backend": "numpy", MAX_INPUT: max_samples})
    config.input.extend(audio_in())
    config.output.extend(speech(O))
    sequence_batching(config, STEP_QUEUE_DELAY_US)
    write(repo, config)

    scorer = {**shared, "num_mel_bins": mel, "encoder_output_size": enc["encoder_out"][1][-1],
              "chunk_size": o.chunk_size, "right_context": o.right_context, "subsampling_rate": o.subsampling,
              "idle_seconds": SEQUENCE_IDLE_US / 1e6}
    if o.endpoint:  # endpointing on for every stream (requests may still turn it off with endpoint=false)
        scorer["endpoint"] = 1
    if o.inline_graphs:  # the scorer runs the two models' graphs itself (asr_server/asr/serving/inline_onnx.py)
        scorer["encoder_onnx"] = "../streaming_encoder/1/streaming_encoder.onnx"
        if o.rescoring:
            scorer["decoder_onnx"] = "../decoder/1/decoder.onnx"
    if o.instance_process:  # each scorer instance in a process of its own (backends/python/process_model.py)
        scorer["instance_process"] = 1
    # wenet: WeNet's scorer, fbank frames in; streaming_wenet, the default: the same work in one python
    # model, audio in (no second request per chunk)
    for name, parameters, inputs, first in (
            ("wenet", {**scorer, MAX_INPUT: max_frames}, speech(I), "OUTPUT0"),
            ("streaming_wenet", {**fbank, "fbank_backend": "numpy", **scorer, MAX_INPUT: max_samples},
             audio_in(("WAV", "WAV_LENS")), "TRANSCRIPTS")):
        config = new_config(name, o.max_batch, "python", parameters=parameters, instances=STREAMING_INSTANCES)
        config.input.extend(inputs)
        config.output.extend(text_out(first, scalar=True))
        sequence_batching(config, SCORER_QUEUE_DELAY_US)
        write(repo, config, assets=tokenizer_files)

    config = new_config("streaming_wenet_ensemble", o.max_batch, platform="ensemble",
                        parameters={MAX_INPUT: max_samples})
    config.input.extend(audio_in(("WAV", "WAV_LENS")))
    config.output.extend(text_out("TRANSCRIPTS"))
    ensemble_step(config, "streaming_feature_extractor", {"wav": "WAV", "wav_lens": "WAV_LENS"},
                  {"speech": "SPEECH", "speech_lengths": "SPEECH_LENGTHS"})
    ensemble_step(config, "wenet", {"speech": "SPEECH", "speech_lengths": "SPEECH_LENGTHS"},
                  {"OUTPUT0": "TRANSCRIPTS", "DETAILS": "DETAILS"})
    write(repo, config)
