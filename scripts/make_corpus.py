#!/usr/bin/env python3
"""Synthesise an English speech corpus with espeak-ng for the bundled demo model.

Writes Kaldi/WeNet-style data dirs::

    OUT/train/{wav.scp,text,utt2spk}     training voices, training sentences
    OUT/test_a/{wav.scp,text,utt2spk}    new sentences, training voice/variant combinations, random perturbation
    OUT/test_b/{wav.scp,text,utt2spk}    voice/variant combinations never used in training
    OUT/wavs/<split>/<utt>.wav           16 kHz mono int16

Variety comes from the voice (accent x variant), speed, pitch, word gap, gain and added noise: espeak-ng is
bit-exact for the same settings, so every utterance draws fresh settings. A corpus is a function of its options
(sox runs in repeatable mode): a split made again is the same audio.

    python scripts/make_corpus.py --out /work/data/corpus --train 12000 --test 300 --jobs 2
"""

from __future__ import annotations

import argparse
import io
import multiprocessing as mp
import random
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf

from asr_data.templates import sentence  # the demo corpus's everyday sentences

SAMPLE_RATE = 16000  # Hz, what the recogniser expects
SPLITS = ("train", "test_a", "test_b")

# espeak-ng's English accents (the MBROLA voices need packages that are not in Debian main).
ACCENTS = ("en-gb", "en-us", "en-gb-scotland", "en-gb-x-gbclan", "en-gb-x-rp", "en-gb-x-gbcwmd", "en-029",
           "en-us-nyc")
# Variants that are not speech-like (whisper, croak, robots at extreme settings) are still kept: they add
# timbre variety, and the test split B measures how far the model generalises anyway.
VARIANTS_DIR = Path("/usr/lib/x86_64-linux-gnu/espeak-ng-data/voices/!v")

@dataclass(frozen=True)
class Job:
    split: str       # train / test_a / test_b
    utt: str         # utterance id
    text: str        # transcript (what espeak says)
    voice: str       # accent+variant, as -v takes it
    speed: int       # words per minute (espeak -s)
    pitch: int       # 0..99 (espeak -p)
    gap: int         # extra gap between words, 10 ms units (espeak -g)
    gain: float      # linear gain on the waveform
    snr_db: float    # signal-to-noise ratio of the added noise; inf: none
    seed: int        # for the noise


def synthesise(job: Job, out_dir: Path) -> tuple[str, str, str, str] | None:
    """Run espeak-ng | sox into 16 kHz, add gain and noise, write the wav; returns the scp/text entries."""
    espeak = ["espeak-ng", "-v", job.voice, "-s", str(job.speed), "-p", str(job.pitch), "-g", str(job.gap),
              "--stdout", job.text]
    # -R: sox dithers its 16-bit output from a random seed unless told to repeat itself
    sox = ["sox", "-R", "-t", "wav", "-", "-r", str(SAMPLE_RATE), "-c", "1", "-b", "16", "-t", "wav", "-"]
    try:
        raw = subprocess.run(espeak, check=True, capture_output=True, timeout=30).stdout
        wav = subprocess.run(sox, input=raw, check=True, capture_output=True, timeout=30).stdout
    except (subprocess.SubprocessError, OSError):
        return None
    audio, sr = sf.read(io.BytesIO(wav), dtype="float32")
    if sr != SAMPLE_RATE or audio.size < SAMPLE_RATE // 4:
        return None
    rng = np.random.default_rng(job.seed)
    peak = float(np.abs(audio).max()) or 1.0
    audio = audio / peak * job.gain
    # Short random silence at both ends: real recordings do not start on the first phone.
    pad = [int(rng.uniform(0.05, 0.4) * SAMPLE_RATE) for _ in range(2)]
    audio = np.concatenate([np.zeros(pad[0], np.float32), audio, np.zeros(pad[1], np.float32)])
    if np.isfinite(job.snr_db):
        noise = rng.standard_normal(audio.size).astype(np.float32)
        if rng.random() < 0.5:  # brown-ish noise: integrate white noise, remove drift
            noise = np.cumsum(noise)
            noise -= np.convolve(noise, np.ones(401) / 401, mode="same")
        speech_pow = float(np.mean(audio[pad[0]:audio.size - pad[1]] ** 2)) + 1e-12
        noise *= np.sqrt(speech_pow / (float(np.mean(noise ** 2)) + 1e-12) / 10 ** (job.snr_db / 10))
        audio = audio + noise
    audio = np.clip(audio, -1.0, 1.0)
    path = out_dir / "wavs" / job.split / f"{job.utt}.wav"
    sf.write(path, audio, SAMPLE_RATE, subtype="PCM_16")
    return job.split, job.utt, str(path.resolve()), job.text


