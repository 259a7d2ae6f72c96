"""Clients on connections of their own (asr_client.connections), and `transcribe --connections N` spreading
the utterances in flight over N of them: `asr-server --workers` gives each connection to one worker."""

from __future__ import annotations

import asyncio
import json

from asr_client.batch import TranscribeOptions, transcribe_files
from asr_client.cli import main
from asr_client.connections import own_connection_client
from tests.helpers.tcp import established_connections_to
from tests.helpers.waiting import wait_until


async def test_own_connection_clients_open_a_tcp_connection_each(asr_server, url):
    clients = [own_connection_client(url) for _ in range(3)]
    try:
        for client in clients:
            assert await client.is_server_live()
        assert established_connections_to(asr_server.grpc_port) == 3
    finally:
        for client in clients:
            await client.close()


async def test_transcribe_spreads_the_utterances_in_flight_over_the_connections(asr_server, url, corpus):
    paths = [corpus.paths[k] for k in "abcd"] * 2
    for connections in (3, 1):
        seen = []
        batch = await transcribe_files(
            paths, url, TranscribeOptions(concurrency=4, connections=connections),
            on_result=lambda _: seen.append(established_connections_to(asr_server.grpc_port)))
        assert [r.hypothesis for r in batch.results] == [corpus.texts[k] for k in "abcd"] * 2
        # by the last result every connection has carried a request; none is left open after the batch
        assert seen[-1] == connections
        assert await wait_until(lambda: established_connections_to(asr_server.grpc_port) == 0)


async def test_connections_below_one_is_a_usage_error(corpus, capsys):
    rc = await asyncio.to_thread(main, ["transcribe", str(corpus.paths["a"]), "--connections", "0"])
    assert rc == 2 and "connections must be at least 1" in capsys.readouterr().err


async def test_the_command_line_opens_its_extra_connections_to_the_server_it_was_given(url, corpus, tmp_path):
    """Not to the default address: --url's server answers every utterance (none is listening on 8001 here)."""
    results = tmp_path / "results.jsonl"
    rc = await asyncio.to_thread(main, [
        "transcribe", *[str(corpus.paths[k]) for k in "abcd"], "--url", url, "--concurrency", "4",
        "--connections", "4", "--no-server-stats", "--no-progress", "--output", str(results)])
    records = [json.loads(line) for line in results.read_text().splitlines()]
    assert rc == 0 and sorted(r["text"] for r in records) == sorted(corpus.texts[k] for k in "abcd")
