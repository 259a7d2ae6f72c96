"""TLS: gRPC with tritonserver's flags (server TLS and mutual TLS) and HTTPS with --http-ssl-cert/--http-ssl-key,
with a throwaway CA, server and client certificate made here."""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from pathlib import Path

import aiohttp
import numpy as np
import pytest
import tritonclient.grpc.aio as aioclient
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from tritonclient.utils import InferenceServerException

from asr_server.settings import validate
from tests.conftest import BUNDLED_REPO, copy_model, local_settings


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _issue(subject: str, key, issuer: str, issuer_key, ca: bool = False, server: bool = False) -> x509.Certificate:
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (x509.CertificateBuilder().subject_name(_name(subject)).issuer_name(_name(issuer))
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if server:
        builder = builder.add_extension(x509.SubjectAlternativeName(
            [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> dict[str, Path]:
    """PEM files: ca.crt, server.crt/key (for 127.0.0.1), client.crt/key (signed by the CA), rogue.crt/key
    (self-signed)."""
    folder = tmp_path_factory.mktemp("pki")
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _issue("test CA", ca_key, "test CA", ca_key, ca=True)
    files = {"ca.crt": ca}
    for name, issuer, issuer_key, server in [("server", "test CA", ca_key, True), ("client", "test CA", ca_key, False),
                                             ("rogue", "rogue", None, False)]:
        key = ec.generate_private_key(ec.SECP256R1())
        files[f"{name}.crt"] = _issue(name, key, issuer, issuer_key or key, server=server)
        files[f"{name}.key"] = key
    paths = {}
    for filename, item in files.items():
        if filename.endswith(".crt"):
            data = item.public_bytes(serialization.Encoding.PEM)
        else:
            data = item.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption())
        (folder / filename).write_bytes(data)
        paths[filename] = folder / filename
    return paths


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    copy_model(tmp_path, BUNDLED_REPO / "add_sub")
    return tmp_path


async def add_sub(client) -> list:
    a = np.arange(4, dtype=np.float32)
    inputs = [aioclient.InferInput(f"INPUT{i}", [4], "FP32") for i in (0, 1)]
    for tensor in inputs:
        tensor.set_data_from_numpy(a)
    return (await client.infer("add_sub", inputs, client_timeout=10)).as_numpy("OUTPUT0").tolist()


async def test_grpc_use_ssl_serves_tls_clients_only(repo: Path, pki, running):
    settings = dict(allow_http=False, grpc_use_ssl=True, grpc_server_cert=pki["server.crt"],
                    grpc_server_key=pki["server.key"])
    async with running(repo, **settings) as server:
        url = f"127.0.0.1:{server.grpc_port}"
        client = aioclient.InferenceServerClient(url, ssl=True, root_certificates=str(pki["ca.crt"]))
        assert await add_sub(client) == [0.0, 2.0, 4.0, 6.0]
        await client.close()
        plain = aioclient.InferenceServerClient(url)
        with pytest.raises(InferenceServerException) as info:
            await add_sub(plain)
        assert info.value.status() == "StatusCode.UNAVAILABLE"
        await plain.close()


async def test_grpc_mutual_tls_refuses_clients_without_a_certificate_from_the_root(repo: Path, pki, running):
    settings = dict(allow_http=False, grpc_use_ssl_mutual=True, grpc_server_cert=pki["server.crt"],
                    grpc_server_key=pki["server.key"], grpc_root_cert=pki["ca.crt"])
    async with running(repo, **settings) as server:
        url = f"127.0.0.1:{server.grpc_port}"
        trusted = aioclient.InferenceServerClient(
            url, ssl=True, root_certificates=str(pki["ca.crt"]), private_key=str(pki["client.key"]),
            certificate_chain=str(pki["client.crt"]))
        assert await add_sub(trusted) == [0.0, 2.0, 4.0, 6.0]
        await trusted.close()
        for extra in ({}, {"private_key": str(pki["rogue.key"]), "certificate_chain": str(pki["rogue.crt"])}):
            refused = aioclient.InferenceServerClient(url, ssl=True, root_certificates=str(pki["ca.crt"]), **extra)
            with pytest.raises(InferenceServerException) as info:
                await add_sub(refused)
            assert info.value.status() == "StatusCode.UNAVAILABLE"
            await refused.close()


async def test_https_with_http_ssl_flags(repo: Path, pki, running):
    settings = dict(allow_grpc=False, http_ssl_cert=pki["server.crt"], http_ssl_key=pki["server.key"])
    async with running(repo, **settings) as server:
        context = ssl.create_default_context(cafile=str(pki["ca.crt"]))
        async with aiohttp.ClientSession() as session:
            async with session.get(f"https://127.0.0.1:{server.http_port}/v2/health/ready", ssl=context) as reply:
                assert reply.status == 200
            with pytest.raises(aiohttp.ClientError):  # plain HTTP on the TLS port gets no HTTP answer
                async with session.get(f"http://127.0.0.1:{server.http_port}/v2/health/ready") as reply:
                    await reply.read()


def test_tls_settings_are_checked_at_start(repo: Path, pki):
    with pytest.raises(ValueError, match="--grpc-server-cert is required"):
        validate(local_settings(repo, grpc_use_ssl=True, grpc_server_key=pki["server.key"]))
    with pytest.raises(ValueError, match="--grpc-root-cert is required"):
        validate(local_settings(repo, grpc_use_ssl_mutual=True, grpc_server_cert=pki["server.crt"],
                                grpc_server_key=pki["server.key"]))
    with pytest.raises(ValueError, match="cannot read"):
        validate(local_settings(repo, grpc_use_ssl=True, grpc_server_cert=repo / "missing.crt",
                                grpc_server_key=pki["server.key"]))
    with pytest.raises(ValueError, match="--http-ssl-cert and --http-ssl-key go together"):
        validate(local_settings(repo, http_ssl_cert=pki["server.crt"]))