def _worker(args: tuple[Job, Path]):
    return synthesise(*args)


def random_settings(rng: random.Random) -> dict:
    return dict(speed=rng.randint(120, 260), pitch=rng.randint(15, 85), gap=rng.choice((0, 0, 0, 1, 2, 4)),
                gain=rng.uniform(0.1, 0.95), snr_db=rng.choice((float("inf"), rng.uniform(5, 35),
                                                               rng.uniform(15, 40))))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--train", type=int, default=12000, help="training utterances")
    ap.add_argument("--test", type=int, default=300, help="utterances per test split")
    ap.add_argument("--heldout-combos", type=float, default=0.15,
                    help="fraction of accent x variant combinations kept out of training (split B)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--splits", nargs="+", choices=SPLITS, default=list(SPLITS),
                    help="synthesise only these (the others are still drawn, so every utterance is the one a "
                         "whole run makes: e.g. an earlier corpus's test splits alone, for evaluation)")
    args = ap.parse_args(argv)
    missing = [tool for tool in ("espeak-ng", "sox") if shutil.which(tool) is None]
    if missing:  # every utterance would fail, and the corpus would come out empty
        sys.exit(f"{' and '.join(missing)} not found: apt-get install espeak-ng sox "
                 "(or bash scripts/get_tts_voices.sh)")

    rng = random.Random(args.seed)
    variants = sorted(p.name for p in VARIANTS_DIR.iterdir()) if VARIANTS_DIR.is_dir() else []
    combos = [f"{a}+{v}" for a in ACCENTS for v in variants] + list(ACCENTS)
    rng.shuffle(combos)
    n_held = max(1, int(len(combos) * args.heldout_combos))
    held, seen = combos[:n_held], combos[n_held:]

    # Test A sentences first, so training never draws them.
    test_a_text: list[str] = []
    while len(test_a_text) < args.test:
        s = sentence(rng)
        if s not in test_a_text:
            test_a_text.append(s)
    banned = set(test_a_text)
    jobs: list[Job] = []
    for split, count, voices in (("train", args.train, seen), ("test_a", args.test, seen),
                                 ("test_b", args.test, held)):
        for i in range(count):
            if split == "test_a":
                text = test_a_text[i]
            else:
                text = sentence(rng)
                while text in banned:
                    text = sentence(rng)
            voice = rng.choice(voices)
            utt = f"{split}_{i:06d}"
            jobs.append(Job(split, utt, text, voice, seed=rng.randrange(2**31), **random_settings(rng)))
    jobs = [job for job in jobs if job.split in args.splits]
    for split in args.splits:
        (args.out / "wavs" / split).mkdir(parents=True, exist_ok=True)
    (args.out / "voices_heldout.txt").write_text("\n".join(sorted(held)) + "\n")

    entries: dict[str, list[tuple[str, str, str]]] = {split: [] for split in args.splits}
    try:
        from tqdm import tqdm
    except ImportError:  # progress bar is a nicety
        def tqdm(it, **_):
            return it
    with mp.Pool(args.jobs) as pool:
        for res in tqdm(pool.imap(_worker, [(j, args.out) for j in jobs], chunksize=16), total=len(jobs),
                        desc="synthesising"):
            if res is not None:
                entries[res[0]].append(res[1:])
    voice_of = {j.utt: j.voice for j in jobs}
    for split, rows in entries.items():
        d = args.out / split
        d.mkdir(parents=True, exist_ok=True)
        rows.sort()
        (d / "wav.scp").write_text("".join(f"{u} {p}\n" for u, p, _ in rows))
        (d / "text").write_text("".join(f"{u} {t}\n" for u, _, t in rows))
        (d / "utt2spk").write_text("".join(f"{u} {voice_of[u]}\n" for u, _, _ in rows))
        print(f"{split}: {len(rows)} utterances", file=sys.stderr)
    drawn = {split: sum(job.split == split for job in jobs) for split in entries}
    empty = [split for split, rows in entries.items() if drawn[split] and not rows]
    if empty:
        print(f"no utterance of {', '.join(empty)} could be synthesised", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
