#!/usr/bin/env python3
"""Generate the data-v2 corpus: open English text, many synthesisers, resumable.

    bash scripts/resume_corpus.sh          # voices, real speech, game speech, then `run` in the background
    /work/asr_data/tts-venv/bin/python scripts/gen_corpus.py status [--voices]
    /work/asr_data/tts-venv/bin/python scripts/gen_corpus.py bench       # synthesis speed of every voice
    /work/asr_data/tts-venv/bin/python scripts/gen_corpus.py freeze      # ROOT/train_v2, the training data

Writes under ROOT (default /work/asr_data, outside the checkout):
    ROOT/manifest.jsonl                 one line per finished utterance (append-only; the truth; in the games'
                                        manifests a relabelled line is appended again and its last row wins)
    ROOT/wavs/<split>/<nnn>/<utt>.flac  16 kHz mono 16-bit
    ROOT/<split>/{wav.scp,text,utt2spk,utt2dur}   Kaldi-style, exported from the manifest
    ROOT/text/                           text pools, built once and then frozen
    ROOT/plan.json                       seed and split sizes of this corpus

Every utterance's text, voice, prosody and channel come from a seed fixed by (seed, split, index), so a run
stopped anywhere and started again makes exactly the corpus an uninterrupted run would; finished utterances
are skipped. Raising a split's size later (--train 60000) appends new indices and keeps the old ones.

Splits: test_template (old templates, like test_a), test_digits (digit strings), test_open (held-out text
sources, training voices), test_heldout_voice (held-out synthesiser: SVOX Pico), train (the rest).
The real-speech split (ROOT/real) is written by scripts/get_real_speech.sh; the games' voiced lines by the
`fotaq`, `drascula` and `bass` commands, and, only when asked for (non-commercial licence), `uqm`.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import random
import resource
import signal
import sys
import time
from pathlib import Path

import numpy as np
import soundfile as sf

from asr_data import augment, clip_check, text_sources, textgen, voices
from asr_data.manifest import Manifest, export_kaldi, latest_rows, leg_name, read_rows, summary
from asr_data.text_sources import Line

ROOT = Path(os.environ.get("ASR_DATA", "/work/asr_data"))
SPLIT_ORDER = ("test_template", "test_digits", "test_open", "test_heldout_voice", "train")
SPLIT_IDS = {s: i for i, s in enumerate(SPLIT_ORDER)}
DEFAULT_SIZES = {"test_template": 300, "test_digits": 300, "test_open": 400, "test_heldout_voice": 400,
                 "train": 40000}
MIN_S, MAX_S = 0.3, 25.0  # a synthesis outside this is a failure, not an utterance
EXPORT_EVERY = 500


def _cpu_s() -> float:
    """CPU seconds of this process and its finished children (the command-line synthesisers)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def utt_seed(seed: int, split: str, index: int) -> int:
    return int(np.random.SeedSequence([seed, SPLIT_IDS[split], index]).generate_state(1)[0])


def build_text(root: Path) -> None:
    """Text pools under ROOT/text, once: later runs read the frozen files, so resumed draws are identical."""
    d = root / "text"
    if (d / "done").exists():
        return
    d.mkdir(parents=True, exist_ok=True)
    train, held = text_sources.collect()
    (d / "train.tsv").write_text("".join(ln.tsv() for ln in train), encoding="utf-8")
    (d / "heldout.tsv").write_text("".join(ln.tsv() for ln in held), encoding="utf-8")
    (d / "vocab.txt").write_text("\n".join(text_sources.vocabulary()) + "\n", encoding="utf-8")
    (d / "names.txt").write_text("\n".join(text_sources.first_names()) + "\n", encoding="utf-8")
    (d / "done").write_text("")


def load_pools(root: Path, seed: int, n_template_test: int) -> tuple[textgen.Pools, textgen.Pools, list[str]]:
    """(training pools, held-out pools, the test_template sentences that training must not use)."""
    from asr_data.templates import sentence as template

    d = root / "text"
    lines = lambda name: [Line.from_tsv(r) for r in (d / name).read_text(encoding="utf-8").splitlines()]  # noqa: E731
    words = lambda name: (d / name).read_text(encoding="utf-8").split()  # noqa: E731
    rng = random.Random(seed)
    tests: list[str] = []
    while len(tests) < n_template_test:
        s = template(rng)
        if s not in tests:
            tests.append(s)
    train = textgen.Pools.from_lines(lines("train.tsv"), words("vocab.txt"), words("names.txt"),
                                     template=template, banned_templates=frozenset(tests))
    held = textgen.Pools.from_lines(lines("heldout.tsv"), train.vocab, train.names, template=template)
    return train, held, tests


