#!/usr/bin/env python3
"""Train a small U2++ conformer (CTC + bidirectional attention loss, dynamic chunks) on a Kaldi-style data dir.

Resumable at any point: ``EXP/checkpoint.pt`` (model, optimiser, step, data position, RNG) is written atomically
every ``--save-minutes`` and on SIGINT/SIGTERM; rerunning the same command continues from it. When the step or
time budget is reached a WeNet-style model dir is written to ``EXP/final/``.

    nice -n 15 python scripts/train.py --data /work/data/corpus/train --exp /work/data/exp/demo \
        --max-minutes 55 --threads 1

Augmentation: speed perturbation (0.9/1.0/1.1 resampling, as WeNet's speed_perturb), SpecAugment (time and
frequency masks on the fbank); the corpus itself carries voice, pitch, gain and noise variety.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import math
import random
import signal
import sys
import time
from pathlib import Path

import numpy as np
import soundfile as sf
import torch

from asr_server.asr.nn.checkpoint import save_model_dir
from asr_server.asr.features.cmvn import CmvnStats, load_cmvn, save_json_cmvn
from asr_server.asr.features.fbank import FbankConfig, fbank
from asr_server.asr.nn.model import IGNORE_ID, ModelConfig, U2Model, count_parameters
from asr_server.asr.nn.decoder import DecoderConfig
from asr_server.asr.nn.encoder import EncoderConfig, GlobalCMVN
from asr_server.asr.training.restricted_ctc import earliest_emission_frames
from asr_server.asr.units import SymbolTable, Tokenizer, bpe_units, train_bpe

# Arguments that define the network and its loss (train.yaml); --finalize takes them from the checkpoint.
MODEL_ARGS = ("d_model", "heads", "ffn", "blocks", "dec_blocks", "kernel", "ctc_weight", "reverse_weight", "dropout")
SPEEDS = (0.9, 1.0, 1.1)  # speed perturbation factors (tempo and pitch together, like sox speed)
CMVN_UTTS = 2000          # utterances used to estimate the global CMVN


def read_data_dir(d: Path) -> list[tuple[str, str, str]]:
    """(utt, wav path, text) from wav.scp + text."""
    wavs = dict(line.split(maxsplit=1) for line in (d / "wav.scp").read_text().splitlines() if line.strip())
    rows = []
    for line in (d / "text").read_text().splitlines():
        parts = line.split(maxsplit=1)
        if len(parts) == 2 and parts[0] in wavs:
            rows.append((parts[0], wavs[parts[0]].strip(), parts[1].strip()))
    return rows


def speed_perturb(wav: np.ndarray, factor: float) -> np.ndarray:
    """Resample by linear interpolation: factor > 1 is faster and higher."""
    if factor == 1.0:
        return wav
    src = np.arange(0, wav.size - 1, factor)
    return np.interp(src, np.arange(wav.size), wav).astype(np.float32)


def spec_augment(feats: np.ndarray, rng: random.Random, num_t_mask: int = 2, num_f_mask: int = 2,
                 max_t: int = 40, max_f: int = 10) -> np.ndarray:
    """Zero random time and frequency bands (WeNet's spec_aug defaults, max_t a little shorter for 2-4 s clips)."""
    x = feats.copy()
    t, f = x.shape
    for _ in range(num_t_mask):
        w = rng.randint(1, max_t)
        s = rng.randint(0, max(0, t - w))
        x[s:s + w] = 0.0
    for _ in range(num_f_mask):
        w = rng.randint(1, max_f)
        s = rng.randint(0, max(0, f - w))
        x[:, s:s + w] = 0.0
    return x


def load_wav(path: str) -> np.ndarray:
    wav, sr = sf.read(path, dtype="float32")
    if sr != 16000:
        raise ValueError(f"{path}: {sr} Hz, expected 16000")
    return wav


def prepare(args, rows) -> tuple[SymbolTable, Tokenizer, CmvnStats, Path]:
    """BPE, units.txt and CMVN, computed once and reused on resume."""
    exp = args.exp
    bpe_path = exp / "bpe.model"
    if not bpe_path.exists():
        train_bpe((t for _, _, t in rows), exp / "bpe", args.bpe_size)
    symbols = SymbolTable.from_units(bpe_units(bpe_path))
    symbols.save(exp / "units.txt")
    cmvn_path = exp / "global_cmvn"
    if cmvn_path.exists():
        cmvn = load_cmvn(cmvn_path)
    else:
        cmvn = CmvnStats.zeros(80)
        for _, p, _ in random.Random(0).sample(rows, min(CMVN_UTTS, len(rows))):
            cmvn.accumulate(fbank(load_wav(p)))
        save_json_cmvn(cmvn, cmvn_path)
    return symbols, Tokenizer(symbols, bpe_path), cmvn, bpe_path


def build(args, vocab: int, cmvn: CmvnStats) -> U2Model:
    enc = EncoderConfig(output_size=args.d_model, attention_heads=args.heads, linear_units=args.ffn,
                        num_blocks=args.blocks, dropout_rate=args.dropout, positional_dropout_rate=args.dropout,
                        attention_dropout_rate=0.0, cnn_module_kernel=args.kernel, causal=True,
                        use_dynamic_chunk=True, use_dynamic_left_chunk=False, cnn_module_norm="layer_norm")
    dec = DecoderConfig(attention_heads=args.heads, linear_units=args.ffn, num_blocks=args.dec_blocks,
                        r_num_blocks=args.dec_blocks, dropout_rate=args.dropout,
                        positional_dropout_rate=args.dropout)
    mean, istd = cmvn.mean_istd()
    return U2Model(ModelConfig(input_dim=80, vocab_size=vocab, ctc_weight=args.ctc_weight, lsm_weight=0.1,
                               reverse_weight=args.reverse_weight),
                   enc, dec, GlobalCMVN(torch.from_numpy(mean), torch.from_numpy(istd)))


def make_batch(items, tokenizer: Tokenizer, rng: random.Random, augment: bool, pad_multiple: int = 1,
               emission_slack: int | None = None):
    """Padded (x (B, T, 80), x_lens (B,), y (B, L) with IGNORE_ID, y_lens (B,), earliest (B, L) or None); T is
    rounded up to a multiple of `pad_multiple` frames: fewer distinct shapes let oneDNN reuse its kernels (15-20%
    faster steps here). With `emission_slack`, earliest holds each token's earliest CTC emission frame."""
    feats, ys, bounds = [], [], []
    for _, path, text in items:
        wav = load_wav(path)
        if augment:
            wav = speed_perturb(wav, rng.choice(SPEEDS))
        f = fbank(wav)
        if emission_slack is not None:
            bounds.append(earliest_emission_frames(f, tokenizer.text_to_tokens(text), emission_slack))
        feats.append(spec_augment(f, rng) if augment else f)
        ys.append(tokenizer.encode(text))
    xl = torch.tensor([f.shape[0] for f in feats])
    x = torch.zeros(len(feats), -(-int(xl.max()) // pad_multiple) * pad_multiple, 80)
    for i, f in enumerate(feats):
        x[i, : f.shape[0]] = torch.from_numpy(f)
    yl = torch.tensor([len(y) for y in ys])
    y = pad_int_rows(ys, IGNORE_ID)
    earliest = pad_int_rows(bounds, 0) if emission_slack is not None else None
    return x, xl, y, yl, earliest


def pad_int_rows(rows: list[list[int]], fill: int) -> torch.Tensor:
    """(B, longest) int64, each row's values then ``fill``."""
    return torch.nn.utils.rnn.pad_sequence([torch.tensor(r, dtype=torch.int64) for r in rows], batch_first=True,
                                           padding_value=fill)


def lr_at(step: int, peak: float, warmup: int) -> float:
    """WeNet's WarmupLR: linear warm-up to ``peak`` then inverse square-root decay."""
    step = max(step, 1)
    return peak * min(step / warmup, math.sqrt(warmup / step))


def epoch_order(n: int, seed: int, epoch: int, batch: int, rows) -> list[list[int]]:
    """Batches of similar-length utterances (less padding), in a random order fixed by (seed, epoch)."""
    rng = random.Random(seed * 1000 + epoch)
    idx = list(range(n))
    rng.shuffle(idx)
    # sort within windows of 50 batches by transcript length (a cheap proxy for duration)
    win = batch * 50
    out = []
    for s in range(0, n, win):
        block = sorted(idx[s:s + win], key=lambda i: len(rows[i][2]))
        out += [block[j:j + batch] for j in range(0, len(block), batch)]
    rng.shuffle(out)
    return out


def attention_chunk(step: int, args) -> int:
    """The encoder's attention chunk for this step's batch, in encoder frames (-1: full context).

    Dynamic chunk training as in WeNet's U2++: some batches see the whole utterance, the others a random
    chunk, so one model decodes offline and streaming. WeNet draws full context about half the time and
    chunks of 1-25 frames otherwise; --full-context-share and --chunk-range narrow that towards the chunk the
    server streams with. The draw depends on the step only, so a resumed run repeats it.
    """
    if step < args.curriculum_steps:
        return -1
    rng = random.Random(args.seed * 104729 + step)
    if rng.random() < args.full_context_share:
        return -1
    return rng.randint(args.chunk_range[0], args.chunk_range[1])


def planned_batches(rows, args, state: dict):
    """(epoch, position in epoch, utterance indices) from the saved position on, epoch after epoch."""
    epoch, start = state["epoch"], state["batch_in_epoch"]
    while True:
        order = epoch_order(len(rows), args.seed, epoch, args.batch, rows)
        for position in range(start, len(order)):
            yield epoch, position, order[position]
        epoch, start = epoch + 1, 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, required=True, help="Kaldi-style dir with wav.scp and text")
    ap.add_argument("--exp", type=Path, required=True)
    ap.add_argument("--max-minutes", type=float, default=55.0, help="wall-clock budget over all runs")
    ap.add_argument("--max-steps", type=int, default=100000)
    ap.add_argument("--save-minutes", type=float, default=4.0)
    ap.add_argument("--batch", type=int, default=32,
                    help="utterances per step (32 took 30%% less time per utterance than 16 here)")
    ap.add_argument("--pad-multiple", type=int, default=64, help="round each batch's frames up to this")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=300)
    ap.add_argument("--bpe-size", type=int, default=200)
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--ffn", type=int, default=512)
    ap.add_argument("--blocks", type=int, default=6)
    ap.add_argument("--dec-blocks", type=int, default=1)
    ap.add_argument("--kernel", type=int, default=15)
    ap.add_argument("--ctc-weight", type=float, default=0.3)
    ap.add_argument("--reverse-weight", type=float, default=0.3)
    ap.add_argument("--dropout", type=float, default=0.1,
                    help="dropout of encoder and decoder (on CPU, dropout masks cost ~15%% of a step)")
    ap.add_argument("--curriculum-steps", type=int, default=0,
                    help="first steps train full context without augmentation, so CTC finds its alignments "
                         "sooner; dynamic chunks start after them, augmentation too unless --augment-after says")
    ap.add_argument("--full-context-share", type=float, default=0.5,
                    help="share of the batches trained with full attention context after the curriculum")
    ap.add_argument("--chunk-range", type=int, nargs=2, default=(1, 25), metavar=("MIN", "MAX"),
                    help="the other batches' attention chunk, encoder frames (40 ms each), drawn uniformly")
    ap.add_argument("--augment-after", type=int, default=None,
                    help="step from which speed perturbation and SpecAugment apply (default: --curriculum-steps)")
    ap.add_argument("--emission-slack", type=int, default=None, metavar="FRAMES",
                    help="restricted CTC: no token may be emitted earlier than FRAMES encoder frames before the "
                         "time it is estimated to be spoken (speech span shared out by characters); keeps the "
                         "CTC head from writing words before it hears them, which streaming needs. Default: "
                         "plain CTC")
    ap.add_argument("--bf16", action="store_true",
                    help="bfloat16 autocast (about 2x faster on CPUs with AVX512-BF16 or AMX; weights stay fp32)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=777)
    ap.add_argument("--finalize", action="store_true",
                    help="write EXP/final (or --final-dir) from the latest checkpoint without training")
    ap.add_argument("--final-dir", type=Path, default=None)
    ap.add_argument("--fp16-weights", action="store_true", help="store final.pt in half precision (size)")
    args = ap.parse_args(argv)

    torch.set_num_threads(args.threads)
    args.exp.mkdir(parents=True, exist_ok=True)
    rows = read_data_dir(args.data)
    symbols, tokenizer, cmvn, bpe_path = prepare(args, rows)
    ckpt_path = args.exp / "checkpoint.pt"
    if args.finalize and ckpt_path.exists():
        # The model dir must describe the run, whatever this command line says: architecture and loss
        # weights come from the checkpoint (as the last training command set them).
        saved = torch.load(ckpt_path, map_location="cpu", weights_only=False)["args"]
        for name in MODEL_ARGS:
            setattr(args, name, saved.get(name, getattr(args, name)))
    torch.manual_seed(args.seed)
    model = build(args, len(symbols), cmvn)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    state = {"step": 0, "epoch": 0, "batch_in_epoch": 0, "elapsed": 0.0}
    if ckpt_path.exists():
        ck = torch.load(ckpt_path, map_location="cpu", weights_only=False)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["optimizer"])
        state = ck["state"]
        torch.set_rng_state(ck["torch_rng"])
        print(f"resumed at step {state['step']} ({state['elapsed'] / 60:.1f} min trained)", file=sys.stderr)
    print(f"{count_parameters(model) / 1e6:.2f}M parameters, {len(rows)} utterances, vocab {len(symbols)}",
          file=sys.stderr)

    final_dir = args.final_dir or args.exp / "final"

    def write_final():
        model.eval()
        save_model_dir(final_dir, model, symbols, cmvn, bpe_path, half_precision=args.fp16_weights,
                       extra={"training": {"steps": state["step"], "epochs_completed": state["epoch"],
                                           "minutes": round(state["elapsed"] / 60, 1),
                                           "utterances": len(rows), "batch": args.batch}})
        print(f"wrote {final_dir} after {state['step']} steps", file=sys.stderr)

    if args.finalize:
        write_final()
        return 0

    def save_checkpoint():
        tmp = ckpt_path.with_suffix(".tmp")
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "state": dict(state),
                    "torch_rng": torch.get_rng_state(), "args": vars(args)}, tmp)
        tmp.replace(ckpt_path)

    stop = {"flag": False}

    def on_signal(signum, _frame):
        stop["flag"] = True  # finish the current step, save, exit

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    from tqdm import tqdm

    log = (args.exp / "train_log.tsv").open("a")
    if log.tell() == 0:
        log.write("step\tepoch\tloss\tloss_ctc\tloss_att\tlr\tminutes\n")
    budget_s = args.max_minutes * 60
    bar = tqdm(total=args.max_steps, initial=state["step"], desc="train", dynamic_ncols=True, mininterval=5)
    model.train()
    t_last_save = time.monotonic()
    t_run = time.monotonic()
    elapsed0 = state["elapsed"]
    smooth = None
    plan = planned_batches(rows, args, state)

    def load_batch(step: int):
        """The batch of `step`; augmentation randomness is a function of the step, so a resumed run draws
        the same batches."""
        epoch, position, indices = next(plan)
        chunk = attention_chunk(step, args)
        augment = step >= (args.curriculum_steps if args.augment_after is None else args.augment_after)
        batch = make_batch([rows[i] for i in indices], tokenizer, random.Random(args.seed * 7919 + step),
                           augment=augment, pad_multiple=args.pad_multiple,
                           emission_slack=args.emission_slack)
        return epoch, position, chunk, batch

    # One thread reads and featurises the next batch while torch runs this one (it releases the GIL).
    prefetch = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="batches")
    pending = prefetch.submit(load_batch, state["step"])
    while state["step"] < args.max_steps and not stop["flag"]:
        epoch, position, chunk, (x, xl, y, yl, earliest) = pending.result()
        pending = prefetch.submit(load_batch, state["step"] + 1)
        lr = lr_at(state["step"] + 1, args.lr, args.warmup)
        for g in opt.param_groups:
            g["lr"] = lr
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
            out = model(x, xl, y, yl, decoding_chunk_size=chunk, ctc_earliest=earliest)
        opt.zero_grad()
        out["loss"].backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        if torch.isfinite(grad_norm):
            opt.step()
        state["step"] += 1
        state["epoch"], state["batch_in_epoch"] = epoch, position + 1
        state["elapsed"] = elapsed0 + time.monotonic() - t_run
        loss = float(out["loss"].detach())
        smooth = loss if smooth is None else 0.98 * smooth + 0.02 * loss
        log.write(f"{state['step']}\t{state['epoch']}\t{loss:.4f}\t{float(out['loss_ctc']):.4f}\t"
                  f"{float(out['loss_att']):.4f}\t{lr:.6f}\t{state['elapsed'] / 60:.2f}\n")
        bar.update(1)
        bar.set_postfix(loss=f"{smooth:.2f}", ep=state["epoch"], lr=f"{lr:.1e}")
        if time.monotonic() - t_last_save > args.save_minutes * 60:
            log.flush()
            save_checkpoint()
            t_last_save = time.monotonic()
        if state["elapsed"] >= budget_s:
            break
    prefetch.shutdown(wait=True, cancel_futures=True)
    bar.close()
    log.close()
    save_checkpoint()
    done = state["step"] >= args.max_steps or state["elapsed"] >= budget_s
    if done:
        write_final()
    else:
        print(f"interrupted at step {state['step']}; rerun to resume", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
