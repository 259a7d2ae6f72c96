"""CPU cost of the streaming pipeline under a fixed load, and where it goes.

    python -m bench.stream_cpu [--repo model_repo] [--streams 32] [--seconds 12] [--profile out.txt]

Starts our server on the repository in a subprocess (127.0.0.1), runs S paced real-time streams (640 ms
chunks, demo utterances back to back, starts staggered over one chunk) for about --seconds of audio each, and
prints the server's CPU-seconds per audio-second (process CPU time from /proc: robust on a shared machine,
unlike wall-clock latency). With --profile, py-spy samples every thread of the server for the run and the
top functions by own and by inclusive samples are printed (and the raw collapsed stacks written to the file).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

from bench._server import serve_repository, server_process
from bench.vs_sherpa import child_pids, cpu_seconds, load_data, ours_paced


def thread_cpu(pid: int, prefix: str = "") -> collections.Counter:
    """CPU seconds of each thread of a process, summed by thread name (digits dropped); the threads of its
    child processes (model instances in processes of their own) count as "instance process <name>"."""
    out = collections.Counter()
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:  # a child process that ended meanwhile
        return out
    for task in tasks:
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")].rstrip("0123456789_-")
        fields = stat.rsplit(")", 1)[1].split()
        out[prefix + name] += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    for child in child_pids(pid):
        out.update(thread_cpu(child, "instance process "))
    return out


def sys_seconds(pid: int) -> float:
    """Kernel-mode CPU seconds of a process: thread wake-ups, polling and copies show up here."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[12]) / os.sysconf("SC_CLK_TCK")


def batch_stats(url: str) -> dict:
    """{model: (inference count, execution count, execution ns)} from the server's statistics."""
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(url)
    stats = client.get_inference_statistics(as_json=True)
    client.close()
    return {m["name"]: (int(m.get("inference_count", 0)), int(m.get("execution_count", 0)),
                        sum(int(b.get("compute_infer", {}).get("ns", 0)) for b in m.get("batch_stats", [])))
            for m in stats.get("model_stats", [])}


def summarise(collapsed: Path, top: int) -> str:
    """Top functions of py-spy's collapsed stacks: own samples and inclusive samples (% of all)."""
    own, inclusive, total = collections.Counter(), collections.Counter(), 0
    for line in collapsed.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        n = int(count)
        total += n
        frames = [f.split(" (")[0] + " (" + f.split(" (")[-1].split(":")[0].rsplit("/", 1)[-1] + ")"
                  for f in stack.split(";")[1:]]  # [0] is the thread
        if frames:
            own[frames[-1]] += n
        for frame in set(frames):
            inclusive[frame] += n
    lines = [f"{total} samples (all threads, active only)", "own:"]
    lines += [f"  {100 * n / total:5.1f}%  {f}" for f, n in own.most_common(top)]
    lines += ["inclusive:"] + [f"  {100 * n / total:5.1f}%  {f}" for f, n in inclusive.most_common(top)]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repo", type=Path, default=ROOT / "model_repo")
    parser.add_argument("--data", type=Path, default=ROOT / "tests" / "data" / "demo_utts")
    parser.add_argument("--streams", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=12.0, help="audio per stream")
    parser.add_argument("--chunk-ms", type=float, default=640.0)
    parser.add_argument("--profile", type=Path, default=None, help="py-spy collapsed stacks go here")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--gil", action="store_true",
                        help="sample only the thread holding the GIL: the Python work that bounds throughput")
    args = parser.parse_args()
    items = load_data(args.data)
    with server_process(serve_repository, str(args.repo)) as (proc, port):
        spy = None
        try:
            url = f"127.0.0.1:{port}"
            asyncio.run(ours_paced(url, items, 2, args.chunk_ms, 2.0))  # warm-up (sessions, allocators)
            if args.profile:
                exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
                spy = subprocess.Popen([exe, "record", "--pid", str(proc.pid), "--format", "raw", "--rate", "200",
                                        "--output", str(args.profile), "--nonblocking"]
                                       + (["--gil"] if args.gil else []),
                                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                time.sleep(1.0)
            stats0 = batch_stats(url)
            threads0 = thread_cpu(proc.pid)
            cpu0, client0, wall = cpu_seconds(proc.pid), cpu_seconds(None), time.monotonic()
            sys0 = sys_seconds(proc.pid)
            r = asyncio.run(ours_paced(url, items, args.streams, args.chunk_ms, args.seconds))
            cpu, wall = cpu_seconds(proc.pid) - cpu0, time.monotonic() - wall
            client_cpu = cpu_seconds(None) - client0  # the load generator shares the machine's cores
            kernel = sys_seconds(proc.pid) - sys0
            print(f"{args.streams} paced streams, {r['audio_s']:.0f} s of audio in {wall:.1f} s: server "
                  f"{cpu:.2f} CPU-s = {cpu / r['audio_s']:.4f} CPU-s per audio-s; final latency p50 "
                  f"{r['final_p50_ms']:.0f} p99 {r['final_p99_ms']:.0f} ms; chunk p99 {r['chunk_p99_ms']:.0f} ms; "
                  f"errors {r['errors']}; load generator {client_cpu / wall:.2f} cores, server {cpu / wall:.2f} cores "
                  f"({100 * kernel / max(cpu, 1e-9):.0f}% of it in the kernel)")
            stats = batch_stats(url)
            # (requests, executions, execution ns) of each model that executed during the run
            ran = {m: [now - before for now, before in zip(stats[m], stats0.get(m, (0, 0, 0)))]
                   for m in sorted(stats) if stats[m][1] > stats0.get(m, (0, 0, 0))[1]}
            print("average batch (requests / executions): " + ", ".join(
                f"{m} {requests / max(1, executions):.1f}" for m, (requests, executions, _) in ran.items()))
            # An instance busy all the time is the stage every chunk queues for (latency without full CPUs).
            print("busy fraction of each model's instances (execution time / wall): " + ", ".join(
                f"{m} {ns / 1e9 / wall:.2f}" for m, (_, _, ns) in ran.items()))
            by_thread = thread_cpu(proc.pid)
            by_thread.subtract(threads0)
            print("CPU-s per audio-s by thread: " + ", ".join(
                f"{name} {sec / r['audio_s']:.4f}" for name, sec in by_thread.most_common() if sec > 0.005))
        finally:
            if spy is not None:
                spy.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
                spy.wait(30)
    if spy is not None and args.profile.exists():
        print(summarise(args.profile, args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