class Generator:
    def __init__(self, root: Path, plan: dict):
        self.root, self.plan, self.seed = root, plan, plan["seed"]
        self.train_pools, self.held_pools, self.template_tests = load_pools(root, self.seed,
                                                                            plan["sizes"]["test_template"])
        self.kokoro = voices._kokoro_names()
        self.espeak = voices.espeak_voices()

    def job(self, split: str, i: int, train_families: dict[str, float] | None = None
            ) -> tuple[textgen.Text, voices.Voice, int]:
        seed = utt_seed(self.seed, split, i)
        rng = random.Random(seed)
        if split == "test_template":
            t = self.template_tests[i]
            text = textgen.Text("template", "templates", t, t)
        elif split == "test_digits":
            text = textgen.draw(rng, {"digits": 1.0}, self.train_pools, training=False)
        elif split == "test_open":
            text = textgen.draw(rng, {"sentence": 1.0}, self.held_pools, training=False)
        elif split == "test_heldout_voice":
            text = textgen.draw(rng, {"sentence": 0.7, "words": 0.15, "digits": 0.15}, self.held_pools,
                                training=False)
        else:
            text = textgen.draw(rng, textgen.TRAIN_KINDS, self.train_pools, training=True)
        families = (voices.HELDOUT_FAMILIES if split == "test_heldout_voice" else
                    train_families or voices.TRAIN_FAMILIES)
        voice = voices.draw_voice(rng, families, self.kokoro, self.espeak)
        return text, voice, seed

    def make(self, split: str, i: int, train_families: dict[str, float] | None = None) -> dict:
        text, voice, seed = self.job(split, i, train_families)
        t0 = _cpu_s()
        raw, sr = voices.synthesise(text.speak, voice, seed)
        synth_cpu = _cpu_s() - t0
        speech = augment.to_16k(raw, sr)
        if not MIN_S <= speech.size / augment.SAMPLE_RATE <= MAX_S or not np.any(speech):
            raise ValueError(f"synthesis gave {speech.size / augment.SAMPLE_RATE:.2f} s")
        np_rng = np.random.default_rng(seed)
        channel = augment.Channel.draw(np_rng)
        audio = augment.apply(speech, channel, np_rng)
        rel = Path("wavs") / split / f"{i // 1000:03d}" / f"{split}_{i:06d}.flac"
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.stem + ".tmp.flac")
        sf.write(tmp, audio, augment.SAMPLE_RATE, format="FLAC", subtype="PCM_16")
        os.replace(tmp, path)
        return {"utt": f"{split}_{i:06d}", "split": split, "index": i, "path": str(rel),
                "dur": round(audio.size / augment.SAMPLE_RATE, 3), "label": text.label, "speak": text.speak,
                "kind": text.kind, "source": text.source, "family": voice.family, "voice": voice.name,
                "speaker": voice.speaker, "tempo": voice.tempo, "pitch": voice.pitch, "seed": seed,
                "channel": channel.__dict__ | {"pad_s": list(channel.pad_s)},
                "synth_cpu_s": round(synth_cpu, 3)}


def load_plan(root: Path, args) -> dict:
    path = root / "plan.json"
    plan = json.loads(path.read_text()) if path.exists() else {"seed": args.seed, "sizes": dict(DEFAULT_SIZES)}
    if args.seed is not None and args.seed != plan["seed"]:
        sys.exit(f"{path} was made with seed {plan['seed']}; a different seed would be another corpus")
    for split in SPLIT_ORDER:
        size = getattr(args, split, None)
        if size is not None:
            if split != "train" and path.exists() and size != plan["sizes"][split]:
                sys.exit(f"test split sizes are fixed once made ({split}: {plan['sizes'][split]})")
            plan["sizes"][split] = size
    path.write_text(json.dumps(plan, indent=1) + "\n")
    return plan


