"""Export a WeNet-style model dir to ONNX (encoder, streaming_encoder, decoder [+ fp16, + sherpa-onnx]).

    python scripts/export_onnx.py --model-dir models/demo_en --out-dir models/demo_en/onnx \
        [--chunk-size 16] [--left-chunks 4] [--beam 10] [--fp16] [--sherpa]

Every graph is run with ONNX Runtime against the PyTorch model on random inputs; one parity line per graph is
printed, and the exit status is 1 when any fp32 graph differs by more than --atol (fp16 graphs are compared
with the fp32 model at a looser tolerance, see asr_server/asr/export/graphs.py).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

from asr_server.asr.nn.checkpoint import load_model_dir
from asr_server.asr.export.export_all import export_all
from asr_server.asr.export.options import ExportMismatch, ExportOptions


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model-dir", type=Path, required=True, help="train.yaml, final.pt, units.txt, global_cmvn")
    p.add_argument("--checkpoint", default="final.pt")
    p.add_argument("--out-dir", type=Path, required=True)
    p.add_argument("--chunk-size", type=int, default=16, help="encoder frames per streaming chunk (40 ms each)")
    p.add_argument("--left-chunks", type=int, default=4, help="chunks of attention cache (fixed in the graph)")
    p.add_argument("--beam", type=int, default=10, help="top-k of the CTC log-probs the encoders return")
    p.add_argument("--fp16", action="store_true", help="also write *_fp16.onnx (model exported in half)")
    p.add_argument("--sherpa", action="store_true", help="also write sherpa/model.onnx + sherpa/tokens.txt")
    p.add_argument("--atol", type=float, default=1e-4, help="max |ORT - torch| for the fp32 graphs")
    args = p.parse_args(argv)

    import torch

    torch.set_num_threads(2)  # export is not worth more cores than a background training run
    loaded = load_model_dir(args.model_dir, args.checkpoint)
    opts = ExportOptions(chunk_size=args.chunk_size, left_chunks=args.left_chunks, beam=args.beam, atol=args.atol)
    start = time.monotonic()
    try:
        result = export_all(loaded.model, args.out_dir, opts, fp16=args.fp16,
                            sherpa_symbols=loaded.symbols if args.sherpa else None)
    except (ExportMismatch, ValueError) as e:
        print(f"export failed: {e}", file=sys.stderr)
        return 1
    bad = [r.graph for r in result.reports if not r.ok]
    print(f"wrote {len(result.files)} graphs into {args.out_dir} in {time.monotonic() - start:.1f} s"
          + (f"; MISMATCH in {', '.join(bad)}" if bad else "; all match"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
