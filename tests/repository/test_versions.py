"""Model folders, version folders, version policies and fingerprints."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from asr_server.errors import ErrorCode, ServerError
from asr_server.repository import available_versions, fingerprint, list_model_dirs, select_versions


def policy(text: str) -> mc.ModelConfig:
    return text_format.Parse(f'name: "m"\n{text}', mc.ModelConfig())


def test_list_model_dirs_skips_hidden_folders_and_files(tmp_path: Path) -> None:
    for name in ("b_model", "a_model", ".git", ".ipynb_checkpoints", "__pycache__"):
        (tmp_path / name).mkdir()
    (tmp_path / "README.md").write_text("not a model")
    assert list_model_dirs(tmp_path) == ["a_model", "b_model"]


def test_available_versions_are_numeric_folders(tmp_path: Path) -> None:
    for name in ("1", "10", "2", "0", "01", "v3", "-4"):
        (tmp_path / name).mkdir()
    (tmp_path / "5").write_text("a file, not a version folder")
    assert available_versions(tmp_path) == [0, 1, 2, 10]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", [10]),  # no policy: Triton's default, latest 1
        ("version_policy { latest { num_versions: 1 } }", [10]),
        ("version_policy { latest { num_versions: 2 } }", [3, 10]),
        ("version_policy { latest { num_versions: 9 } }", [1, 3, 10]),
        ("version_policy { all { } }", [1, 3, 10]),
        ("version_policy { specific { versions: [3, 1] } }", [1, 3]),
    ],
)
def test_select_versions(text: str, expected: list[int]) -> None:
    assert select_versions(policy(text), [10, 1, 3]) == expected


def test_no_versions_available() -> None:
    assert select_versions(policy(""), []) == []
    assert select_versions(policy("version_policy { all { } }"), []) == []


def test_specific_version_without_folder() -> None:
    with pytest.raises(ServerError) as caught:
        select_versions(policy("version_policy { specific { versions: [1, 7] } }"), [1, 2])
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT
    assert caught.value.message == "version 7 is specified for model 'm', but the version directory is not present"


def test_fingerprint_changes_with_content_and_files(tmp_path: Path) -> None:
    (tmp_path / "1").mkdir()
    model = tmp_path / "1" / "model.onnx"
    model.write_bytes(b"abc")
    (tmp_path / "config.pbtxt").write_text('name: "m"')
    first = fingerprint(tmp_path)
    assert [entry[0] for entry in first] == ["1/model.onnx", "config.pbtxt"]
    assert fingerprint(tmp_path) == first

    model.write_bytes(b"abcd")  # new size
    second = fingerprint(tmp_path)
    assert second != first

    stat = model.stat()
    os.utime(model, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))  # same size, newer
    third = fingerprint(tmp_path)
    assert third != second

    (tmp_path / "2").mkdir()
    (tmp_path / "2" / "model.onnx").write_bytes(b"abcd")
    assert fingerprint(tmp_path) != third


def test_fingerprint_ignores_python_bytecode(tmp_path: Path) -> None:
    (tmp_path / "1").mkdir()
    (tmp_path / "1" / "model.py").write_text("x = 1\n")
    before = fingerprint(tmp_path)
    (tmp_path / "1" / "__pycache__").mkdir()
    (tmp_path / "1" / "__pycache__" / "model.cpython-311.pyc").write_bytes(b"\0")
    assert fingerprint(tmp_path) == before
