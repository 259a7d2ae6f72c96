"""The images cannot be built here (no Docker), so what a build would trip over first is checked: every COPY/ADD
source a Dockerfile names exists in the repository (a renamed package once left `COPY client client` behind),
and every command an image runs is one this project installs."""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path

import pytest

from tests.conftest import ROOT

DOCKERFILES = sorted((ROOT / "deploy").glob("*Dockerfile"))


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", path.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.split(" #")[0].strip()))
    return out


def arg_defaults(steps) -> dict[str, str]:
    return {k: v for word, rest in steps if word == "ARG" and "=" in rest for k, v in [rest.split("=", 1)]}


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_every_copy_source_exists(dockerfile: Path):
    steps = instructions(dockerfile)
    args = arg_defaults(steps)
    for word, rest in steps:
        if word not in ("COPY", "ADD"):
            continue
        parts = [p for p in shlex.split(rest) if not p.startswith("--chown") and not p.startswith("--chmod")]
        if any(p.startswith("--from") for p in parts):
            continue  # from another stage
        for source in parts[:-1]:
            source = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], source)
            assert (ROOT / source).exists(), f"{dockerfile.name}: COPY {source}: no such path in the repository"


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_every_entrypoint_is_installed(dockerfile: Path):
    scripts = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"])
    packages = {p.name for p in ROOT.iterdir() if (p / "__init__.py").exists()}
    for word, rest in instructions(dockerfile):
        if word == "ENTRYPOINT":
            command = shlex.split(rest.strip("[]").replace(",", " "))[0]
            assert command in scripts, f"{dockerfile.name}: ENTRYPOINT {command} is not a [project.scripts] entry"
    copied = {shlex.split(rest)[0] for word, rest in instructions(dockerfile) if word == "COPY"}
    if "pyproject.toml" in copied:  # an image that installs the project copies each of its packages
        include = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
        wanted = {p for p in packages if any(re.fullmatch(pat.replace("*", ".*"), p) for pat in include["include"])}
        assert wanted <= copied, f"{dockerfile.name} installs the project without {sorted(wanted - copied)}"
