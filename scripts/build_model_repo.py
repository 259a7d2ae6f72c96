"""Write the ASR pipelines into a Triton model repository (WeNet's layout and tensor names).

    python scripts/build_model_repo.py --model-dir models/demo_en --onnx-dir models/demo_en/onnx --out model_repo

Reads the exported graphs (encoder.onnx, streaming_encoder.onnx, decoder.onnx from scripts/export_onnx.py)
for every dimension, and writes each config.pbtxt the way WeNet's runtime/gpu/scripts/convert.py fills its
templates. The repository is complete and self-contained: the graphs, the python models' model.py (from this
project's model_repo/) and the tokenizer files (units.txt, bpe.model) are copied into the model folders, and
every path in a config is relative to its model's folder, so the folder loads wherever it is written, moved
or copied. The python models import `asr_server`, which must be installed where the server runs them
(`pip install` into the server's python, or Triton's python stub: see deploy/README.md).

Models written:
  offline   attention_rescoring (ensemble) = feature_extractor -> encoder -> scoring (+ decoder through BLS)
  streaming streaming_wenet (python)       = fbank + the streaming scorer in one model
            streaming_wenet_ensemble       = streaming_feature_extractor -> wenet (WeNet's layout: one more
                                             model and request per chunk; the same transcripts)
            Both scorers run the streaming_encoder and decoder graphs themselves with onnxruntime (parameters
            encoder_onnx, decoder_onnx), the caches held per sequence; with --streaming-bls they call those
            models through BLS instead (the streaming_encoder's caches then held as its implicit state).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import onnx

from asr_server.asr.nn.embedding import subsampling_geometry
from asr_server.asr.export.onnx_layout import find_graphs
from asr_server.asr.units import SymbolTable
from asr_server.asr.windows import WindowConfig

ROOT = Path(__file__).resolve().parent.parent
# The python models' sources: model_repo/<name>/1/model.py of this project, copied into every built repository.
PYTHON_MODEL_SOURCES = ROOT / "model_repo"

ONNX_TO_CONFIG = {1: "TYPE_FP32", 10: "TYPE_FP16", 6: "TYPE_INT32", 7: "TYPE_INT64", 9: "TYPE_BOOL"}
SEQUENCE_IDLE_US = 5_000_000  # per-sequence state is freed after 5 s without a request (WeNet's value)
# Two instances of the streaming scorer and of the streaming encoder: each sequence stays on one instance
# (sequence batcher), so while one scorer instance waits for the encoder the other runs its search. On 2 cores
# this halved p99 final latency at 96 paced streams (bench/stream_cpu.py); more instances did not help there.
STREAMING_INSTANCES = 2
SCORER_QUEUE_DELAY_US = 20_000  # see scorer_oldest in build()
MAX_AUDIO_SECONDS = 60  # longest offline utterance the feature extractor accepts (encoder memory ~ length^2)
# No queue delay for the offline models (as WeNet's configs): an idle instance starts at once, and batches
# form from what queues while it is busy. Waiting 2 ms at each of the four steps cost about 12 ms per
# utterance at concurrency 1 here (p50 28 -> 16 ms) and gained no throughput at concurrency 8.
# The offline graphs see inputs of every length: ORT's arena would keep the largest request's memory for
# good, so each run hands it back (Triton's onnxruntime parameter).
ARENA_SHRINKAGE = {"memory.enable_memory_arena_shrinkage": "cpu:0"}
# Every model bounds the -1 dimensions of its inputs by what MAX_AUDIO_SECONDS implies (config parameter
# max_input_dim, checked by the server before any work; Triton ignores it): samples for audio inputs, fbank
# frames (10 ms) for features, encoder frames for the decoding steps.
MAX_INPUT = "max_input_dim"
OFFLINE_BATCHING = "dynamic_batching { preferred_batch_size: [ 8, 16 ] }"


def graph_io(path: Path) -> dict[str, tuple[str, list]]:
    """name -> (config data type, dims without the batch dim; -1 for dynamic)."""
    model = onnx.load(str(path), load_external_data=False)
    out = {}
    for value in list(model.graph.input) + list(model.graph.output):
        tensor = value.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else -1 for d in tensor.shape.dim][1:]
        out[value.name] = (ONNX_TO_CONFIG[tensor.elem_type], dims)
    return out


def tensor(name: str, data_type: str, dims: list, reshape_scalar: bool = False) -> str:
    text = f'{{ name: "{name}" data_type: {data_type} dims: [ {", ".join(str(d) for d in dims)} ]'
    if reshape_scalar:
        text += " reshape: { shape: [ ] }"
    return text + " }"


def graph_tensor(io: dict, name: str, rename: str | None = None) -> str:
    data_type, dims = io[name]
    if dims == []:  # a (B,) tensor: [1] on the wire, a scalar per request inside
        return tensor(rename or name, data_type, [1], reshape_scalar=True)
    return tensor(rename or name, data_type, dims)


def params(values: dict) -> str:
    rows = ",\n  ".join(f'{{ key: "{k}" value: {{ string_value: "{v}" }} }}' for k, v in values.items())
    return f"parameters [\n  {rows}\n]"


CONTROLS = """control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] },
    { name: "END" control [ { kind: CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] }
  ]"""


def write(repo: Path, name: str, text: str, files: dict[str, Path] = {}, assets: dict[str, Path] = {}) -> None:
    """<repo>/<name>/config.pbtxt; `files` go into the version folder 1/ (a python model's model.py comes from
    PYTHON_MODEL_SOURCES), `assets` next to config.pbtxt (the paths in parameters are relative to it)."""
    folder = repo / name
    (folder / "1").mkdir(parents=True, exist_ok=True)
    (folder / "config.pbtxt").write_text(text.strip() + "\n")
    if 'backend: "python"' in text:
        files = {"model.py": PYTHON_MODEL_SOURCES / name / "1" / "model.py", **files}
    for target, source in [*((folder / "1" / t, s) for t, s in files.items()),
                           *((folder / t, s) for t, s in assets.items())]:
        if not (target.exists() and target.samefile(source)):  # building into model_repo/ itself
            shutil.copyfile(source, target)


def build(model_dir: Path, onnx_dir: Path, repo: Path, beam: int, chunk_size: int, right_context: int,
          subsampling: int, max_batch: int, search: str = "prefix_beam", rescoring: bool = True,
          hotwords: Path | None = None, endpoint: bool = False, timestamp_shift_ms: str = "",
          inline_graphs: bool = True, instance_process: bool = False) -> None:
    if instance_process and not inline_graphs:
        raise ValueError("--instance-process needs the inline graphs: a model in its own process cannot call BLS")
    enc = graph_io(onnx_dir / "encoder.onnx")
    senc = graph_io(onnx_dir / "streaming_encoder.onnx")
    dec = graph_io(onnx_dir / "decoder.onnx")
    d_model = enc["encoder_out"][1][-1]
    mel = enc["speech"][1][-1]
    window = senc["chunk_xs"][1][0]
    bidecoder = int("r_hyps_pad_sos_eos" in dec)
    # The tokenizer files are copied next to the config of each model that decodes; paths in parameters are
    # relative to the model's folder, so the repository does not refer to MODEL_DIR once built.
    tokenizer_files = {"units.txt": model_dir / "units.txt"}
    shared = {"units": "units.txt", "beam_size": beam, "bidecoder": bidecoder, "rescoring": int(rescoring),
              "search": search, "frame_shift_ms": 10, "subsampling_rate": subsampling}
    if (model_dir / "bpe.model").exists():
        shared["bpe_model"] = "bpe.model"
        tokenizer_files["bpe.model"] = model_dir / "bpe.model"
    if timestamp_shift_ms:  # how late the model emits words: "START,END[,ONSET]" ms (bench/asr_extras.py --calibrate)
        shared["timestamp_shift_ms"] = timestamp_shift_ms
    if hotwords is not None:  # the model's hotwords, copied next to the decoding models' configs
        shared["hotwords_file"] = "hotwords.txt"
        tokenizer_files["hotwords.txt"] = hotwords
    fbank = {"num_mel_bins": mel, "frame_length_ms": 25, "frame_shift_ms": 10, "sample_rate": 16000}
    # twice the accepted audio: a WAV a little over MAX_AUDIO_SECONDS still reaches the feature extractor, whose
    # refusal says what to do (use --long); the bound is for WAV rows padded far past their WAV_LENS
    max_samples = 2 * MAX_AUDIO_SECONDS * fbank["sample_rate"]
    max_frames = MAX_AUDIO_SECONDS * 1000 // fbank["frame_shift_ms"] + right_context + 1
    max_encoder_frames = max_frames // subsampling + 1
    wav_in = [tensor("wav", "TYPE_FP32", [-1]), tensor("wav_lens", "TYPE_INT32", [1])]
    # the feature extractors' outputs, and the inputs of the scorer that reads them (wenet)
    speech = [tensor("speech", "TYPE_FP32", [-1, mel]), tensor("speech_lengths", "TYPE_INT32", [1])]
    oldest = (f"oldest {{ max_candidate_sequences: 1024 preferred_batch_size: [ 8, 16, 32 ] "
              f"max_queue_delay_microseconds: 2000 }}")
    # The scorers wait longer for a batch: they run the encoder graph on every window of a batch at once, and
    # bigger batches cost less per window. bench.stream_cpu, 128 paced streams, one run each: 2 / 20 / 50 /
    # 100 ms -> average batch 1.9 / 3.3 / 5.8 / 10.1, CPU-s per audio-s 0.0128 / 0.0114 / 0.0113 / 0.0112,
    # p99 final latency 248 / 158 / 267 / 396 ms.
    scorer_oldest = oldest.replace("max_queue_delay_microseconds: 2000",
                                   f"max_queue_delay_microseconds: {SCORER_QUEUE_DELAY_US}")

    write(repo, "feature_extractor", f"""
