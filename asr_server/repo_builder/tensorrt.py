"""Rewrite an ONNX model repository (scripts/build_model_repo.py's) for TensorRT engines.

The graph models (encoder, streaming_encoder, decoder) switch to `backend: "tensorrt"` with
`default_model_filename: "<model>.plan"` and GPU instances. INT64 tensors narrow to INT32 the way WeNet's and
sherpa's TensorRT recipes do (TensorRT 8 bound no INT64, and INT32 halves the state the batcher moves): the
graph models' INT64 outputs and implicit states, and every model input an ensemble feeds from a narrowed output
(scoring's `batch_log_probs_idx`). Inputs a python model sends through BLS (the decoder's hypotheses) keep
INT64: the python models build them as int64, and TensorRT 10 binds INT64 inputs.

`mode="onnx_int32"` writes the same configs over ONNX graphs with Cast nodes at the narrowed boundaries, still
on onnxruntime: a repository that runs on any CPU and shows the narrowed configs serve the same transcripts.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Iterable, Mapping, Optional

import onnx
from google.protobuf import text_format
from onnx import TensorProto, helper
from tritonclient.grpc import model_config_pb2 as mc

from asr_server.asr.serving.inline_onnx import repository_without_inline_graphs
from asr_server.gpu.profiles import load_config

GRAPH_MODELS = ("encoder", "streaming_encoder", "decoder")
INT64, INT32 = mc.DataType.Value("TYPE_INT64"), mc.DataType.Value("TYPE_INT32")
# onnxruntime-only parameters that mean nothing to TensorRT.
ORT_PARAMETERS = ("memory.enable_memory_arena_shrinkage",)


def narrow_graph_config(config: mc.ModelConfig) -> tuple[set[str], set[str]]:
    """INT64 -> INT32 on a graph model's outputs and states, in place; (narrowed outputs, narrowed inputs)."""
    outputs, inputs = set(), set()
    for io in config.output:
        if io.data_type == INT64:
            io.data_type = INT32
            outputs.add(io.name)
    for state in config.sequence_batching.state:
        if state.data_type == INT64:
            state.data_type = INT32
            if state.initial_state:
                for initial in state.initial_state:
                    initial.data_type = INT32
            outputs.add(state.output_name)
            inputs.add(state.input_name)
    return outputs, inputs


def fed_inputs(configs: Mapping[str, mc.ModelConfig], narrowed: Mapping[str, set[str]]) -> dict[str, set[str]]:
    """model -> inputs that an ensemble step feeds from a narrowed output of another model."""
    fed: dict[str, set[str]] = {}
    for ensemble in configs.values():
        steps = ensemble.ensemble_scheduling.step
        produced = {tensor for step in steps for output, tensor in step.output_map.items()
                    if output in narrowed.get(step.model_name, set())}
        for step in steps:
            for model_input, tensor in step.input_map.items():
                if tensor in produced:
                    fed.setdefault(step.model_name, set()).add(model_input)
    return fed


