"""The folders of a model repository: model folders, version folders, the version policy, change detection."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from tritonclient.grpc import model_config_pb2 as mc

from asr_server.errors import invalid_argument

# Written by Python next to a python model's model.py when it is imported: not a change to the model.
_GENERATED_DIRS = ("__pycache__",)

Fingerprint = tuple[tuple[str, int, int], ...]  # ((path relative to the model folder, mtime_ns, size), ...)


def list_model_dirs(repo: Path) -> list[str]:
    """Names of the model folders in a repository, sorted; hidden folders are skipped."""
    return sorted(
        entry.name
        for entry in Path(repo).iterdir()
        if entry.is_dir() and not entry.name.startswith(".") and entry.name not in _GENERATED_DIRS
    )


def available_versions(model_dir: Path) -> list[int]:
    """Version numbers of a model folder's numeric sub-folders, ascending.

    Names with leading zeros ("01") are skipped: they would alias another version.
    """
    versions = []
    for entry in Path(model_dir).iterdir():
        name = entry.name
        if entry.is_dir() and name.isascii() and name.isdigit() and (name == "0" or not name.startswith("0")):
            versions.append(int(name))
    return sorted(versions)


def select_versions(config: mc.ModelConfig, available: Sequence[int]) -> list[int]:
    """The versions the config's version_policy serves, ascending (empty when none is available).

    A `specific` policy naming a version without a folder is an error, as in Triton.
    """
    policy = config.version_policy
    available = sorted(set(available))
    which = policy.WhichOneof("policy_choice")
    if which == "all":
        return available
    if which == "specific":
        missing = [v for v in policy.specific.versions if v not in available]
        if missing:
            raise invalid_argument(
                f"version {missing[0]} is specified for model '{config.name}', but the version directory "
                "is not present"
            )
        return sorted(set(policy.specific.versions))
    count = max(policy.latest.num_versions, 1) if which == "latest" else 1
    return available[-count:] if available else []


def fingerprint(model_dir: Path) -> Fingerprint:
    """Path, mtime and size of every file under a model folder: unequal fingerprints mean the model
    changed (poll mode reloads it)."""
    model_dir = Path(model_dir)
    entries = []
    for path in model_dir.rglob("*"):
        relative = path.relative_to(model_dir)
        if any(part in _GENERATED_DIRS for part in relative.parts) or not path.is_file():
            continue
        stat = path.stat()
        entries.append((relative.as_posix(), stat.st_mtime_ns, stat.st_size))
    return tuple(sorted(entries))
