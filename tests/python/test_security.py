"""TLS, mTLS and SASL against the real broker, with Python's own ssl module and
hand-written SASL/AMQP frames (so the exact bytes on the wire are under test)."""

import json
import os
import socket
import ssl
import struct
import subprocess
import tempfile
import time

import pytest

from conftest import free_port


def run(*args, cwd):
    subprocess.run(args, cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def pki():
    """A CA, a server certificate for localhost/127.0.0.1 and a client certificate
    whose CN is worker-7, made with the openssl command line."""
    d = tempfile.mkdtemp(prefix="sluice-pki-")
    run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
        "-days", "2", "-subj", "/CN=sluice-test-ca", cwd=d)
    with open(os.path.join(d, "server.ext"), "w") as f:
        f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    with open(os.path.join(d, "client.ext"), "w") as f:
        f.write("extendedKeyUsage=clientAuth\n")
    for name, cn in (("server", "localhost"), ("client", "worker-7")):
        run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
            "-subj", f"/CN={cn}", cwd=d)
        run("openssl", "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", f"{name}.pem", "-days", "2", "-extfile", f"{name}.ext", cwd=d)
    return d


@pytest.fixture
def tls_broker(broker_factory, pki):
    port = free_port()
    b = broker_factory(
        CONNECTORS_AMQP10_TLS_PORT=str(port),
        SLUICE_TLS_CERT_FILE=os.path.join(pki, "server.pem"),
        SLUICE_TLS_KEY_FILE=os.path.join(pki, "server.key"),
        SLUICE_TLS_CLIENT_CA_FILE=os.path.join(pki, "ca.pem"),
    )
    b.tls_port = port
    return b


def frame(frame_type, body):
    return struct.pack(">IBBH", 8 + len(body), 2, frame_type, 0) + body


def str8(tag, s):
    return bytes([tag, len(s)]) + s


def open_frame(cid):
    fields = str8(0xA1, cid)
    return frame(0, b"\x00\x53\x10" + bytes([0xC0, 1 + len(fields), 1]) + fields)


def sasl_init(mechanism, response=None):
    fields = str8(0xA3, mechanism)
    count = 1
    if response is not None:
        fields += (b"\xa0" + bytes([len(response)]) + response) if len(response) < 256 else (
            b"\xb0" + struct.pack(">I", len(response)) + response)
        count = 2
    lst = (bytes([0xC0, 1 + len(fields), count]) if len(fields) < 255 else
           b"\xd0" + struct.pack(">II", 4 + len(fields), count))
    return frame(1, b"\x00\x53\x41" + lst + fields)


def read_frames(sock, want, timeout=5):
    """Read until `want(bytes)` is true or the peer closes."""
    sock.settimeout(timeout)
    data = b""
    deadline = time.monotonic() + timeout
    while not want(data) and time.monotonic() < deadline:
        try:
            chunk = sock.recv(65536)
        except (socket.timeout, ssl.SSLError):
            break
        if not chunk:
            break
        data += chunk
    return data


def tls_connect(b, pki, client_cert=True, amqp_tls_header=False):
    s = socket.create_connection(("127.0.0.1", b.tls_port), timeout=5)
    if amqp_tls_header:
        s.sendall(b"AMQP\x02\x01\x00\x00")
        assert s.recv(8) == b"AMQP\x02\x01\x00\x00"
    ctx = ssl.create_default_context(cafile=os.path.join(pki, "ca.pem"))
    if client_cert:
        ctx.load_cert_chain(os.path.join(pki, "client.pem"), os.path.join(pki, "client.key"))
    return ctx.wrap_socket(s, server_hostname="localhost")


