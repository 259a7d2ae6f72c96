"""NVIDIA's perf_analyzer as the load generator: one run per load point, its CSV parsed into metrics.

perf_analyzer does everything a unary or sequence measurement needs (concurrency and request-rate loads,
sequences with START/END and correlation ids over a gRPC stream, --input-data with real audio, stable windows),
so the analyzer drives it rather than sending requests itself. `scripts/get_perf_analyzer.sh` fetches a build
that runs without a GPU into .tools/perf_analyzer/.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[2]
BUNDLED_BINARY = ROOT / ".tools" / "perf_analyzer" / "bin" / "perf_analyzer"
US_PER_MS = 1000.0


class PerfError(RuntimeError):
    """perf_analyzer failed at a load point; the message ends with the tail of its output."""


def find_binary(explicit: Optional[str] = None) -> Path:
    """--perf-analyzer, else $PERF_ANALYZER, else the fetched build, else perf_analyzer on PATH."""
    if explicit:
        if not Path(explicit).is_file():
            raise FileNotFoundError(f"perf_analyzer '{explicit}' does not exist")
        return Path(explicit)
    for candidate in (os.environ.get("PERF_ANALYZER"), str(BUNDLED_BINARY), shutil.which("perf_analyzer")):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    raise FileNotFoundError("perf_analyzer not found: run `bash scripts/get_perf_analyzer.sh` or pass --perf-analyzer")


@dataclass(frozen=True)
class PerfSettings:
    binary: Path  # the perf_analyzer executable
    measurement_interval_ms: int = 1000  # one measurement window
    max_trials: int = 4  # windows before perf_analyzer gives up stabilising
    # perf_analyzer calls a load point unstable when p99 and throughput of the last 3 windows differ by more
    # than this percentage. On 2 shared cores they always do a little, and an unstable point makes it exit
    # without numbers; 999 keeps its numbers (the last 3 windows averaged) and the search compares like with like.
    stability_percentage: float = 999.0
    timeout_s: float = 300.0  # kill a run that hangs (a server that stopped answering)
    # > 0: each point measures this many requests (perf_analyzer's --request-count) instead of windows, with
    # no stability check: figures as repeatable as the machine, and no point lost to a window's hiccup on a
    # loaded machine. Not for sequence workloads, whose sequences a count would cut short.
    request_count: int = 0
    extra_args: tuple[str, ...] = ()  # anything else, passed through unchanged

    def __post_init__(self):
        if self.measurement_interval_ms <= 0 or self.max_trials < 1 or self.request_count < 0:
            raise ValueError("measurement_interval_ms must be positive, max_trials at least 1 and request_count "
                             "not negative")


@dataclass(frozen=True)
class Workload:
    """What each request carries and how requests group into sequences."""

    input_args: tuple[str, ...] = ()  # --shape NAME:dims or --input-data FILE (the rest are random data)
    sequence: bool = False  # the model (or an ensemble step) is sequence-batched: send sequences
    streaming: bool = False  # --streaming: bidirectional gRPC stream (needed by decoupled models)
    sequence_length: Optional[int] = None  # --sequence-length (steps per sequence when the data does not say)
    batch_size: int = 1  # -b


@dataclass(frozen=True)
class LoadPoint:
    """One load: `concurrency` outstanding requests (or sequences), or `request_rate` requests per second."""

    concurrency: Optional[int] = None
    request_rate: Optional[float] = None

    def __post_init__(self):
        if (self.concurrency is None) == (self.request_rate is None):
            raise ValueError("a load point is a concurrency or a request rate, not both")

    def args(self) -> list[str]:
        if self.concurrency is not None:
            return ["--concurrency-range", str(self.concurrency)]
        return ["--request-rate-range", f"{self.request_rate:g}"]

    def key(self) -> str:
        return f"c{self.concurrency}" if self.concurrency is not None else f"r{self.request_rate:g}"


@dataclass(frozen=True)
class PerfMetrics:
    """perf_analyzer's numbers for one load point (latencies in ms, client side unless named server)."""

    throughput: float  # infer/sec
    p50_ms: float
    p90_ms: float
    p95_ms: float
    p99_ms: float
    avg_ms: float  # the sum of perf_analyzer's average components (its CSV has no average column)
    server_queue_ms: float
    server_compute_infer_ms: float


