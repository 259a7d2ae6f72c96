"""An ASR model repository built from a tiny random U2++ model: export -> build_model_repo -> serve.

The transcripts of a random model are meaningless, but deterministic: the tests check that the pipelines
work end to end and that streaming results do not depend on chunking, batching or interleaving.
Tests with real transcripts use the bundled demo model (test_bundled_model.py).
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="building the test model repository needs torch")

from tests.conftest import ROOT  # noqa: E402

CHUNK = 4  # encoder frames per streaming chunk of the tiny model (160 ms)
LEFT_CHUNKS = 2
BEAM = 4


def _units(vocab: int) -> list[str]:
    letters = [chr(ord("a") + i) for i in range(vocab - 4)]
    return ["<blank>", "<unk>", *letters, "▁", "<sos/eos>"]


@pytest.fixture(scope="session")
def asr_repo(tmp_path_factory) -> Path:
    from asr_server.asr.nn.checkpoint import save_model_dir
    from asr_server.asr.units import SymbolTable
    from tests.asr.conftest import VOCAB, tiny_model

    from asr_server.repo_builder.pipelines import BuildOptions, build

    root = tmp_path_factory.mktemp("asr")
    model_dir = save_model_dir(root / "model", tiny_model(seed=3), SymbolTable(_units(VOCAB)), None)
    onnx_dir = root / "onnx"
    subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "export_onnx.py"), "--model-dir", str(model_dir),
         "--out-dir", str(onnx_dir), "--chunk-size", str(CHUNK), "--left-chunks", str(LEFT_CHUNKS),
         "--beam", str(BEAM)],
        check=True, capture_output=True, timeout=300,
    )
    repo = root / "repo"
    options = BuildOptions(beam=BEAM, chunk_size=CHUNK, max_batch=32)
    build(model_dir, onnx_dir, repo, options)
    # the same model with the streaming scorer calling its encoder and decoder models through BLS
    build(model_dir, onnx_dir, root / "repo_bls", dataclasses.replace(options, inline_graphs=False))
    return repo


@pytest.fixture(scope="session")
def asr_repo_bls(asr_repo) -> Path:
    return asr_repo.parent / "repo_bls"
