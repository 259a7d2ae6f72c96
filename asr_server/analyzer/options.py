"""What an analysis run is asked (AnalyzerOptions, checked in __post_init__) and what it returns (Summary)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from asr_server.analyzer import objectives
from asr_server.analyzer.perf import PerfSettings
from asr_server.analyzer.objectives import Constraints
from asr_server.analyzer.search import Candidate

BRUTE, HILL = "brute", "hill"


@dataclass(frozen=True)
class AnalyzerOptions:
    model: str  # the model or ensemble to analyse
    export_path: Path  # where results, configs and the report go
    repository: Optional[Path] = None  # start our server on a copy of this repository (and read configs here)
    url: Optional[str] = None  # else: a running server with --model-control-mode=explicit
    bls_composing_models: tuple[str, ...] = ()  # models the tuned ones call (BLS): searched and loaded too
    grid: dict = field(default_factory=dict)  # {"*" or model: {knob: (values...)}}
    search: str = HILL  # "brute": every grid point; "hill": hill climbing from the shipped config
    max_candidates: int = 12  # configurations measured at most (the shipped one included)
    min_gain: float = 0.02  # hill climbing moves only for a relative gain above this
    objective: str = objectives.THROUGHPUT
    constraints: Constraints = Constraints()
    concurrency: tuple[int, ...] = (1, 4)  # perf_analyzer load points (sequences for sequence models)
    request_rate: tuple[float, ...] = ()  # perf_analyzer request rates instead of concurrencies
    paced_streams: tuple[int, ...] = (2, 4, 8)  # paced_streams objective: stream counts, ascending
    paced_seconds: float = 10.0  # audio per paced stream at each point
    chunk_ms: float = 640.0  # streaming chunk length (perf_analyzer data and paced streams)
    audio: Optional[Path] = None  # real audio for WAV/WAV_LENS inputs (a Kaldi-style folder or audio files)
    audio_limit: int = 6  # utterances taken from `audio`
    shape: tuple[str, ...] = ()  # perf_analyzer --shape NAME:dims for variable-size inputs
    input_data: Optional[Path] = None  # a ready perf_analyzer --input-data file
    sequence_length: Optional[int] = None  # perf_analyzer --sequence-length without audio data
    perf: Optional[PerfSettings] = None
    checkpoint: Optional[Path] = None
    # Rounds in which the shipped and the best config are measured again, alternately, after the search: on
    # shared cores one measurement can be off by 10-25 %, so the comparison quoted is the median of these.
    confirm_rounds: int = 0
    progress: bool = True

    def __post_init__(self):
        if (self.repository is None) == (self.url is None):
            raise ValueError("give a model repository (our server is started) or the url of a running server")
        if self.search not in (BRUTE, HILL):
            raise ValueError(f"search must be '{BRUTE}' or '{HILL}'")
        if self.objective not in objectives.OBJECTIVES:
            raise ValueError(f"objective must be one of {objectives.OBJECTIVES}")
        if self.objective == objectives.PACED_STREAMS:
            if self.audio is None or not self.paced_streams:
                raise ValueError("the paced_streams objective needs --audio and --paced-streams")
        elif not (self.concurrency or self.request_rate):
            raise ValueError("give --concurrency or --request-rate load points")
        if self.max_candidates < 1:
            raise ValueError("max_candidates must be at least 1")
        count = self.perf.request_count if self.perf is not None else 0
        if count and count < max((*self.concurrency, *self.request_rate), default=0):
            # perf_analyzer's own rule: "request-count can not be less than concurrency"
            raise ValueError(f"--request-count {count} is less than the largest concurrency or request rate")


@dataclass(frozen=True)
class Summary:
    best: Candidate
    best_name: str
    best_score: tuple
    shipped_score: tuple
    csv_path: Path
    report_path: Path
    best_repository: Path
    confirmation: dict  # {"shipped"|"best": {load: (median infer/s, median p99 ms, rounds)}}, when confirmed
    measured_points: int  # measured in this run (not taken from the checkpoint)
    resumed_points: int  # taken from the checkpoint
