#!/usr/bin/env python3
"""One leg of the open-English recogniser's relay training: everything a leg needs comes from the
repository, and everything the next leg needs goes back into it.

    python scripts/relay_leg.py --train-minutes 90        # set-up, data, training, evaluation, state
    git add models/open_en_wip && git commit               # the leg counts once its state is on main

A leg: make this leg's data (``gen_corpus.py leg``, deterministic from the leg number, bounded by
--data-minutes; an earlier run's data folder is reused when it is there; --with-earlier-legs adds earlier legs'
data still on this machine) -> train from the committed weights for
--train-minutes (``train.py --init-from``; Adam's moments are not carried, they re-warm over --rewarm-steps at
the schedule's learning rate) -> evaluate on the fixed splits -> write the state folder:

    STATE/final.pt, train.yaml, units.txt, bpe.model, global_cmvn   the model (fp16 weights), a WeNet model dir
    STATE/relay.json    leg, global step, seeds, network and schedule: all a next leg needs to resume
    STATE/legs.tsv      one line per leg: data hours, minutes, every split's WER

The machine may be wiped between legs: nothing outside the repository is needed to run the next one.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

import numpy as np
import soundfile as sf
import soxr

from asr_data import clip_check
from asr_data.manifest import REAL_SPEECH, latest_rows, leg_name
from asr_server.asr.decoding.token_lm import DEFAULT_FUSION
from asr_server.asr.training.relay_args import relay_train_args

REPO = Path(__file__).resolve().parent.parent
ROOT = Path(os.environ.get("ASR_DATA", "/work/asr_data"))
PY = sys.executable

# The relay continues the bundled demo model (same network, units and CMVN; 18,932 steps on synthetic
# template speech): its acoustic training is reused, and its 199 BPE pieces include every letter and the
# apostrophe, so any normalised English sentence can be spelled. Fixed at leg 1, read from relay.json after.
FIRST_STATE = {
    "leg": 0, "step": 18932, "hours_seen": 0.0, "minutes": 0.0, "seed": 2026, "init_from": "models/demo_en",
    "network": {"bpe_size": 200, "d_model": 128, "heads": 4, "ffn": 512, "blocks": 6, "dec_blocks": 1,
                "kernel": 15, "ctc_weight": 0.5, "reverse_weight": 0.3, "dropout": 0.1},
    # lr_at(step, 4e-3, 1000): 9.2e-4 at step 18,932, 6.3e-4 at 40,000
    "schedule": {"lr": 4e-3, "warmup": 1000, "curriculum_steps": 0, "full_context_share": 0.3,
                 "chunk_range": [8, 24], "emission_slack": 4, "batch": 32, "rewarm_steps": 300,
                 "band_limit_share": 0.25, "lead_silence_share": 0.2},
}
# Evaluation splits: (name, folder under ROOT, utterance limit). The 8 kHz variants are the real splits
# band-limited (8 kHz and back to 16 kHz, 16-bit), as a telephone line delivers them.
EVAL_SPLITS = [("real", "real", None), ("fotaq_test", "legs/eval/fotaq_test", 200),
               ("test_open", "legs/eval/test_open", None), ("test_heldout_voice", "legs/eval/test_heldout_voice", None),
               ("test_digits", "legs/eval/test_digits", None), ("test_template", "legs/eval/test_template", None)]
BAND_LIMITED = ("real", "fotaq_test")
LOGGED_MODES = ("offline_greedy", "offline_rescore", "stream_greedy", "stream_rescore")
# With the state's token LM (STATE/lm.arpa.gz, scripts/build_lm.py) at its default weight and bonus, logged as
# "<split>/<mode>_lm" (eval.py names the mode "<mode>+lm<weight>/<bonus>").
LM_FILE, LM_FUSION, LM_MODES = "lm.arpa.gz", DEFAULT_FUSION, ("offline_rescore", "stream_rescore")
LOG_COLUMNS = ("leg", "date", "step", "train_min", "data_h", "hours_seen")
# The model card's leg table, written from legs.tsv between these markers after each leg: split -> its label.
CARD_TABLE = ("<!-- leg table: scripts/relay_leg.py writes it from legs.tsv -->", "<!-- end of the leg table -->")
CARD_SPLITS = {
    "real": "real (pocketsphinx-testdata; pocketsphinx 21.9)", "real_8k": "real_8k",
    "fotaq_test": "fotaq_test (held-out real speakers)", "fotaq_test_8k": "fotaq_test_8k", "test_open": "test_open",
    "test_heldout_voice": "test_heldout_voice (Pico)", "test_digits": "test_digits", "test_template": "test_template",
}


def run(cmd: list[str], **kw) -> None:
    print(f"[{time.strftime('%F %T')}] $ {' '.join(map(str, cmd))}", flush=True)
    subprocess.run([str(c) for c in cmd], check=True, cwd=REPO, **kw)


def setup(with_uqm: bool) -> None:
    """The voices and the real-speech split (idempotent scripts; minutes on a fresh machine, seconds after)."""
    run(["bash", "scripts/get_tts_voices.sh"])
    run(["bash", "scripts/get_real_speech.sh"])
    run(["bash", "scripts/get_bass.sh"])
    if with_uqm:
        run(["bash", "scripts/get_uqm.sh"])


def make_data(leg: int, minutes: float, seed: int, with_uqm: bool) -> Path:
    train = ROOT / "legs" / leg_name(leg, with_uqm) / "train"
    if (train / "text").exists():
        print(f"leg {leg}'s data is already in {train}: reused", flush=True)
        refresh_game_lines(train)  # made before the latest clip verdicts and label rules, perhaps
        return train
    tts = ROOT / "tts-venv" / "bin" / "python"
    run([tts, "scripts/gen_corpus.py", "fotaq"])
    run([tts, "scripts/gen_corpus.py", "drascula"])  # from leg 2 on: 0.77 h more real voices (12 speakers)
    run([tts, "scripts/gen_corpus.py", "bass"])  # from leg 8 on: 1.9 h more (Beneath a Steel Sky's cast)
    if with_uqm:  # non-commercial (asr_data/uqm.py); only when the state or the command line asks for it
        run([tts, "scripts/gen_corpus.py", "uqm"])
    run([tts, "scripts/gen_corpus.py", "leg", "--leg", leg, "--minutes", minutes, "--jobs", os.cpu_count() or 2,
         "--seed", seed, *(["--with-uqm"] if with_uqm else [])])
    return train


KALDI_FILES = ("wav.scp", "text", "utt2dur", "utt2spk")  # the files of a training split that a leg joins
NON_COMMERCIAL = "uqm_"  # the prefix of lines a licence-clean model must never train on
CLEAN_STATE = REPO / "models" / "open_en_wip"  # licence-clean: the default's successor (never --with-uqm)


def check_licence(data: Path, with_uqm: bool) -> None:
    """A licence-clean leg stops before training if its data holds any non-commercial line."""
    if with_uqm:
        return
    found = [line.split(maxsplit=1)[0] for line in (data / "text").read_text().splitlines()
             if line.startswith(NON_COMMERCIAL)]
    if found:
        sys.exit(f"{data} holds {len(found)} non-commercial lines (e.g. {found[0]}) but this state is "
                 "licence-clean: remove that folder and make the leg's data again")


def current_game_labels() -> dict[str, str]:
    """{utt: label} of the games' lines as their manifests hold them now (a line relabelled when the label
    rules changed: its last row)."""
    return {row["utt"]: row["label"] for source in ("fotaq", "drascula", "bass", "uqm")
            for row in latest_rows(ROOT / source / "manifest.jsonl")}


def read_kaldi_split(folder: Path) -> dict[str, dict[str, str]]:
    """A Kaldi training folder's tables: {file name: {utt: value}} for each of KALDI_FILES."""
    return {name: dict(line.split(maxsplit=1) for line in (folder / name).read_text().splitlines())
            for name in KALDI_FILES}