def run(args) -> int:
    """One generator per root at a time: two writers would interleave the manifest."""
    args.root.mkdir(parents=True, exist_ok=True)
    with open(args.root / "gen.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            sys.exit(f"another generator holds {args.root / 'gen.lock'}")
        return _run_locked(args)


def _run_locked(args) -> int:
    root = args.root
    (root / "gen.pid").write_text(f"{os.getpid()}\n")
    if args.seed is None and not (root / "plan.json").exists():
        args.seed = 2026
    plan = load_plan(root, args)
    build_text(root)
    gen = Generator(root, plan)
    manifest = Manifest(root / "manifest.jsonl")
    failed_path = root / "failures.jsonl"
    failed = {r["utt"] for r in read_rows(failed_path)}
    stop = {"now": False}
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.update(now=True))
    made, start = 0, time.time()
    print(f"[{time.strftime('%F %T')}] start: {len(manifest.rows)} done, plan {plan['sizes']}", flush=True)
    for split in SPLIT_ORDER:
        for i in range(plan["sizes"][split]):
            utt = f"{split}_{i:06d}"
            if stop["now"] or (args.limit and made >= args.limit):
                break
            if utt in manifest or utt in failed:
                continue
            try:
                manifest.append(gen.make(split, i))
            except Exception as exc:  # one bad synthesis must not stop a day-long run; it is recorded
                with open(failed_path, "a") as fh:
                    fh.write(json.dumps({"utt": utt, "error": repr(exc)[:300]}) + "\n")
                failed.add(utt)
                continue
            made += 1
            if made % 100 == 0:
                hours = sum(r["dur"] for r in manifest.rows.values()) / 3600
                print(f"[{time.strftime('%F %T')}] +{made} ({made / (time.time() - start):.2f} utt/s), "
                      f"total {len(manifest.rows)} utts {hours:.2f} h, at {utt}", flush=True)
            if made % EXPORT_EVERY == 0:
                export_kaldi(manifest.rows.values(), root)
    export_kaldi(manifest.rows.values(), root)
    manifest.close()
    print(f"[{time.strftime('%F %T')}] stop: made {made}, total {len(manifest.rows)}, "
          f"failures {len(failed)}", flush=True)
    return 0


def status(args) -> int:
    root = args.root
    rows = list(read_rows(root / "manifest.jsonl"))
    plan = json.loads((root / "plan.json").read_text()) if (root / "plan.json").exists() else {"sizes": {}}
    pid = (root / "gen.pid").read_text().strip() if (root / "gen.pid").exists() else None
    alive = bool(pid) and Path(f"/proc/{pid}").exists()
    print(f"generator: {'running, pid ' + pid if alive else 'not running'}; start or resume: "
          f"bash {Path(__file__).resolve().parent}/resume_corpus.sh")
    failures = sum(1 for _ in read_rows(root / "failures.jsonl"))
    table = summary(rows)
    for split in SPLIT_ORDER:
        cells = table.get(split, {})
        n, h = cells.get("all", [0, 0.0])
        print(f"{split:20s} {n:6d} / {plan['sizes'].get(split, 0):6d} utts  {h:7.2f} h")
        for fam in sorted(f for f in cells if f != "all"):
            print(f"    {fam:16s} {cells[fam][0]:6d} utts  {cells[fam][1]:7.2f} h")
    if args.voices:
        per_voice: dict[tuple[str, str], list[float]] = {}
        for r in rows:
            cell = per_voice.setdefault((r["split"], r["speaker"] if "*" not in r["voice"] else "kokoro-blend"),
                                        [0, 0.0])
            cell[0] += 1
            cell[1] += r["dur"] / 3600
        for (split, spk), (n, h) in sorted(per_voice.items()):
            print(f"  {split:20s} {spk:28s} {n:6d} utts {h:6.2f} h")
    fotaq_rows = latest_rows(root / "fotaq" / "manifest.jsonl")
    for split, cells in sorted(summary(fotaq_rows).items()):
        print(f"{split:20s} {cells['all'][0]:6d} utts  {cells['all'][1]:7.2f} h   (real speech, {root}/fotaq)")
    print(f"failures: {failures}")
    return 0


FOTAQ_TEST_SPEAKERS = 8  # other-person voices of whole dialogues held out as real-speech test data


