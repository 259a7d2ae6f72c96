"""scripts/build_trt.sh: optimisation profiles derived from config.pbtxt, the --dry-run output, and the
engine check's feeds and comparison (run here with ONNX Runtime on both sides: no TensorRT on CI)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from asr_server.gpu.profiles import derive_profiles, parse_shape_overrides, pick_profile, trtexec_shapes
from tests.conftest import BUNDLED_REPO, ROOT

needs_graphs = pytest.mark.skipif(not (BUNDLED_REPO / "encoder" / "1" / "encoder.onnx").exists(),
                                  reason="model_repo has no exported graphs: run bash scripts/build_demo_repo.sh")
ENCODER = """
name: "encoder" max_batch_size: 64
input [ { name: "speech" data_type: TYPE_FP32 dims: [ -1, 80 ] },
        { name: "speech_lengths" data_type: TYPE_INT32 dims: [ 1 ] reshape: { shape: [ ] } } ]
dynamic_batching { preferred_batch_size: [ 8, 16 ] }
"""
STREAMING = """
name: "streaming_encoder" max_batch_size: 32
input [ { name: "chunk_xs" data_type: TYPE_FP32 dims: [ 67, 80 ] } ]
sequence_batching { oldest { preferred_batch_size: [ 4, 64 ] }
  state [ { input_name: "offset" output_name: "r_offset" data_type: TYPE_INT32 dims: [ 1 ] } ] }
