"""scripts/build_model_repo.py --out NEW_DIR writes a complete repository (graphs, python models, tokenizer
files, relative paths) that serves both ASR pipelines, and still does after the folder is moved and copied.

Uses the bundled model (models/demo_en) and its graphs, exported at set-up (scripts/build_demo_repo.sh).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from asr_client.audio import load_audio
from asr_client.streaming import StreamingClient, StreamOptions
from bench.vs_sherpa import child_pids
from tests.conftest import ROOT
from tests.helpers.served import served_transcripts

MODEL_DIR = ROOT / "models" / "demo_en"
DATA = ROOT / "tests" / "data" / "demo_utts"
UTTERANCE = "test_a_000004"  # "i need nine black chairs": 2 s, both pipelines transcribe it exactly
PIPELINE_MODELS = {"feature_extractor", "encoder", "decoder", "scoring", "attention_rescoring",
                   "streaming_feature_extractor", "streaming_encoder", "wenet", "streaming_wenet",
                   "streaming_wenet_ensemble"}

pytestmark = pytest.mark.skipif(not (MODEL_DIR / "onnx" / "encoder.onnx").exists(),
                                reason="the bundled model's graphs are not exported: run bash scripts/build_demo_repo.sh")


def build(out: Path, *flags: str) -> subprocess.CompletedProcess:
    """The script as a user runs it, from another working directory."""
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "build_model_repo.py"), "--model-dir",
                           str(MODEL_DIR), "--out", str(out), *flags], cwd=out.parent, capture_output=True,
                          text=True, timeout=120)


def parameters(model: Path) -> dict[str, str]:
    config = text_format.Parse((model / "config.pbtxt").read_text(), mc.ModelConfig())
    return {key: value.string_value for key, value in config.parameters.items()}


def reference() -> tuple:
    texts = dict(line.split(" ", 1) for line in (DATA / "text").read_text().splitlines())
    return load_audio(DATA / f"{UTTERANCE}.flac").samples, texts[UTTERANCE]


async def transcripts(running, repo: Path) -> tuple[str, str]:
    """(offline transcript, final streaming transcript) of the reference utterance from a server on `repo`."""
    return await served_transcripts(running, repo, reference()[0])


def test_repository_is_self_contained(tmp_path):
    out = tmp_path / "built"
    run = build(out)
    assert run.returncode == 0, run.stderr
    assert {p.name for p in out.iterdir()} == PIPELINE_MODELS
    for name in ("feature_extractor", "scoring", "streaming_feature_extractor", "wenet", "streaming_wenet"):
        assert (out / name / "1" / "model.py").read_text() == (ROOT / "model_repo" / name / "1" / "model.py").read_text()
    for name in ("scoring", "wenet", "streaming_wenet"):
        assert (out / name / "units.txt").read_bytes() == (MODEL_DIR / "units.txt").read_bytes()
        assert (out / name / "bpe.model").read_bytes() == (MODEL_DIR / "bpe.model").read_bytes()
    # No parameter points outside the repository: no absolute path; the only '..' paths are the streaming
    # scorer's graphs in its sibling models (encoder_onnx, decoder_onnx), which exist.
    for config in out.glob("*/config.pbtxt"):
        for value in re.findall(r'string_value: "([^"]*)"', config.read_text()):
            assert not value.startswith("/"), (config, value)
            if ".." in Path(value).parts:
                target = (config.parent / value).resolve()
                assert target.is_file() and target.is_relative_to(out.resolve()), (config, value)
    for name in ("wenet", "streaming_wenet"):
        assert "encoder_onnx" in parameters(out / name)


async def test_built_repository_serves_both_pipelines_where_built_moved_and_copied(tmp_path, running):
    _, text = reference()
    built = tmp_path / "built"
    assert build(built).returncode == 0
    assert await transcripts(running, built) == (text, text)

    moved = tmp_path / "elsewhere" / "deeper" / "repo"
    moved.parent.mkdir(parents=True)
    shutil.move(built, moved)
    copied = tmp_path / "copy"
    shutil.copytree(moved, copied)
    shutil.rmtree(moved)  # nothing may refer to the folder it was copied from
    assert await transcripts(running, copied) == (text, text)


async def test_a_token_lm_is_copied_next_to_each_decoding_model_and_served(tmp_path, running):
    """--lm: the ARPA travels with the repository, the decoding models name it (lm_file, lm_weight, lm_bonus)
    and load it; the reference utterance is still transcribed exactly."""
    lm = ROOT / "models" / "open_en_wip" / "lm.arpa.gz"  # over the same 202 units as the demo model
    built = tmp_path / "built"
    run = build(built, "--lm", str(lm), "--lm-weight", "0.4")
    assert run.returncode == 0, run.stderr
    for name in ("scoring", "wenet", "streaming_wenet"):
        assert (built / name / "lm.arpa.gz").read_bytes() == lm.read_bytes()
        params = parameters(built / name)
        assert (params["lm_file"], float(params["lm_weight"]), float(params["lm_bonus"])) == ("lm.arpa.gz", 0.4, 3.0)
    _, text = reference()
    assert await transcripts(running, built) == (text, text)
    missing = build(tmp_path / "none", "--lm", str(tmp_path / "absent.arpa"))
    assert missing.returncode == 2 and "no such file" in missing.stderr
    greedy = build(tmp_path / "greedy", "--lm", str(lm), "--search", "greedy")
    assert greedy.returncode == 2 and "cannot go with --search greedy" in greedy.stderr


def our_children() -> set[int]:
    return set(child_pids(os.getpid()))


async def test_instance_process_runs_each_streaming_scorer_instance_in_its_own_process(tmp_path, running):
    built = tmp_path / "built"
    run = build(built, "--instance-process")
    assert run.returncode == 0, run.stderr
    for name in ("wenet", "streaming_wenet"):
        assert parameters(built / name)["instance_process"] == "1", name
    samples, text = reference()
    before = our_children()
    async with running(built, allow_http=False) as server:
        # two instances of each of the two scorers, each in a process of its own
        assert len(our_children() - before) == 4
        async with StreamingClient(f"127.0.0.1:{server.grpc_port}", StreamOptions(chunk_ms=640)) as streaming:
            assert (await streaming.transcribe(samples)).text == text
    assert not our_children() - before  # they ended with the server
    refused = build(tmp_path / "bls", "--instance-process", "--streaming-bls")
    assert refused.returncode != 0 and "cannot go with --streaming-bls" in refused.stderr


@pytest.mark.parametrize("fixture, geometry", [("u2pp_conformer_bpe", (4, 6)), ("u2pp_conformer_conv2d6_v2", (6, 10)),
                                                ("u2_conformer_conv2d8_abspos", (8, 14))])
def test_subsampling_and_right_context_come_from_train_yaml(fixture, geometry):
    """conv2d6 / conv2d8 models need no --subsampling/--right-context flags: train.yaml's input_layer gives them."""
    from asr_server.repo_builder.model_folder import model_subsampling

    assert model_subsampling(ROOT / "tests" / "fixtures" / "wenet" / fixture) == geometry