name: "feature_extractor"
backend: "python"
max_batch_size: {max_batch}
{params({**fbank, "min_frames": right_context + 1, "fbank_backend": "numpy",
         "max_audio_seconds": MAX_AUDIO_SECONDS, MAX_INPUT: max_samples})}
input [ {", ".join(wav_in)} ]
output [ {", ".join(speech)} ]
{OFFLINE_BATCHING}
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
""")
    write(repo, "encoder", f"""
name: "encoder"
backend: "onnxruntime"
default_model_filename: "encoder.onnx"
max_batch_size: {max_batch}
{params({**ARENA_SHRINKAGE, MAX_INPUT: max_frames})}
input [ {graph_tensor(enc, "speech")}, {graph_tensor(enc, "speech_lengths")} ]
output [
  {graph_tensor(enc, "encoder_out")}, {graph_tensor(enc, "encoder_out_lens")},
  {graph_tensor(enc, "ctc_log_probs")}, {graph_tensor(enc, "beam_log_probs")}, {graph_tensor(enc, "beam_log_probs_idx")}
]
{OFFLINE_BATCHING}
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
""", {"encoder.onnx": onnx_dir / "encoder.onnx"})
    write(repo, "decoder", f"""
name: "decoder"
backend: "onnxruntime"
default_model_filename: "decoder.onnx"
max_batch_size: {max_batch}
{params({**ARENA_SHRINKAGE, MAX_INPUT: max_encoder_frames})}
input [
  {", ".join(graph_tensor(dec, n) for n in dec if n in ("encoder_out", "encoder_out_lens", "hyps_pad_sos_eos", "hyps_lens_sos", "r_hyps_pad_sos_eos", "ctc_score"))}
]
output [ {graph_tensor(dec, "best_index")} ]
{OFFLINE_BATCHING}
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
""", {"decoder.onnx": onnx_dir / "decoder.onnx"})
    write(repo, "scoring", f"""
