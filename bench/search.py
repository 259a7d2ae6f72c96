"""CTC prefix beam search speed: compiled kernel vs the plain-Python reference, same run.

    python -m bench.search [--frames 250] [--vocab 5000] [--beam 10] [--repeats 20] [--lm-model DIR]

Defaults: T=250 encoder frames at 40 ms = 10 s of audio, V=5000, beam 10, top-k 10. Two
kinds of random posteriors: "flat" (a new token wins almost every frame: long prefixes,
worst case) and "peaky" (blank wins ~70% of frames, like a trained CTC model). Inputs are
the encoder's top-k (T, K) and, separately, full (T, V) log-probs. Every fast n-best is
checked identical to the reference's before its time is printed.

With ``--lm-model DIR`` (a model folder with ``units.txt`` and ``lm.arpa.gz``), also the cost of fusing its token
n-gram LM: the same posteriors over its units searched with and without the LM, the fused n-best checked
against the reference's.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from asr_server.asr.decoding.ctc_search import (
    IMPLEMENTATION,
    CtcPrefixBeamSearch,
    SearchOptions,
    advance_streams,
    ctc_greedy,
    topk_log_probs,
)
from asr_server.asr.decoding.reference_search import reference_prefix_beam_search
from asr_server.asr.decoding.token_lm import load_arpa
from asr_server.asr.units import SymbolTable

FRAME_S = 0.04  # one encoder frame after 4x subsampling of 10 ms fbank frames


def make_log_probs(rng: np.random.Generator, frames: int, vocab: int, kind: str) -> np.ndarray:
    """(T, V) float32 log-softmax posteriors."""
    logits = rng.standard_normal((frames, vocab)) * 3.0
    if kind == "peaky":
        blank_frames = rng.random(frames) < 0.7
        logits[blank_frames, 0] = logits[blank_frames].max(-1) + 8.0
    logits -= logits.max(-1, keepdims=True)
    return (logits - np.log(np.exp(logits).sum(-1, keepdims=True))).astype(np.float32)


def timed(fn, repeats: int) -> tuple[float, object]:
    """Median wall time of fn() in seconds, and its last result."""
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def fast_search(opts: SearchOptions, lp: np.ndarray, ids: np.ndarray | None):
    search = CtcPrefixBeamSearch(opts)
    search.advance(lp, ids)
    return search.nbest()


def lm_cost(args, rng: np.random.Generator) -> bool:
    """Plain vs LM-fused search over the LM model's own units, same posteriors; True if the fused n-best is
    the reference's."""
    symbols = SymbolTable.load(args.lm_model / "units.txt")
    t0 = time.perf_counter()
    lm = load_arpa(args.lm_model / "lm.arpa.gz", symbols.id_to_symbol)
    print(f"\nLM fusion: {args.lm_model / 'lm.arpa.gz'}, order {lm.order}, {len(lm.arc_token)} n-grams, "
          f"{lm.nbytes / 2**20:.1f} MiB of arrays, loaded in {time.perf_counter() - t0:.1f} s; V={len(symbols)}")
    plain_opts = SearchOptions(beam_size=args.beam)
    fused_opts = SearchOptions(beam_size=args.beam, lm=lm)
    fast_search(fused_opts, make_log_probs(rng, 4, len(symbols), "flat"), None)  # compile
    ok = True
    for kind in ("flat", "peaky"):
        vals, ids = topk_log_probs(make_log_probs(rng, args.frames, len(symbols), kind), plain_opts.tokens_per_frame)
        plain_s, _ = timed(lambda: fast_search(plain_opts, vals, ids), args.repeats)
        fused_s, fused_nbest = timed(lambda: fast_search(fused_opts, vals, ids), args.repeats)
        ref_nbest, _ = reference_prefix_beam_search(vals, ids, fused_opts)
        same = fused_nbest == ref_nbest
        ok &= same
        print(f"{kind} top-k (T,K): plain {1e3 * plain_s / (args.frames * FRAME_S):.3f}, fused "
              f"{1e3 * fused_s / (args.frames * FRAME_S):.3f} ms per second of audio ({fused_s / plain_s:.1f}x); "
              f"fused n-best {'identical to the reference' if same else 'DIFFERENT from the reference'}")
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=250)
    ap.add_argument("--vocab", type=int, default=5000)
    ap.add_argument("--beam", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=20, help="fast runs per case (reference: 3)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lm-model", type=Path, default=None, help="model folder with units.txt and lm.arpa.gz: "
                    "also time the search with its LM fused")
    args = ap.parse_args()

    rng = np.random.default_rng(args.seed)
    audio_s = args.frames * FRAME_S
    opts = SearchOptions(beam_size=args.beam)
    print(
        f"CTC prefix beam search: T={args.frames} frames ({audio_s:.1f} s audio), V={args.vocab}, "
        f"beam {args.beam}, top-k {opts.tokens_per_frame}; fast = {IMPLEMENTATION}"
    )
    t0 = time.perf_counter()
    fast_search(opts, make_log_probs(rng, 4, 50, "flat"), None)  # compile or load the cached kernels
    print(f"kernel load/compile: {time.perf_counter() - t0:.2f} s (once per process)\n")

    header = f"{'input':<24}{'fast ms/s audio':>16}{'ref ms/s audio':>16}{'ratio':>8}  n-best"
    print(header)
    print("-" * len(header))
    ok = True
    for kind in ("flat", "peaky"):
        lp = make_log_probs(rng, args.frames, args.vocab, kind)
        vals, ids = topk_log_probs(lp, opts.tokens_per_frame)
        cases = [
            (f"{kind} top-k (T,K)", opts, vals, ids),
            (f"{kind} full (T,V)", opts, lp, None),
            (f"{kind} top-k cutoff .9999", SearchOptions(beam_size=args.beam, cutoff_prob=0.9999), vals, ids),
        ]
        for name, case_opts, x, x_ids in cases:
            fast_s, fast_nbest = timed(lambda: fast_search(case_opts, x, x_ids), args.repeats)
            ref_s, (ref_nbest, _) = timed(lambda: reference_prefix_beam_search(x, x_ids, case_opts), 3)
            same = fast_nbest == ref_nbest
            ok &= same
            print(
                f"{name:<24}{1e3 * fast_s / audio_s:>16.3f}{1e3 * ref_s / audio_s:>16.2f}"
                f"{ref_s / fast_s:>7.0f}x  {'identical' if same else 'DIFFERENT'}"
            )

    # What the streaming scorer does per model call: many streams, one 16-frame chunk each.
    batch, chunk = 64, 16
    lp = np.stack([make_log_probs(rng, args.frames, args.vocab, "peaky") for _ in range(batch)])
    vals, ids = topk_log_probs(lp, opts.tokens_per_frame)

    def streaming() -> None:
        streams = [CtcPrefixBeamSearch(opts) for _ in range(batch)]
        for a in range(0, args.frames, chunk):
            advance_streams(streams, vals[:, a : a + chunk], ids[:, a : a + chunk])

    stream_s, _ = timed(streaming, 3)
    print(
        f"\nadvance_streams, {batch} streams x {chunk}-frame chunks (peaky top-k): "
        f"{1e3 * stream_s / (batch * audio_s):.3f} ms per second of audio per stream "
        f"({1e3 * stream_s / (batch * -(-args.frames // chunk)):.3f} ms per stream-chunk)"
    )
    greedy_s, _ = timed(lambda: ctc_greedy(lp), 5)
    print(f"ctc_greedy, batch {batch} full (T,V): {1e3 * greedy_s / (batch * audio_s):.3f} ms per second of audio")
    if args.lm_model is not None:
        ok &= lm_cost(args, rng)
    if not ok:
        print("FAIL: fast and reference n-best differ", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
