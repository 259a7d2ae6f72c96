"""Build TensorRT engines (.plan) from a model repository's ONNX graphs; the Python builder behind build_trt.sh.

    python scripts/build_trt.py --repo model_repo --out-dir plans [--fp16] [--workspace-mib 4096]
        [--timing-cache plans/timing.cache] [--split-batch 8] [--shape speech:0=16,512,2048] [--dry-run]

For each of encoder, streaming_encoder and decoder: the optimisation profiles come from the model's
config.pbtxt (asr_server/gpu/profiles.py: batch 1 / preferred / max_batch_size, the offline encoder's frames
16 / 512 / 2048); `polygraphy surgeon sanitize --fold-constants` folds the graph first when polygraphy is
installed; the engine is built with `trtexec` when it is on PATH, else with the TensorRT 10 Python API; then
the engine's outputs are compared with ONNX Runtime's on real features (CHECK_TOLERANCES).
`--dry-run` prints the exact commands and profiles and needs no TensorRT.

UNVERIFIED beyond --dry-run: the machine this was written on had no TensorRT and no GPU.
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

from asr_server.gpu.profiles import (Profile, derive_profiles, load_config, parse_shape_overrides,
                                     trtexec_shapes)

MODELS = ("encoder", "streaming_encoder", "decoder")
# max |engine - ONNX Runtime| allowed per output kind, by precision. fp32 engines differ from ORT by kernel
# choice only; fp16 engines round every activation to 11 bits, so they are held to argmax agreement too.
CHECK_TOLERANCES = {
    "fp32": {"float_atol": 1e-3, "top1_agreement": 0.999},
    "fp16": {"float_atol": 5e-2, "top1_agreement": 0.98},
}


def builder_kind(requested: str) -> str:
    """'trtexec' when asked or on PATH, else 'python' (the TensorRT Python API)."""
    if requested != "auto":
        return requested
    return "trtexec" if shutil.which("trtexec") else "python"


def fold_command(onnx: Path, folded: Path) -> list[str] | None:
    """polygraphy's constant folding, when polygraphy is installed (else None: the graph is built as is)."""
    if not shutil.which("polygraphy"):
        return None
    return ["polygraphy", "surgeon", "sanitize", str(onnx), "--fold-constants", "-o", str(folded)]


def trtexec_command(onnx: Path, plan: Path, profiles: list[Profile], args) -> list[str]:
    command = ["trtexec", f"--onnx={onnx}", f"--saveEngine={plan}",
               f"--memPoolSize=workspace:{args.workspace_mib}M", f"--timingCacheFile={args.timing_cache}"]
    for profile in profiles:  # trtexec makes one profile per repeated min/opt/max triple
        command += trtexec_shapes(profile)
    if args.fp16:
        command.append("--fp16")
    return command


def plan_for(model: str, args) -> dict:
    """Everything the build of one model does, as data: printed by --dry-run, executed otherwise."""
    config_path = args.repo / model / "config.pbtxt"
    config = load_config(config_path)
    onnx = args.repo / model / "1" / config.default_model_filename
    profiles = derive_profiles(config, parse_shape_overrides(args.shape), args.split_batch)
    folded = args.out_dir / f"{model}.folded.onnx"
    fold = None if args.no_fold else fold_command(onnx, folded)
    built_from = folded if fold else onnx
    plan = args.out_dir / f"{model}.plan"
    kind = builder_kind(args.builder)
    build = trtexec_command(built_from, plan, profiles, args) if kind == "trtexec" else None
    return {"model": model, "config": config_path, "onnx": onnx, "fold": fold, "built_from": built_from,
            "plan": plan, "builder": kind, "build": build, "profiles": profiles}


def describe(step: dict, args) -> str:
    lines = [f"# {step['model']}: {step['config']}"]
    for index, profile in enumerate(step["profiles"]):
        lines.append(f"# profile {index}: " + json.dumps({"min": profile.min, "opt": profile.opt, "max": profile.max}))
    if step["fold"]:
        lines.append(shlex.join(step["fold"]))
    else:
        lines.append("# constant folding skipped: " + ("--no-fold" if args.no_fold else "polygraphy not installed"))
    if step["build"]:
        lines.append(shlex.join(step["build"]))
    else:
        lines.append(f"# TensorRT Python API: parse {step['built_from']}, {len(step['profiles'])} profile(s) as above, "
                     f"workspace {args.workspace_mib} MiB, timing cache {args.timing_cache}"
                     + (", FP16" if args.fp16 else "") + f" -> {step['plan']}")
    lines.append(f"# check: {step['plan']} vs ONNX Runtime on real features, tolerances "
                 + json.dumps(CHECK_TOLERANCES["fp16" if args.fp16 else "fp32"]))
    return "\n".join(lines)


