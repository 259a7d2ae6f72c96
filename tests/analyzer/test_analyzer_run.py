"""asr-model-analyzer end to end on a small ONNX model (identity_fp32), with NVIDIA's perf_analyzer.

Our server is started by the analyzer on a copy of the repository. Needs perf_analyzer
(`bash scripts/get_perf_analyzer.sh`, which .ci/run calls); these tests skip without it.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from asr_server.analyzer import perf
from asr_server.analyzer.cli import main
from asr_server.analyzer.results import MODEL_ANALYZER_COLUMNS
from asr_server.analyzer.run import Analyzer, AnalyzerOptions
from tests.conftest import BUNDLED_REPO, ROOT, copy_model

try:
    BINARY = perf.find_binary()
except FileNotFoundError:
    BINARY = None

pytestmark = pytest.mark.skipif(BINARY is None, reason="perf_analyzer not fetched (bash scripts/get_perf_analyzer.sh)")

# A fixed count per point (about a second here): enough to rank, and no time windows for a loaded CI machine's
# hiccups to fail perf_analyzer's stability check (these tests check the analyzer's bookkeeping, not speed)
QUICK = dict(request_count=300)


def options(repo: Path, export: Path, **overrides) -> AnalyzerOptions:
    base = dict(model="identity_fp32", export_path=export, repository=repo, shape=("INPUT0:16",),
                grid={"*": {"instance_count": (1, 2)}}, search="brute", concurrency=(4,),
                perf=perf.PerfSettings(BINARY, **QUICK), progress=False)
    base.update(overrides)
    return AnalyzerOptions(**base)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    folder = tmp_path / "repo"
    copy_model(folder, BUNDLED_REPO / "identity_fp32")
    return folder


def rows(export: Path) -> list[dict]:
    with (export / "results" / "metrics-model-inference.csv").open() as f:
        return list(csv.DictReader(f))


def test_sweep_finds_a_config_at_least_as_good_as_the_shipped_one_and_writes_triton_outputs(repo, tmp_path):
    export = tmp_path / "out"
    summary = Analyzer(options(repo, export, confirm_rounds=1)).run()
    table = rows(export)
    header = list(table[0].keys())
    assert header[:len(MODEL_ANALYZER_COLUMNS)] == list(MODEL_ANALYZER_COLUMNS)
    by_config = {r["Model Config Path"]: r for r in table}
    assert set(by_config) == {"identity_fp32_config_default", "identity_fp32_config_0", "identity_fp32_config_1"}
    assert all(float(r["Throughput (infer/sec)"]) > 0 and r["Satisfies Constraints"] == "Yes" for r in table)
    assert {by_config["identity_fp32_config_0"]["Instance Group"], by_config["identity_fp32_config_1"]["Instance Group"]} \
        == {"1:CPU", "2:CPU"}
    shipped = float(by_config["identity_fp32_config_default"]["Throughput (infer/sec)"])
    best = float(by_config[summary.best_name]["Throughput (infer/sec)"])
    assert best >= shipped and summary.best_score >= summary.shipped_score  # measured, not assumed
    if summary.confirmation:  # the search picked a candidate: shipped and it measured once more, out of the CSV
        assert summary.measured_points == 5 and len(table) == 3
        assert set(summary.confirmation) == {"shipped", "best"} and summary.confirmation["best"]["c4"][2] == 1
        best_t, shipped_t = summary.confirmation["best"]["c4"][0], summary.confirmation["shipped"]["c4"][0]
        assert (best_t > shipped_t) == bool(summary.best.variants)  # a pick that lost the rematch is not kept
    else:  # the shipped config won the search: nothing to confirm
        assert summary.measured_points == 3 and not summary.best.variants
    assert summary.resumed_points == 0
    assert (export / "output_model_repository" / "identity_fp32_config_0" / "config.pbtxt").is_file()
    assert (export / "reports" / "summary.html").is_file() and (export / "reports" / "throughput_vs_latency.png").is_file()


async def test_written_best_config_loads_unchanged_and_serves(repo, tmp_path, running):
    import tritonclient.grpc.aio as grpcclient

    export = tmp_path / "out"
    summary = Analyzer(options(repo, export, grid={"*": {"instance_count": (3,), "max_queue_delay_us": (100,)}}
                               )).run()
    best = summary.best_repository
    text = (best / "identity_fp32" / "config.pbtxt").read_text()
    async with running(best, allow_http=False) as server:  # mode 'none': loads the folder as written
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
        try:
            config = (await client.get_model_config("identity_fp32")).config
            x = np.arange(16, dtype=np.float32).reshape(1, 16)
            inp = grpcclient.InferInput("INPUT0", [1, 16], "FP32")
            inp.set_data_from_numpy(x)
            result = await client.infer("identity_fp32", [inp])
        finally:
            await client.close()
    assert np.array_equal(result.as_numpy("OUTPUT0"), x)
    if summary.best.variants:  # the served config is the best candidate's
        assert config.instance_group[0].count == 3 and config.dynamic_batching.max_queue_delay_microseconds == 100
        assert "max_queue_delay_microseconds: 100" in text


def test_resume_from_checkpoint_skips_measured_points(repo, tmp_path, capsys):
    export = tmp_path / "out"
    args = ["--model-repository", str(repo), "--model", "identity_fp32", "--shape", "INPUT0:16",
            "--grid", "instance_count=1,2", "--search", "brute", "--concurrency", "2", "--request-count", "300",
            "--export-path", str(export), "--max-candidates", "2", "--no-progress"]
    assert main(args) == 0
    assert "measured 2 points, 0 from the checkpoint" in capsys.readouterr().out
    first = rows(export)
    # a larger grid on the same checkpoint: the two measured configs are read back, only the new one is measured
    assert main(args[:-2] + ["3", "--no-progress"]) == 0
    assert "measured 1 points, 2 from the checkpoint" in capsys.readouterr().out
    again = {(r["Model Config Path"], r["Throughput (infer/sec)"]) for r in rows(export)}
    assert {(r["Model Config Path"], r["Throughput (infer/sec)"]) for r in first} < again


async def test_running_server_in_explicit_mode_is_tuned_and_left_with_its_shipped_config(repo, tmp_path, running):
    import asyncio

    import tritonclient.grpc.aio as grpcclient

    async with running(repo, allow_http=False, model_control_mode="explicit",
                       load_models=("identity_fp32",)) as server:
        url = f"127.0.0.1:{server.grpc_port}"
        opts = options(None, tmp_path / "out", url=url, grid={"*": {"instance_count": (3,)}})
        summary = await asyncio.to_thread(Analyzer(opts).run)  # the server answers on this test's event loop
        table = rows(tmp_path / "out")
        client = grpcclient.InferenceServerClient(url)
        try:
            config = (await client.get_model_config("identity_fp32")).config
        finally:
            await client.close()
    assert {r["Model Config Path"] for r in table} == {"identity_fp32_config_default", "identity_fp32_config_0"}
    assert all(r["RAM Usage (MB)"] == "" for r in table)  # not our process: memory is not measured
    assert config.instance_group[0].count == 2  # the repository's config again (onnxruntime's default: 2)
    assert summary.best_repository.joinpath("identity_fp32", "config.pbtxt").is_file()


async def test_a_server_without_explicit_model_control_is_refused(repo, tmp_path, running):
    import asyncio

    async with running(repo, allow_http=False) as server:
        opts = options(None, tmp_path / "out", url=f"127.0.0.1:{server.grpc_port}")
        with pytest.raises(RuntimeError, match="--model-control-mode=explicit"):
            await asyncio.to_thread(Analyzer(opts).run)


ENSEMBLE = """
name: "ens"
platform: "ensemble"
max_batch_size: 8
input [ { name: "X" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ -1 ] } ]
ensemble_scheduling { step [ { model_name: "identity_fp32" model_version: -1
  input_map { key: "INPUT0" value: "X" } output_map { key: "OUTPUT0" value: "Y" } } ] }
