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
    return start_tls_broker(broker_factory, pki, client_ca=True)


def start_tls_broker(broker_factory, pki, client_ca=False, **env):
    """A broker with a TLS listener (its port as `tls_port`) on the test PKI's server
    certificate, verifying client certificates when `client_ca`, with `env` besides."""
    port = free_port()
    if client_ca:
        env["SLUICE_TLS_CLIENT_CA_FILE"] = os.path.join(pki, "ca.pem")
    b = broker_factory(
        CONNECTORS_AMQP10_TLS_PORT=str(port),
        SLUICE_TLS_CERT_FILE=os.path.join(pki, "server.pem"),
        SLUICE_TLS_KEY_FILE=os.path.join(pki, "server.key"),
        **env,
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


def test_tls_connections_are_spread_over_the_shards_and_each_authenticates(tls_broker, pki):
    """Eight TLS connections held open at once are served four per shard (a connection
    the kernel put on the busier shard is handed to the other before its handshake),
    and every one completes TLS, SASL EXTERNAL with its certificate and OPEN."""
    # Connections of earlier tests must be gone first: placement counts them.
    tls_broker.wait_metric("kubemq_amqp10_connections", lambda v: v == 0)
    time.sleep(0.1)
    socks = []
    for i in range(8):
        s = tls_connect(tls_broker, pki, client_cert=True, amqp_tls_header=(i % 2 == 1))
        _, code, rest = sasl_exchange(s, b"EXTERNAL", b"", cid=b"spread-%d" % i)
        assert code == 0 and b"\x00\x53\x10" in rest
        socks.append(s)
    conns = [c for c in connections(tls_broker) if c["container_id"].startswith("spread-")]
    assert len(conns) == 8, conns
    assert all(c["tls"] and c["sasl"] == "external" and c["client_id"] == "worker-7" for c in conns), conns
    assert sorted(c["shard"] for c in conns) == [0, 0, 0, 0, 1, 1, 1, 1], conns
    for s in socks:
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


# ----------------------------------------------------------------- authentication on

import base64
import hashlib
import hmac

SECRET = b"sluice-test-secret-0123456789abcdef"


def b64url(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=")


def jwt(claims, secret=SECRET):
    head = b64url(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    body = b64url(json.dumps(claims).encode())
    sig = b64url(hmac.new(secret, head + b"." + body, hashlib.sha256).digest())
    return (head + b"." + body + b"." + sig)


MODEL = """[request_definition]
r = sub, obj, chan, act

[policy_definition]
p = sub, obj, chan, act

[policy_effect]
e = some(where (p.eft == allow))

[matchers]
m = r.sub == p.sub && r.obj == p.obj && keyMatch(r.chan, p.chan) && r.act == p.act
"""

POLICY = """p, order-service, queues, orders, write
p, order-service, queues, orders, read
p, order-service, events, audit*, write
"""


@pytest.fixture
def auth_broker(broker_factory, pki):
    d = tempfile.mkdtemp(prefix="sluice-auth-")
    for name, text in (("key", SECRET.decode()), ("model.conf", MODEL), ("policy.csv", POLICY)):
        with open(os.path.join(d, name), "w") as f:
            f.write(text)
    return start_tls_broker(
        broker_factory,
        pki,
        client_ca=True,
        SLUICE_AUTH_ENABLED="true",
        SLUICE_AUTH_JWT_KEY_FILE=os.path.join(d, "key"),
        SLUICE_AUTH_JWT_AUDIENCE="sluice",
        SLUICE_AUTH_CASBIN_MODEL=os.path.join(d, "model.conf"),
        SLUICE_AUTH_CASBIN_POLICY=os.path.join(d, "policy.csv"),
    )


def token(**over):
    claims = {"sub": "order-service", "aud": "sluice", "exp": int(time.time()) + 3600}
    claims.update(over)
    return jwt({k: v for k, v in claims.items() if v is not None})


def plain(tok, user=b"audit-user"):
    return b"\x00" + user + b"\x00" + tok


def attach_frame(handle, role_receiver, address):
    # attach: name, handle, role, snd-settle-mode, rcv-settle-mode, source, target
    name = str8(0xA1, b"link-%d" % handle)
    addr = str8(0xA1, address)
    terminus_fields = addr
    terminus = b"\xc0" + bytes([1 + len(terminus_fields), 1]) + terminus_fields
    source = b"\x00\x53\x28" + terminus if role_receiver else b"\x40"
    target = b"\x00\x53\x29" + (b"\x45" if role_receiver else terminus)
    fields = name + b"\x52" + bytes([handle]) + (b"\x41" if role_receiver else b"\x42") + b"\x40\x40" + source + target
    if not role_receiver:
        fields += b"\x40\x40\x43"  # unsettled, incomplete-unsettled, initial-delivery-count 0
        count = 10
    else:
        count = 7
    return frame(0, b"\x00\x53\x12" + bytes([0xC0, 1 + len(fields), count]) + fields)


def begin_frame():
    fields = b"\x40\x43\x70\x00\x00\x08\x00\x70\x00\x00\x08\x00"
    return frame(0, b"\x00\x53\x11" + bytes([0xC0, 1 + len(fields), 4]) + fields)


def test_auth_on_offers_no_anonymous_and_refuses_bare_connections(auth_broker):
    s = socket.create_connection(("127.0.0.1", auth_broker.port), timeout=5)
    mechanisms, _, _ = sasl_exchange(s, b"ANONYMOUS")
    assert b"PLAIN" in mechanisms and b"ANONYMOUS" not in mechanisms
    s.close()
    s = socket.create_connection(("127.0.0.1", auth_broker.port), timeout=5)
    s.sendall(b"AMQP\x00\x01\x00\x00")
    got = read_frames(s, lambda d: len(d) >= 8)
    assert got[:8] == b"AMQP\x03\x01\x00\x00"  # only the SASL layer is offered back
    assert read_frames(s, lambda d: False, timeout=2) == b""  # then closed


def test_plain_with_a_valid_jwt_names_the_client_and_audits(auth_broker):
    s = socket.create_connection(("127.0.0.1", auth_broker.port), timeout=5)
    _, code, rest = sasl_exchange(s, b"PLAIN", plain(token()), cid=b"jwt-client")
    assert code == 0 and b"\x00\x53\x10" in rest
    conns = [c for c in connections(auth_broker) if c["container_id"] == "jwt-client"]
    assert conns and conns[0]["client_id"] == "order-service" and conns[0]["sasl"] == "plain"
    assert "auth.success" in auth_broker.log()
    s.close()


@pytest.mark.parametrize("bad", [
    "expired", "not-yet-valid", "wrong-audience", "wrong-signature", "garbage",
])
def test_plain_with_a_bad_jwt_fails_after_a_delay_and_says_nothing_on_the_wire(auth_broker, bad):
    tok = {
        "expired": lambda: token(exp=int(time.time()) - 10),
        "not-yet-valid": lambda: token(nbf=int(time.time()) + 3600),
        "wrong-audience": lambda: token(aud="someone-else"),
        "wrong-signature": lambda: jwt({"sub": "order-service", "aud": "sluice"}, secret=b"not-the-secret-0123456789abcdefgh"),
        "garbage": lambda: b"not.a.jwt",
    }[bad]()
    s = socket.create_connection(("127.0.0.1", auth_broker.port), timeout=5)
    started = time.monotonic()
    _, code, got = sasl_exchange(s, b"PLAIN", plain(tok))
    waited = time.monotonic() - started
    assert code == 1  # auth
    assert waited >= 0.5, "no delay before the failed outcome"  # a lower bound, not a timing target
    # The reason is in the audit log, never on the wire.
    assert b"expired" not in got and b"audience" not in got and b"signature" not in got
    assert "auth.failure" in auth_broker.log()


def test_external_with_auth_on(auth_broker, pki):
    s = tls_connect(auth_broker, pki, client_cert=True)
    mechanisms, code, rest = sasl_exchange(s, b"EXTERNAL", b"", cid=b"mtls-client")
    assert mechanisms.find(b"EXTERNAL") < mechanisms.find(b"PLAIN")
    assert code == 0
    conns = [c for c in connections(auth_broker) if c["container_id"] == "mtls-client"]
    assert conns and conns[0]["client_id"] == "worker-7"
    s.close()


def open_authenticated(b, tok, cid):
    s = socket.create_connection(("127.0.0.1", b.port), timeout=5)
    _, code, _ = sasl_exchange(s, b"PLAIN", plain(tok), cid=cid)
    assert code == 0
    s.sendall(begin_frame())
    read_frames(s, lambda d: b"\x00\x53\x11" in d)
    return s


def test_casbin_allows_and_denies_attaches(auth_broker):
    s = open_authenticated(auth_broker, token(), b"authz")
    s.sendall(attach_frame(0, False, b"queues/orders"))  # write: allowed
    got = read_frames(s, lambda d: b"\x00\x53\x13" in d or b"\x00\x53\x16" in d)
    assert b"\x00\x53\x13" in got and b"unauthorized" not in got  # a FLOW with credit, no detach
    s.sendall(attach_frame(1, False, b"queues/payments"))  # write: denied
    got = read_frames(s, lambda d: b"amqp:unauthorized-access" in d)
    assert b"amqp:unauthorized-access" in got and b"not authorized for payments" in got
    s.sendall(attach_frame(2, True, b"events/audit-trail"))  # read: only write is granted
    got = read_frames(s, lambda d: b"not authorized for audit-trail" in d)
    assert b"not authorized for audit-trail" in got
    s.close()


def test_an_expiring_jwt_closes_the_connection_with_unauthorized_access(auth_broker):
    s = open_authenticated(auth_broker, token(exp=int(time.time()) + 5), b"short-lived")
    got = read_frames(s, lambda d: b"amqp:unauthorized-access" in d, timeout=12)
    assert b"\x00\x53\x18" in got and b"amqp:unauthorized-access" in got  # CLOSE
    s.close()


def test_a_tls_peer_that_stops_reading_is_dropped_after_the_write_timeout(broker_factory, pki, amqp):
    """A TLS subscriber with huge credit that stops reading blocks the broker's writes
    to it; after SLUICE_WRITE_TIMEOUT_SECONDS without progress the connection is
    dropped (no CLOSE can reach it: not even TLS's close_notify is attempted), counted
    as a connection error, and the publisher is served all along."""
    import raw_amqp
    from amqp_harness import Delivery

    b = start_tls_broker(broker_factory, pki, SLUICE_WRITE_TIMEOUT_SECONDS="2")
    s = tls_connect(b, pki, client_cert=False)
    s.sendall(
        b"AMQP\x00\x01\x00\x00"
        + open_frame(b"tls-stuck")
        + raw_amqp.begin_frame(0)
        + raw_amqp.attach_frame("r", 0, "events/tls-stuck", client_is_sender=False)
        + raw_amqp.flow_frame(0, 1000000)
    )
    # The broker's ATTACH: the subscription is in place. From here on nothing is read.
    got = read_frames(s, lambda d: b"\x00\x53\x12" in d)
    assert b"\x00\x53\x12" in got, got
    pub = amqp.connect(b.url)
    snd = pub.sender("events/tls-stuck")
    snd.wait_credit()
    body = b"\x05" * 65536
    for i in range(1000):  # 64 MiB: many times what the socket buffers hold
        snd.wait_credit()
        snd.send(body=body, settle=True)
        if i % 32 == 0:
            amqp.pump(0)
    deadline = time.monotonic() + 60
    while any(c["container_id"] == "tls-stuck" for c in connections(b)):
        assert time.monotonic() < deadline, "the TLS connection that reads nothing was never dropped"
        amqp.pump(0.1)
    assert b.metric("kubemq_amqp10_errors_total", scope="conn") >= 1
    q = pub.sender("queues/after-stuck")
    assert q.send_and_wait(body="still served").remote_state == Delivery.ACCEPTED
    s.close()


def test_the_handshake_timeout_counts_once_from_accept_over_tls(broker_factory, pki):
    """SLUICE_HANDSHAKE_TIMEOUT_SECONDS is the time from accept to OPEN: a TLS peer that
    used most of it on a slow TLS handshake has only the rest for AMQP. Before, the
    AMQP handshake got the whole timeout again once TLS was done (6 s + 4 s here)."""
    b = start_tls_broker(broker_factory, pki, SLUICE_HANDSHAKE_TIMEOUT_SECONDS="6")
    s = socket.create_connection(("127.0.0.1", b.tls_port), timeout=5)
    accepted = time.monotonic()
    time.sleep(4)
    ctx = ssl.create_default_context(cafile=os.path.join(pki, "ca.pem"))
    t = ctx.wrap_socket(s, server_hostname="localhost")
    t.settimeout(1)
    closed_after = None
    while time.monotonic() < accepted + 20:
        try:
            if not t.recv(4096):
                closed_after = time.monotonic() - accepted
                break
        except socket.timeout:
            continue
        except (ssl.SSLError, OSError):
            closed_after = time.monotonic() - accepted
            break
    t.close()
    assert closed_after is not None, "the silent TLS peer was never closed"
    # 6 s from accept; the old double timeout closed it at 10 s.
    assert closed_after < 8.5, f"closed {closed_after:.1f} s after accept, timeout 6 s"


def test_sockets_silent_in_their_tls_handshake_give_their_place_at_the_connection_limit(broker_factory, pki):
    """At CONNECTORS_AMQP10_MAX_CONNECTIONS, the oldest connection still in its
    handshake after a second gives its place to a new one, also when it is stuck in
    TLS. Before, sockets silent in their TLS handshake were not in the handshake map:
    three of them held a limit of 3 until the handshake timeout (60 s here) and the
    client was told "connection limit reached"."""
    b = start_tls_broker(
        broker_factory,
        pki,
        CONNECTORS_AMQP10_MAX_CONNECTIONS="3",
        SLUICE_SHARDS="1",
        SLUICE_HANDSHAKE_TIMEOUT_SECONDS="60",
    )
    # The start-up probe's connection has gone (else the third socket comes in over
    # the limit, holds no place, and the client gets a free one without an eviction).
    b.wait_metric("kubemq_amqp10_connections", lambda v: v == 0)
    time.sleep(0.2)
    silent = [socket.create_connection(("127.0.0.1", b.tls_port), timeout=5) for _ in range(3)]
    # Evictable a second after the broker accepted them (not after the connect).
    time.sleep(2.5)
    s = tls_connect(b, pki, client_cert=False)
    s.sendall(b"AMQP\x00\x01\x00\x00" + open_frame(b"after-the-silent-ones"))
    got = read_frames(s, lambda d: b"\x00\x53\x10" in d)
    assert b"\x00\x53\x10" in got, got
    # Refused, it would get a CLOSE (descriptor 0x18) right after its OPEN.
    got += read_frames(s, lambda d: False, timeout=0.5)
    assert b"\x00\x53\x18" not in got and b"connection limit" not in got, got
    assert any(c["container_id"] == "after-the-silent-ones" for c in connections(b))
    # The oldest silent socket was dropped; the other two still wait.
    silent[0].settimeout(5)
    try:
        dropped = silent[0].recv(64) == b""
    except ConnectionResetError:
        dropped = True
    except socket.timeout:
        dropped = False
    assert dropped, "the oldest socket silent in its TLS handshake is still open"
    silent[1].settimeout(0.3)
    with pytest.raises(socket.timeout):
        silent[1].recv(64)
    assert b.wait_metric("sluice_connections_evicted_in_handshake_total", lambda v: v == 1) == 1
    s.close()
    for t in silent:
        t.close()