def rewrite_repository(src: Path, dst: Path, mode: str = "tensorrt",
                       plans: Optional[Mapping[str, Path]] = None, gpus: Iterable[int] = (0,)) -> dict[str, dict]:
    """Copy repository `src` to `dst`, rewritten (see the module docstring). mode "tensorrt" needs `plans`
    (model -> .plan path, copied in); "onnx_int32" rewrites the ONNX graphs. Returns what changed per model:
    {model: {"outputs": [...], "inputs": [...]}}."""
    if mode not in ("tensorrt", "onnx_int32"):
        raise ValueError(f"mode must be 'tensorrt' or 'onnx_int32', not '{mode}'")
    src, dst = Path(src), Path(dst)
    if dst.exists():
        raise FileExistsError(f"{dst} exists; the rewrite writes a new repository")
    shutil.copytree(src, dst, symlinks=False)
    configs = {path.parent.name: load_config(path) for path in sorted(dst.glob("*/config.pbtxt"))}
    missing = [name for name in GRAPH_MODELS if name not in configs]
    if missing:
        raise ValueError(f"{src} has no {', '.join(missing)} model folder(s)")
    narrowed_out, narrowed_in = {}, {}
    for name in GRAPH_MODELS:
        narrowed_out[name], narrowed_in[name] = narrow_graph_config(configs[name])
    for model, inputs in fed_inputs(configs, narrowed_out).items():
        for io in configs[model].input:
            if io.name in inputs and io.data_type == INT64:
                io.data_type = INT32
                narrowed_in.setdefault(model, set()).add(io.name)
    for name in GRAPH_MODELS:
        config, version_dir = configs[name], dst / name / "1"
        onnx_file = version_dir / config.default_model_filename
        if mode == "tensorrt":
            if not plans or name not in plans:
                raise ValueError(f"no .plan given for model '{name}'")
            onnx_file.unlink(missing_ok=True)
            config.backend, config.platform = "tensorrt", ""
            config.default_model_filename = f"{name}.plan"
            shutil.copyfile(plans[name], version_dir / config.default_model_filename)
            for key in ORT_PARAMETERS:
                if key in config.parameters:
                    del config.parameters[key]
            for group in config.instance_group:
                group.kind = mc.ModelInstanceGroup.Kind.Value("KIND_GPU")
                group.ClearField("gpus")
                group.gpus.extend(gpus)
        else:
            int32_twin(onnx_file, onnx_file, narrowed_in[name], narrowed_out[name])
    for name, config in configs.items():
        if name in GRAPH_MODELS or narrowed_in.get(name):
            (dst / name / "config.pbtxt").write_text(text_format.MessageToString(config))
    repository_without_inline_graphs(dst)  # a scorer that ran the ONNX graphs itself calls the new models
    return {name: {"outputs": sorted(narrowed_out.get(name, ())), "inputs": sorted(narrowed_in.get(name, ()))}
            for name in configs if narrowed_out.get(name) or narrowed_in.get(name)}


def int32_twin(src: Path, dst: Path, inputs: Iterable[str], outputs: Iterable[str]) -> None:
    """Make the named INT64 graph inputs/outputs INT32 with a Cast at each boundary (the graph inside is
    unchanged: the twin computes exactly what the original computes)."""
    model = onnx.load(str(src))
    graph = model.graph
    for value in graph.input:
        if value.name in inputs and value.type.tensor_type.elem_type == TensorProto.INT64:
            inner = f"{value.name}__int64"
            for node in graph.node:
                node.input[:] = [inner if name == value.name else name for name in node.input]
            value.type.tensor_type.elem_type = TensorProto.INT32
            graph.node.insert(0, helper.make_node("Cast", [value.name], [inner], to=TensorProto.INT64,
                                                  name=f"{value.name}_to_int64"))
    for value in graph.output:
        if value.name in outputs and value.type.tensor_type.elem_type == TensorProto.INT64:
            inner = f"{value.name}__int64"
            for node in graph.node:
                node.output[:] = [inner if name == value.name else name for name in node.output]
                node.input[:] = [inner if name == value.name else name for name in node.input]
            value.type.tensor_type.elem_type = TensorProto.INT32
            graph.node.append(helper.make_node("Cast", [inner], [value.name], to=TensorProto.INT32,
                                               name=f"{value.name}_to_int32"))
    onnx.checker.check_model(model)
    onnx.save(model, str(dst))


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(description="Rewrite an ONNX model repository for TensorRT (or its INT32 ONNX twin).")
    p.add_argument("src", type=Path)
    p.add_argument("dst", type=Path)
    p.add_argument("--mode", choices=("tensorrt", "onnx_int32"), default="tensorrt")
    p.add_argument("--plans", type=Path, help="folder with <model>.plan for encoder, streaming_encoder, decoder")
    p.add_argument("--gpus", default="0", help="comma-separated device ids of the engines' instance groups")
    args = p.parse_args(argv)
    plans = {name: args.plans / f"{name}.plan" for name in GRAPH_MODELS} if args.plans else None
    changed = rewrite_repository(args.src, args.dst, args.mode, plans, [int(g) for g in args.gpus.split(",")])
    for model, tensors in changed.items():
        print(f"{model}: INT64 -> INT32 outputs {tensors['outputs']} inputs {tensors['inputs']}")
    print(f"wrote {args.dst} ({args.mode})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
