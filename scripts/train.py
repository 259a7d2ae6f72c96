#!/usr/bin/env python3
"""Train a small U2++ conformer (CTC + bidirectional attention loss, dynamic chunks) on a Kaldi-style data dir.

Resumable at any point: ``EXP/checkpoint.pt`` (model, optimiser, step, data position, RNG) is written atomically
every ``--save-minutes`` and on SIGINT/SIGTERM; rerunning the same command continues from it. When the step or
time budget is reached a WeNet-style model dir is written to ``EXP/final/``. ``--keep-snapshots N`` keeps the
weights of the last N saves too, for ``scripts/average_checkpoints.py``.

    nice -n 15 python scripts/train.py --data /work/data/corpus/train --exp /work/data/exp/demo \
        --max-minutes 55 --threads 1

Augmentation: speed perturbation (0.9/1.0/1.1 resampling, as WeNet's speed_perturb), SpecAugment (time and
frequency masks on the fbank); the corpus itself carries voice, pitch, gain and noise variety.
"""

from __future__ import annotations

import argparse
import collections
import random
import shutil
import signal
import sys
import time
from pathlib import Path

import torch

from asr_server.asr.features.cmvn import CmvnStats, load_cmvn, save_json_cmvn
from asr_server.asr.features.fbank import fbank
from asr_server.asr.nn.checkpoint import save_model_dir
from asr_server.asr.nn.decoder import DecoderConfig
from asr_server.asr.nn.encoder import EncoderConfig, GlobalCMVN
from asr_server.asr.nn.model import ModelConfig, U2Model, count_parameters
from asr_server.asr.training.batch_maker import BatchMaker
from asr_server.asr.training.batching import planned_batches
from asr_server.asr.training.data import load_wav, read_data_dir, utterance_seconds
from asr_server.asr.training.schedule import attention_chunk, lr_at
from asr_server.asr.units import SymbolTable, Tokenizer, bpe_units, train_bpe

# Arguments that define the network and its loss (train.yaml); --finalize takes them from the checkpoint.
MODEL_ARGS = ("d_model", "heads", "ffn", "blocks", "dec_blocks", "kernel", "ctc_weight", "reverse_weight", "dropout")
CMVN_UTTS = 2000          # utterances used to estimate the global CMVN


def prepare(args, rows) -> tuple[SymbolTable, Tokenizer, CmvnStats, Path]:
    """BPE, units.txt and CMVN, computed once and reused on resume."""
    exp = args.exp
    bpe_path = exp / "bpe.model"
    if args.init_from is not None:  # a relay leg keeps the units and CMVN of the model it continues
        for name in ("bpe.model", "global_cmvn"):
            if not (exp / name).exists():
                shutil.copyfile(args.init_from / name, exp / name)
    if not bpe_path.exists():
        train_bpe((t for _, _, t in rows), exp / "bpe", args.bpe_size)
    symbols = SymbolTable.from_units(bpe_units(bpe_path))
    if args.init_from is not None and (args.init_from / "units.txt").exists():
        # the output layer is indexed by the model's own units.txt: it must be what the BPE gives here
        inherited = SymbolTable.load(args.init_from / "units.txt")
        if inherited.id_to_symbol != symbols.id_to_symbol:
            raise SystemExit(f"{args.init_from}/units.txt does not match its bpe.model: the output layer would "
                             "be mis-indexed")
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


