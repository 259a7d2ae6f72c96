"""bench/gpu_scale.py's dry run on the CPU: the same steps as on a GPU machine (repository with BLS encoders,
servers with 1 and 2 workers, paced load from generator processes, the table), small, so that the script is
known to work before a GPU window is spent on it."""

from __future__ import annotations

import json

import pytest

from bench import gpu_scale


@pytest.mark.skipif(not (gpu_scale.MODEL_DIR / "onnx" / "streaming_encoder.onnx").exists(),
                    reason="the bundled model's graphs are not exported: run bash scripts/build_demo_repo.sh")
def test_the_scale_check_runs_on_the_cpu(tmp_path, capsys):
    out = tmp_path / "scale.json"
    assert gpu_scale.main(["--device", "cpu", "--workers", "1,2", "--start", "2", "--max-streams", "2",
                           "--seconds", "2", "--clients", "1", "--connections", "2", "--out", str(out)]) == 0
    table = json.loads(out.read_text())
    assert set(table["held"]) == {"1", "2"} and all(held >= 2 for held in table["held"].values())
    assert "--workers 2:" in capsys.readouterr().out
