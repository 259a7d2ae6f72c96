"""The analysis loop: candidates from a search, loaded on the server, measured at every load point, ranked.

    Analyzer(options).run() -> Summary          (options.py: AnalyzerOptions and Summary)

Output folder (Model Analyzer's layout where it has one):
    results/metrics-model-inference.csv
    output_model_repository/<model>_config_<n>/config.pbtxt     every candidate config measured
    best_model_repository/<model>/...                            the best configuration, ready to serve
    reports/summary.html, reports/throughput_vs_latency.png
    checkpoints/0.ckpt                                           (unless --checkpoint says otherwise)
The outputs are written by outputs.py; this module plans, loads, measures and confirms.
"""

from __future__ import annotations

import contextlib
import re
import logging
import statistics
from pathlib import Path
from typing import Any, Optional

from tritonclient.grpc import model_config_pb2 as mc

from asr_server.analyzer import audio_data, objectives, perf, search
from asr_server.analyzer.checkpoint import CONFIRM, Checkpoint, Record
from asr_server.analyzer.objectives import Measured
from asr_server.analyzer.options import BRUTE, HILL, AnalyzerOptions, Summary
from asr_server.analyzer.outputs import write_outputs
from asr_server.analyzer.search import SHIPPED, Candidate, Coordinate
from asr_server.analyzer.server import LocalServer, ModelControl, RemoteServer
from asr_server.analyzer.variants import Variant, apply_variant, is_sequence, knobs_for, shipped_value, to_pbtxt

log = logging.getLogger("asr_model_analyzer")
ENSEMBLE = "ensemble"
WARM_UP_STREAMS, WARM_UP_SECONDS = 4, 2.0  # paced warm-up after a load: streams, audio seconds each


def bls_hint(error: str) -> str:
    """What to add when a model the tuned ones call through BLS was not loaded (an ensemble's steps do not show
    those calls): Triton's words are "Request for unknown model: 'NAME' is not found"."""
    found = re.search(r"unknown model: '([^']+)' is not found", error or "")
    if not found:
        return ""
    return f"; a model calls '{found.group(1)}' through BLS: add --bls-composing-models {found.group(1)}"