name: "scoring"
backend: "python"
max_batch_size: {max_batch}
{params({**shared, MAX_INPUT: max_encoder_frames})}
input [
  {graph_tensor(enc, "encoder_out")}, {graph_tensor(enc, "encoder_out_lens")},
  {graph_tensor(enc, "beam_log_probs", "batch_log_probs")}, {graph_tensor(enc, "beam_log_probs_idx", "batch_log_probs_idx")},
  {graph_tensor(enc, "ctc_log_probs")[:-2]} optional: true }}
]
output [ {tensor("OUTPUT0", "TYPE_STRING", [1])}, {tensor("DETAILS", "TYPE_STRING", [1])} ]
{OFFLINE_BATCHING}
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
""", assets=tokenizer_files)
    write(repo, "attention_rescoring", f"""
name: "attention_rescoring"
platform: "ensemble"
max_batch_size: {max_batch}
{params({MAX_INPUT: max_samples})}
input [ {tensor("WAV", "TYPE_FP32", [-1])}, {tensor("WAV_LENS", "TYPE_INT32", [1])} ]
output [ {tensor("TRANSCRIPTS", "TYPE_STRING", [1])}, {tensor("DETAILS", "TYPE_STRING", [1])} ]
ensemble_scheduling {{
  step [
    {{ model_name: "feature_extractor" model_version: -1
      input_map {{ key: "wav" value: "WAV" }} input_map {{ key: "wav_lens" value: "WAV_LENS" }}
      output_map {{ key: "speech" value: "SPEECH" }} output_map {{ key: "speech_lengths" value: "SPEECH_LENGTHS" }} }},
    {{ model_name: "encoder" model_version: -1
      input_map {{ key: "speech" value: "SPEECH" }} input_map {{ key: "speech_lengths" value: "SPEECH_LENGTHS" }}
      output_map {{ key: "encoder_out" value: "encoder_out" }} output_map {{ key: "encoder_out_lens" value: "encoder_out_lens" }}
      output_map {{ key: "beam_log_probs" value: "beam_log_probs" }} output_map {{ key: "beam_log_probs_idx" value: "beam_log_probs_idx" }}
      output_map {{ key: "ctc_log_probs" value: "ctc_log_probs" }} }},
    {{ model_name: "scoring" model_version: -1
      input_map {{ key: "encoder_out" value: "encoder_out" }} input_map {{ key: "encoder_out_lens" value: "encoder_out_lens" }}
      input_map {{ key: "batch_log_probs" value: "beam_log_probs" }} input_map {{ key: "batch_log_probs_idx" value: "beam_log_probs_idx" }}
      input_map {{ key: "ctc_log_probs" value: "ctc_log_probs" }}
      output_map {{ key: "OUTPUT0" value: "TRANSCRIPTS" }} output_map {{ key: "DETAILS" value: "DETAILS" }} }}
  ]
}}
""")
    # ---- streaming -------------------------------------------------------------------------------
    states = []
    for name in ("offset", "att_cache", "cnn_cache", "cache_mask"):
        if name in senc:
            data_type, dims = senc[name]
            states.append(f'{{ input_name: "{name}" output_name: "r_{name}" data_type: {data_type} '
                          f'dims: [ {", ".join(str(d) for d in (dims or [1]))} ] '
                          f'initial_state {{ data_type: {data_type} dims: [ {", ".join(str(d) for d in (dims or [1]))} ] '
                          f'zero_data: true name: "zeros" }} }}')
    write(repo, "streaming_encoder", f"""
