"""The analyzer's pieces without a server: knobs on configs, grid parsing, searches, checkpoint, CSV, audio data."""

from __future__ import annotations

import base64
import csv
import json

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from asr_server.analyzer import audio_data, objectives, perf, search
from asr_server.analyzer.checkpoint import Checkpoint, Record
from asr_server.analyzer.cli import parse_grid
from asr_server.analyzer.results import MODEL_ANALYZER_COLUMNS, Row, write_csv
from asr_server.analyzer.variants import Variant, apply_variant, knobs_for, shipped_value, to_pbtxt
from asr_server.repository import complete_config, read_config
from tests.conftest import BUNDLED_REPO

OLDEST = """
name: "seq" backend: "python" max_batch_size: 64
input [ { name: "x" data_type: TYPE_FP32 dims: [ 1 ] } ] output [ { name: "y" data_type: TYPE_FP32 dims: [ 1 ] } ]
sequence_batching { oldest { max_candidate_sequences: 1024 preferred_batch_size: [ 8, 16, 32 ]
                             max_queue_delay_microseconds: 2000 } }
instance_group [ { count: 1 kind: KIND_CPU } ]
"""


def parse(text: str) -> mc.ModelConfig:
    return text_format.Parse(text, mc.ModelConfig())


def test_oldest_sequence_knobs_go_to_the_oldest_strategy_and_preferred_sizes_follow_max_batch():
    config = parse(OLDEST)
    assert set(knobs_for(config)) == {"instance_count", "max_batch_size", "preferred_batch_size",
                                      "max_queue_delay_us", "max_candidate_sequences"}
    out = apply_variant(config, Variant.of({"instance_count": 2, "max_batch_size": 16, "max_queue_delay_us": 500,
                                            "max_candidate_sequences": 64}))
    assert out.instance_group[0].count == 2 and out.max_batch_size == 16
    assert list(out.sequence_batching.oldest.preferred_batch_size) == [8, 16]  # 32 > max_batch_size dropped
    assert out.sequence_batching.oldest.max_queue_delay_microseconds == 500
    assert out.sequence_batching.oldest.max_candidate_sequences == 64
    assert not out.HasField("dynamic_batching")  # a sequence model never gets a dynamic batcher
    assert config.max_batch_size == 64  # the original is untouched
    assert shipped_value(config, "preferred_batch_size") == (8, 16, 32)


def test_dynamic_batcher_is_added_when_missing_and_the_text_round_trips(tmp_path):
    config = read_config(BUNDLED_REPO / "identity_fp32")
    out = apply_variant(config, Variant.of({"preferred_batch_size": (4,), "max_queue_delay_us": 100,
                                            "instance_count": 3}))
    again = text_format.Parse(to_pbtxt(out), mc.ModelConfig())
    assert list(again.dynamic_batching.preferred_batch_size) == [4]
    assert again.dynamic_batching.max_queue_delay_microseconds == 100 and again.instance_group[0].count == 3
    complete_config(again, BUNDLED_REPO / "identity_fp32", [1])  # Triton's rules accept it
    with pytest.raises(ValueError, match="no knob 'max_candidate_sequences'"):
        apply_variant(config, Variant.of({"max_candidate_sequences": 4}))


def test_grid_syntax():
    grid = parse_grid(["instance_count=1,2", "wenet.preferred_batch_size=8/16,none", "encoder.max_queue_delay_us=0"])
    assert grid == {"*": {"instance_count": (1, 2)}, "wenet": {"preferred_batch_size": ((8, 16), ())},
                    "encoder": {"max_queue_delay_us": (0,)}}
    with pytest.raises(ValueError, match="unknown knob"):
        parse_grid(["instances=2"])


def _bowl(best_instances: int, best_delay: int):
    """A synthetic objective with one maximum, counting evaluations."""
    calls = []

    def evaluate(candidate):
        calls.append(candidate.key())
        v = candidate.variant("m").as_dict()
        return 1, -abs(v.get("instance_count", 1) - best_instances) - abs(v.get("max_queue_delay_us", 0) - best_delay) / 1000

    return evaluate, calls


def test_brute_force_measures_every_grid_point_once_and_the_shipped_config_first():
    coords = [search.Coordinate("m", "instance_count", (1, 2, 3)), search.Coordinate("m", "max_queue_delay_us", (0, 1000))]
    evaluate, calls = _bowl(3, 1000)
    best, key = search.brute_force(coords, evaluate)
    assert calls[0] == search.SHIPPED.key() and len(calls) == 1 + 6 == len(set(calls))
    assert best.variant("m").as_dict() == {"instance_count": 3, "max_queue_delay_us": 1000} and key == (1, 0.0)