def relabel_game_lines(manifest: Manifest, root: Path, source: str) -> int:
    """Give every game line made before the label rules changed (asr_data/normalise.py) the label they write
    now, from its own subtitle (`speak`): a row appended with the new label (the manifest's last row of an
    utterance is its truth; no game files or audio are needed). Returns how many lines changed."""
    from asr_data.normalise import normalise

    changed = 0
    for row in list(manifest.rows.values()):
        pair = normalise(row["speak"], allow_caps=True)
        if pair is not None and pair[1] != row["label"]:
            manifest.append(dict(row, label=pair[1]))
            changed += 1
    if changed:
        export_kaldi(manifest.rows.values(), root)
        print(f"{source}: {changed} lines relabelled by the current label rules", flush=True)
    return changed


def write_real_clips(root: Path, source: str, lines, load_audio) -> tuple[dict, int, int]:
    """Voiced game lines as 16 kHz FLAC under ROOT/wavs/ with their manifest rows, resumable like `run`.
    ``lines``: (split, utt, clip name, subtitle text, speaker, folder under wavs/); ``load_audio(clip name)``
    -> (samples, rate). Lines made before under older label rules are relabelled first (`relabel_game_lines`).
    Returns (the split counts exported, lines made now, lines not normalisable)."""
    from asr_data.normalise import normalise

    manifest = Manifest(root / "manifest.jsonl")
    relabel_game_lines(manifest, root, source)
    skipped = made = 0
    for split, utt, name, text, speaker, folder in lines:
        pair = normalise(text, allow_caps=True)
        if pair is None:
            skipped += 1
            continue
        if utt in manifest:
            continue
        audio, sr = load_audio(name)
        audio = np.clip(augment.to_16k(audio, sr), -1.0, 1.0)
        rel = Path("wavs") / folder / f"{utt}.flac"
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        sf.write(root / rel, audio, augment.SAMPLE_RATE, format="FLAC", subtype="PCM_16")
        manifest.append({"utt": utt, "split": split, "path": str(rel), "dur": round(audio.size / 16000, 3),
                         "label": pair[1], "speak": text, "kind": "real", "source": source, "family": source,
                         "voice": speaker, "speaker": f"{source}-{speaker}"})
        made += 1
    counts = export_kaldi(manifest.rows.values(), root)
    manifest.close()
    return counts, made, skipped


def fotaq_run(args) -> int:
    """Real speech: the voiced lines of Debian's flight-of-the-amazon-queen, resampled to 16 kHz flac, as
    ROOT/fotaq/{fotaq_train,fotaq_test,fotaq_cut}. Joe (the hero) trains; FOTAQ_TEST_SPEAKERS of the
    dialogue characters, drawn by the seed, are the test split. Cutaway-scene lines, whose speakers are
    not identified (they may include test characters), are fotaq_cut. Resumable like `run`."""
    from asr_data import fotaq

    if not fotaq.QUEEN_1C.exists():
        sys.exit(f"{fotaq.QUEEN_1C} missing: apt-get install flight-of-the-amazon-queen "
                 "(bash scripts/get_tts_voices.sh installs it)")
    clips = fotaq.clips()
    people = sorted({c.speaker for c in clips if c.speaker not in ("joe", "cutaway")})
    held = set(random.Random(args.seed or 2026).sample(people, FOTAQ_TEST_SPEAKERS))

    def lines():
        for clip in clips:
            split = ("fotaq_cut" if clip.speaker == "cutaway" else
                     "fotaq_test" if clip.speaker in held else "fotaq_train")
            yield split, f"{split}_{clip.name.lower()}", clip.name, clip.text, clip.speaker, split

    counts, made, skipped = write_real_clips(args.root / "fotaq", "fotaq", lines(),
                                             lambda name: fotaq.clip_audio(fotaq.QUEEN_1C, name))
    print(f"fotaq: {counts}, made {made} now, {skipped} lines not normalisable; held-out speakers "
          f"{sorted(held)}")
    return 0