def setup_build_flags() -> list[str]:
    """build_model_repo.py's flags in scripts/build_demo_repo.sh, the set-up step that writes model_repo/."""
    script = (ROOT / "scripts" / "build_demo_repo.sh").read_text().replace("\\\n", " ")
    line = next(line for line in script.splitlines() if "scripts/build_model_repo.py" in line)
    words = shlex.split(line.replace('"$MODEL"', str(MODEL_DIR)))
    flags = words[words.index("scripts/build_model_repo.py") + 1:]
    out = flags.index("--out")
    del flags[out:out + 2]  # written into a temporary folder here
    return [f for f in flags if f != "--export"]


def test_committed_configs_are_what_the_set_up_writes(tmp_path):
    """model_repo/*/config.pbtxt are generated (set-up rewrites them); committed, they must not go stale."""
    out = tmp_path / "generated"
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "build_model_repo.py"), *setup_build_flags(),
                          "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    generated = sorted(p.parent.name for p in out.glob("*/config.pbtxt"))
    assert set(generated) == PIPELINE_MODELS
    stale = [name for name in generated
             if (out / name / "config.pbtxt").read_text() != (ROOT / "model_repo" / name / "config.pbtxt").read_text()]
    assert stale == [], f"regenerate with: bash scripts/build_demo_repo.sh (stale: {stale})"


def test_the_command_line_refuses_to_overwrite_or_guess(tmp_path):
    """--out is required; a non-empty --out needs --force (it once overwrote the bundled model_repo/ while a
    server served it); a folder that is not a WeNet model says which file is missing."""
    script = [sys.executable, str(ROOT / "scripts" / "build_model_repo.py")]
    run = subprocess.run([*script, "--model-dir", str(MODEL_DIR)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and "--out" in run.stderr
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "keep.txt").write_text("mine")
    run = subprocess.run([*script, "--model-dir", str(MODEL_DIR), "--out", str(taken)], capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 2 and "not empty" in run.stderr and "--force" in run.stderr
    assert [p.name for p in taken.iterdir()] == ["keep.txt"]
    (tmp_path / "not_a_model").mkdir()
    (tmp_path / "not_a_model" / "units.txt").write_text("<blank> 0\n")
    run = subprocess.run([*script, "--model-dir", str(tmp_path / "not_a_model"), "--out", str(tmp_path / "new")],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and "train.yaml missing" in run.stderr and "Traceback" not in run.stderr
    helps = subprocess.run([*script, "--help"], capture_output=True, text=True, timeout=60).stdout
    # every option has a help text: argparse prints an option without one on a line of its own
    lines = helps.split("options:")[1].splitlines()[1:]
    bare = [line.strip() for i, line in enumerate(lines) if line.strip().startswith("--")
            and len(line.strip().split("  ")) == 1 and (i + 1 == len(lines) or lines[i + 1].strip().startswith("-"))]
    assert bare == [], bare
