"""The asr-server command (tritonserver's flags, signals, exit codes) and poll mode."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient

from asr_server.cli import build_parser, settings_from_args
from tests.conftest import BUNDLED_REPO, ROOT, copy_model
from tests.helpers.waiting import wait_until


def test_flags_map_to_settings():
    args = build_parser().parse_args([
        "--model-repository", "/r1", "--model-repository", "/r2", "--grpc-port", "9001", "--http-port", "9000",
        "--metrics-port", "9002", "--grpc-address", "127.0.0.1", "--model-control-mode", "explicit",
        "--load-model", "a", "--load-model", "b", "--strict-readiness", "false", "--repository-poll-secs", "3",
        "--log-verbose", "1", "--exit-on-error", "false",
    ])
    s = settings_from_args(args)
    assert s.model_repositories == (Path("/r1"), Path("/r2"))
    assert (s.grpc_port, s.http_port, s.metrics_port, s.grpc_address) == (9001, 9000, 9002, "127.0.0.1")
    assert s.model_control_mode == "explicit" and s.load_models == ("a", "b")
    assert (s.strict_readiness, s.exit_on_error, s.repository_poll_secs, s.log_verbose) == (False, False, 3.0, 1)


def test_command_serves_and_stops_cleanly_on_sigterm(tmp_path: Path):
    copy_model(tmp_path, BUNDLED_REPO / "add_sub")
    proc = subprocess.Popen(
        [sys.executable, "-m", "asr_server", "--model-repository", str(tmp_path), "--grpc-address", "127.0.0.1",
         "--grpc-port", "0", "--http-address", "127.0.0.1", "--http-port", "0", "--metrics-port", "0"],
        cwd=ROOT, stderr=subprocess.PIPE, text=True,
    )
    try:
        port, deadline, seen = None, time.monotonic() + 60, []
        while port is None and time.monotonic() < deadline:
            line = proc.stderr.readline()
            seen.append(line)
            match = re.search(r"Started GRPCInferenceService at 127\.0\.0\.1:(\d+)", line)
            if match:
                port = int(match.group(1))
        assert port, "".join(seen)
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{port}")
        a = np.ones(4, np.float32)
        inputs = [grpcclient.InferInput("INPUT0", [4], "FP32"), grpcclient.InferInput("INPUT1", [4], "FP32")]
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(a)
        np.testing.assert_array_equal(client.infer("add_sub", inputs).as_numpy("OUTPUT0"), 2 * a)
        client.close()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stderr.close()


def test_command_exits_non_zero_when_a_model_fails_and_exit_on_error(tmp_path: Path):
    broken = tmp_path / "broken" / "1"
    broken.mkdir(parents=True)
    (broken / "model.onnx").write_bytes(b"not onnx")
    result = subprocess.run(
        [sys.executable, "-m", "asr_server", "--model-repository", str(tmp_path), "--grpc-address", "127.0.0.1",
         "--grpc-port", "0", "--allow-http", "false", "--allow-metrics", "false"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 1
    assert "failed to load all models: broken" in result.stderr


def test_a_busy_port_is_one_line_before_any_model_loads(tmp_path: Path):
    import socket

    from tests.conftest import BUNDLED_REPO, copy_model

    copy_model(tmp_path, BUNDLED_REPO / "add_sub")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "asr_server", "--model-repository", str(tmp_path), "--grpc-address", "127.0.0.1",
             "--grpc-port", "0", "--http-address", "127.0.0.1", "--http-port", str(port), "--allow-metrics",
             "false"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert f"failed to start HTTP service: Unavailable - Socket '127.0.0.1:{port}' already in use" in result.stderr
    assert "loading" not in result.stderr.lower() and "Traceback" not in result.stderr


def test_help_gives_every_option_a_meaning_and_its_default():
    from asr_server.cli import build_parser

    parser = build_parser()
    text = parser.format_help()
    assert "0.0.0.0 (every interface)" in text
    for action in parser._actions:
        if action.option_strings and action.dest != "help":
            assert action.help, f"{action.option_strings[0]} has no help"
    assert "(default: 8001)" in text and "(default: 30.0)" in text


async def test_poll_mode_loads_new_reloads_changed_and_unloads_removed_models(tmp_path: Path, running):
    copy_model(tmp_path, BUNDLED_REPO / "add_sub")
    async with running(tmp_path, allow_http=False, model_control_mode="poll", repository_poll_secs=0.1) as server:
        client = aioclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
        assert await client.is_model_ready("add_sub")
        copy_model(tmp_path, BUNDLED_REPO / "identity_fp32")
        assert await wait_until(lambda: client.is_model_ready("identity_fp32"), 20)
        # A changed config is picked up: max_batch_size 8 -> 4.
        config = tmp_path / "identity_fp32" / "config.pbtxt"
        config.write_text(config.read_text().replace("max_batch_size: 8", "max_batch_size: 4"))
        os.utime(config, (time.time() + 5, time.time() + 5))

        async def reloaded():
            return (await client.get_model_config("identity_fp32", as_json=True))["config"]["max_batch_size"] == 4

        assert await wait_until(reloaded, 20)
        shutil.rmtree(tmp_path / "add_sub")

        async def gone():
            return not await client.is_model_ready("add_sub")

        assert await wait_until(gone, 20)
        await client.close()


async def test_the_port_probe_takes_ipv6_as_grpc_writes_it(tmp_path: Path):
    from asr_server.server import Server
    from tests.conftest import BUNDLED_REPO, copy_model, local_settings

    copy_model(tmp_path, BUNDLED_REPO / "add_sub")
    server = Server(local_settings(tmp_path, grpc_address="[::1]", grpc_port=0, allow_http=False,
                                   allow_metrics=False))
    server.check_ports_free(server.settings)  # "[::1]" with brackets: no gaierror, no refusal