def drascula_run(args) -> int:
    """Real speech: the English voiced lines of Debian's drascula (12 speakers, 0.77 h), resampled to 16 kHz
    flac, as ROOT/drascula/drascula_train (all of it trains: fotaq_test holds the unseen real speakers).
    Resumable like `run`."""
    from asr_data import drascula

    if not drascula.DRASCULA_DIR.is_dir():
        sys.exit(f"{drascula.DRASCULA_DIR} missing: apt-get install drascula "
                 "(bash scripts/get_tts_voices.sh installs it)")
    lines = (("drascula_train", f"drascula_train_{clip.name.lower()}", clip.name, clip.text, clip.speaker, "")
             for clip in drascula.clips())
    counts, made, skipped = write_real_clips(args.root / "drascula", "drascula", lines, drascula.clip_audio)
    print(f"drascula: {counts}, made {made} now, {skipped} lines not normalisable")
    return 0


def bass_run(args) -> int:
    """Real speech: the voiced lines of Beneath a Steel Sky (CD version, 3,491 lines, 1.9 h; asr_data/bass.py),
    resampled to 16 kHz flac, as ROOT/bass/bass_train (all of it trains, as drascula's). Resumable like `run`."""
    from asr_data import bass

    if not (bass.GAME_DIR / "sky.dsk").exists() or not bass.SCUMMVM.exists():
        sys.exit(f"{bass.GAME_DIR} or {bass.SCUMMVM} missing: bash scripts/get_bass.sh")
    lines = (("bass_train", f"bass_train_{clip.name}", clip.name, clip.text, clip.speaker, "")
             for clip in bass.clips())
    counts, made, skipped = write_real_clips(args.root / "bass", "bass", lines, bass.clip_audio)
    print(f"bass: {counts}, made {made} now, {skipped} lines not normalisable")
    return 0


BENCH_TEXT = ("The old man walked slowly to the station, carrying two heavy bags.",
              "Please call me back at four five six, seven eight nine zero.",
              "In nineteen eighty four she moved to a small town near the coast.")


def bench(args) -> int:
    """Synthesis speed of every voice: audio seconds per CPU second (one process, one thread)."""
    names = {**voices.TRAIN_VOICES, **voices.HELDOUT_VOICES, "espeak": ("en-us", "en-gb+m3"),
             "kokoro": ("af_heart", "bm_george")}
    print(f"{'family':9s} {'voice':12s} {'x real time':>11s}  audio_s  cpu_s")
    for family in sorted(names):
        for name in names[family]:
            voice = voices.Voice(family, name, 1.0, 1.0)
            try:
                voices.synthesise("Warm up.", voice, 0)  # model loading is not synthesis
                t0, audio_s = _cpu_s(), 0.0
                for text in BENCH_TEXT:
                    raw, sr = voices.synthesise(text, voice, 0)
                    audio_s += raw.size / sr
                cpu = _cpu_s() - t0
                print(f"{family:9s} {name:12s} {audio_s / cpu:11.1f}  {audio_s:7.1f}  {cpu:5.2f}", flush=True)
            except Exception as exc:  # report and go on: one missing voice should not hide the others
                print(f"{family:9s} {name:12s} FAILED {exc!r:.120}", flush=True)
    return 0


FROZEN_TRAIN = 15_568  # the train split's size when the data-v2 training data was frozen (2026-12-04)
KALDI_FILES = ("wav.scp", "text", "utt2spk", "utt2dur")


def uqm_run(args) -> int:
    """Real speech under a NON-COMMERCIAL licence, only when asked for: The Ur-Quan Masters' voiced dialogue
    (scripts/get_uqm.sh; 21 characters, 6,621 subtitle lines, 8.0 h), cut into lines (asr_data/uqm.py),
    resampled to 16 kHz flac, as ROOT/uqm/uqm_train. A model trained on it is CC BY-NC-SA 2.5."""
    from asr_data import uqm

    if not uqm.VOICE_PACK.exists():
        sys.exit(f"{uqm.VOICE_PACK} missing: bash scripts/get_uqm.sh")
    out = args.root / "uqm"
    if (out / "complete").exists() and (out / "uqm_train" / "text").exists():
        manifest = Manifest(out / "manifest.jsonl")
        try:
            relabel_game_lines(manifest, out, "uqm")
        finally:
            manifest.close()
        print(f"uqm: already in {out}")
        return 0
    current: dict = {}  # the entry being cut: write_real_clips asks for each line's audio right after its line

    def lines():
        for entry in uqm.entries(uqm.VOICE_PACK, uqm.CONTENT_PACK):
            audio = uqm.entry_audio(entry, uqm.VOICE_PACK)
            current.clear()
            for line in uqm.cut(entry, audio):
                current[line.name] = uqm.line_audio(line, audio)
                yield ("uqm_train", f"uqm_train_{line.name}", line.name, line.text, line.race, line.race)

    counts, made, skipped = write_real_clips(out, "uqm", lines(), lambda name: (current[name], uqm.SAMPLE_RATE))
    (out / "complete").write_text("")
    print(f"uqm: {counts}, made {made} now, {skipped} lines not normalisable")
    return 0


