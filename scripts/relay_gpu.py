#!/usr/bin/env python3
"""A relay leg on a lent GPU: prepared here on the CPU, so that a GPU window of a few minutes is used
at once. Only 64 MiB travel to the GPU machine, the working tree (about 30 MiB) included, and 16 MiB per file
come back, so a leg's audio goes as Ogg/Opus (16 kbit/s: about 4 h in the 30 MiB left) and only the fp16
weights come back.

    python scripts/relay_gpu.py wheels                  # what the GPU image lacks (scripts/gpu_wheels.py relay)
    python scripts/relay_gpu.py pack --leg 2            # ROOT/legs/leg2/train -> relay_pack/ (Opus, wav.scp, text)
    # on the GPU machine (the device tool's run, carry: relay_pack, .whl), at most 10 minutes a call:
    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site &&
      python3 scripts/relay_gpu.py train --minutes 8 --out $OUT
    # back here, with the files that came back:
    python scripts/relay_gpu.py adopt --final FILES_AT/final   # evaluate, then write models/open_en_wip

`train` decodes the pack to WAV once, then continues models/open_en_wip with the relay's network and schedule
(relay.json) on CUDA with bf16 and a larger batch, made by worker processes on the machine's cores; the
optimiser's moments stay behind (they would not fit what comes back), as between CPU legs.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import io
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # the GPU machine runs this tree as it is, without installing the project

from asr_data.manifest import REAL_SPEECH  # noqa: E402 - needs the line above
from asr_server.asr.training.relay_args import relay_train_args  # noqa: E402

ROOT = Path(os.environ.get("ASR_DATA", "/work/asr_data"))
PACK = REPO / "relay_pack"
STATE = REPO / "models" / "open_en_wip"
OPUS_KBPS = 16
DEFAULT_OPUS_LEVEL = 0.97  # about 16 kbit/s for 16 kHz mono speech (see opus_level)
CALIBRATION_UTTS = 20  # the pack's first utterances, on which the Opus level is measured
MIN_PACK_MIB = 4  # less than about half an hour of speech is not worth a GPU window
TRAVEL_MIB = 64  # the device tool's limit on what travels (working tree and carried paths)
TRAVEL_MARGIN_MIB = 2  # files the run itself adds (none planned) and rounding
GPU_BATCH = 128


def travel_budget_mib() -> float:
    """What a pack may take of the 64 MiB that travel to a GPU machine: the rest of the working tree (tracked
    files and untracked ones git does not ignore) and the carried wheels travel too."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, check=True).stdout.split(b"\0")
    tree = sum((REPO / os.fsdecode(name)).stat().st_size for name in listed
               if name and (REPO / os.fsdecode(name)).is_file())
    wheels = sum(p.stat().st_size for p in (REPO / ".whl").glob("*.whl"))
    return (TRAVEL_MIB * 2**20 - tree - wheels) / 2**20 - TRAVEL_MARGIN_MIB


def source_of(utt: str) -> str:
    """The game an utterance's line comes from (its id prefix), or "synthetic"."""
    return next((prefix for prefix in REAL_SPEECH if utt.startswith(prefix)), "synthetic")


def pack_order(utts) -> list[str]:
    """Every source (each game, the synthetic speech) spread evenly over the order, in proportion to its size, so
    that whatever prefix a size budget keeps has the leg's mix of games and synthetic speech. Within a source, id
    order; deterministic."""
    sources: dict[str, list[str]] = {}
    for utt in sorted(utts):
        sources.setdefault(source_of(utt), []).append(utt)
    placed = [((rank + 0.5) / len(members), name, utt)
              for name, members in sources.items() for rank, utt in enumerate(members)]
    return [utt for _, _, utt in sorted(placed)]


