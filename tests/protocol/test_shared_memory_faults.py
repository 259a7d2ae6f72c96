"""System shared memory a client changes under the server: a region whose file is truncated after
it was registered fails the request that reads or writes it with INVALID_ARGUMENT (it used to kill the server
with SIGBUS), and the number of regions, each holding a descriptor, is capped."""

from __future__ import annotations

import os
import uuid

import numpy as np
import pytest
import tritonclient.grpc.aio as grpc_aio
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

from asr_server.errors import ErrorCode, ServerError
from asr_server.shared_memory import SHM_ROOT, SharedMemoryRegistry
from tests.protocol.test_hostile_input import repo  # noqa: F401  (fixture)


@pytest.fixture
def region_key():
    key = f"/asr_test_{uuid.uuid4().hex}"
    yield key
    try:
        os.unlink(os.path.join(SHM_ROOT, key[1:]))
    except FileNotFoundError:
        pass


def test_a_truncated_region_is_refused_not_read(region_key):
    path = os.path.join(SHM_ROOT, region_key[1:])
    with open(path, "wb") as fh:
        fh.write(bytes(range(64)))
    registry = SharedMemoryRegistry()
    registry.register("r", region_key, 0, 64)
    assert registry.read("r", 8, 8) == bytes(range(8, 16))
    os.truncate(path, 0)
    with pytest.raises(ServerError, match="smaller than registered") as info:
        registry.read("r", 8, 8)
    assert info.value.code == ErrorCode.INVALID_ARGUMENT
    with pytest.raises(ServerError, match="smaller than registered"):
        registry.write("r", 0, b"x" * 16, 16)
    assert os.path.getsize(path) == 0  # a refused write does not grow the client's file again
    registry.close()


def descriptors_of(path: str) -> int:
    """This process's open descriptors on `path` (only those: other threads open and close their own)."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}") == path
        except OSError:  # closed meanwhile
            continue
    return count


def test_regions_are_capped_and_release_their_descriptors(region_key):
    path = os.path.join(SHM_ROOT, region_key[1:])
    with open(path, "wb") as fh:
        fh.write(bytes(64))
    registry = SharedMemoryRegistry(max_regions=3)
    for i in range(3):
        registry.register(f"r{i}", region_key, 0, 64)
    assert descriptors_of(path) == 3
    with pytest.raises(ServerError) as info:
        registry.register("r3", region_key, 0, 64)
    assert info.value.code == ErrorCode.RESOURCE_EXHAUSTED
    registry.unregister()
    assert descriptors_of(path) == 0
    registry.register("r3", region_key, 0, 64)
    registry.close()


async def test_the_server_survives_a_region_truncated_under_it(repo, running, region_key):  # noqa: F811
    handle = shm.create_shared_memory_region("faulty", region_key, 64)
    try:
        shm.set_shared_memory_region(handle, [np.ones(4, np.float32)])
        async with running(repo, allow_http=False) as server:
            client = grpc_aio.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
            try:
                await client.register_system_shared_memory("faulty", region_key, 64)
                inputs = [grpc_aio.InferInput(n, [4], "FP32") for n in ("INPUT0", "INPUT1")]
                for tensor in inputs:
                    tensor.set_shared_memory("faulty", 16)
                result = await client.infer("add_sub", inputs)
                np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), [2, 2, 2, 2])
                os.truncate(os.path.join(SHM_ROOT, region_key[1:]), 0)
                with pytest.raises(InferenceServerException, match="smaller than registered") as info:
                    await client.infer("add_sub", inputs)
                assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
                assert await client.is_server_live()
                plain = [grpc_aio.InferInput(n, [4], "FP32") for n in ("INPUT0", "INPUT1")]
                for tensor in plain:
                    tensor.set_data_from_numpy(np.ones(4, np.float32))
                result = await client.infer("add_sub", plain)
                np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), [2, 2, 2, 2])
            finally:
                await client.close()
    finally:
        shm.destroy_shared_memory_region(handle)
