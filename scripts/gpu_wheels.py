#!/usr/bin/env python3
"""Wheels for what a lent GPU machine's image lacks, fetched here into .whl/ (ignored by git, carried by the
device tool's run), at the versions this environment tests, for the image's Python 3.12.

    python scripts/gpu_wheels.py relay     # a GPU relay leg: scripts/relay_gpu.py train
    python scripts/gpu_wheels.py check     # the GPU checks: scripts/gpu_check.sh, bench/gpu_scale.py, tests/gpu
    # there, before the command:
    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site

The image (the device library's KINDS.md, its package list of 2026-11-17) has torch, numpy, onnx, onnxruntime
(CPU), grpcio, protobuf, aiohttp, pytest and more, and nothing can be installed there from a registry. Each set
is what its entry points import beyond that (tests/scripts/test_gpu_wheels.py walks their imports), with what
those wheels require in turn. The relay's set is kept small: its pack shares the 64 MiB that travel.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# The image's packages our code relies on (a subset of its list).
IMAGE_PACKAGES = (
    "torch", "numpy", "scipy", "tqdm", "pyyaml", "sentencepiece", "typing-extensions", "onnx", "onnxruntime",
    "grpcio", "protobuf", "aiohttp", "prometheus-client", "nvidia-ml-py", "matplotlib", "urllib3", "packaging",
    "click", "ml-dtypes", "pygments", "pytest-timeout",
)
_AUDIO = ("kaldi-native-fbank", "soundfile", "cffi", "pycparser", "soxr")
WHEEL_SETS = {
    "relay": _AUDIO,
    # grpcio, protobuf and pytest are on the image, but at other versions than ours were tested with (and
    # pytest-asyncio needs pytest >= 8.4); tests/gpu run with PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 (docs/gpu_check.md)
    "check": (*_AUDIO, "tritonclient", "python-rapidjson", "jiwer", "rapidfuzz", "grpcio", "protobuf",
              "pytest", "pluggy", "iniconfig", "pytest-asyncio"),
}
# What each set's work starts from (for the import walk of its test).
ENTRY_POINTS = {
    "relay": ("scripts/relay_gpu.py", "scripts/train.py"),
    "check": ("bench/gpu_scale.py", "bench/gpu_bench.py", "asr_server/__main__.py"),
}
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")


def download(kind: str, dest: Path) -> list[Path]:
    """Empty `dest`, then fetch the set's wheels there. Emptied first: two versions of one package there would
    stop `pip install --no-deps --target` on the GPU machine at its first line."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    pinned = [f"{name}=={importlib.metadata.version(name)}" for name in WHEEL_SETS[kind]]
    platforms = [arg for platform in PLATFORMS for arg in ("--platform", platform)]
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version",
                    "3.12", "--implementation", "cp", *platforms, "-d", str(dest), *pinned], check=True)
    return sorted(dest.glob("*.whl"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kind", choices=sorted(WHEEL_SETS))
    ap.add_argument("--dest", type=Path, default=REPO / ".whl")
    args = ap.parse_args(argv)
    wheels = download(args.kind, args.dest)
    size = sum(w.stat().st_size for w in wheels) / 2**20
    print(f"{args.dest}: {len(wheels)} wheels, {size:.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
