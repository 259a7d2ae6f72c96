"""bench/vs_sherpa.py's reading of the targets: the CPU budget a target leaves the server on this
machine, beside the bare floor of the same work."""

import pytest

from bench import vs_sherpa


def rows(ours_cpu: float) -> dict:
    return {"sherpa-onnx": {100: {"machine_busy_pct": 80.0, "load_generator_cpu_per_audio_s": 0.0008,
                                  "cpu_per_audio_s": 0.006}},
            "ours greedy": {120: {"machine_busy_pct": 85.0, "load_generator_cpu_per_audio_s": 0.0010,
                                  "cpu_per_audio_s": ours_cpu}}}


def test_budget_is_the_cores_left_after_the_clients_per_target_stream(monkeypatch):
    monkeypatch.setattr(vs_sherpa.os, "cpu_count", lambda: 2)
    out = vs_sherpa.target_budgets({"sherpa-onnx": 100, "ours greedy": 120}, rows(0.005),
                                   {"ours greedy": 0.003}, 0.0004)["ours greedy"]
    assert out["target_streams"] == 170  # 1.7 x 100
    per_stream = 0.0010  # the clients' CPU-s per audio-s at our own limit
    assert out["client_cores_per_stream"] == pytest.approx(per_stream)
    assert out["machine_load_at_limit"] == pytest.approx(0.85)  # the busier of the two limits
    assert out["budget_every_core"] == pytest.approx((2 - per_stream * 170) / 170)
    assert out["budget_at_limit_load"] == pytest.approx((1.7 - per_stream * 170) / 170)
    assert out["floor_with_fbank"] == pytest.approx(0.0034)
    assert out["ours_at_limit"] == 0.005
    # at its bare floor the server could carry what 85% of 2 cores allow with the clients' share
    assert out["streams_at_floor"] == pytest.approx(1.7 / (0.0034 + per_stream))
    assert out["peer_over_its_floor"] is None  # no floor given for the peer


def test_streams_at_the_peers_distance_from_its_floor(monkeypatch, capsys):
    monkeypatch.setattr(vs_sherpa.os, "cpu_count", lambda: 2)
    floors = {"ours greedy": 0.003, "sherpa-onnx": 0.0036}
    out = vs_sherpa.target_budgets({"sherpa-onnx": 100, "ours greedy": 120}, rows(0.005), floors,
                                   0.0004)["ours greedy"]
    assert out["peer_over_its_floor"] == pytest.approx(0.006 / 0.0040)  # its CPU at its limit / (floor + fbank)
    assert out["streams_at_peers_factor"] == pytest.approx(1.7 / (1.5 * 0.0034 + 0.0010))
    assert f"({out['streams_at_peers_factor'] / 100:.2f}x) at 1.50x the floor" in capsys.readouterr().out


def test_a_floor_above_the_budget_is_reported_out_of_reach(monkeypatch, capsys):
    monkeypatch.setattr(vs_sherpa.os, "cpu_count", lambda: 2)
    best = {"sherpa-onnx": 100, "ours greedy": 120}
    vs_sherpa.target_budgets(best, rows(0.02), {"ours greedy": 0.0095}, 0.0004)
    assert "out of reach at the 85% machine load" in capsys.readouterr().out
    vs_sherpa.target_budgets(best, rows(0.02), {"ours greedy": 0.0120}, 0.0004)
    assert "out of reach even with every core busy" in capsys.readouterr().out
    vs_sherpa.target_budgets(best, rows(0.02), {"ours greedy": 0.0030}, 0.0004)
    assert "not excluded by the floor" in capsys.readouterr().out


def test_modes_not_run_or_without_a_peer_are_left_out():
    assert vs_sherpa.target_budgets({"ours greedy": 120}, rows(0.005), {"ours greedy": 0.003}, 0.0004) == {}
    assert vs_sherpa.target_budgets({"sherpa-onnx": 100, "ours greedy": 0}, rows(0.005), {"ours greedy": 0.003},
                                    0.0004) == {}


def test_machine_load_is_read_over_the_middle_half_of_a_trial():
    load = vs_sherpa.MachineLoad()
    # (busy, total) ticks: idle at both ends, 90% busy in the middle
    load.samples = [(0, 0), (1, 100), (2, 200), (92, 300), (182, 400), (272, 500), (362, 600), (363, 700)]
    assert load.steady_pct() == pytest.approx(90.0)
    with vs_sherpa.MachineLoad(every_s=0.01) as real:
        sum(i * i for i in range(200_000))
    assert len(real.samples) >= 2 and 0 <= real.steady_pct() <= 100


def test_workers_and_proc_variants_share_their_decodings_target_and_repository():
    assert vs_sherpa.base_name("ours greedy_workers") == "ours greedy"
    assert vs_sherpa.base_name("rescore_workers") == "rescore"
    assert vs_sherpa.base_name("ours rescore_proc") == "ours rescore"
    assert vs_sherpa.base_name("sherpa-onnx") == "sherpa-onnx"


def test_our_paced_streams_take_turns_over_the_connections(monkeypatch):
    import asyncio

    import numpy as np

    import asr_client.connections
    import asr_client.streaming

    opened, used = [], []

    class FakeConnection:  # stands in for own_connection_client's tritonclient client
        def __init__(self, url):
            self.open = False
            opened.append(self)

        async def __aenter__(self):
            self.open = True
            return self

        async def __aexit__(self, *exc):
            self.open = False

    class FakeClient:
        def __init__(self, url, options, grpc_client):
            self.connection = grpc_client

        async def transcribe(self, samples):
            assert self.connection.open
            used.append(self.connection)
            return type("Result", (), {"text": "x", "chunk_latencies_s": [0.01, 0.02]})()

    monkeypatch.setattr(asr_client.streaming, "StreamingClient", FakeClient)
    monkeypatch.setattr(asr_client.connections, "own_connection_client", FakeConnection)
    items = [("u", np.zeros(1600, dtype=np.float32), "x")]  # 0.1 s each: 3 utterances per stream
    result = asyncio.run(vs_sherpa.ours_paced("127.0.0.1:1", items, 4, 1.0, 0.25, connections=3))
    assert result["errors"] == 0 and result["audio_s"] == pytest.approx(4 * 0.3)
    assert len(opened) == 3 and not any(c.open for c in opened)
    assert sorted(used.count(c) for c in opened) == [4, 4, 4]  # 12 utterances, in turn