def test_hill_climb_reaches_the_maximum_with_fewer_evaluations_than_the_grid():
    coords = [search.Coordinate("m", "instance_count", (1, 2, 3, 4, 5, 6)),
              search.Coordinate("m", "max_queue_delay_us", (0, 500, 1000, 2000, 4000))]
    evaluate, calls = _bowl(4, 1000)
    best, key = search.hill_climb(coords, (0, 0), evaluate, max_candidates=30, min_gain=0.0)
    assert best.variant("m").as_dict() == {"instance_count": 4, "max_queue_delay_us": 1000}
    assert len(calls) == len(set(calls)) < 6 * 5
    evaluate, calls = _bowl(4, 1000)
    search.hill_climb(coords, (0, 0), evaluate, max_candidates=3, min_gain=0.0)
    assert len(calls) == 3  # the budget counts evaluations: shipped + 2 neighbours


def test_constraints_rank_satisfying_points_first():
    budget = objectives.Constraints(max_p99_latency_ms=10)
    fast = objectives.Measured(throughput=100, p99_ms=5)
    faster_but_late = objectives.Measured(throughput=500, p99_ms=50)
    assert objectives.score("throughput", budget, [fast, faster_but_late]) == (1, 100)
    assert objectives.score("throughput", budget, [faster_but_late]) < objectives.score("throughput", budget, [fast])
    assert objectives.score("latency", objectives.Constraints(), [fast, faster_but_late]) == (1, -5)
    small = objectives.Constraints(max_memory_mb=200)
    assert small.satisfied(objectives.Measured(throughput=1, p99_ms=1, memory_mb=150))
    assert not small.satisfied(objectives.Measured(throughput=1, p99_ms=1, memory_mb=250))
    assert small.satisfied(objectives.Measured(throughput=1, p99_ms=1, memory_mb=None))  # not measured: no verdict
    assert not objectives.Constraints().satisfied(objectives.Measured(error="load failed"))


def test_checkpoint_round_trip_keeps_names_and_refuses_another_analysis(tmp_path):
    path = tmp_path / "0.ckpt"
    ck = Checkpoint.open(path, {"model": "a"})
    assert ck.name_for("a", "shipped") == "a_config_default"
    assert ck.name_for("a", "instance_count=2") == "a_config_0" and ck.name_for("a", "instance_count=3") == "a_config_1"
    ck.add(Record(candidate="k", load="c1", generator="perf_analyzer", throughput=5.0, p99_ms=2.0))
    again = Checkpoint.open(path, {"model": "a"})
    assert again.find("k", "c1").throughput == 5.0 and again.find("k", "c4") is None
    assert again.name_for("a", "instance_count=3") == "a_config_1"
    with pytest.raises(ValueError, match="another analysis"):
        Checkpoint.open(path, {"model": "b"})


def test_csv_has_model_analyzer_columns_and_quotes_ensemble_cells(tmp_path):
    row = Row("ens", 1, "4", "ens_config_1: a_config_0, b_config_default", "1:CPU,2:CPU", "64,64", True, 12.345,
              7.0, 5.0, 6.0, 300.0, None, "perf_analyzer")
    path = write_csv([row], tmp_path / "metrics-model-inference.csv")
    lines = path.read_text().splitlines()
    assert lines[0].startswith(",".join(MODEL_ANALYZER_COLUMNS) + ",")
    assert lines[1].startswith('ens,1,4,"ens_config_1: a_config_0, b_config_default","1:CPU,2:CPU","64,64",Yes,12.3,7.0')
    parsed = list(csv.DictReader(lines))
    assert parsed[0]["Throughput (infer/sec)"] == "12.3" and parsed[0]["Final p99 Latency (ms)"] == ""


def test_perf_analyzer_csv_parsing_and_command():
    text = ("Concurrency,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,Server Compute Input,"
            "Server Compute Infer,Server Compute Output,Client Recv,p50 latency,p90 latency,p95 latency,p99 latency,"
            "request/response,response wait\n4,2372.4,3,1500,35,0,73,0,1,1600,2300,2400,2900,4,2132\n")
    m = perf.parse_csv(text)
    assert m.throughput == 2372.4 and m.p99_ms == 2.9 and m.avg_ms == pytest.approx(1.612)
    settings = perf.PerfSettings(binary=perf.Path("/bin/pa"))
    cmd = perf.command(settings, "h:1", "m", perf.Workload(("--shape", "X:4"), sequence=True, streaming=True,
                                                           sequence_length=5),
                       perf.LoadPoint(request_rate=20), perf.Path("/tmp/x.csv"))
    assert cmd[:7] == ["/bin/pa", "-i", "grpc", "-u", "h:1", "-m", "m"]
    for part in (["--request-rate-range", "20"], ["--streaming"], ["--sequence-length", "5"], ["--shape", "X:4"]):
        assert any(cmd[i:i + len(part)] == part for i in range(len(cmd)))
    assert "--request-count" not in cmd  # windows by default
    counted = perf.command(perf.PerfSettings(binary=perf.Path("/bin/pa"), request_count=300), "h:1", "m",
                           perf.Workload(("--shape", "X:4")), perf.LoadPoint(concurrency=2), perf.Path("/tmp/x.csv"))
    assert counted.count("--request-count") == 1 and counted[counted.index("--request-count") + 1] == "300"
    with pytest.raises(ValueError):
        perf.PerfSettings(binary=perf.Path("/bin/pa"), request_count=-1)


