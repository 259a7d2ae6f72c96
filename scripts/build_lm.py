#!/usr/bin/env python3
"""Estimate the token n-gram LM that the CTC prefix beam search can fuse in (``asr_server.asr.decoding.token_lm``).

Text: the open-English training pool of the synthetic data (``asr_data.text_sources.collect``: fortunes and
WordNet glosses, the held-out topics left out), the transcripts of the games' training lines (the ``text``
files given with ``--kaldi-text``, keys of real speech only), and ``--spoken-lines`` lines drawn as the
synthetic data draws its digit strings, dates and times and template sentences (``asr_data.textgen``; its
random word lists are not language and stay out). Every line that is the reference of an
evaluation split (``--exclude``: Kaldi dirs or text files) is left out, and the real recordings' sentences
never enter the pool (``is_banned``). Lines are cut into the model's own units by its ``bpe.model``, so the
LM's words are the units the search emits.

Estimation: IRSTLM (Debian ``irstlm``: ``apt-get install irstlm``), improved Kneser-Ney, singletons of the
higher orders pruned, then ``prune-lm`` drops n-grams whose back-off estimate is close enough (``--prune``).
KenLM's ``lmplz`` would do the same; it is not in the registries this project installs from.

    python scripts/build_lm.py --model models/open_en_wip --kaldi-text /work/asr_data/legs/leg13/train/text \\
        --exclude /work/asr_data/legs/eval/* /work/asr_data/real --out models/open_en_wip/lm.arpa.gz

Prints the n-gram counts, the file size and the perplexity per unit on the held-out text pool (test_open's
sources).
"""

from __future__ import annotations

import argparse
import gzip
import random
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from asr_data import textgen  # noqa: E402
from asr_data.manifest import REAL_SPEECH  # noqa: E402
from asr_data.templates import sentence as template_sentence  # noqa: E402
from asr_data.text_sources import collect  # noqa: E402

# The kinds of synthetic text that are language a user says (a phone number, a date, "the train to the station
# leaves at seven"), in their training shares; without them the LM pulls digit strings towards words.
SPOKEN_KINDS = {kind: textgen.TRAIN_KINDS[kind] for kind in ("digits", "date_time", "template")}
SPOKEN_SEED = 7


def kaldi_lines(path: Path) -> list[tuple[str, str]]:
    """(key, transcript) of a Kaldi ``text`` file (or of the ``text`` inside a data dir)."""
    path = path / "text" if path.is_dir() else path
    rows = []
    for raw in path.read_text(encoding="utf-8").splitlines():
        parts = raw.split(maxsplit=1)  # a space or a tab after the key
        if len(parts) == 2:
            rows.append((parts[0], " ".join(parts[1].split())))
    return rows


def spoken_lines(count: int, seed: int = SPOKEN_SEED) -> list[str]:
    """``count`` labels of the SPOKEN_KINDS, drawn as the training data draws them (real recordings'
    sentences never; the same seed gives the same lines)."""
    pools = textgen.Pools(sentences={}, vocab=[], names=[], template=template_sentence)
    rng = random.Random(seed)
    return [textgen.draw(rng, SPOKEN_KINDS, pools, training=True).label for _ in range(count)]


def training_text(kaldi_texts: list[Path], exclude: list[Path], spoken: int = 0) -> tuple[list[str], list[str]]:
    """(LM training lines, held-out lines for the perplexity), as labels (lowercase words)."""
    withheld = {words for p in exclude for _, words in kaldi_lines(p)}
    train, held = collect()
    lines = [ln.label for ln in train] + spoken_lines(spoken)
    for path in kaldi_texts:
        lines += [words for key, words in kaldi_lines(path) if key.startswith(REAL_SPEECH)]
    return [ln for ln in lines if ln not in withheld], [ln.label for ln in held]


def write_units(lines: list[str], sp, path: Path) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for line in lines:
            f.write("<s> " + " ".join(sp.encode(line, out_type=str)) + " </s>\n")


def irstlm(*args: str) -> str:
    done = subprocess.run(["irstlm", *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"irstlm {args[0]} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return done.stdout + done.stderr


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, required=True, help="model dir with the bpe.model of its units")
    ap.add_argument("--kaldi-text", type=Path, nargs="*", default=[], help="Kaldi text files (or data dirs) "
                    "whose real-speech lines join the text")
    ap.add_argument("--exclude", type=Path, nargs="*", default=[], help="evaluation splits: their references "
                    "never enter the LM")
    ap.add_argument("--spoken-lines", type=int, default=20000, help="digit strings, dates and times and "
                    "template sentences drawn as the synthetic data draws them")
    ap.add_argument("--order", type=int, default=6)
    ap.add_argument("--prune", type=float, default=1e-7, help="prune-lm threshold (0: no pruning)")
    ap.add_argument("--out", type=Path, required=True, help="the ARPA, gzipped when it ends in .gz")
    args = ap.parse_args(argv)
    if shutil.which("irstlm") is None:
        ap.error("IRSTLM is not installed: apt-get install irstlm")
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(args.model / "bpe.model"))
    lines, held = training_text(args.kaldi_text, args.exclude, args.spoken_lines)
    print(f"{len(lines)} lines, {sum(len(x.split()) for x in lines)} words; {len(held)} held-out lines")
    with tempfile.TemporaryDirectory() as tmp:
        tmp_dir = Path(tmp)
        write_units(lines, sp, tmp_dir / "train.txt")
        write_units(held, sp, tmp_dir / "held.txt")
        thresholds = ",".join(["0", "0"] + ["1"] * (args.order - 2))  # singletons of order 3 and up pruned
        report = irstlm("tlm", f"-tr={tmp_dir / 'train.txt'}", f"-n={args.order}", "-lm=ikn", "-bo=yes",
                        f"-pft={thresholds}", f"-o={tmp_dir / 'lm.arpa'}", f"-te={tmp_dir / 'held.txt'}")
        pp = re.search(r"PP=([0-9.]+)", report)
        arpa = tmp_dir / "lm.arpa"
        if args.prune > 0:
            irstlm("prune-lm", f"--threshold={args.prune}", str(arpa), str(tmp_dir / "pruned.arpa"))
            arpa = tmp_dir / "pruned.arpa"
        args.out.parent.mkdir(parents=True, exist_ok=True)
        opener = gzip.open if args.out.suffix == ".gz" else open
        with open(arpa, "rb") as src, opener(args.out, "wb") as dst:
            shutil.copyfileobj(src, dst)
        counts = [ln.strip() for ln in arpa.read_text(encoding="utf-8").split("\\1-grams:")[0].splitlines()
                  if ln.startswith("ngram")]
    print("; ".join(counts))
    print(f"perplexity per unit on the held-out text, before pruning: {pp.group(1) if pp else '?'}")
    print(f"wrote {args.out} ({args.out.stat().st_size / 2**20:.1f} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