class GameLineRules:
    """Which game lines a leg trains on, and with which label: the Whisper check's mismatched lines are left
    out (asr_data/clip_check.py) and the others take their current label (asr_data/normalise.py's rules, as
    their manifests hold them now). Synthetic utterances pass unchanged."""

    def __init__(self) -> None:
        self.drops, self.labels = clip_check.dropped(), current_game_labels()

    def kept(self, utt: str) -> bool:
        return utt not in self.drops

    def label(self, utt: str, text: str) -> str:
        return self.labels.get(utt, text)


def refresh_game_lines(folder: Path) -> None:
    """Apply GameLineRules to a Kaldi folder made earlier: rewrite it without the mismatched game lines, and
    with the games' current labels."""
    rules, tables = GameLineRules(), read_kaldi_split(folder)
    kept = {name: {utt: value for utt, value in table.items() if rules.kept(utt)} for name, table in tables.items()}
    kept["text"] = {utt: rules.label(utt, text) for utt, text in kept["text"].items()}
    if kept != tables:
        for name, table in kept.items():
            (folder / name).write_text("".join(f"{utt} {value}\n" for utt, value in table.items()))
        relabelled = sum(tables["text"][utt] != text for utt, text in kept["text"].items())
        print(f"{folder}: left out {len(tables['text']) - len(kept['text'])} mismatched game lines, "
              f"relabelled {relabelled}", flush=True)


