#!/usr/bin/env python3
"""A relay leg on a lent GPU: prepared here on the CPU, so that a GPU window of a few minutes is used
at once. Only 64 MiB travel to the GPU machine, the working tree (about 30 MiB) included, and 16 MiB per file
come back, so a leg's audio goes as Ogg/Opus (16 kbit/s: about 4 h in the 30 MiB left) and only the fp16
weights come back.

    python scripts/relay_gpu.py pack --leg 2            # ROOT/legs/leg2/train -> relay_pack/ (Opus, wav.scp, text)
    python scripts/relay_gpu.py wheels                  # what the GPU image lacks, for its Python 3.12
    # on the GPU machine (the device tool's run, carry: relay_pack, .whl), at most 10 minutes a call:
    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site &&
      python3 scripts/relay_gpu.py train --minutes 8 --out $OUT
    # back here, with the files that came back:
    python scripts/relay_gpu.py adopt --final FILES_AT/final   # evaluate, then write models/open_en_wip

`train` continues models/open_en_wip with the relay's network and schedule (relay.json) on CUDA with bf16 and a
larger batch, made by worker processes on the machine's cores; the optimiser's moments stay behind (they would
not fit what comes back), as between CPU legs.
"""

from __future__ import annotations

import argparse
import io
import itertools
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
TRAVEL_MIB = 64  # the device tool's limit on what travels (working tree and carried paths)
TRAVEL_MARGIN_MIB = 2  # files the run itself adds (none planned) and rounding
GPU_BATCH = 128
# What training imports that the GPU image (the device library's KINDS.md, its package list of 2026-11-17) has,
# and the wheels that carry the rest (with what those need: soundfile needs cffi, cffi needs pycparser).
IMAGE_PACKAGES = ("torch", "numpy", "scipy", "tqdm", "pyyaml", "sentencepiece", "typing-extensions")
WHEELS = ("kaldi-native-fbank", "soundfile", "cffi", "pycparser", "soxr")


def travel_budget_mib() -> float:
    """What a pack may take of the 64 MiB that travel to a GPU machine: the rest of the working tree (tracked
    files and untracked ones git does not ignore) and the carried wheels travel too."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, check=True).stdout.split(b"\0")
    tree = sum((REPO / os.fsdecode(name)).stat().st_size for name in listed
               if name and (REPO / os.fsdecode(name)).is_file())
    wheels = sum(p.stat().st_size for p in (REPO / ".whl").glob("*.whl"))
    return (TRAVEL_MIB * 2**20 - tree - wheels) / 2**20 - TRAVEL_MARGIN_MIB


def pack_order(utts) -> list[str]:
    """Real and synthetic utterances alternately (real first), so that a size budget cuts both kinds alike and
    the pack keeps the legs' mix of about half real speech (each kind in id order: deterministic)."""
    real = sorted(u for u in utts if u.startswith(REAL_SPEECH))
    synthetic = sorted(u for u in utts if not u.startswith(REAL_SPEECH))
    return [u for pair in itertools.zip_longest(real, synthetic) for u in pair if u is not None]


def pack(args) -> int:
    """The leg's training utterances as Opus under --out, until --max-mib (real and synthetic alternately)."""
    import soundfile as sf

    src = args.data or ROOT / "legs" / f"leg{args.leg}" / "train"
    wavs = dict(line.split(maxsplit=1) for line in (src / "wav.scp").read_text().splitlines())
    texts = dict(line.split(maxsplit=1) for line in (src / "text").read_text(encoding="utf-8").splitlines()
                 if len(line.split(maxsplit=1)) == 2)
    order = pack_order(wavs)
    if args.max_mib is None:
        args.max_mib = travel_budget_mib()
    out = args.out
    if out.exists():
        shutil.rmtree(out)
    (out / "audio").mkdir(parents=True)
    scp, text, size, seconds, level = [], [], 0, 0.0, None
    for utt in order:
        if utt not in texts:
            continue
        audio, rate = sf.read(wavs[utt].strip(), dtype="float32")
        if level is None:
            level = opus_level(audio, rate, OPUS_KBPS)
        path = out / "audio" / f"{utt}.opus"
        sf.write(path, audio, rate, format="OGG", subtype="OPUS", compression_level=level)
        size += path.stat().st_size
        if size > args.max_mib * 2**20:
            path.unlink()
            break
        seconds += audio.shape[0] / rate
        scp.append(f"{utt} {path.relative_to(REPO) if path.is_relative_to(REPO) else path}\n")
        text.append(f"{utt} {texts[utt]}\n")
    (out / "wav.scp").write_text("".join(scp))
    (out / "text").write_text("".join(text), encoding="utf-8")
    kbps = 8 * size / max(seconds, 1e-9) / 1000
    print(f"{out}: {len(scp)} of {len(order)} utterances, {seconds / 3600:.2f} h in {size / 2**20:.1f} MiB "
          f"({kbps:.1f} kbit/s)")
    return 0


def opus_level(audio, rate: int, kbps: float) -> float:
    """The compression level that gives Opus about `kbps`. soundfile sets the codec's bitrate only through
    libsndfile's compression level in [0, 1], which libsndfile maps linearly from the highest bitrate to the
    lowest (here 262 and 8 kbit/s for 16 kHz mono speech; a level of 0.75 gave 72 kbit/s, not 16): both ends
    are measured on this audio and the level interpolated."""
    import soundfile as sf

    def rate_at(level: float) -> float:
        buffer = io.BytesIO()
        sf.write(buffer, audio, rate, format="OGG", subtype="OPUS", compression_level=level)
        return 8 * len(buffer.getvalue()) / (audio.shape[0] / rate) / 1000

    highest, lowest = rate_at(0.0), rate_at(1.0)
    return min(1.0, max(0.0, (highest - kbps) / (highest - lowest)))


def wheels(args) -> int:
    """Wheels the GPU image lacks, for its Python 3.12 (.whl/ is ignored by git and carried by the run)."""
    dest = REPO / ".whl"
    dest.mkdir(exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version",
                    "3.12", "--implementation", "cp", "--platform", "manylinux_2_28_x86_64", "--platform",
                    "manylinux_2_17_x86_64", "--platform", "manylinux2014_x86_64", "-d", str(dest), *WHEELS],
                   check=True)
    return 0


def train(args) -> int:
    """Continue the relay's model on this machine's GPU for --minutes; the fp16 model dir goes to OUT/final."""
    state = json.loads((STATE / "relay.json").read_text())
    exp = Path(args.exp)
    cmd = [sys.executable, str(REPO / "scripts" / "train.py"), "--data", str(args.pack), "--exp", str(exp),
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
    t0 = time.time()
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
    p.add_argument("--loader-workers", type=int, default=max(1, (os.cpu_count() or 2) - 2),
                   help="processes making batches (default: the cores but two)")
    p = sub.add_parser("adopt")
    p.add_argument("--final", type=Path, required=True)
    args = ap.parse_args(argv)
    return {"pack": pack, "wheels": wheels, "train": train, "adopt": adopt}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