def freeze_subsampling_convs(model: U2Model, count: int) -> None:
    """The first `count` convolutions of the encoder's input subsampling stop learning (requires_grad off)."""
    convs = [m for m in model.encoder.embed.conv if isinstance(m, torch.nn.Conv2d)]
    if count > len(convs):
        sys.exit(f"--frozen-convs {count}: the subsampling has {len(convs)} convolutions")
    for conv in convs[:count]:
        conv.requires_grad_(False)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, required=True, help="Kaldi-style dir with wav.scp and text")
    ap.add_argument("--exp", type=Path, required=True)
    ap.add_argument("--max-minutes", type=float, default=55.0, help="wall-clock budget over all runs")
    ap.add_argument("--max-steps", type=int, default=100000)
    ap.add_argument("--save-minutes", type=float, default=4.0)
    ap.add_argument("--keep-snapshots", type=int, default=0, metavar="N",
                    help="also keep the weights of the last N saves as EXP/snapshots/step_<global step>.pt, "
                         "for scripts/average_checkpoints.py (WeNet decodes with such an average)")
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
    ap.add_argument("--init-from", type=Path, default=None, metavar="MODEL_DIR",
                    help="relay leg: start from this model dir's weights, units and CMVN (not its optimiser: "
                         "Adam's moments are re-warmed over --rewarm-steps)")
    ap.add_argument("--step-offset", type=int, default=0,
                    help="relay leg: steps trained by earlier legs; the learning-rate schedule and the log count "
                         "from there")
    ap.add_argument("--rewarm-steps", type=int, default=0,
                    help="relay leg: ramp the learning rate from 0 to the schedule's over this many steps, while "
                         "the fresh optimiser's moment estimates settle")
    ap.add_argument("--band-limit-share", type=float, default=0.0,
                    help="share of augmented utterances band-limited to 8 or 11.025 kHz and back (telephone and "
                         "game audio), requantised to 16 bits")
    ap.add_argument("--lead-silence-share", type=float, default=0.0,
                    help="share of augmented utterances given 0.3-1.5 s more leading silence (the first word "
                         "after a pause)")
    ap.add_argument("--frozen-convs", type=int, default=0, metavar="N",
                    help="keep the first N convolutions of the input subsampling fixed. Freezing the first (1,280 "
                         "weights) spares the backward pass the gradient of the second convolution's input, the "
                         "costliest part of a conv2d step; the optimiser keeps them, so a checkpoint resumes")
    ap.add_argument("--device", default="cpu", help="cpu, or cuda for a GPU leg (batches are made on the CPU)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--loader-workers", type=int, default=0, metavar="N",
                    help="processes that make the batches (a GPU leg: one thread cannot feed a GPU); 0: one "
                         "thread beside the step, which is enough on a CPU")
    ap.add_argument("--seed", type=int, default=777)
    ap.add_argument("--finalize", action="store_true",
                    help="write EXP/final (or --final-dir) from the latest checkpoint without training")
    ap.add_argument("--final-dir", type=Path, default=None)
    ap.add_argument("--fp16-weights", action="store_true", help="store final.pt in half precision (size)")
    args = ap.parse_args(argv)

    torch.set_num_threads(args.threads)
    args.exp.mkdir(parents=True, exist_ok=True)
    rows = read_data_dir(args.data)
    if not rows:
        sys.exit(f"{args.data}: no utterance has both a wav.scp and a text line")
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
    state = {"step": 0, "epoch": 0, "batch_in_epoch": 0, "elapsed": 0.0}
    if not ckpt_path.exists() and args.init_from is not None:
        state_dict = torch.load(args.init_from / "final.pt", map_location="cpu", weights_only=True)
        model.load_state_dict({k: v.float() if v.is_floating_point() else v for k, v in state_dict.items()})
        print(f"started from {args.init_from} (global step {args.step_offset})", file=sys.stderr)
    device = torch.device(args.device)
    model.to(device)  # before the optimiser exists: its state then lives where the weights do
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    if ckpt_path.exists():
        ck = torch.load(ckpt_path, map_location="cpu", weights_only=False)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["optimizer"])
        state = ck["state"]
        torch.set_rng_state(ck["torch_rng"])
        print(f"resumed at step {state['step']} ({state['elapsed'] / 60:.1f} min trained)", file=sys.stderr)
    freeze_subsampling_convs(model, args.frozen_convs)
    print(f"{count_parameters(model) / 1e6:.2f}M parameters, {len(rows)} utterances, vocab {len(symbols)}",
          file=sys.stderr)

    final_dir = args.final_dir or args.exp / "final"

    def write_final():
        model.eval()
        save_model_dir(final_dir, model, symbols, cmvn, bpe_path, half_precision=args.fp16_weights,
                       extra={"training": {"steps": args.step_offset + state["step"],
                                           "this_run_steps": state["step"], "epochs_completed": state["epoch"],
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
        if args.keep_snapshots > 0:
            keep_snapshot()

    def keep_snapshot():
        """The weights alone (a quarter of a checkpoint's size): the last --keep-snapshots saves survive."""
        folder = args.exp / "snapshots"
        folder.mkdir(exist_ok=True)
        path = folder / f"step_{args.step_offset + state['step']:07d}.pt"
        tmp = path.with_suffix(".tmp")
        torch.save(model.state_dict(), tmp)
        tmp.replace(path)
        for old in sorted(folder.glob("step_*.pt"))[:-args.keep_snapshots]:
            old.unlink()

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
    plan = planned_batches(utterance_seconds(rows), args.seed, args.batch, state["epoch"], state["batch_in_epoch"])

    # Batches are made while torch runs the step: in one thread (it releases the GIL), or in --loader-workers
    # processes where one thread cannot keep up (a GPU).
    maker = BatchMaker(tokenizer, args.loader_workers, pad_multiple=args.pad_multiple,
                       emission_slack=args.emission_slack, band_limit_share=args.band_limit_share,
                       lead_silence_share=args.lead_silence_share)

    def batch_of(step: int):
        """The batch of `step`, submitted; augmentation randomness is a function of the step, so a resumed run
        draws the same batches."""
        epoch, position, indices = next(plan)
        at = args.step_offset + step  # the curriculum counts over all legs of a relay
        chunk = attention_chunk(at, args.seed, args.curriculum_steps, args.full_context_share, args.chunk_range)
        augment = at >= (args.curriculum_steps if args.augment_after is None else args.augment_after)
        return epoch, position, chunk, maker.submit([rows[i] for i in indices], args.seed * 7919 + at, augment)

    ahead = collections.deque(batch_of(state["step"] + k) for k in range(maker.depth))
    while state["step"] < args.max_steps and not stop["flag"]:
        epoch, position, chunk, pending = ahead.popleft()
        try:
            tensors = pending.result()
        except BaseException:
            # a batch that could not be made (e.g. a worker process killed): the steps taken so far are kept,
            # and a rerun resumes after the last of them
            maker.close()
            save_checkpoint()
            raise
        x, xl, y, yl, earliest = (t.to(device, non_blocking=True) if t is not None else None for t in tensors)
        ahead.append(batch_of(state["step"] + maker.depth))
        lr = lr_at(args.step_offset + state["step"] + 1, args.lr, args.warmup)
        if args.rewarm_steps:
            lr *= min(1.0, (state["step"] + 1) / args.rewarm_steps)
        for g in opt.param_groups:
            g["lr"] = lr
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.bf16):
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
        log.write(f"{args.step_offset + state['step']}\t{state['epoch']}\t{loss:.4f}\t{float(out['loss_ctc']):.4f}\t"
                  f"{float(out['loss_att']):.4f}\t{lr:.6f}\t{state['elapsed'] / 60:.2f}\n")
        bar.update(1)
        bar.set_postfix(loss=f"{smooth:.2f}", ep=state["epoch"], lr=f"{lr:.1e}")
        if time.monotonic() - t_last_save > args.save_minutes * 60:
            log.flush()
            save_checkpoint()
            t_last_save = time.monotonic()
        if state["elapsed"] >= budget_s:
            break
    maker.close()
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