def command(settings: PerfSettings, url: str, model: str, workload: Workload, point: LoadPoint,
            csv_path: Path) -> list[str]:
    args = [str(settings.binary), "-i", "grpc", "-u", url, "-m", model, "-b", str(workload.batch_size),
            "--measurement-interval", str(settings.measurement_interval_ms),
            "--max-trials", str(settings.max_trials),
            "--stability-percentage", f"{settings.stability_percentage:g}",
            "--percentile", "99", "-f", str(csv_path), *workload.input_args, *point.args()]
    if workload.streaming:
        args.append("--streaming")
    if workload.sequence and workload.sequence_length:
        args += ["--sequence-length", str(workload.sequence_length)]
    if settings.request_count:
        args += ["--request-count", str(settings.request_count)]
    return args + list(settings.extra_args)


# perf_analyzer's words for a point whose windows were too short for this machine; both advise longer ones.
UNSTABLE = "Failed to obtain stable measurement"
NO_REQUESTS = "No valid requests recorded within time interval"  # a cold model's first request outlasted a window


def measure(settings: PerfSettings, url: str, model: str, workload: Workload, point: LoadPoint) -> PerfMetrics:
    """Run perf_analyzer at one load point and return its metrics; PerfError when it fails. A point it calls
    unstable (a window with a hiccup on a busy machine, even at stability 999%) or whose window saw no request
    complete (a freshly loaded model's first request on a busy machine) is measured once more with windows
    twice as long, as its message advises."""
    try:
        return _measure_once(settings, url, model, workload, point)
    except PerfError as exc:
        if UNSTABLE not in str(exc) and NO_REQUESTS not in str(exc):
            raise
    longer = dataclasses.replace(settings, measurement_interval_ms=2 * settings.measurement_interval_ms)
    return _measure_once(longer, url, model, workload, point)


WARM_UP_REQUESTS = 2  # sent to a freshly loaded model before its first measured window


def warm_up(settings: PerfSettings, url: str, model: str, workload: Workload) -> Optional[str]:
    """A few requests to a freshly loaded model, not measured: its first ones (ONNX Runtime's first runs, the
    python models' set-up) can outlast a whole window, which perf_analyzer then rejects as holding no valid
    request. perf_analyzer's own count mode (--request-count) sends them, with the measured run's data.
    Sequence workloads are left out: a count cut short would leave a sequence open on the server, holding a
    slot through the first window. The error message when the warm-up failed (the measured run will tell)."""
    if workload.sequence:
        return None
    warm = dataclasses.replace(settings, request_count=WARM_UP_REQUESTS)
    try:
        _measure_once(warm, url, model, workload, LoadPoint(concurrency=1))
    except PerfError as exc:
        return str(exc)
    return None


def _measure_once(settings: PerfSettings, url: str, model: str, workload: Workload, point: LoadPoint
                  ) -> PerfMetrics:
    env = dict(os.environ)
    lib = settings.binary.parent.parent / "lib"  # the fetched build keeps libcudart/libb64 beside it
    if lib.is_dir():
        env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [str(lib), env.get("LD_LIBRARY_PATH")]))
    with tempfile.TemporaryDirectory(prefix="perf-") as tmp:
        csv_path = Path(tmp) / "perf.csv"
        try:
            run = subprocess.run(command(settings, url, model, workload, point, csv_path), env=env,
                                 capture_output=True, text=True, timeout=settings.timeout_s)
        except subprocess.TimeoutExpired:
            raise PerfError(f"perf_analyzer ran past {settings.timeout_s:.0f} s at {point.key()}") from None
        if run.returncode != 0 or not csv_path.is_file():
            tail = (run.stdout + run.stderr).strip().splitlines()[-6:]
            raise PerfError(f"perf_analyzer exited with {run.returncode} at {point.key()}: " + " | ".join(tail))
        return parse_csv(csv_path.read_text())


def parse_csv(text: str) -> PerfMetrics:
    """The first data row of perf_analyzer's -f CSV (microseconds) as PerfMetrics (milliseconds)."""
    rows = list(csv.DictReader(io.StringIO(text)))
    if not rows:
        raise PerfError("perf_analyzer wrote no measurement")
    row = rows[0]

    def ms(column: str) -> float:
        return float(row.get(column) or 0) / US_PER_MS

    return PerfMetrics(
        throughput=float(row["Inferences/Second"]),
        p50_ms=ms("p50 latency"), p90_ms=ms("p90 latency"), p95_ms=ms("p95 latency"), p99_ms=ms("p99 latency"),
        avg_ms=sum(ms(c) for c in ("Client Send", "Network+Server Send/Recv", "Server Queue", "Server Compute Input",
                                   "Server Compute Infer", "Server Compute Output", "Client Recv")),
        server_queue_ms=ms("Server Queue"), server_compute_infer_ms=ms("Server Compute Infer"),
    )