"""


def config(text: str) -> mc.ModelConfig:
    return text_format.Parse(text, mc.ModelConfig())


def test_offline_encoder_profile_runs_batch_1_preferred_max_and_frames_16_512_2048():
    [profile] = derive_profiles(config(ENCODER))
    assert profile.min == {"speech": (1, 16, 80), "speech_lengths": (1,)}
    assert profile.opt == {"speech": (16, 512, 80), "speech_lengths": (16,)}  # largest preferred batch
    assert profile.max == {"speech": (64, 2048, 80), "speech_lengths": (64,)}
    assert trtexec_shapes(profile) == ["--minShapes=speech:1x16x80,speech_lengths:1",
                                       "--optShapes=speech:16x512x80,speech_lengths:16",
                                       "--maxShapes=speech:64x2048x80,speech_lengths:64"]


def test_streaming_profile_includes_state_and_ignores_preferred_sizes_above_max():
    [profile] = derive_profiles(config(STREAMING))
    assert profile.opt == {"chunk_xs": (4, 67, 80), "offset": (4, 1)}  # 64 > max_batch_size 32 is ignored
    assert profile.max == {"chunk_xs": (32, 67, 80), "offset": (32, 1)}


def test_split_batch_and_overrides_and_the_profile_a_batch_picks():
    profiles = derive_profiles(config(ENCODER), parse_shape_overrides(["speech:0=8,100,300"]), split_batch=8)
    assert [p.batch_range for p in profiles] == [(1, 8), (9, 64)]
    assert profiles[0].opt["speech"] == (8, 100, 80) and profiles[1].opt["speech"] == (16, 100, 80)
    assert profiles[1].max["speech"] == (64, 300, 80)
    ranges = [p.batch_range for p in profiles]
    assert [pick_profile(ranges, b) for b in (1, 8, 9, 64)] == [0, 0, 1, 1]
    with pytest.raises(ValueError, match="outside every optimisation profile"):
        pick_profile(ranges, 65)


def test_a_dynamic_axis_without_a_range_and_bad_overrides_are_refused():
    unknown = config('name: "m" max_batch_size: 4 input [ { name: "x" data_type: TYPE_FP32 dims: [ -1 ] } ]')
    with pytest.raises(ValueError, match=r"pass --shape x:0=MIN,OPT,MAX"):
        derive_profiles(unknown)
    with pytest.raises(ValueError, match="min <= opt <= max"):
        parse_shape_overrides(["x:0=5,2,9"])
    with pytest.raises(ValueError, match="split-batch"):
        derive_profiles(config(ENCODER), split_batch=64)


def dry_run(*flags: str) -> str:
    # PATH without trtexec or polygraphy; this interpreter and its PYTHONPATH, since the script's own default
    # (.venv/bin/python, else python3 on PATH) is absent where the GPU check runs (packages under /tmp/site)
    env = {"PATH": "/usr/bin:/bin", "PYTHON": sys.executable}
    if os.environ.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    run = subprocess.run(["bash", str(ROOT / "scripts" / "build_trt.sh"), "--repo", str(BUNDLED_REPO),
                          "--out-dir", "/nonexistent/plans", "--dry-run", *flags],
                         capture_output=True, text=True, timeout=60, env=env)
    assert run.returncode == 0, run.stderr
    return run.stdout


@needs_graphs
def test_dry_run_prints_the_trtexec_commands_and_profiles():
    out = dry_run("--builder", "trtexec", "--fp16", "--workspace-mib", "2048", "--no-fold")
    commands = [line for line in out.splitlines() if line.startswith("trtexec")]
    assert len(commands) == 3
    encoder = commands[0].split()
    assert encoder[:2] == ["trtexec", f"--onnx={BUNDLED_REPO}/encoder/1/encoder.onnx"]
    assert "--saveEngine=/nonexistent/plans/encoder.plan" in encoder and "--fp16" in encoder
    assert "--memPoolSize=workspace:2048M" in encoder
    assert "--timingCacheFile=/nonexistent/plans/timing.cache" in encoder
    assert "--maxShapes=speech:64x2048x80,speech_lengths:64" in encoder
    assert any(arg.startswith("--minShapes=chunk_xs:1x67x80,chunk_lens:1,offset:1x1,att_cache:1x") for arg in commands[1].split())
    profile = json.loads(next(line for line in out.splitlines() if line.startswith("# profile 0")).split(": ", 1)[1])
    assert profile["opt"]["speech"] == [16, 512, 80]
    assert '"float_atol": 0.05' in out  # fp16 tolerances are stated
    assert not (ROOT / "nonexistent").exists()


@needs_graphs
def test_dry_run_without_trtexec_describes_the_python_api_build():
    out = dry_run()  # PATH has no trtexec and no polygraphy
    assert "trtexec" not in out
    assert out.count("# TensorRT Python API: parse") == 3
    assert out.count("# constant folding skipped: polygraphy not installed") == 3
    assert '"float_atol": 0.001' in out


@needs_graphs
@pytest.mark.parametrize("model", ["encoder", "streaming_encoder", "decoder"])
def test_engine_check_feeds_are_real_and_the_comparison_catches_a_difference(model):
    import onnxruntime as ort

    from asr_server.gpu.engine_check import check_feeds, compare

    feeds = check_feeds(model, BUNDLED_REPO / model / "config.pbtxt", BUNDLED_REPO / "encoder" / "1")
    session = ort.InferenceSession(str(BUNDLED_REPO / model / "1" / f"{model}.onnx"),
                                   providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    reference = dict(zip(names, session.run(None, feeds)))
    tolerances = {"float_atol": 1e-3, "top1_agreement": 0.999}
    assert compare(reference, reference, tolerances).ok
    if model == "decoder":  # best_index over real hypotheses: not all the same choice
        changed = {"best_index": (reference["best_index"] + 1) % 10}
    else:
        name = names[0]
        changed = {**reference, name: reference[name] + 0.01}
    report = compare(reference, {**reference, **changed}, tolerances)
    assert not report.ok and "MISMATCH" in report.line()


@pytest.mark.skipif(not (ROOT / "models" / "demo_en" / "onnx" / "encoder.onnx").exists(),
                    reason="the bundled model's graphs are not exported: run bash scripts/build_demo_repo.sh")
def test_export_build_serve_dry_run_writes_the_int32_twin_and_prints_the_rest(tmp_path):
    run = subprocess.run(["bash", str(ROOT / "scripts" / "export_build_serve.sh"), str(ROOT / "models" / "demo_en"),
                          str(tmp_path / "work"), "--dry-run"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    twin = tmp_path / "work" / "int32_repo"
    assert "TYPE_INT64" not in (twin / "streaming_encoder" / "config.pbtxt").read_text()
    assert f"{twin}/encoder/1/encoder.onnx" in run.stdout
    assert run.stdout.strip().splitlines()[-1] == f"asr-server --model-repository {tmp_path}/work/trt_repo"
    assert not (tmp_path / "work" / "plans").exists() and not (tmp_path / "work" / "trt_repo").exists()


@pytest.mark.tensorrt
@needs_graphs
def test_build_trt_builds_an_engine_that_matches_onnx_runtime(tmp_path):
    """Where TensorRT and a GPU exist: the INT32 twin's streaming encoder -> .plan, checked against ORT."""
    pytest.importorskip("tensorrt", reason="TensorRT (python package 'tensorrt' 10.x) is not installed")
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU visible to torch")
    from asr_server.repo_builder.tensorrt import rewrite_repository

    rewrite_repository(BUNDLED_REPO, tmp_path / "twin", mode="onnx_int32")
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "build_trt.py"), "--repo", str(tmp_path / "twin"),
                          "--models", "streaming_encoder", "--out-dir", str(tmp_path / "plans"),
                          "--builder", "python", "--no-fold"], capture_output=True, text=True, timeout=280)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "check streaming_encoder:" in run.stdout and ": ok" in run.stdout