def _kaldi_rows(folder: Path) -> dict[str, dict[str, str]]:
    """{utt: {file: value}} of a Kaldi-style folder's files."""
    rows: dict[str, dict[str, str]] = {}
    for name in KALDI_FILES:
        for line in (folder / name).read_text(encoding="utf-8").splitlines():
            utt, _, value = line.partition(" ")
            rows.setdefault(utt, {})[name] = value
    return rows


def freeze(args) -> int:
    """ROOT/<out>: the training data of the open-English recogniser (scripts/train_open_en.sh), the same on
    every machine: the train split's first N utterances by index (the generator makes index i from its own
    seed, so a regenerated corpus gives the same ones) and the Flight of the Amazon Queen actors' training
    lines listed --fotaq-copies times (copies after the first get the suffix _rep<k>), without those the
    Whisper check found mismatched."""
    train = _kaldi_rows(args.root / "train")
    chosen = {utt: row for utt, row in train.items() if int(utt.rsplit("_", 1)[1]) < args.freeze_train}
    if len(chosen) < args.freeze_train:
        print(f"the train split has {len(chosen)} of the first {args.freeze_train} utterances: let the "
              "generator run on (bash scripts/resume_corpus.sh)", file=sys.stderr)
        return 1
    drops = clip_check.dropped()  # clips whose subtitle Whisper contradicts (scripts/check_clips.py)
    game = {utt: row for utt, row in _kaldi_rows(args.root / "fotaq" / "fotaq_train").items() if utt not in drops}
    for k in range(args.fotaq_copies):
        for utt, row in game.items():
            chosen[utt if k == 0 else f"{utt}_rep{k + 1}"] = row
    out = args.root / args.out
    out.mkdir(parents=True, exist_ok=True)
    for name in KALDI_FILES:
        (out / name).write_text("".join(f"{utt} {row[name]}\n" for utt, row in sorted(chosen.items())),
                                encoding="utf-8")
    hours = sum(float(row["utt2dur"]) for row in chosen.values()) / 3600
    print(f"{out}: {len(chosen)} utterances, {hours:.1f} h ({args.freeze_train} synthetic, "
          f"{len(game)} game lines x {args.fotaq_copies})")
    return 0


LEG_STRIDE = 20_000   # train-split indices reserved per relay leg: leg L draws from L * LEG_STRIDE upwards
EVAL_SIZE = 100       # utterances of each synthetic test split that every leg generates and evaluates
# A leg's training utterances: Kokoro (natural, but ~20x the synthesis cost of the others) speaks every
# LEG_KOKORO_EVERY-th index, the fast engines the rest, so Kokoro takes about half the synthesis time.
LEG_KOKORO_EVERY = 16
LEG_FAST_FAMILIES = {f: w for f, w in voices.TRAIN_FAMILIES.items() if f != "kokoro"}
_WORKER: dict = {}


def _leg_worker_init(root: str, plan: dict) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop
    # Forked workers inherit the parent's SIGTERM handler (a server's, a test runner's): with it, the pool's
    # terminate() at the leg's deadline would not end them, and the leg would wait for them for ever.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _WORKER["gen"] = Generator(Path(root), plan)


def leg_families(split: str, i: int) -> dict[str, float] | None:
    if split != "train":
        return None
    return {"kokoro": 1.0} if i % LEG_KOKORO_EVERY == 0 else LEG_FAST_FAMILIES


def _leg_worker_make(job: tuple[str, int]) -> tuple[str, dict | None, str]:
    split, i = job
    try:
        return f"{split}_{i:06d}", _WORKER["gen"].make(split, i, leg_families(split, i)), ""
    except Exception as exc:  # recorded by the parent, as in `run`
        return f"{split}_{i:06d}", None, repr(exc)[:300]


