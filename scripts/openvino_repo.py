"""Write OpenVINO IR of a built repository's encoders and a copy of the repository that serves them on the
openvino backend (the rest of the pipeline is unchanged).

    python scripts/openvino_repo.py --repo model_repo --out model_repo_openvino \
        [--models encoder streaming_encoder] [--parameter INFERENCE_NUM_THREADS=2 ...]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

from asr_server.repo_builder.openvino import ENCODER_MODELS, rewrite_repository


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repo", type=Path, required=True, help="an ONNX repository (scripts/build_model_repo.py's)")
    p.add_argument("--out", type=Path, required=True, help="new folder for the rewritten repository")
    p.add_argument("--models", nargs="+", default=list(ENCODER_MODELS), help="graph models to run on OpenVINO")
    p.add_argument("--parameter", action="append", default=[], metavar="KEY=VALUE",
                   help="Triton openvino parameter for the rewritten models (NUM_STREAMS, INFERENCE_NUM_THREADS, ...)")
    args = p.parse_args(argv)
    parameters = dict(item.split("=", 1) for item in args.parameter)
    done = rewrite_repository(args.repo, args.out, args.models, parameters)
    print(f"{args.out}: {', '.join(done) or 'nothing'} on openvino")
    return 0 if done else 1


if __name__ == "__main__":
    sys.exit(main())