name: "streaming_encoder"
backend: "onnxruntime"
default_model_filename: "streaming_encoder.onnx"
max_batch_size: {max_batch}
input [ {graph_tensor(senc, "chunk_xs")}, {graph_tensor(senc, "chunk_lens")} ]
output [
  {graph_tensor(senc, "log_probs")}, {graph_tensor(senc, "log_probs_idx")},
  {graph_tensor(senc, "chunk_out")}, {graph_tensor(senc, "chunk_out_lens")}
]
sequence_batching {{
  max_sequence_idle_microseconds: {SEQUENCE_IDLE_US}
  {oldest}
  state [
    {(","+chr(10)+"    ").join(states)}
  ]
}}
instance_group [ {{ count: {STREAMING_INSTANCES} kind: KIND_CPU }} ]
""", {"streaming_encoder.onnx": onnx_dir / "streaming_encoder.onnx"})
    write(repo, "streaming_feature_extractor", f"""
name: "streaming_feature_extractor"
backend: "python"
max_batch_size: {max_batch}
{params({**fbank, "idle_seconds": SEQUENCE_IDLE_US / 1e6, "fbank_backend": "numpy", MAX_INPUT: max_samples})}
input [ {", ".join(wav_in)} ]
output [ {", ".join(speech)} ]
sequence_batching {{
  max_sequence_idle_microseconds: {SEQUENCE_IDLE_US}
  {oldest}
  {CONTROLS}
}}
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
""")
    wenet_params = {**shared, "num_mel_bins": mel, "encoder_output_size": d_model, "chunk_size": chunk_size,
                    "right_context": right_context, "subsampling_rate": subsampling,
                    "idle_seconds": SEQUENCE_IDLE_US / 1e6}
    if endpoint:  # endpointing on for every stream (requests may still turn it off with endpoint=false)
        wenet_params["endpoint"] = 1
    if inline_graphs:  # the scorer runs the two models' graphs itself (asr_server/asr/serving/inline_onnx.py)
        wenet_params["encoder_onnx"] = "../streaming_encoder/1/streaming_encoder.onnx"
        if rescoring:
            wenet_params["decoder_onnx"] = "../decoder/1/decoder.onnx"
    if instance_process:  # each scorer instance in a process of its own (backends/python/process_model.py)
        wenet_params["instance_process"] = 1
    def write_scorer(name: str, values: dict, inputs: list[str], text_output: str) -> None:
        """A streaming scorer: a sequence-batched python model answering a scalar transcript and DETAILS."""
        write(repo, name, f"""