def test_audio_input_data_is_exact_and_streams_are_chunked(tmp_path):
    utts = [np.linspace(-1, 1, 16000, dtype=np.float32), np.ones(5000, np.float32)]
    offline = audio_data.offline_data(utts)
    first = offline["data"][0]
    assert np.array_equal(np.frombuffer(base64.b64decode(first["WAV"]["b64"]), "<f4"), utts[0])
    assert first["WAV_LENS"] == {"content": [16000], "shape": [1]}
    streams = audio_data.streaming_data(utts, chunk_ms=640)["data"]  # 10240-sample chunks
    assert [[s["WAV"]["shape"][0] for s in stream] for stream in streams] == [[10240, 5760], [5000]]
    json.loads(audio_data.write(offline, tmp_path / "d.json").read_text())


def test_cli_refuses_a_missing_model_folder_and_a_missing_perf_analyzer(capsys):
    from asr_server.analyzer.cli import main

    with pytest.raises(SystemExit):
        main(["--model-repository", str(BUNDLED_REPO), "--model", "no_such_model"])
    assert "no model folder 'no_such_model'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--model-repository", str(BUNDLED_REPO), "--model", "identity_fp32", "--perf-analyzer", "/no/such/pa"])
    assert "perf_analyzer '/no/such/pa' does not exist" in capsys.readouterr().err


def test_local_server_leaves_nothing_behind_when_the_copy_fails(tmp_path, monkeypatch):
    import tempfile

    from asr_server.analyzer.server import LocalServer

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with pytest.raises(FileNotFoundError):
        with LocalServer(tmp_path / "no_repo", ["missing"]):
            pass
    assert list(tmp_path.iterdir()) == [], "the repository copy was not removed"


def test_local_servers_take_ports_of_their_own_and_a_failed_start_is_reported(tmp_path, monkeypatch):
    """Each server binds a free port itself and the analyzer reads it from the server's log (a port picked by
    the analyzer and handed over could be taken in between); a log that already holds an earlier server's
    line is read from where this start began; a server that exits at start is reported with its code."""
    import sys

    from asr_server.analyzer.server import LocalServer

    log = tmp_path / "server.log"
    log.write_text("Started GRPCInferenceService at 127.0.0.1:1\n")  # an earlier run's line: not this server
    with LocalServer(BUNDLED_REPO, ["identity_fp32"], log_path=log) as first, \
            LocalServer(BUNDLED_REPO, ["identity_fp32"]) as second:
        assert first.url != second.url and not first.url.endswith(":1")
        assert first.client.is_server_live() and second.client.is_server_live()
    monkeypatch.setattr(sys, "executable", "/bin/false")
    with pytest.raises(RuntimeError, match="exited with 1 at start"):
        with LocalServer(BUNDLED_REPO, ["identity_fp32"]):
            pass


def test_the_copied_repository_brings_the_folders_a_model_reads_graphs_from(tmp_path):
    """The bundled streaming scorers run the streaming_encoder's and decoder's graphs themselves (parameters
    encoder_onnx, decoder_onnx = "../<model>/1/<file>"): the analyzer's copy must hold those folders."""
    from pathlib import Path

    from asr_server.analyzer.options import AnalyzerOptions
    from asr_server.analyzer.run import Analyzer

    analyzer = Analyzer(AnalyzerOptions(model="streaming_wenet_ensemble", export_path=tmp_path,
                                        repository=BUNDLED_REPO, perf=perf.PerfSettings(Path("perf_analyzer"))))
    models = analyzer._models_from_repository()
    assert models[:3] == ["streaming_wenet_ensemble", "streaming_feature_extractor", "wenet"]
    assert sorted(models[3:]) == ["decoder", "streaming_encoder"]


