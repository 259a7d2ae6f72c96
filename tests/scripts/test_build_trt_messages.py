"""Without TensorRT, the TensorRT scripts say so in one line instead of a traceback; export_build_serve.sh
--help prints its usage."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys

import pytest

from tests.conftest import BUNDLED_REPO, ROOT


@pytest.mark.skipif(importlib.util.find_spec("tensorrt") is not None or shutil.which("trtexec") is not None,
                    reason="TensorRT is installed here: nothing to refuse")
@pytest.mark.skipif(not (BUNDLED_REPO / "encoder" / "1" / "encoder.onnx").exists(),
                    reason="the bundled model's graphs are not exported: run bash scripts/build_demo_repo.sh")
def test_build_trt_without_tensorrt_is_one_line(tmp_path):
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "build_trt.py"), "--repo", str(BUNDLED_REPO),
                          "--out-dir", str(tmp_path / "plans")], capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and "TensorRT is not installed here" in run.stderr and "--dry-run" in run.stderr
    assert "Traceback" not in run.stderr and not (tmp_path / "plans").exists()


def test_export_build_serve_help():
    run = subprocess.run(["bash", str(ROOT / "scripts" / "export_build_serve.sh"), "--help"], capture_output=True,
                         text=True, timeout=30)
    assert run.returncode == 0 and "MODEL_DIR WORK_DIR" in run.stdout and "--dry-run" in run.stdout