"""


def test_an_ensembles_steps_are_searched_and_its_max_batch_size_follows_them(repo, tmp_path):
    (repo / "ens" / "1").mkdir(parents=True)
    (repo / "ens" / "config.pbtxt").write_text(ENSEMBLE)
    export = tmp_path / "out"
    summary = Analyzer(options(repo, export, model="ens", shape=("X:16",),
                               grid={"identity_fp32": {"max_batch_size": (4,)}})).run()
    table = rows(export)
    assert {r["Model Config Path"] for r in table} == {"ens_config_default: identity_fp32_config_default",
                                                       "ens_config_0: identity_fp32_config_0"}
    assert {r["Max Batch Size"] for r in table} == {"8", "4"} and all(r["Model"] == "ens" for r in table)
    assert all(float(r["Throughput (infer/sec)"]) > 0 for r in table)  # the shrunken ensemble loaded and ran
    best = summary.best_repository
    assert sorted(p.name for p in best.iterdir()) == ["ens", "identity_fp32"]
    if summary.best.variants:
        assert "max_batch_size: 4" in (best / "ens" / "config.pbtxt").read_text()


def test_a_sequence_model_is_measured_with_sequences_and_its_oldest_strategy_is_searched(tmp_path):
    from tests.helpers.sequence_models import accumulator

    repo = tmp_path / "repo"
    accumulator(repo)  # ONNX, oldest strategy, implicit state
    export = tmp_path / "out"
    windows = perf.PerfSettings(BINARY, measurement_interval_ms=300, max_trials=3)  # a count would cut sequences
    summary = Analyzer(options(repo, export, model="accumulator", shape=(), sequence_length=4, perf=windows,
                               grid={"*": {"max_queue_delay_us": (0,), "preferred_batch_size": ((4,),)}})).run()
    table = rows(export)
    assert len(table) == 2 and all(float(r["Throughput (infer/sec)"]) > 0 for r in table)
    text = (export / "output_model_repository" / "accumulator_config_0" / "config.pbtxt").read_text()
    assert "oldest" in text and "preferred_batch_size: 4" in text and "dynamic_batching" not in text
    assert summary.best_score >= summary.shipped_score


def test_the_help_example_runs_as_printed(tmp_path, capsys):
    """The example in --help, on the bundled repository; only its budget is cut (one candidate, one load;
    2.5 s windows: the analyzer warms a loaded model up first, and a window that sees no request complete is
    measured again with one twice as long)."""
    from asr_server.analyzer.cli import build_parser

    help_text = build_parser().format_help()
    example = help_text[help_text.index("    asr-model-analyzer --model-repository"):].split("\n\n")[0]
    argv = example.replace("\\\n", " ").split()[1:]
    argv[argv.index("--export-path") + 1] = str(tmp_path / "analysis")
    for flag in ("--model-repository", "--audio"):  # relative to the repository's root, as the README's commands
        argv[argv.index(flag) + 1] = str(ROOT / argv[argv.index(flag) + 1])
    budget = ["--max-candidates", "1", "--concurrency", "1", "--measurement-interval", "2500", "--max-trials", "3",
              "--confirm-rounds", "0", "--no-progress", "--perf-analyzer", str(BINARY)]
    assert main(argv + budget) == 0, capsys.readouterr().err
    assert (tmp_path / "analysis" / "results" / "metrics-model-inference.csv").is_file()


def test_a_model_called_through_bls_but_not_loaded_is_named_with_the_flag_to_add():
    from asr_server.analyzer.run import bls_hint

    error = ("Thread [0] had error: in ensemble 'attention_rescoring', step 2 ('scoring'): TritonModelException: "
             "Request for unknown model: 'decoder' is not found")
    assert bls_hint(error).endswith("add --bls-composing-models decoder")
    assert bls_hint("Failed to maintain requested inference load") == ""
