"""Measured points on disk, so that a stopped run resumes without measuring them again.

One JSON file (written atomically after every point): the analysed model, the config names given to each
variant (so a resumed run names them the same), and every measurement with its candidate and load point.
A checkpoint written for another model or another workload is refused rather than mixed in.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

from asr_server.analyzer.objectives import Measured

VERSION = 1
CONFIRM = "#confirm"  # load keys of the confirmation rounds: "<load>#confirm<round>"


@dataclass
class Record:
    """One load point of one candidate."""

    candidate: str  # Candidate.key()
    load: str  # LoadPoint.key() or "s<N>" for N paced streams
    generator: str  # "perf_analyzer" or "paced"
    concurrency: Optional[int] = None
    request_rate: Optional[float] = None
    throughput: float = 0.0  # infer/sec
    p99_ms: float = float("inf")
    p95_ms: float = float("inf")
    p50_ms: float = float("inf")
    avg_ms: float = float("inf")
    final_p99_ms: Optional[float] = None  # paced streams: END chunk sent -> final transcript received
    memory_mb: Optional[float] = None
    streams: int = 0
    error: str = ""

    def measured(self) -> Measured:
        """The numbers an objective reads from this record."""
        return Measured(throughput=self.throughput, p99_ms=self.p99_ms, memory_mb=self.memory_mb,
                        streams=self.streams, error=self.error)


@dataclass
class Checkpoint:
    path: Path
    identity: dict  # what was analysed and how (model, workload, load points): a resume must match it
    names: dict = field(default_factory=dict)  # "<model>|<variant key>" -> "<model>_config_<n>"
    records: list = field(default_factory=list)  # Record

    @classmethod
    def open(cls, path: Path, identity: dict) -> "Checkpoint":
        path = Path(path)
        if not path.is_file():
            return cls(path, identity)
        data = json.loads(path.read_text())
        if data.get("version") != VERSION or data.get("identity") != identity:
            raise ValueError(f"checkpoint {path} was written for another analysis "
                             f"({data.get('identity')}); remove it or pass another --checkpoint")
        return cls(path, identity, dict(data.get("names", {})), [Record(**r) for r in data.get("records", [])])

    def find(self, candidate: str, load: str) -> Optional[Record]:
        for r in self.records:
            if r.candidate == candidate and r.load == load:
                return r
        return None

    def add(self, record: Record) -> None:
        self.records.append(record)
        self.save()

    def name_for(self, model: str, variant_key: str) -> str:
        """A stable config name per distinct variant of a model: <model>_config_default for the shipped one."""
        key = f"{model}|{variant_key}"
        if key not in self.names:
            if variant_key == "shipped":
                self.names[key] = f"{model}_config_default"
            else:
                taken = sum(1 for k, v in self.names.items() if k.startswith(f"{model}|") and not v.endswith("default"))
                self.names[key] = f"{model}_config_{taken}"
        return self.names[key]

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"version": VERSION, "identity": self.identity, "names": self.names,
                                   "records": [asdict(r) for r in self.records]}, indent=1))
        os.replace(tmp, self.path)