def _write_kaldi(rows: list[dict], base: Path, out: Path) -> float:
    """out/{wav.scp,text,utt2spk,utt2dur} of manifest rows whose paths are relative to `base`; hours."""
    out.mkdir(parents=True, exist_ok=True)
    rows = sorted(rows, key=lambda r: r["utt"])
    (out / "wav.scp").write_text("".join(f"{r['utt']} {(base / r['path']).resolve()}\n" for r in rows))
    (out / "text").write_text("".join(f"{r['utt']} {r['label']}\n" for r in rows), encoding="utf-8")
    (out / "utt2spk").write_text("".join(f"{r['utt']} {r['speaker']}\n" for r in rows))
    (out / "utt2dur").write_text("".join(f"{r['utt']} {r['dur']:.3f}\n" for r in rows))
    return sum(r["dur"] for r in rows) / 3600


def leg(args) -> int:
    """One relay leg's data, deterministic from the leg number, bounded by --minutes:
    the synthetic test splits' first EVAL_SIZE utterances (the same every leg), then this leg's training
    utterances, train-split indices leg * LEG_STRIDE + 0, 1, 2, ... until the time is up (each index is the
    same utterance on every machine, so a leg's data is a prefix of its own fixed sequence), made by --jobs
    processes. Writes ROOT/legs/leg<N>/train (this leg's synthetic utterances plus the game's training lines;
    leg<N>_uqm/train with --with-uqm, asr_data.manifest.leg_name)
    and ROOT/legs/eval/<split> for every evaluation split."""
    args.root.mkdir(parents=True, exist_ok=True)
    with open(args.root / "gen.lock", "w") as lock:  # one writer of the manifest at a time
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _leg_locked(args)