class Analyzer:
    def __init__(self, options: AnalyzerOptions):
        self.o = options
        self.perf = options.perf or perf.PerfSettings(perf.find_binary())
        self.export = Path(options.export_path)
        self.candidates_dir = self.export / "output_model_repository"
        self.control: Optional[ModelControl] = None
        self.loaded: dict[str, str] = {}  # model -> variant key currently loaded
        self.file_configs: dict[str, mc.ModelConfig] = {}  # as written in the repository: what we edit
        self.effective: dict[str, mc.ModelConfig] = {}  # as the server completed them: what actually runs
        self.top_config: Optional[mc.ModelConfig] = None
        self.tuned: list[str] = []
        self.scores: dict[str, tuple] = {}
        self.candidates: dict[str, Candidate] = {}
        self.measured = self.resumed = 0
        self.bar = None
        self.utterances = None

    # ---- set-up ---------------------------------------------------------------------------------------
    def _server(self):
        if self.o.repository is not None:
            models = self._models_from_repository()
            return LocalServer(self.o.repository, models, self.export / "server.log")
        return RemoteServer(self.o.url)

    def _read_file_config(self, name: str) -> mc.ModelConfig:
        from asr_server.repository import read_config

        if self.o.repository is not None:
            return read_config(Path(self.o.repository) / name)
        return self.control.config(name)  # a running server: its (completed) config is all we can read

    def _models_from_repository(self) -> list[str]:
        from asr_server.repository import read_config

        top = read_config(Path(self.o.repository) / self.o.model)
        steps = [s.model_name for s in top.ensemble_scheduling.step] if top.platform == ENSEMBLE else []
        models = list(dict.fromkeys([self.o.model, *steps, *self.o.bls_composing_models]))
        # folders whose files a model's parameters name ("../streaming_encoder/1/...": a scorer that runs that
        # model's graph itself) are copied too, or the copy would not load
        for name in list(models):
            for value in read_config(Path(self.o.repository) / name).parameters.values():
                parts = Path(value.string_value).parts
                if len(parts) > 2 and parts[0] == ".." and (Path(self.o.repository) / parts[1]).is_dir():
                    models.append(parts[1])
        return list(dict.fromkeys(models))

    def _plan(self) -> None:
        self.top_config = self._read_file_config(self.o.model)
        if self.top_config.platform == ENSEMBLE:
            self.tuned = list(dict.fromkeys(s.model_name for s in self.top_config.ensemble_scheduling.step))
        else:
            self.tuned = [self.o.model]
        self.tuned = list(dict.fromkeys(self.tuned + list(self.o.bls_composing_models)))
        for name in self.tuned:
            self.file_configs[name] = self._read_file_config(name)

    def _coordinates(self, effective: dict[str, mc.ModelConfig]) -> tuple[list[Coordinate], list[int]]:
        """One coordinate per (tuned model, knob) the grid names; the start index is the shipped value's,
        which is added to the values when the grid leaves it out (so a climb starts where the model is)."""
        coords, start = [], []
        for name in self.tuned:
            for knob in knobs_for(effective[name]):
                values = (self.o.grid.get(name, {}) or {}).get(knob, self.o.grid.get("*", {}).get(knob))
                if not values:
                    continue
                values = list(dict.fromkeys(values))
                shipped = shipped_value(effective[name], knob)
                if self.o.search == HILL and shipped not in values and shipped is not None:
                    values.append(shipped)
                    if all(isinstance(v, (int, float)) for v in values):
                        values.sort()
                coords.append(Coordinate(name, knob, tuple(values)))
                start.append(values.index(shipped) if shipped in values else 0)
        return coords, start

    def _workload(self) -> perf.Workload:
        sequence = any(is_sequence(c) for c in self.file_configs.values())
        if sequence and self.perf.request_count:
            raise ValueError("--request-count cannot measure a sequence model: a count cuts its sequences short "
                             "(measure it in windows: --measurement-interval, --max-trials)")
        decoupled = any(c.model_transaction_policy.decoupled for c in self.file_configs.values())
        if self.o.input_data is not None:
            args: tuple[str, ...] = ("--input-data", str(self.o.input_data))
        elif self.o.audio is not None:
            data = (audio_data.streaming_data(self._utterances(), self.o.chunk_ms) if sequence
                    else audio_data.offline_data(self._utterances()))
            path = audio_data.write(data, self.export / "input_data.json")
            args = ("--input-data", str(path))
        else:
            args = tuple(a for s in self.o.shape for a in ("--shape", s))
        return perf.Workload(input_args=args, sequence=sequence, streaming=sequence or decoupled,
                             sequence_length=self.o.sequence_length)

    def _utterances(self):
        if self.utterances is None:
            self.utterances = audio_data.load_utterances(self.o.audio, self.o.audio_limit)
        return self.utterances

    def _load_points(self) -> list[tuple[str, Any]]:
        if self.o.objective == objectives.PACED_STREAMS:
            return [(f"s{n}", n) for n in sorted(self.o.paced_streams)]
        if self.o.request_rate:
            return [(p.key(), p) for p in (perf.LoadPoint(request_rate=r) for r in self.o.request_rate)]
        return [(p.key(), p) for p in (perf.LoadPoint(concurrency=c) for c in self.o.concurrency)]

    # ---- configurations -------------------------------------------------------------------------------
    def config_of(self, name: str, variant: Variant) -> mc.ModelConfig:
        return apply_variant(self.file_configs[name], variant)

    def ensemble_config(self, candidate: Candidate) -> Optional[mc.ModelConfig]:
        """The ensemble's config with max_batch_size no larger than its steps' (Triton refuses it otherwise)."""
        if self.top_config is None or self.top_config.platform != ENSEMBLE:
            return None
        config = mc.ModelConfig()
        config.CopyFrom(self.top_config)
        limits = [self.config_of(s, candidate.variant(s)).max_batch_size
                  for s in dict.fromkeys(x.model_name for x in self.top_config.ensemble_scheduling.step)]
        if config.max_batch_size > 0 and limits and min(limits) > 0:
            config.max_batch_size = min(config.max_batch_size, min(limits))
        return config

    def names(self, candidate: Candidate) -> dict[str, str]:
        return {m: self.checkpoint.name_for(m, candidate.variant(m).describe()) for m in self.tuned}

    def config_path(self, candidate: Candidate) -> str:
        names = self.names(candidate)
        if self.top_config.platform != ENSEMBLE and len(self.tuned) == 1:
            return names[self.o.model]
        top = self.checkpoint.name_for(self.o.model, candidate.key() if candidate.variants else "shipped")
        return f"{top}: " + ", ".join(names[m] for m in self.tuned)

    def _write_candidate(self, candidate: Candidate) -> None:
        for model, name in self.names(candidate).items():
            folder = self.candidates_dir / name
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "config.pbtxt").write_text(to_pbtxt(self.config_of(model, candidate.variant(model))))

    def _ensure_loaded(self, candidate: Candidate) -> None:
        wanted = {m: candidate.variant(m).describe() for m in self.tuned}
        changed = [m for m in self.tuned if self.loaded.get(m) != wanted[m]]
        top = self.ensemble_config(candidate)
        if not changed and (top is None or self.loaded.get(self.o.model) == candidate.key()):
            return
        if top is not None and self.o.model in self.loaded:
            self.control.unload(self.o.model)
            self.loaded.pop(self.o.model)
        for m in changed:
            self.loaded.pop(m, None)
            self.control.load(m, self.config_of(m, candidate.variant(m)))
            self.loaded[m] = wanted[m]
        if top is not None:
            self.control.load(self.o.model, top)
            self.loaded[self.o.model] = candidate.key()
        self._warm_up()

    def _warm_up(self) -> None:
        """The first requests to freshly loaded models (ONNX Runtime's first runs, per-sequence set-up) are
        slow: paced streams measure from the first chunk, so they would land in the first point's p99, and a
        perf_analyzer window that sees none of them complete fails the point. A short run first, not recorded."""
        if self.o.objective == objectives.PACED_STREAMS:
            from asr_server.analyzer.paced import run_paced

            run_paced(self.control.url, self.o.model, self._utterances(), WARM_UP_STREAMS, WARM_UP_SECONDS,
                      self.o.chunk_ms)
            return
        error = perf.warm_up(self.perf, self.control.url, self.o.model, self.workload)
        if error:
            log.info("warm-up of '%s' failed (the measurement will say why): %s", self.o.model, error)

    # ---- measuring ------------------------------------------------------------------------------------
    def evaluate(self, candidate: Candidate) -> tuple:
        self.candidates[candidate.key()] = candidate
        self._write_candidate(candidate)
        records = []
        for load_key, point in self.load_points:
            record = self.checkpoint.find(candidate.key(), load_key)
            if record is None:
                record = self._measure(candidate, load_key, point)
                self.checkpoint.add(record)
                self.measured += 1
            else:
                self.resumed += 1
            if self.bar is not None:
                self.bar.set_postfix_str(f"{load_key} {record.throughput:.1f}/s p99 {record.p99_ms:.0f} ms", False)
                self.bar.update(1)
            records.append(record)
            # Paced streams go up in count until one fails: more streams will not do better.
            if self.o.objective == objectives.PACED_STREAMS and not self.o.constraints.satisfied(record.measured()):
                break
        if candidate == SHIPPED and records and all(r.error for r in records):
            # Nothing can be compared with a baseline that does not run: stop rather than sweep errors.
            raise RuntimeError(f"the shipped configuration of '{self.o.model}' failed to measure: {records[0].error}"
                               f"{bls_hint(records[0].error)} (fix it, then remove {self.checkpoint.path} if it "
                               "recorded the failure)")
        key = objectives.score(self.o.objective, self.o.constraints, (r.measured() for r in records))
        self.scores[candidate.key()] = key
        log.info("%s (%s): %s", self.config_path(candidate), candidate.describe(), key)
        return key

    def _measure(self, candidate: Candidate, load_key: str, point) -> Record:
        generator = "paced" if self.o.objective == objectives.PACED_STREAMS else "perf_analyzer"
        base = dict(candidate=candidate.key(), load=load_key, generator=generator)
        try:
            self._ensure_loaded(candidate)
        except Exception as exc:  # a config the server refuses is a result too: recorded, never retried
            self.loaded.clear()
            return Record(**base, error=f"load failed: {exc}"[:500])
        if generator == "paced":
            from asr_server.analyzer.paced import run_paced

            r = run_paced(self.control.url, self.o.model, self._utterances(), point, self.o.paced_seconds,
                          self.o.chunk_ms)
            return Record(**base, concurrency=point, throughput=r.chunks_per_s, p99_ms=r.chunk_p99_ms,
                          p50_ms=r.chunk_p50_ms, final_p99_ms=r.final_p99_ms, streams=point,
                          memory_mb=self.control.memory_mb(), error=r.first_error if r.errors else "")
        try:
            m = perf.measure(self.perf, self.control.url, self.o.model, self.workload, point)
        except perf.PerfError as exc:
            return Record(**base, concurrency=point.concurrency, request_rate=point.request_rate,
                          error=str(exc)[:500])
        return Record(**base, concurrency=point.concurrency, request_rate=point.request_rate,
                      throughput=m.throughput, p99_ms=m.p99_ms, p95_ms=m.p95_ms, p50_ms=m.p50_ms, avg_ms=m.avg_ms,
                      memory_mb=self.control.memory_mb())

    # ---- the run --------------------------------------------------------------------------------------
    def run(self) -> Summary:
        self.export.mkdir(parents=True, exist_ok=True)
        with self._server() as control:
            self.control = control
            try:
                return self._run()
            finally:
                if self.o.url is not None:
                    self._restore_shipped()
                control.close()

    def _restore_shipped(self) -> None:
        """A running server is left serving its shipped configs (loaded again from its repository)."""
        with contextlib.suppress(Exception):
            for m in self.tuned:
                self.control.load(m)
            if self.top_config is not None and self.top_config.platform == ENSEMBLE:
                self.control.load(self.o.model)

    def _run(self) -> Summary:
        self._plan()
        self.workload = self._workload()
        self.load_points = self._load_points()
        identity = {"model": self.o.model, "tuned": self.tuned, "loads": [k for k, _ in self.load_points],
                    "workload": [self.workload.sequence, self.workload.streaming, self.workload.sequence_length,
                                 self.workload.batch_size, self.o.objective == objectives.PACED_STREAMS,
                                 self.o.paced_seconds, self.o.chunk_ms, str(self.o.audio), self.o.audio_limit,
                                 list(self.o.shape), str(self.o.input_data)],
                    # the request count only when set: checkpoints written before it existed still match
                    "perf": [self.perf.measurement_interval_ms, self.perf.max_trials,
                             *([self.perf.request_count] if self.perf.request_count else [])]}
        self.checkpoint = Checkpoint.open(self.o.checkpoint or self.export / "checkpoints" / "0.ckpt", identity)
        # The shipped configs as the server completes them: a knob's shipped value is what the model runs with.
        self._ensure_loaded(SHIPPED)
        self.effective = {m: self.control.config(m) for m in self.tuned}
        coords, start = self._coordinates(self.effective)
        total = self.o.max_candidates * len(self.load_points)
        if self.o.progress:
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=f"analyzing {self.o.model}", unit="point")
        try:
            if self.o.search == BRUTE:
                best, best_key = search.brute_force(coords, self.evaluate, self.o.max_candidates)
            else:
                best, best_key = search.hill_climb(coords, start, self.evaluate, self.o.max_candidates,
                                                   self.o.min_gain)
            confirmation = self._confirm(best)
            if confirmation and not self._confirmed(confirmation):
                # The search's pick did not beat the shipped config when both were measured again alternately:
                # its lead was noise, and the shipped config is what the output repository keeps.
                log.warning("%s did not beat the shipped configuration in the confirmation rounds: keeping the "
                            "shipped one", self.config_path(best))
                best, best_key = SHIPPED, self.scores[SHIPPED.key()]
        finally:
            if self.bar is not None:
                self.bar.close()
        return write_outputs(self, best, best_key, confirmation)

    def _confirmed(self, confirmation: dict) -> bool:
        """Whether the best's confirmed medians rank above the shipped config's."""
        def key(label: str) -> tuple:
            points = [Measured(throughput=t, p99_ms=p, streams=int(load[1:]) if load.startswith("s") else 0)
                      for load, (t, p, _) in confirmation.get(label, {}).items()]
            return objectives.score(self.o.objective, self.o.constraints, points)

        return key("best") > key("shipped")

    def _confirm(self, best: Candidate) -> dict:
        """Shipped and best measured again, alternately, `confirm_rounds` times; medians per load point."""
        if not self.o.confirm_rounds or best == SHIPPED:
            return {}
        if self.bar is not None:
            self.bar.total += 2 * self.o.confirm_rounds * len(self.load_points)
        samples: dict = {"shipped": {}, "best": {}}
        for i in range(self.o.confirm_rounds):
            for label, candidate in (("shipped", SHIPPED), ("best", best)):
                for load_key, point in self.load_points:
                    key = f"{load_key}{CONFIRM}{i}"
                    record = self.checkpoint.find(candidate.key(), key)
                    if record is None:
                        record = self._measure(candidate, key, point)
                        self.checkpoint.add(record)
                        self.measured += 1
                    else:
                        self.resumed += 1
                    if self.bar is not None:
                        self.bar.update(1)
                    if not record.error:
                        samples[label].setdefault(load_key, []).append((record.throughput, record.p99_ms))
        return {label: {load: (statistics.median(t for t, _ in v), statistics.median(p for _, p in v), len(v))
                        for load, v in loads.items()} for label, loads in samples.items()}