def sasl_exchange(sock, mechanism, response=None, cid=b"sec-test"):
    """SASL header, mechanisms, init, outcome; then AMQP header and OPEN on success.
    Returns (offered mechanisms bytes, outcome code, bytes after the outcome)."""
    sock.sendall(b"AMQP\x03\x01\x00\x00")
    got = read_frames(sock, lambda d: len(d) >= 8 + 12 and b"\x00\x53\x40" in d)
    assert got.startswith(b"AMQP\x03\x01\x00\x00"), got
    mechanisms = got[8:]
    sock.sendall(sasl_init(mechanism, response))
    got = read_frames(sock, lambda d: b"\x00\x53\x44" in d and len(d) >= d.find(b"\x00\x53\x44") + 8)
    i = got.find(b"\x00\x53\x44")
    if i < 0:
        return mechanisms, None, got
    # sasl-outcome list: c0 size count 50 code
    code = got[i + 7] if got[i + 6] == 0x50 else None
    if code == 0:
        sock.sendall(b"AMQP\x00\x01\x00\x00" + open_frame(cid))
        rest = read_frames(sock, lambda d: b"\x00\x53\x10" in d)
        return mechanisms, code, rest
    return mechanisms, code, got


def connections(b):
    return b.get_json("/api/amqp10/connections")["connections"]


@pytest.mark.parametrize("amqp_tls_header", [False, True])
def test_tls_listener_with_and_without_the_amqp_tls_header(tls_broker, pki, amqp_tls_header):
    s = tls_connect(tls_broker, pki, client_cert=False, amqp_tls_header=amqp_tls_header)
    assert s.version() in ("TLSv1.2", "TLSv1.3")
    s.sendall(b"AMQP\x00\x01\x00\x00" + open_frame(b"tls-plain"))
    got = read_frames(s, lambda d: b"\x00\x53\x10" in d)
    assert got.startswith(b"AMQP\x00\x01\x00\x00") and b"\x00\x53\x10" in got
    conns = [c for c in connections(tls_broker) if c["container_id"] == "tls-plain"]
    assert conns and conns[0]["tls"] is True and conns[0]["sasl"] == "none"
    s.close()


def test_tls_refuses_protocols_below_tls12(tls_broker, pki):
    s = socket.create_connection(("127.0.0.1", tls_broker.tls_port), timeout=5)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            ctx.minimum_version = ssl.TLSVersion.TLSv1
            ctx.maximum_version = ssl.TLSVersion.TLSv1_1
    except (ValueError, ssl.SSLError):
        pytest.skip("this OpenSSL cannot even offer TLS 1.1")
    with pytest.raises((ssl.SSLError, ConnectionResetError, OSError)):
        ctx.wrap_socket(s, server_hostname="localhost")


def test_sasl_external_with_a_verified_client_certificate(tls_broker, pki):
    s = tls_connect(tls_broker, pki, client_cert=True)
    mechanisms, code, rest = sasl_exchange(s, b"EXTERNAL", b"", cid=b"ext-client")
    # Offered in the reference's order: EXTERNAL, PLAIN, ANONYMOUS (auth disabled).
    assert mechanisms.find(b"EXTERNAL") < mechanisms.find(b"PLAIN") < mechanisms.find(b"ANONYMOUS")
    assert code == 0 and b"\x00\x53\x10" in rest
    conns = [c for c in connections(tls_broker) if c["container_id"] == "ext-client"]
    assert conns and conns[0]["client_id"] == "worker-7" and conns[0]["sasl"] == "external" and conns[0]["tls"]
    s.close()


def test_external_is_not_offered_and_fails_without_a_client_certificate(tls_broker, pki):
    s = tls_connect(tls_broker, pki, client_cert=False)
    mechanisms, code, _ = sasl_exchange(s, b"EXTERNAL", b"")
    assert b"EXTERNAL" not in mechanisms
    assert code == 1  # auth
    s.close()


def test_sasl_plain_username_names_the_client_when_auth_is_disabled(broker):
    s = socket.create_connection(("127.0.0.1", broker.port), timeout=5)
    mechanisms, code, rest = sasl_exchange(s, b"PLAIN", b"\x00alice\x00secret", cid=b"plain-client")
    assert code == 0 and b"\x00\x53\x10" in rest
    conns = [c for c in connections(broker) if c["container_id"] == "plain-client"]
    assert conns and conns[0]["client_id"] == "alice" and conns[0]["sasl"] == "plain"
    s.close()


def test_an_oversized_sasl_initial_response_fails_authentication(broker):
    s = socket.create_connection(("127.0.0.1", broker.port), timeout=5)
    _, code, _ = sasl_exchange(s, b"PLAIN", b"\x00u\x00" + b"x" * (16 * 1024))
    assert code == 1
    s.close()