name: "{name}"
backend: "python"
max_batch_size: {max_batch}
{params(values)}
input [ {", ".join(inputs)} ]
output [ {tensor(text_output, "TYPE_STRING", [1], reshape_scalar=True)}, {tensor("DETAILS", "TYPE_STRING", [1], reshape_scalar=True)} ]
sequence_batching {{
  max_sequence_idle_microseconds: {SEQUENCE_IDLE_US}
  {scorer_oldest}
  {CONTROLS}
}}
instance_group [ {{ count: {STREAMING_INSTANCES} kind: KIND_CPU }} ]
""", assets=tokenizer_files)

    write_scorer("wenet", {**wenet_params, MAX_INPUT: max_frames}, speech, "OUTPUT0")  # WeNet's: fbank frames in
    # The default streaming model: the same work in one python model, audio in (no second request per chunk).
    write_scorer("streaming_wenet", {**fbank, "fbank_backend": "numpy", **wenet_params, MAX_INPUT: max_samples},
                 [tensor("WAV", "TYPE_FP32", [-1]), tensor("WAV_LENS", "TYPE_INT32", [1])], "TRANSCRIPTS")
    write(repo, "streaming_wenet_ensemble", f"""
name: "streaming_wenet_ensemble"
platform: "ensemble"
max_batch_size: {max_batch}
{params({MAX_INPUT: max_samples})}
input [ {tensor("WAV", "TYPE_FP32", [-1])}, {tensor("WAV_LENS", "TYPE_INT32", [1])} ]
output [ {tensor("TRANSCRIPTS", "TYPE_STRING", [1])}, {tensor("DETAILS", "TYPE_STRING", [1])} ]
ensemble_scheduling {{
  step [
    {{ model_name: "streaming_feature_extractor" model_version: -1
      input_map {{ key: "wav" value: "WAV" }} input_map {{ key: "wav_lens" value: "WAV_LENS" }}
      output_map {{ key: "speech" value: "SPEECH" }} output_map {{ key: "speech_lengths" value: "SPEECH_LENGTHS" }} }},
    {{ model_name: "wenet" model_version: -1
      input_map {{ key: "speech" value: "SPEECH" }} input_map {{ key: "speech_lengths" value: "SPEECH_LENGTHS" }}
      output_map {{ key: "OUTPUT0" value: "TRANSCRIPTS" }} output_map {{ key: "DETAILS" value: "DETAILS" }} }}
  ]
}}
""")
    if WindowConfig(chunk_size, subsampling, right_context).window != window:
        raise SystemExit(f"streaming encoder window {window} does not match chunk_size {chunk_size}, "
                         f"subsampling {subsampling}, right_context {right_context}")


def model_subsampling(model_dir: Path) -> tuple[int, int]:
    """(subsampling rate, right context) of the model's encoder, from train.yaml's encoder_conf.input_layer
    (WeNet's default conv2d: 4 and 6 when the folder has no train.yaml)."""
    conf_path = model_dir / "train.yaml"
    if not conf_path.exists():
        return subsampling_geometry("conv2d")
    import yaml

    conf = yaml.safe_load(conf_path.read_text()) or {}
    return subsampling_geometry((conf.get("encoder_conf") or {}).get("input_layer", "conv2d"))


def exports_up_to_date(model_dir: Path, onnx_dir: Path) -> bool:
    checkpoint = model_dir / "final.pt"
    graphs = [onnx_dir / f"{name}.onnx" for name in ("encoder", "streaming_encoder", "decoder")]
    return all(g.exists() and g.stat().st_mtime >= checkpoint.stat().st_mtime for g in graphs)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model-dir", type=Path, required=True, help="WeNet-style model folder (units.txt, ...)")
    p.add_argument("--onnx-dir", type=Path, action="append", default=None,
                   help="folder with encoder/streaming_encoder/decoder.onnx (default: MODEL_DIR/onnx); or, given "
                        "twice, WeNet's wenet/bin/export_onnx_gpu.py output folders (one offline, one --streaming)")
    p.add_argument("--export", action="store_true",
                   help="first export the graphs from MODEL_DIR's checkpoint with scripts/export_onnx.py "
                        "(skipped when they are newer than the checkpoint)")
    p.add_argument("--out", type=Path, required=True,
                   help="the model repository to write (a new or empty folder; an existing one only with --force)")
    p.add_argument("--force", action="store_true",
                   help="write into --out although it is not empty (its ASR model folders are replaced, other "
                        "models kept): the bundled model_repo/ is rebuilt this way by scripts/build_demo_repo.sh")
    p.add_argument("--beam", type=int, default=10, help="CTC prefix beam width and n-best for rescoring")
    p.add_argument("--chunk-size", type=int, default=16, help="encoder frames per streaming chunk")
    p.add_argument("--right-context", type=int, default=None,
                   help="input frames the subsampling reads ahead (default: from train.yaml's input_layer)")
    p.add_argument("--subsampling", type=int, default=None,
                   help="input frames per encoder frame (default: from train.yaml's input_layer)")
    p.add_argument("--max-batch", type=int, default=64, help="max_batch_size of the batching models")
    p.add_argument("--search", choices=("prefix_beam", "greedy"), default="prefix_beam",
                   help="CTC search of the scoring and wenet models")
    p.add_argument("--no-rescoring", dest="rescoring", action="store_false",
                   help="the CTC search result is final (no attention rescoring with the decoder)")
    p.add_argument("--hotwords", type=Path, default=None,
                   help="the model's hotwords: one phrase per line, optionally 'phrase<TAB>score' (requests may "
                        "give their own with the parameter hotwords)")
    p.add_argument("--endpoint", action="store_true",
                   help="streaming endpointing on by default (requests turn it on or off with the parameter endpoint)")
    p.add_argument("--encoder-backend", choices=("onnxruntime", "openvino"), default="onnxruntime",
                   help="openvino: the encoders as OpenVINO IR on the openvino backend (the 'openvino' extra; "
                        "bench/openvino_vs_ort.py compares the two)")
    p.add_argument("--timestamp-shift-ms", default="",
                   help="START,END[,ONSET]: ms the model emits a word's first/last token after it is spoken, and "
                        "how much later still the first word after a pause; word times move earlier by them "
                        "(bench/asr_extras.py --calibrate measures them)")
    p.add_argument("--streaming-bls", dest="inline_graphs", action="store_false",
                   help="the streaming scorer (wenet) calls the streaming_encoder and decoder models through BLS "
                        "instead of running their ONNX graphs itself (the default, cheaper on CPU: bench.stream_cpu)")
    p.add_argument("--instance-process", action="store_true",
                   help="run each instance of the streaming scorers in a process of its own (its own interpreter "
                        "lock: lower tail latency near the CPU limit, bench/vs_sherpa.py; more memory per instance)")
    args = p.parse_args()
    if args.instance_process and not args.inline_graphs:
        p.error("--instance-process cannot go with --streaming-bls (a model in its own process cannot call BLS)")
    missing = [name for name in ("units.txt", "train.yaml") if not (args.model_dir / name).is_file()]
    if missing:
        p.error(f"{args.model_dir} is not a WeNet model folder: {' and '.join(missing)} missing (a WeNet "
                "experiment folder holds train.yaml, units.txt and the checkpoint)")
    if args.out.exists() and any(args.out.iterdir()) and not args.force:
        p.error(f"{args.out} is not empty: give a new folder, or --force to write into it (its ASR model "
                "folders are replaced)")
    SymbolTable.load(args.model_dir / "units.txt")  # fail early on a wrong folder
    rate, context = model_subsampling(args.model_dir)
    args.subsampling = rate if args.subsampling is None else args.subsampling
    args.right_context = context if args.right_context is None else args.right_context
    onnx_dirs = args.onnx_dir or [args.model_dir / "onnx"]
    if args.export and len(onnx_dirs) > 1:
        p.error("--export writes one folder: give at most one --onnx-dir with it")
    onnx_dir = onnx_dirs[0]
    if args.export and not exports_up_to_date(args.model_dir, onnx_dir):
        subprocess.run([sys.executable, str(ROOT / "scripts" / "export_onnx.py"), "--model-dir", str(args.model_dir),
                        "--out-dir", str(onnx_dir), "--chunk-size", str(args.chunk_size),
                        "--beam", str(args.beam)], check=True)
    with tempfile.TemporaryDirectory() as staging:
        # the graphs under the names build() reads (WeNet's export calls both encoders encoder.onnx)
        for name, path in find_graphs(onnx_dirs).items():
            os.symlink(path.resolve(), Path(staging) / f"{name}.onnx")
        build(args.model_dir, Path(staging), args.out, args.beam, args.chunk_size, args.right_context,
              args.subsampling, args.max_batch, args.search, args.rescoring, args.hotwords, args.endpoint,
              args.timestamp_shift_ms, args.inline_graphs, args.instance_process)
    if args.encoder_backend == "openvino":
        from asr_server.openvino_repo import switch_to_openvino

        print(f"encoders on openvino: {', '.join(switch_to_openvino(args.out))}")
    print(f"wrote the ASR pipelines into {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
