"""System (POSIX) shared-memory regions registered by clients, for zero-copy tensor transfer.

A client creates `/dev/shm/<key>` (tritonclient.utils.shared_memory does), registers it under a name, and
then names the region, offset and size in an input's or output's parameters instead of sending bytes.
A key is what `shm_open` takes: an optional leading '/', then one file name. Any other key (a '/' further on,
'.', '..') is refused, and the file is opened relative to /dev/shm without following links, so that no key
and no link planted in /dev/shm lets inference read or overwrite a file elsewhere.
CUDA shared memory needs a GPU and CUDA IPC: without them its RPCs answer a clear error.

Reads and writes go through the region's descriptor (pread/pwrite), not a memory mapping: a client that
truncates its file after registering it would make a copy out of a mapping fault (SIGBUS, the process dies);
pread returns short instead, and the request fails alone. Each region holds one descriptor, so regions are
capped per server (MAX_REGIONS) far below the process's descriptor limit.
"""

from __future__ import annotations

import dataclasses
import os
import stat
import threading

from asr_server.errors import ErrorCode, ServerError, invalid_argument

SHM_ROOT = "/dev/shm"
NAME_MAX = 255  # bytes in one file name (Linux)
MAX_REGIONS = 1024  # registered system shared-memory regions per server (one descriptor each)
_OPEN_FLAGS = os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # NONBLOCK: a planted FIFO never stalls


def shm_name(key: str) -> str:
    """The file name under /dev/shm that `shm_open(key)` opens; INVALID_ARGUMENT for keys it refuses."""
    name = key[1:] if key.startswith("/") else key
    try:
        encoded = os.fsencode(name)
    except UnicodeEncodeError:  # a lone surrogate from JSON: no file has that name
        encoded = b""
    if not encoded or name in (".", "..") or b"/" in encoded or b"\0" in encoded or len(encoded) > NAME_MAX:
        raise invalid_argument(
            f"Unable to open shared memory region: '{key}': a key is an optional '/' then a name of 1 to "
            f"{NAME_MAX} bytes without '/', other than '.' and '..'"
        )
    return name


def _open_region(key: str) -> int:
    """A descriptor of the regular file /dev/shm/<name>, opened without leaving /dev/shm or following a link."""
    name = shm_name(key)
    root = os.open(SHM_ROOT, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fd = os.open(name, _OPEN_FLAGS, dir_fd=root)
    except OSError as exc:
        raise invalid_argument(f"Unable to open shared memory region: '{key}': {exc.strerror}") from None
    finally:
        os.close(root)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise invalid_argument(f"Unable to open shared memory region: '{key}': not a regular file")
    return fd


@dataclasses.dataclass
class Region:
    name: str
    key: str
    offset: int
    byte_size: int
    fd: int


class SharedMemoryRegistry:
    def __init__(self, max_regions: int = MAX_REGIONS) -> None:
        self._regions: dict[str, Region] = {}
        self._lock = threading.Lock()
        self.max_regions = max_regions

    def register(self, name: str, key: str, offset: int, byte_size: int) -> None:
        with self._lock:
            if name in self._regions:
                raise ServerError(f"shared memory region '{name}' already in manager", ErrorCode.ALREADY_EXISTS)
            if len(self._regions) >= self.max_regions:
                raise ServerError(f"Unable to register shared memory region '{name}': {self.max_regions} regions "
                                  "are registered, the most this server holds; unregister one first",
                                  ErrorCode.RESOURCE_EXHAUSTED)
            fd = _open_region(key)
            size = os.fstat(fd).st_size
            if offset < 0 or byte_size <= 0 or offset + byte_size > size:
                os.close(fd)
                raise invalid_argument(
                    f"shared memory region '{name}': offset {offset} + byte_size {byte_size} exceeds the "
                    f"size of '{key}' ({size} bytes)"
                )
            self._regions[name] = Region(name, key, offset, byte_size, fd)

    def unregister(self, name: str = "") -> None:
        """Unregister one region, or all of them when `name` is empty."""
        with self._lock:
            names = [name] if name else list(self._regions)
            for region_name in names:
                region = self._regions.pop(region_name, None)
                if region is not None:
                    os.close(region.fd)

    def status(self, name: str = "") -> list[Region]:
        with self._lock:
            if name:
                if name not in self._regions:
                    raise ServerError(f"Unable to find system shared memory region: '{name}'", ErrorCode.NOT_FOUND)
                return [self._regions[name]]
            return list(self._regions.values())

    def _window(self, name: str, offset: int, byte_size: int) -> tuple[Region, int]:
        region = self._regions.get(name)
        if region is None:
            raise invalid_argument(f"Unable to find shared memory region: '{name}'")
        if offset < 0 or offset + byte_size > region.byte_size:
            raise invalid_argument(
                f"Invalid offset + byte size for shared memory region: '{name}'"
            )
        return region, region.offset + offset

    def read(self, name: str, offset: int, byte_size: int) -> bytes:
        with self._lock:
            region, start = self._window(name, offset, byte_size)
            parts, have = [], 0
            while have < byte_size:  # one pread returns at most ~2 GiB on Linux
                part = os.pread(region.fd, byte_size - have, start + have)
                if not part:
                    break
                parts.append(part)
                have += len(part)
            data = parts[0] if len(parts) == 1 else b"".join(parts)
        if len(data) < byte_size:  # the file shrank after it was registered
            raise invalid_argument(
                f"shared memory region '{name}' is smaller than registered: {start + len(data)} of "
                f"{start + byte_size} bytes are left in '{region.key}'"
            )
        return data

    def write(self, name: str, offset: int, data: bytes, byte_size: int) -> None:
        with self._lock:
            if len(data) > byte_size:
                raise invalid_argument(
                    f"shared memory size specified with the request for output is too small: "
                    f"{byte_size} < {len(data)} bytes needed"
                )
            region, start = self._window(name, offset, len(data))
            size = os.fstat(region.fd).st_size
            if start + len(data) > size:  # writing would grow a file its owner shrank
                raise invalid_argument(
                    f"shared memory region '{name}' is smaller than registered: {size} of "
                    f"{start + len(data)} bytes are left in '{region.key}'"
                )
            os.pwrite(region.fd, data, start)

    def close(self) -> None:
        self.unregister()
