"""Files a model's config names by a parameter: they must lie inside the model's own folder."""

from __future__ import annotations

from pathlib import Path


def file_in_folder(folder: str | Path, name: str, parameter: str) -> Path:
    """``folder/name`` resolved; ValueError naming ``parameter`` if it leads outside ``folder`` (``..``, an
    absolute path, a symlink): a config cannot make the server read anything else."""
    root = Path(folder).resolve()
    path = (root / name).resolve()
    if root not in path.parents:
        raise ValueError(f"{parameter} {name!r} is outside the model's folder")
    return path