def pack(args) -> int:
    """The leg's training utterances as Opus under --out, until --max-mib (every source in proportion)."""
    import soundfile as sf

    from asr_server.asr.training.data import read_data_dir

    src = args.data or ROOT / "legs" / f"leg{args.leg}" / "train"
    rows = {utt: (wav, text) for utt, wav, text in read_data_dir(src)}  # utterances with audio and a transcript
    order = pack_order(rows)
    if args.max_mib is None:
        if not any((REPO / ".whl").glob("*.whl")):
            sys.exit("run `relay_gpu.py wheels` first: they travel with the pack, and its budget counts them")
        args.max_mib = travel_budget_mib()
    if args.max_mib < MIN_PACK_MIB:
        sys.exit(f"only {args.max_mib:.1f} MiB of the {TRAVEL_MIB} that travel are left for the pack "
                 f"(at least {MIN_PACK_MIB} needed): the working tree takes the rest")
    calibration = {utt: sf.read(rows[utt][0], dtype="float32") for utt in order[:CALIBRATION_UTTS]}
    level = opus_level(list(calibration.values()), OPUS_KBPS)
    out = args.out
    if out.exists():
        shutil.rmtree(out)
    (out / "audio").mkdir(parents=True)
    scp, text, size, seconds = [], [], 0, 0.0
    for utt in order:
        audio, rate = calibration.pop(utt, None) or sf.read(rows[utt][0], dtype="float32")
        path = out / "audio" / f"{utt}.opus"
        sf.write(path, audio, rate, format="OGG", subtype="OPUS", compression_level=level)
        lines = (f"{utt} {path.relative_to(REPO) if path.is_relative_to(REPO) else path}\n", f"{utt} {rows[utt][1]}\n")
        grown = size + path.stat().st_size + sum(len(line.encode()) for line in lines)  # the lists travel too
        if grown > args.max_mib * 2**20:
            path.unlink()
            break
        size, seconds = grown, seconds + audio.shape[0] / rate
        scp.append(lines[0])
        text.append(lines[1])
    if not scp:
        sys.exit(f"{out}: no utterance fits in {args.max_mib:.1f} MiB")
    (out / "wav.scp").write_text("".join(scp))
    (out / "text").write_text("".join(text), encoding="utf-8")
    kbps = 8 * size / seconds / 1000
    kinds = collections.Counter(source_of(line.split()[0]) for line in scp)
    print(f"{out}: {len(scp)} of {len(order)} utterances ({', '.join(f'{k} {n}' for k, n in sorted(kinds.items()))}), "
          f"{seconds / 3600:.2f} h in {size / 2**20:.1f} MiB ({kbps:.1f} kbit/s)")
    return 0


def opus_level(clips: list, kbps: float) -> float:
    """The compression level that gives Opus about `kbps`. soundfile sets the codec's bitrate only through
    libsndfile's compression level in [0, 1], which libsndfile maps linearly from the highest bitrate to the
    lowest (here 262 and 8 kbit/s for 16 kHz mono speech; a level of 0.75 gave 72 kbit/s, not 16): both ends
    are measured on `clips` ((audio, rate) pairs, joined: the pack's first utterances, so that neither silence
    nor the Ogg pages of one short file decide) and the level interpolated. Where they cannot be measured
    (no audio, or no difference between the ends), the level those figures give."""
    import numpy as np
    import soundfile as sf

    audio = np.concatenate([a for a, _ in clips]) if clips else np.zeros(0, np.float32)
    rate = clips[0][1] if clips else 16000
    if audio.shape[0] < rate:  # under a second: nothing to measure
        return DEFAULT_OPUS_LEVEL

    def rate_at(level: float) -> float:
        buffer = io.BytesIO()
        sf.write(buffer, audio, rate, format="OGG", subtype="OPUS", compression_level=level)
        return 8 * len(buffer.getvalue()) / (audio.shape[0] / rate) / 1000

    highest, lowest = rate_at(0.0), rate_at(1.0)
    if highest - lowest < 1.0:
        return DEFAULT_OPUS_LEVEL
    return min(1.0, max(0.0, (highest - kbps) / (highest - lowest)))


def wheels(args) -> int:
    """The relay's wheel set (scripts/gpu_wheels.py) into .whl/."""
    return subprocess.run([sys.executable, str(REPO / "scripts" / "gpu_wheels.py"), "relay"]).returncode