def _leg_locked(args) -> int:
    import multiprocessing

    root = args.root
    if args.seed is None and not (root / "plan.json").exists():
        args.seed = 2026
    plan = load_plan(root, args)
    build_text(root)
    manifest = Manifest(root / "manifest.jsonl")
    failed_path = root / "failures.jsonl"
    failed = {r["utt"] for r in read_rows(failed_path)}
    deadline = time.time() + args.minutes * 60
    first = args.leg * LEG_STRIDE
    tests = [(s, i) for s in SPLIT_ORDER[:-1] for i in range(min(EVAL_SIZE, plan["sizes"][s]))]
    jobs = tests + [("train", first + k) for k in range(LEG_STRIDE)]
    foreign = [u for u, r in manifest.rows.items() if r["split"] == "train" and first <= r["index"] < first + LEG_STRIDE
               and r["family"] not in leg_families("train", r["index"])]
    if foreign:  # made by `run` with the whole-corpus voice mix: not this leg's utterances
        sys.exit(f"{len(foreign)} utterances of leg {args.leg}'s index range (e.g. {foreign[0]}) were made by "
                 f"`gen_corpus.py run`, not by `leg`: use another --root for the relay")
    todo = [j for j in jobs if f"{j[0]}_{j[1]:06d}" not in manifest and f"{j[0]}_{j[1]:06d}" not in failed]
    print(f"[{time.strftime('%F %T')}] leg {args.leg}: {len(manifest.rows)} in the manifest, "
          f"{args.minutes:.0f} min, {args.jobs} jobs", flush=True)
    made, start = 0, time.time()
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(args.jobs, _leg_worker_init, (str(root), plan)) as pool:
        for utt, row, error in pool.imap(_leg_worker_make, todo):
            if row is not None:
                manifest.append(row)
                made += 1
            else:
                with open(failed_path, "a") as fh:
                    fh.write(json.dumps({"utt": utt, "error": error}) + "\n")
            if made % 200 == 0 and row is not None:
                print(f"[{time.strftime('%F %T')}] +{made} ({made / (time.time() - start):.2f} utt/s) at {utt}",
                      flush=True)
            # imap yields in order, so stopping here leaves a prefix of the leg's sequence
            if time.time() > deadline and utt.startswith("train"):
                pool.terminate()
                break
    manifest.close()
    rows = list(manifest.rows.values())
    legs = root / "legs"
    mine = [r for r in rows if r["split"] == "train" and first <= r["index"] < first + LEG_STRIDE]
    # the games' rows hold paths relative to ROOT/fotaq, ROOT/drascula and ROOT/bass
    game = [dict(r, path=str(Path("fotaq") / r["path"])) for r in latest_rows(root / "fotaq" / "manifest.jsonl")]
    game_train = [r for r in game if r["split"] == "fotaq_train"]
    for source in ("drascula", "bass"):  # all of their lines train
        game_train += [dict(r, path=str(Path(source) / r["path"]))
                       for r in latest_rows(root / source / "manifest.jsonl")]
    if args.with_uqm:  # non-commercial: only when asked for (asr_data/uqm.py), into folders of its own
        if not (root / "uqm" / "complete").exists():
            sys.exit(f"{root / 'uqm'} is not complete: run `gen_corpus.py uqm` first")
        game_train += [dict(r, path=str(Path("uqm") / r["path"])) for r in latest_rows(root / "uqm" / "manifest.jsonl")]
    drops = clip_check.dropped()  # clips whose subtitle Whisper contradicts (scripts/check_clips.py)
    kept = [r for r in game_train if r["utt"] not in drops]
    if len(kept) < len(game_train):
        print(f"left out {len(game_train) - len(kept)} game lines that their subtitles do not match "
              f"({clip_check.CHECKS.name})", flush=True)
    game_train = kept
    synth_h = sum(r["dur"] for r in mine) / 3600
    real_h = sum(r["dur"] for r in game_train) / 3600
    _write_kaldi(mine + game_train, root, legs / leg_name(args.leg, args.with_uqm) / "train")
    for split in SPLIT_ORDER[:-1]:
        _write_kaldi([r for r in rows if r["split"] == split and r["index"] < EVAL_SIZE], root,
                     legs / "eval" / split)
    _write_kaldi([r for r in game if r["split"] == "fotaq_test"], root, legs / "eval" / "fotaq_test")
    print(f"[{time.strftime('%F %T')}] leg {args.leg}: made {made} in {(time.time() - start) / 60:.1f} min; "
          f"train: {len(mine)} synthetic ({synth_h:.2f} h) + {len(game_train)} game lines ({real_h:.2f} h)",
          flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=("run", "status", "export", "bench", "fotaq", "drascula", "bass", "uqm",
                                        "freeze", "leg"))
    ap.add_argument("--root", type=Path, default=ROOT)
    ap.add_argument("--seed", type=int, default=None, help="first run only (default 2026); fixed after")
    for split in SPLIT_ORDER:
        ap.add_argument(f"--{split.replace('_', '-')}", dest=split, type=int, default=None,
                        help=f"utterances (default {DEFAULT_SIZES[split]})")
    ap.add_argument("--limit", type=int, default=0, help="stop after making this many (0: all)")
    ap.add_argument("--voices", action="store_true", help="status: per-voice table")
    ap.add_argument("--freeze-train", type=int, default=FROZEN_TRAIN,
                    help=f"freeze: the train split's first N utterances (default {FROZEN_TRAIN})")
    ap.add_argument("--fotaq-copies", type=int, default=2, help="freeze: times the game's actors' lines are listed")
    ap.add_argument("--out", default="train_v2", help="freeze: the data folder written under ROOT")
    ap.add_argument("--leg", type=int, default=0, help="leg: the relay leg whose data to make")
    ap.add_argument("--minutes", type=float, default=30.0, help="leg: time budget for synthesis")
    ap.add_argument("--jobs", type=int, default=2, help="leg: synthesis processes")
    ap.add_argument("--with-uqm", action="store_true",
                    help="leg: train on The Ur-Quan Masters' lines too (`uqm` first; CC BY-NC-SA: non-commercial)")
    args = ap.parse_args(argv)
    if args.command == "leg":
        return leg(args)
    if args.command == "freeze":
        return freeze(args)
    if args.command == "run":
        return run(args)
    if args.command == "fotaq":
        return fotaq_run(args)
    if args.command == "drascula":
        return drascula_run(args)
    if args.command == "bass":
        return bass_run(args)
    if args.command == "uqm":
        return uqm_run(args)
    if args.command == "bench":
        return bench(args)
    if args.command == "export":
        counts = export_kaldi(latest_rows(args.root / "manifest.jsonl"), args.root)
        print(counts)
        return 0
    return status(args)


if __name__ == "__main__":
    sys.exit(main())
