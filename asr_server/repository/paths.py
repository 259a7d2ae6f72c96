"""Untrusted strings that become paths: model names and the `file:<path>` keys of RepositoryModelLoad.

A model name is one plain path component; a `file:` path stays inside its model folder. Both are checked
before anything is read or written (Triton since CVE-2023-31036 refuses `file:` paths that leave the model
folder; its 2.51 answer for a name that is not a folder of the repository is "failed to poll").
"""

from __future__ import annotations

import posixpath

from asr_server.errors import ErrorCode, ServerError, invalid_argument


NAME_MAX = 255  # bytes in one file name (Linux): a longer name cannot be a folder of the repository


def is_plain_name(name: str) -> bool:
    """True for a single path component that stays where it is joined: no separators, no '.'/'..', no NUL,
    at most NAME_MAX bytes (a longer one would reach the file system only to fail with ENAMETOOLONG)."""
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:  # a lone surrogate: no folder has that name
        return False
    return (bool(name) and name not in (".", "..") and not any(c in name for c in "/\\\0")
            and size <= NAME_MAX)


def poll_failed(name: str) -> ServerError:
    """Triton 2.51's answer to loading a name that is not a model folder of the repository."""
    return ServerError(f"failed to load '{name}', failed to poll from model repository", ErrorCode.INTERNAL)


def check_model_name(name: str) -> None:
    if not is_plain_name(name):
        raise poll_failed(name)


def check_file_path(relative: str) -> str:
    """The normalised relative path of a `file:` parameter; refused (Triton's words) if it leaves the folder."""
    normalised = posixpath.normpath(relative) if relative else ""
    escapes = (
        not relative
        or "\0" in relative
        or "\\" in relative
        or posixpath.isabs(relative)
        or normalised in (".", "..")
        or normalised.startswith("../")
    )
    if escapes:
        raise invalid_file(relative, normalised)
    return normalised


def invalid_file(relative: str, normalised: str = "") -> ServerError:
    return invalid_argument(
        f"Invalid file parameter 'file:{relative}' with normalized path '{normalised or relative}' must stay "
        "within model directory."
    )
