"""scripts/hooks/commit-msg: the subject 'area: what changed' in at most 72 characters, then a blank line."""

from __future__ import annotations

import subprocess

import pytest

from tests.conftest import ROOT

HOOK = ROOT / "scripts" / "hooks" / "commit-msg"


@pytest.mark.parametrize("message, ok", [
    ("fbank: floor log-mel energies\n\nWhy, figures, how checked.\n", True),
    ("docs: a subject\n", True),
    ("Merge branch 'x'\n", True),
    ("fbank: " + "x" * 70 + "\n\nbody\n", False),       # 77 characters
    ("floor log-mel energies\n\nbody\n", False),          # no area
    ("fbank: floor\nbody right away\n", False),           # no blank line
    ("\n\nbody\n", False),
])
def test_the_hook_checks_the_subject(tmp_path, message, ok):
    path = tmp_path / "MSG"
    path.write_text(message + "# a comment git strips\n")
    assert (subprocess.run(["bash", str(HOOK), str(path)], capture_output=True).returncode == 0) == ok
