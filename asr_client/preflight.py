"""What the client checks before it sends audio, so that a wrong first try ends in one line that says what to
do instead of a transcript of nothing or a Triton error about correlation ids:

- the URL: gRPC takes host:port; a scheme is dropped, and the HTTP port of a Triton-style server (8000) is
  named as such;
- the model: it must exist (else the models the server has are listed), stream when asked to stream (a
  sequence batcher), and not be a streaming model when asked for offline transcription ("add --streaming").
"""

from __future__ import annotations

from typing import Optional

HTTP_PORT = 8000  # Triton's default HTTP port; its gRPC port is 8001


class PreflightError(Exception):
    """One line for the user: what is wrong and what to do."""


def grpc_url(url: str) -> str:
    """host:port for gRPC from what a user types (``http://host:8001/``, ``grpc://host:8001``, ``host:8001``)."""
    for scheme in ("grpc://", "http://", "https://"):
        if url.startswith(scheme):
            url = url[len(scheme):]
            break
    url = url.rstrip("/")
    if "/" in url:
        raise PreflightError(f"--url takes host:port of the gRPC endpoint, not a path: {url!r}")
    return url


def unreachable_hint(url: str) -> str:
    """What to add to "cannot reach": Triton's HTTP port named as such (a gRPC server may listen there too,
    so it is only said when the connection failed)."""
    if url.rsplit(":", 1)[-1] == str(HTTP_PORT):
        return (f" ({HTTP_PORT} is the HTTP port of a Triton-style server; asr-client speaks gRPC, port "
                f"{HTTP_PORT + 1} by default: try -u {url.rsplit(':', 1)[0]}:{HTTP_PORT + 1})")
    return ""


async def model_streams(client, model: str) -> bool:
    """Whether ``model`` is a streaming (sequence-batched) model; PreflightError listing the server's models
    when it has none of that name."""
    try:
        config = await client.get_model_config(model, as_json=True)
    except Exception as error:  # InferenceServerException: unknown model, or not ready
        names = await _model_names(client)
        known = f"; the server has: {', '.join(names)}" if names else ""
        raise PreflightError(f"model '{model}' is not available ({_first_line(error)}){known}") from None
    config = config.get("config", config)
    if "ensemble_scheduling" in config:  # an ensemble streams when one of its steps does
        steps = {step["model_name"] for step in config["ensemble_scheduling"].get("step", [])}
        return any([await _streams_quietly(client, step) for step in sorted(steps) if step != model])
    return "sequence_batching" in config


async def check_model(client, model: str, streaming: bool) -> None:
    streams = await model_streams(client, model)
    if streaming and not streams:
        names = [n for n in await _model_names(client) if await _streams_quietly(client, n)]
        hint = f"; streaming models here: {', '.join(names)}" if names else ""
        raise PreflightError(f"model '{model}' does not stream (it has no sequence batcher){hint}")
    if not streaming and streams:
        raise PreflightError(f"model '{model}' is a streaming model: add --streaming (or pick an offline model)")


async def _streams_quietly(client, model: str) -> bool:
    try:
        return await model_streams(client, model)
    except PreflightError:
        return False


async def _model_names(client) -> list[str]:
    try:
        index = await client.get_model_repository_index(as_json=True)
    except Exception:  # noqa: BLE001 - the list is a hint; without it the message still stands
        return []
    return sorted({m["name"] for m in index.get("models", []) if m.get("state", "READY") == "READY"})


def _first_line(error: Exception) -> Optional[str]:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