def tensorrt_missing(steps: list[dict]) -> str:
    """Why the engines cannot be built here ('' when they can): neither trtexec nor the tensorrt module."""
    if all(step["build"] for step in steps):  # trtexec builds every one
        return ""
    try:
        import tensorrt  # noqa: F401
    except ImportError:
        return ("TensorRT is not installed here: neither trtexec on PATH nor the tensorrt Python module (pip "
                "install 'asr-server[tensorrt]' on a machine with an NVIDIA GPU). --dry-run prints the commands "
                "and optimisation profiles without it.")
    return ""


def build_with_python_api(step: dict, args) -> None:
    """The TensorRT 10 Python API equivalent of the trtexec command."""
    import tensorrt as trt

    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(0)  # TensorRT 10: explicit batch is the only mode
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(step["built_from"])):
        errors = [str(parser.get_error(i)) for i in range(parser.num_errors)]
        raise RuntimeError(f"TensorRT could not parse {step['built_from']}: {errors}")
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, args.workspace_mib << 20)
    if args.fp16:
        config.set_flag(trt.BuilderFlag.FP16)
    cache_bytes = args.timing_cache.read_bytes() if args.timing_cache.exists() else b""
    cache = config.create_timing_cache(cache_bytes)
    config.set_timing_cache(cache, ignore_mismatch=False)
    for profile in step["profiles"]:
        optimisation = builder.create_optimization_profile()
        for name in profile.min:
            optimisation.set_shape(name, profile.min[name], profile.opt[name], profile.max[name])
        config.add_optimization_profile(optimisation)
    serialised = builder.build_serialized_network(network, config)
    if serialised is None:
        raise RuntimeError(f"TensorRT failed to build {step['model']}")
    step["plan"].write_bytes(bytes(serialised))
    args.timing_cache.write_bytes(bytes(config.get_timing_cache().serialize()))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repo", type=Path, default=ROOT / "model_repo", help="repository with the ONNX models' configs")
    p.add_argument("--models", default=",".join(MODELS), help="comma-separated model folders to build")
    p.add_argument("--out-dir", type=Path, default=Path("plans"))
    p.add_argument("--fp16", action="store_true", help="allow FP16 kernels (checked at the fp16 tolerances)")
    p.add_argument("--workspace-mib", type=int, default=4096, help="builder scratch memory limit, MiB")
    p.add_argument("--timing-cache", type=Path, default=None, help="default: OUT_DIR/timing.cache (reused)")
    p.add_argument("--split-batch", type=int, default=0, help="K: two profiles, batch 1..K and K+1..max")
    p.add_argument("--shape", action="append", default=[], help="name:axis=min,opt,max for a dynamic axis")
    p.add_argument("--builder", choices=("auto", "trtexec", "python"), default="auto")
    p.add_argument("--no-fold", action="store_true", help="skip polygraphy's constant folding")
    p.add_argument("--no-check", action="store_true", help="skip the engine-vs-ONNX-Runtime output check")
    p.add_argument("--dry-run", action="store_true", help="print commands and profiles; needs no TensorRT")
    args = p.parse_args(argv)
    args.timing_cache = args.timing_cache or args.out_dir / "timing.cache"
    try:
        steps = [plan_for(model, args) for model in args.models.split(",")]
    except (ValueError, FileNotFoundError) as exc:
        print(f"build_trt: {exc}", file=sys.stderr)
        return 2
    if args.dry_run:
        print("\n\n".join(describe(step, args) for step in steps))
        return 0
    missing = tensorrt_missing(steps)
    if missing:
        print(f"build_trt: {missing}", file=sys.stderr)
        return 2
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for step in steps:
        print(describe(step, args), flush=True)
        if step["fold"]:
            subprocess.run(step["fold"], check=True)
        if step["build"]:
            subprocess.run(step["build"], check=True)
        else:
            build_with_python_api(step, args)
        if not args.no_check:
            from asr_server.gpu.engine_check import check_engine

            report = check_engine(step["model"], step["config"], step["onnx"], step["plan"],
                                  CHECK_TOLERANCES["fp16" if args.fp16 else "fp32"])
            print(report.line(), flush=True)
            if not report.ok:
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