@pytest.mark.parametrize("complaint", [
    "Failed to obtain stable measurement within 3 measurement windows for concurrency 4.",
    "No valid requests recorded within time interval. Please use a larger time window."])
def test_a_point_perf_analyzer_finds_too_short_is_measured_again_with_longer_windows(tmp_path, complaint):
    """perf_analyzer exits when a window hiccups, even at --stability-percentage 999, or when no request completed
    in a window (both seen on CI's 2 cores): the analyzer measures that point once more with windows twice as
    long, as perf_analyzer advises."""
    from pathlib import Path

    calls = tmp_path / "calls"
    fake = tmp_path / "perf_analyzer"
    fake.write_text(f"""#!/usr/bin/env bash
echo "$@" >> {calls}
interval=$(sed -E 's/.*--measurement-interval ([0-9]+).*/\\1/' <<<"$*")
csv=$(sed -E 's/.* -f ([^ ]+).*/\\1/' <<<"$*")
if [ "$interval" -lt 600 ]; then
  echo "{complaint}"; exit 2
fi
printf 'Concurrency,Inferences/Second,p50 latency,p90 latency,p95 latency,p99 latency\\n4,123.5,1000,2000,3000,4000\\n' > "$csv"
""")
    fake.chmod(0o755)
    settings = perf.PerfSettings(Path(fake), measurement_interval_ms=300, max_trials=3)
    got = perf.measure(settings, "127.0.0.1:1", "m", perf.Workload(), perf.LoadPoint(concurrency=4))
    assert got.throughput == 123.5 and got.p99_ms == 4.0
    assert [line.split("--measurement-interval ")[1].split()[0] for line in calls.read_text().splitlines()] == \
        ["300", "600"]
    other = tmp_path / "broken"
    other.write_text("#!/usr/bin/env bash\necho 'connection refused'; exit 1\n")
    other.chmod(0o755)
    with pytest.raises(perf.PerfError, match="connection refused"):
        perf.measure(perf.PerfSettings(Path(other)), "127.0.0.1:1", "m", perf.Workload(),
                     perf.LoadPoint(concurrency=4))


def test_a_freshly_loaded_model_is_warmed_by_a_counted_run_unless_it_takes_sequences(tmp_path):
    """The warm-up is perf_analyzer in count mode at concurrency 1 with the measured run's data; its failure is
    returned, not raised (the measured run will report it); sequence workloads get none (a count cut short
    would leave a sequence open on the server)."""
    from pathlib import Path

    calls = tmp_path / "calls"
    fake = tmp_path / "perf_analyzer"
    fake.write_text(f"""#!/usr/bin/env bash
echo "$@" >> {calls}
csv=$(sed -E 's/.* -f ([^ ]+).*/\\1/' <<<"$*")
printf 'Concurrency,Inferences/Second,p50 latency,p90 latency,p95 latency,p99 latency\\n1,9,1,1,1,1\\n' > "$csv"
""")
    fake.chmod(0o755)
    workload = perf.Workload(input_args=("--input-data", "audio.json"))
    assert perf.warm_up(perf.PerfSettings(Path(fake)), "127.0.0.1:1", "m", workload) is None
    line = calls.read_text().strip()
    assert "--request-count 2" in line and "--concurrency-range 1" in line and "--input-data audio.json" in line
    assert perf.warm_up(perf.PerfSettings(Path(fake)), "127.0.0.1:1", "m", perf.Workload(sequence=True)) is None
    assert len(calls.read_text().splitlines()) == 1
    broken = tmp_path / "broken"
    broken.write_text("#!/usr/bin/env bash\necho 'connection refused'; exit 1\n")
    broken.chmod(0o755)
    assert "connection refused" in perf.warm_up(perf.PerfSettings(Path(broken)), "127.0.0.1:1", "m", workload)


def test_a_request_count_is_refused_below_the_load_and_for_sequence_models(tmp_path):
    from pathlib import Path

    from asr_server.analyzer.options import AnalyzerOptions
    from asr_server.analyzer.run import Analyzer
    from tests.helpers.sequence_models import accumulator

    counted = perf.PerfSettings(Path("perf_analyzer"), request_count=100)
    with pytest.raises(ValueError, match="less than the largest concurrency"):
        AnalyzerOptions(model="m", export_path=tmp_path, repository=tmp_path, concurrency=(4, 128), perf=counted)
    repo = tmp_path / "repo"
    accumulator(repo)
    analyzer = Analyzer(AnalyzerOptions(model="accumulator", export_path=tmp_path / "out", repository=repo,
                                        concurrency=(4,), perf=counted))
    analyzer._plan()
    with pytest.raises(ValueError, match="cannot measure a sequence model"):
        analyzer._workload()