def with_earlier_legs(leg: int, with_uqm: bool, newest: Optional[int] = None) -> Path:
    """This leg's split joined with the utterances of earlier legs' splits whose audio is still on this machine
    (a machine that kept its data folder need not spend a leg's first half hour on synthesis for fresh variety:
    a short new batch plus what earlier legs made). Utterance ids are unique across legs (each leg draws its
    own index range) and the game's lines, in every leg, are taken once. The real speech (the games' lines,
    REAL_SPEECH) is then repeated until it is at least half of the utterances, as in a leg's own split, so that
    the extra synthetic variety does not dilute it. A non-commercial leg (with_uqm) takes both kinds of earlier
    folders, a licence-clean one only clean ones (asr_data.manifest.leg_name). Game lines go through
    GameLineRules, whichever leg's folder lists them. `newest`: only that many of the most recent earlier legs (each
    kept leg makes the epoch longer, and a fixed-length leg then sees each utterance fewer times); None: all.
    Written to <leg>/train_all."""
    rows: dict[str, dict[str, str]] = {}
    rules = GameLineRules()
    oldest = 1 if newest is None else max(1, leg - newest)
    folders = [ROOT / "legs" / leg_name(n, kind) / "train" for n in [leg, *range(leg - 1, oldest - 1, -1)]
               for kind in ((True, False) if with_uqm else (False,))]
    for folder in folders:
        if not (folder / "text").exists():
            continue
        tables = read_kaldi_split(folder)
        kept = 0
        for utt, path in tables["wav.scp"].items():
            if utt in rows or not rules.kept(utt) or not Path(path).exists():
                continue
            rows[utt] = {name: table[utt] for name, table in tables.items()}
            rows[utt]["text"] = rules.label(utt, rows[utt]["text"])  # a game line relabelled since
            kept += 1
        print(f"{folder.parent.name}'s split: {kept} utterances taken", flush=True)
    real = sorted(utt for utt in rows if utt.startswith(REAL_SPEECH))
    if real and len(real) < len(rows):
        repeats = max(1, -(-(len(rows) - len(real)) // len(real)))  # ceil(synthetic / real)
        for copy in range(2, repeats + 1):
            rows.update({f"{utt}_r{copy}": rows[utt] for utt in real})
        print(f"real speech: {len(real)} utterances, each {repeats} times", flush=True)
    out = ROOT / "legs" / leg_name(leg, with_uqm) / "train_all"
    out.mkdir(parents=True, exist_ok=True)
    for name in KALDI_FILES:
        (out / name).write_text("".join(f"{utt} {row[name]}\n" for utt, row in sorted(rows.items())))
    return out


def band_limited_copy(src: Path, dst: Path, rate: int = 8000) -> Path:
    """dst: the Kaldi split `src` with every wav passed through `rate` Hz and back to 16 kHz, 16-bit. A copy
    made earlier keeps its audio and takes src's current references (labels change with the label rules)."""
    if (dst / "text").exists():
        if (src / "text").exists():
            shutil.copyfile(src / "text", dst / "text")
        return dst
    (dst / "wavs").mkdir(parents=True, exist_ok=True)
    lines = []
    for line in (src / "wav.scp").read_text().splitlines():
        utt, path = line.split(maxsplit=1)
        audio, sr = sf.read(path, dtype="float32")
        narrow = soxr.resample(soxr.resample(audio, sr, rate), rate, 16000)
        out = dst / "wavs" / f"{utt}.wav"
        sf.write(out, np.clip(narrow, -1, 1), 16000, subtype="PCM_16")
        lines.append(f"{utt} {out.resolve()}\n")
    (dst / "wav.scp").write_text("".join(lines))
    shutil.copyfile(src / "text", dst / "text")
    return dst


def evaluate(model: Path, out_json: Path, lm: Path | None = None) -> dict[str, float]:
    """{split[_8k]/mode: WER} for every evaluation split, offline and streaming (640 ms chunks); with ``lm``
    (when the file exists) the rescored modes again with it fused ("<mode>_lm")."""
    fused = lm is not None and lm.is_file()
    wer: dict[str, float] = {}
    for name, folder, limit in EVAL_SPLITS:
        splits = [(name, ROOT / folder)]
        if name in BAND_LIMITED:
            splits.append((f"{name}_8k", band_limited_copy(ROOT / folder, ROOT / "legs" / "eval" / f"{name}_8k")))
        for label, d in splits:
            if not (d / "text").exists():
                print(f"no {d}: {label} not evaluated", flush=True)
                continue
            js = out_json.with_name(f"{out_json.stem}_{label}.json")
            cmd = ["scripts/eval.py", "--model", model, "--data", d, "--threads", os.cpu_count() or 2,
                   "--json", js, "--show", 3]
            run([PY, *cmd, *(["--limit", limit] if limit else []),
                 *(["--lm", lm, "--lm-fusion", LM_FUSION] if fused else [])])
            for figures in json.loads(js.read_text()).values():  # {split: {mode: WER, ...}}
                for mode in LOGGED_MODES:
                    wer[f"{label}/{mode}"] = figures[mode]
                for mode in LM_MODES if fused else ():
                    wer[f"{label}/{mode}_lm"] = figures[f"{mode}+lm{LM_FUSION}"]
    out_json.write_text(json.dumps(wer, indent=1) + "\n")
    return wer


def has_bf16() -> bool:
    """bf16 autocast pays only where the CPU computes in bf16 (AVX512-BF16 or AMX); elsewhere torch emulates it,
    many times slower than fp32."""
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    return "avx512_bf16" in flags or "amx_bf16" in flags


def train(state: dict, leg: int, data: Path, minutes: float, state_dir: Path) -> Path:
    sch = state["schedule"]
    exp = ROOT / "exp" / leg_name(leg, state.get("data", {}).get("uqm", False))
    cmd = [PY, "scripts/train.py", "--data", data, "--exp", exp, "--max-minutes", minutes, "--save-minutes", 5,
           "--threads", os.cpu_count() or 2, "--seed", state["seed"] + leg, "--batch", sch["batch"],
           *relay_train_args(state), "--init-from", state_dir if state["leg"] > 0 else REPO / state["init_from"]]
    if has_bf16():
        cmd.append("--bf16")
    average_last = sch.get("average_last", 0)
    if average_last:
        cmd += ["--keep-snapshots", average_last]
    run(cmd)
    run([*cmd, "--finalize", "--fp16-weights"])
    if average_last:
        average_snapshots(exp, average_last)
    return exp


def average_snapshots(exp: Path, count: int) -> None:
    """EXP/final's weights become the average of the leg's last COUNT snapshots (saved every 5 minutes), as
    WeNet's recipes decode: the next leg continues from that average too."""
    snapshots = sorted((exp / "snapshots").glob("step_*.pt"))[-count:]
    if snapshots:
        run([PY, "scripts/average_checkpoints.py", "--model-dir", exp / "final", *snapshots, "--fp16-weights"])


def record_leg(state_dir: Path, state: dict, leg: int, model_dir: Path, steps: int, minutes: float,
               data_h: float, hours_seen: float, wer: dict[str, float]) -> None:
    """The leg's model and its line become the relay's state (this folder is what the next leg continues)."""
    state_dir.mkdir(parents=True, exist_ok=True)
    for name in ("final.pt", "train.yaml", "units.txt", "bpe.model", "global_cmvn"):
        shutil.copyfile(model_dir / name, state_dir / name)
    state.update(leg=leg, step=state["step"] + steps, hours_seen=round(state["hours_seen"] + hours_seen, 1),
                 minutes=round(state["minutes"] + minutes, 1))
    (state_dir / "relay.json").write_text(json.dumps(state, indent=1) + "\n")
    log = state_dir / "legs.tsv"
    if not log.exists():
        log.write_text("\t".join([*LOG_COLUMNS, *sorted(wer)]) + "\n")
    lines = log.read_text().splitlines()
    header = lines[0].split("\t")
    new = sorted(set(wer) - set(header))
    if new:  # figures no earlier leg had (the LM's): new columns, empty for the earlier legs
        header += new
        log.write_text("\n".join(["\t".join(header), *(line + "\t" * len(new) for line in lines[1:])]) + "\n")
    row = {"leg": leg, "date": time.strftime("%F"), "step": state["step"], "train_min": round(minutes, 1),
           "data_h": round(data_h, 2), "hours_seen": state["hours_seen"], **{k: f"{v:.2f}" for k, v in wer.items()}}
    with open(log, "a") as fh:
        fh.write("\t".join(str(row.get(c, "")) for c in header) + "\n")
    write_card_table(state_dir)


def leg_table(log: Path) -> str:
    """legs.tsv as a markdown table: a row per split, a column per leg (leg 0: the model the relay started
    from), each cell offline / streaming WER with attention rescoring."""
    lines = [line.split("\t") for line in log.read_text().splitlines()]
    header, legs = lines[0], [dict(zip(lines[0], row)) for row in lines[1:]]
    names = ["demo_en (leg 0)" if leg["leg"] == "0" else f"leg {leg['leg']} ({leg['date']})" for leg in legs]
    table = ["| split | " + " | ".join(names) + " |", "|---" * (len(legs) + 1) + "|"]
    for suffix, note in (("", ""), ("_lm", f", with the LM {LM_FUSION}")):
        for split, label in CARD_SPLITS.items():
            if f"{split}/offline_rescore{suffix}" not in header:
                continue
            cells = [f"{leg.get(f'{split}/offline_rescore{suffix}') or '-'} / "
                     f"{leg.get(f'{split}/stream_rescore{suffix}') or '-'}"
                     for leg in legs]  # a leg that did not evaluate a split (its folder was missing) shows "-"
            table.append(f"| {label}{note} | " + " | ".join(cells) + " |")
    return "\n".join(table)


def write_card_table(state_dir: Path) -> None:
    """Rewrite the leg table of STATE/MODEL_CARD.md (between CARD_TABLE's markers) from STATE/legs.tsv, so that
    no leg's figures are typed by hand; a card without the markers is left alone."""
    card, log = state_dir / "MODEL_CARD.md", state_dir / "legs.tsv"
    if not card.exists() or not log.exists():
        return
    text = card.read_text()
    start, end = (text.find(marker) for marker in CARD_TABLE)
    if start < 0 or end < start:
        return
    card.write_text(text[:start + len(CARD_TABLE[0])] + "\n" + leg_table(log) + "\n" + text[end:])


def adopt(state_dir: Path, state: dict, model_dir: Path) -> int:
    """A leg trained elsewhere (a GPU leg, scripts/relay_gpu.py): evaluate its model dir and record it."""
    import yaml

    training = yaml.safe_load((model_dir / "train.yaml").read_text()).get("training", {})
    steps = int(training.get("this_run_steps", training.get("steps", state["step"]) - state["step"]))
    leg = state["leg"] + 1
    wer = evaluate(model_dir, ROOT / "legs" / f"eval_leg{leg}.json", state_dir / LM_FILE)
    record_leg(state_dir, state, leg, model_dir, steps, float(training.get("minutes", 0.0)), 0.0, 0.0, wer)
    print(f"leg {leg} (adopted from {model_dir}): step {state['step']}; state in {state_dir} (commit it)")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--state", type=Path, default=CLEAN_STATE, help="the committed state folder")
    ap.add_argument("--data-minutes", type=float, default=30.0, help="synthesis time of this leg's data")
    ap.add_argument("--train-minutes", type=float, default=90.0, help="training time of this leg")
    ap.add_argument("--skip-setup", action="store_true", help="voices and real speech are installed")
    ap.add_argument("--eval-only", type=Path, default=None, metavar="MODEL_DIR",
                    help="evaluate this model dir on the relay's splits and stop")
    ap.add_argument("--adopt", type=Path, default=None, metavar="MODEL_DIR",
                    help="record a leg trained elsewhere (a GPU leg): evaluate it and make it the state")
    ap.add_argument("--with-uqm", action="store_true",
                    help="train on The Ur-Quan Masters' voiced lines too (11 h, 21 characters), from this leg on: "
                         "recorded in relay.json, so later legs keep them. CC BY-NC-SA 2.5: the model becomes "
                         "non-commercial (asr_data/uqm.py)")
    ap.add_argument("--with-earlier-legs", action="store_true",
                    help="train on this leg's data plus earlier legs' data still on this machine (pair it with a "
                         "shorter --data-minutes)")
    ap.add_argument("--earlier-legs", type=int, default=None, metavar="N",
                    help="with --with-earlier-legs: only the N most recent earlier legs (default: all of them)")
    args = ap.parse_args(argv)

    state_path = args.state / "relay.json"
    state = json.loads(state_path.read_text()) if state_path.exists() else json.loads(json.dumps(FIRST_STATE))
    with_uqm = args.with_uqm or state.get("data", {}).get("uqm", False)
    if with_uqm and args.state.resolve() == CLEAN_STATE.resolve():
        sys.exit(f"--with-uqm makes the model non-commercial (CC BY-NC-SA 2.5), and {CLEAN_STATE} stays licence-clean "
                 "(its MODEL_CARD.md): branch a state of its own first, e.g. cp -r models/open_en_wip "
                 "models/open_en_nc, then --state models/open_en_nc")
    if not args.skip_setup:
        setup(with_uqm)
    if args.eval_only:
        print(json.dumps(evaluate(args.eval_only, ROOT / "legs" / f"eval_{args.eval_only.name}.json",
                                  args.state / LM_FILE), indent=1))
        return 0
    if args.adopt:
        return adopt(args.state, state, args.adopt)
    leg = state["leg"] + 1
    data = make_data(leg, args.data_minutes, state["seed"], with_uqm)
    if with_uqm:
        state.setdefault("data", {})["uqm"] = True  # sticky: the weights now derive from non-commercial data
    if args.with_earlier_legs:
        data = with_earlier_legs(leg, with_uqm, args.earlier_legs)
    check_licence(data, with_uqm)
    data_h = sum(float(line.split()[1]) for line in (data / "utt2dur").read_text().splitlines()) / 3600
    exp = train(state, leg, data, args.train_minutes, args.state)
    wer = evaluate(exp / "final", ROOT / "legs" / f"eval_leg{leg}.json", args.state / LM_FILE)

    import torch

    ckpt = torch.load(exp / "checkpoint.pt", map_location="cpu", weights_only=False)
    steps = ckpt["state"]["step"]
    minutes = ckpt["state"]["elapsed"] / 60  # the training clock: a leg resumed from its checkpoint counts it all
    epochs = steps * state["schedule"]["batch"] / max(1, len((data / "text").read_text().splitlines()))
    record_leg(args.state, state, leg, exp / "final", steps, minutes, data_h, data_h * epochs, wer)
    print(f"leg {leg} done: step {state['step']}, {minutes:.0f} min; state in {args.state} (commit it)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
