#!/usr/bin/env python3
"""Write the ONNX files of the bundled example models (tiny, committed; rerun to regenerate).

    python scripts/make_example_models.py [--repo model_repo]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import onnx
from onnx import TensorProto, helper

OPSET = 17  # old enough for every onnxruntime the project allows
IR_VERSION = 8


def identity_fp32(path: Path) -> None:
    """INPUT0 [batch, time] FP32 -> OUTPUT0, unchanged: the smallest model that exercises batching."""
    shape = ["batch", "time"]
    graph = helper.make_graph(
        [helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"])],
        "identity_fp32",
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, shape)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="asr_server")
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))


EXAMPLES = {"identity_fp32": identity_fp32}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, default=Path(__file__).resolve().parent.parent / "model_repo")
    args = parser.parse_args()
    for name, write in EXAMPLES.items():
        path = args.repo / name / "1" / "model.onnx"
        write(path)
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
