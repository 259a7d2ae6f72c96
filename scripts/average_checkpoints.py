#!/usr/bin/env python3
"""Average the weights of several checkpoints of one training run into a model dir's final.pt.

WeNet's recipes decode with the average of the last few checkpoints rather than the last one: the average
sits nearer the middle of the valley that the optimiser hops around in, and usually decodes better.

    python scripts/average_checkpoints.py --model-dir models/demo_en CKPT [CKPT ...] [--fp16-weights]

The model dir (train.yaml, units.txt, global_cmvn; written by `scripts/train.py --finalize`) fixes the
architecture; each CKPT is a training checkpoint (`{"model": state_dict, ...}`, as train.py writes) or a bare
state_dict. Every checkpoint must have exactly the model's parameters. final.pt is replaced atomically.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from asr_server.asr.nn.checkpoint import load_model_dir


def read_state(path: Path) -> dict[str, torch.Tensor]:
    state = torch.load(path, map_location="cpu", weights_only=False)
    if isinstance(state, dict) and isinstance(state.get("model"), dict):
        state = state["model"]
    return state


def average(paths: list[Path]) -> dict[str, torch.Tensor]:
    """Element-wise mean of floating-point tensors (in float64, then cast back); other tensors (step counters,
    integer buffers) are taken from the last checkpoint."""
    states = [read_state(p) for p in paths]
    keys = states[0].keys()
    for path, state in zip(paths[1:], states[1:]):
        if state.keys() != keys:
            raise ValueError(f"{path} holds other parameters than {paths[0]}")
    out = {}
    for key in keys:
        last = states[-1][key]
        if last.is_floating_point():
            out[key] = (sum(s[key].double() for s in states) / len(states)).to(last.dtype)
        else:
            out[key] = last.clone()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-dir", type=Path, required=True)
    p.add_argument("checkpoints", type=Path, nargs="+")
    p.add_argument("--fp16-weights", action="store_true", help="store final.pt in half precision (size)")
    args = p.parse_args(argv)
    loaded = load_model_dir(args.model_dir)  # fails early on a wrong folder
    state = average(args.checkpoints)
    loaded.model.load_state_dict(state, strict=True)  # exactly the model's parameters
    if args.fp16_weights:
        state = {k: v.half() if v.is_floating_point() else v for k, v in state.items()}
    tmp = args.model_dir / "final.pt.tmp"
    torch.save(state, tmp)
    tmp.replace(args.model_dir / "final.pt")
    print(f"wrote {args.model_dir / 'final.pt'}: the average of {len(args.checkpoints)} checkpoints")
    return 0


if __name__ == "__main__":
    sys.exit(main())
