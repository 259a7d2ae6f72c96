"""Machine instructions our serving layer executes per streamed chunk: a figure that a busy machine does not
change, for comparing two versions of the chunk path while other work (a training leg) holds the cores.

    python -m bench.chunk_instructions [--streams 40] [--rounds 20] [--group N --gap MS] [--compare CHECKOUT]

Runs `bench/chunk_path.py` (the serving layer in process, without the network) under valgrind's lackey tool
twice, with 4 rounds and with --rounds rounds, and divides the difference of the executed instructions by the
chunks of the extra rounds, so that start-up, model loading and shutdown cancel out. With --compare, the
same for another checkout (e.g. a `git worktree` of the commit before a change), in the same run.
Needs valgrind (`apt-get install valgrind`); each run takes about a minute. Python's hash seed is fixed; what
remains uneven (how chunks fall into batches) moves the figure by about 1%. Instructions are not time: a
change that trades instructions for memory traffic or thread hand-offs shows in bench/chunk_path.py and
bench/stream_overhead.py on quiet cores, not here.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASE_ROUNDS = 4  # two of warm-up, two measured: the run whose cost is subtracted


def instructions(checkout: Path, streams: int, rounds: int, arrival: list[str]) -> tuple[int, str]:
    """Guest instructions of one chunk_path run in `checkout`, and its own summary line."""
    env = dict(os.environ, PYTHONHASHSEED="0", PYTHONPATH=str(checkout))
    done = subprocess.run(["valgrind", "--tool=lackey", "--basic-counts=yes", sys.executable, "-m",
                           "bench.chunk_path", "--streams", str(streams), "--rounds", str(rounds), *arrival],
                          cwd=checkout, env=env, capture_output=True, text=True, check=False)
    found = re.search(r"guest instrs:\s+([\d,]+)", done.stderr)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"chunk_path under valgrind failed in {checkout}:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    summary = next((line for line in done.stdout.splitlines() if "per chunk" in line), "")
    return int(found.group(1).replace(",", "")), summary


def per_chunk(checkout: Path, streams: int, rounds: int, arrival: list[str]) -> float:
    base, _ = instructions(checkout, streams, BASE_ROUNDS, arrival)
    total, summary = instructions(checkout, streams, rounds, arrival)
    value = (total - base) / (streams * (rounds - BASE_ROUNDS))
    print(f"{checkout}: {value / 1000:.0f}K instructions per chunk ({summary.split(':')[-1].strip()})", flush=True)
    return value


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--streams", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--group", type=int, default=None, help="chunk_path's --group")
    parser.add_argument("--gap", type=float, default=None, metavar="MS", help="chunk_path's --gap")
    parser.add_argument("--compare", type=Path, default=None, metavar="CHECKOUT",
                        help="another checkout of this project, measured after this one")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")
    if args.rounds <= BASE_ROUNDS:
        raise SystemExit(f"--rounds must exceed {BASE_ROUNDS}")
    arrival = [*(["--group", str(args.group)] if args.group else []), *(["--gap", str(args.gap)] if args.gap else [])]
    ours = per_chunk(ROOT, args.streams, args.rounds, arrival)
    if args.compare is not None:
        other = per_chunk(args.compare.resolve(), args.streams, args.rounds, arrival)
        print(f"this checkout / {args.compare}: {ours / other:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