def unpack(pack_dir: Path, dest: Path, workers: int) -> Path:
    """The pack's Opus decoded once into 16-bit WAV under `dest` (a Kaldi dir): decoding Opus is most of what a
    batch costs to make (22 against 6 ms of CPU an utterance), and a GPU leg reads each utterance many times."""
    lines = [line.split(maxsplit=1) for line in (pack_dir / "wav.scp").read_text().splitlines()]
    if (dest / "wav.scp").exists() and len((dest / "wav.scp").read_text().splitlines()) == len(lines):
        return dest  # a second run on the same machine
    (dest / "audio").mkdir(parents=True, exist_ok=True)
    jobs = [(str(REPO / path if not Path(path).is_absolute() else path), str(dest / "audio" / f"{utt}.wav"))
            for utt, path in lines]
    with concurrent.futures.ProcessPoolExecutor(workers) as pool:
        list(pool.map(_decode, jobs, chunksize=64))
    (dest / "wav.scp").write_text("".join(f"{utt} {wav}\n" for (utt, _), (_, wav) in zip(lines, jobs)))
    shutil.copyfile(pack_dir / "text", dest / "text")
    return dest


def _decode(job: tuple[str, str]) -> None:
    import soundfile as sf

    source, target = job
    audio, rate = sf.read(source, dtype="float32")
    sf.write(target, audio, rate, subtype="PCM_16")


def train(args) -> int:
    """Continue the relay's model on this machine's GPU for --minutes; the fp16 model dir goes to OUT/final."""
    state = json.loads((STATE / "relay.json").read_text())
    exp = Path(args.exp)
    t0 = time.time()
    data = unpack(args.pack, Path(args.exp + "_wav"), args.loader_workers)
    print(f"unpacked {args.pack} in {time.time() - t0:.0f} s", flush=True)
    cmd = [sys.executable, str(REPO / "scripts" / "train.py"), "--data", str(data), "--exp", str(exp),
           "--max-minutes", str(args.minutes), "--save-minutes", "100", "--device", args.device,
           # the step runs on the GPU; the cores make its batches (one thread would make a batch of 128 in
           # about 3 s, where the GPU needs well under one)
           "--threads", "2", "--loader-workers", str(args.loader_workers),
           "--seed", str(state["seed"] + 1000 + state["leg"]), "--batch", str(args.batch),
           *relay_train_args(state), "--init-from", str(STATE)]
    if args.device != "cpu":
        cmd.append("--bf16")
    # train.py imports the project from this tree (nothing is installed there) and the carried wheels from
    # the PYTHONPATH the run set
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    subprocess.run(cmd, check=True, env=env)
    subprocess.run([*cmd, "--finalize", "--fp16-weights", "--final-dir", str(args.out / "final")], check=True, env=env)
    shutil.copyfile(exp / "train_log.tsv", args.out / "train_log.tsv")
    (args.out / "gpu_leg.json").write_text(json.dumps({"minutes": round((time.time() - t0) / 60, 1),
                                                       "batch": args.batch, "device": args.device}))
    return 0


def adopt(args) -> int:
    """The weights a GPU leg brought back become the relay's state, after the usual evaluation."""
    import torch

    final = args.final
    torch.load(final / "final.pt", map_location="cpu", weights_only=True)  # fails here if it did not come back whole
    subprocess.run([sys.executable, str(REPO / "scripts" / "relay_leg.py"), "--skip-setup", "--adopt", str(final)],
                   check=True)
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("pack")
    p.add_argument("--leg", type=int, default=1)
    p.add_argument("--data", type=Path, default=None, help="a Kaldi dir instead of the leg's")
    p.add_argument("--out", type=Path, default=PACK)
    p.add_argument("--max-mib", type=float, default=None,
                   help="default: what the 64 MiB that travel leave beside the working tree and the wheels")
    sub.add_parser("wheels")
    p = sub.add_parser("train")
    p.add_argument("--pack", type=Path, default=PACK)
    p.add_argument("--minutes", type=float, default=8.0)
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "gpu_out")))
    p.add_argument("--exp", default="/tmp/relay_gpu_exp")
    p.add_argument("--batch", type=int, default=GPU_BATCH)
    p.add_argument("--device", default="cuda")
    p.add_argument("--loader-workers", type=int, default=min(16, max(1, len(os.sched_getaffinity(0)) - 2)),
                   help="processes making batches (default: the cores this process may use, but two, at most 16)")
    p = sub.add_parser("adopt")
    p.add_argument("--final", type=Path, required=True)
    args = ap.parse_args(argv)
    return {"pack": pack, "wheels": wheels, "train": train, "adopt": adopt}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
