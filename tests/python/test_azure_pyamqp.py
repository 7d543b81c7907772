"""Azure's pure-Python AMQP 1.0 client against sluice: `azure.servicebus._pyamqp`
(azure-servicebus 7.15.0 from PyPI), the stack Azure's Python SDKs use since they left
uAMQP. It is written from the specification in Python and shares no code with proton,
rhea, fe2o3-amqp, go-amqp or uAMQP.

What it needs from a broker, and what these tests pin down:

* It reads an error's description and info by position (`error[1]`, `error[2]`), not
  by the list's count: an error written without its trailing null fields made it fail
  with an IndexError where it should have reported the condition. sluice writes every
  field of an error (`test_a_rejected_publish_reports_its_condition`).
* Its links ask for rcv-settle-mode second unless told otherwise, which sluice refuses
  by contract (`amqp:not-implemented`); with `ReceiverSettleMode.First` it sends and
  consumes at least once, settling what it took (accepted, released, rejected).
* Its pre-settled sends (`SenderSettleMode.Settled`) never return with any broker: it
  waits for an outcome a settled delivery never gets. These tests send unsettled.

It runs over plain TCP (`use_tls=False`, the port in the host name) and over TLS (the
port in `custom_endpoint_address`, the CA in `connection_verify`), with SASL PLAIN,
ANONYMOUS and EXTERNAL.
"""

import os
import ssl
import threading
import time

import pytest
from azure.servicebus._pyamqp import ReceiveClient, SendClient
from azure.servicebus._pyamqp.authentication import SASLPlainAuth
from azure.servicebus._pyamqp.constants import AUTH_TYPE_SASL_PLAIN, ReceiverSettleMode, SenderSettleMode
from azure.servicebus._pyamqp.error import AMQPException, RetryPolicy
from azure.servicebus._pyamqp.message import Message, Properties
from azure.servicebus._pyamqp.sasl import SASLAnonymousCredential, SASLExternalCredential

from amqp_harness import uid
from test_security import pki, start_tls_broker  # noqa: F401  (pki is a fixture)

NO_RETRY = RetryPolicy(retry_total=0)


class Sasl:
    """An `auth` for the client with any SASL credential (the library has a class for
    PLAIN only)."""

    auth_type = AUTH_TYPE_SASL_PLAIN

    def __init__(self, credential):
        self.sasl = credential


def anonymous():
    return Sasl(SASLAnonymousCredential())


def plain_endpoint(b):
    return {"hostname": f"localhost:{b.port}", "use_tls": False}


def tls_endpoint(b, pki, client_cert=False):  # noqa: F811
    ctx = ssl.create_default_context(cafile=os.path.join(pki, "ca.pem"))
    if client_cert:
        ctx.load_cert_chain(os.path.join(pki, "client.pem"), os.path.join(pki, "client.key"))
    return {"hostname": "localhost", "custom_endpoint_address": f"amqps://localhost:{b.tls_port}", "ssl_context": ctx}


def send(endpoint, address, messages, auth=None):
    """Send unsettled, each waiting for its outcome."""
    with SendClient(target=address, auth=auth or anonymous(), retry_policy=NO_RETRY,
                    receive_settle_mode=ReceiverSettleMode.First, **endpoint) as c:
        for m in messages:
            c.send_message(m, timeout=10)


def receive(endpoint, address, n, settle="accepted", auth=None, link_properties=None, wait=10.0):
    """Up to `n` messages, unsettled (ReceiverSettleMode.First), each settled with
    `settle` (None: left unsettled until the link goes). Returns (message, transfer)
    pairs: the batch API drops the TRANSFER, which settling needs, so the client's
    queue is read directly."""
    got = []
    c = ReceiveClient(source=address, auth=auth or anonymous(), retry_policy=NO_RETRY,
                      receive_settle_mode=ReceiverSettleMode.First, link_credit=max(n, 1),
                      link_properties=link_properties, **endpoint)
    try:
        c.open()
        deadline = time.monotonic() + wait
        while len(got) < n and time.monotonic() < deadline:
            if not c.client_ready():
                c.do_work()
                continue
            c.do_work()
            while not c._received_messages.empty() and len(got) < n:
                frame, message = c._received_messages.get_nowait()
                got.append((message, frame))
                if settle:
                    c.settle_messages(frame[1], frame[2], settle)
        # The dispositions go out before the link closes.
        c.do_work()
    finally:
        c.close()
    return got


def msg(body, **sections):
    """A message with one Data section (the client takes `data` as a list of them)."""
    return Message(data=[body], **sections)


def bodies(got):
    return [b"".join(m.data) for m, _ in got]


@pytest.fixture
def tls(broker_factory, pki):  # noqa: F811
    return start_tls_broker(broker_factory, pki, client_ca=True)


def test_a_queue_round_trip_keeps_every_section(broker):
    ep = plain_endpoint(broker)
    ch = f"queues/{uid('az')}"
    sent = [msg(f"body {i}".encode(),
                    properties=Properties(message_id=f"m{i}", subject="subj", correlation_id=f"c{i}"),
                    application_properties={"i": i, "s": "text", "b": True, "f": 1.5})
            for i in range(20)]
    send(ep, ch, sent)
    got = receive(ep, ch, 20)
    assert bodies(got) == [f"body {i}".encode() for i in range(20)]
    for i, (m, _) in enumerate(got):
        p = {k.decode(): v for k, v in m.application_properties.items()}
        assert p == {"i": i, "s": b"text", "b": True, "f": 1.5}, p
        assert (m.properties.message_id, m.properties.subject, m.properties.correlation_id) == \
            (f"m{i}".encode(), b"subj", f"c{i}".encode())
    # Accepted: nothing is left.
    assert receive(ep, ch, 1, wait=1.0) == []


def test_a_released_message_comes_again_counted(broker):
    ep = plain_endpoint(broker)
    ch = f"queues/{uid('az')}"
    send(ep, ch, [msg(b"again")])
    first = receive(ep, ch, 1, settle="released")
    assert bodies(first) == [b"again"]
    again = receive(ep, ch, 1, settle="accepted")
    assert bodies(again) == [b"again"]
    # Counted at least once (the client grants credit again as soon as it has none, so
    # the released message may come to the first link again before it goes, and be
    # returned, counted, once more).
    header = again[0][0].header
    assert header is not None and header.delivery_count >= 1 and not header.first_acquirer, header
    assert receive(ep, ch, 1, wait=1.0) == []


def test_a_rejected_message_is_done_with(broker):
    ep = plain_endpoint(broker)
    ch = f"queues/{uid('az')}"
    send(ep, ch, [msg(b"bad"), msg(b"good")])
    assert bodies(receive(ep, ch, 1, settle="rejected")) == [b"bad"]
    assert bodies(receive(ep, ch, 1)) == [b"good"]
    assert receive(ep, ch, 1, wait=1.0) == []


def test_what_was_not_settled_comes_again_after_the_link_goes(broker):
    ep = plain_endpoint(broker)
    ch = f"queues/{uid('az')}"
    send(ep, ch, [msg(f"{i}".encode()) for i in range(3)])
    assert bodies(receive(ep, ch, 3, settle=None)) == [b"0", b"1", b"2"]
    assert sorted(bodies(receive(ep, ch, 3))) == [b"0", b"1", b"2"]


def test_a_rejected_publish_reports_its_condition(broker_factory):
    """A publish past SLUICE_QUEUE_MAX_MESSAGES is rejected amqp:resource-limit-exceeded
    "queue full". The client reads the error's third field (info): before sluice wrote
    every field of an error, it failed here with an IndexError, not the condition."""
    b = broker_factory(SLUICE_QUEUE_MAX_MESSAGES="1")
    ep = plain_endpoint(b)
    ch = f"queues/{uid('az')}"
    send(ep, ch, [msg(b"fits")])
    # Without the info field the client's outcome callback fails and its send never
    # returns: it is run where a hang fails the test instead of stopping the run.
    outcome = []

    def over():
        try:
            send(ep, ch, [msg(b"over")])
            outcome.append(None)
        except Exception as ex:  # noqa: BLE001  (what it raised is the result)
            outcome.append(ex)

    t = threading.Thread(target=over, daemon=True)
    t.start()
    t.join(20)
    assert outcome, "no outcome: the client could not read the rejection"
    err = outcome[0]
    assert isinstance(err, AMQPException), outcome
    assert err.condition == b"amqp:resource-limit-exceeded", err
    assert b"queue full" in (err.description or b""), err
    # The link stayed up for the accepted one: it is there, once.
    assert bodies(receive(ep, ch, 1)) == [b"fits"]
    assert receive(ep, ch, 1, wait=1.0) == []


def test_an_unknown_address_is_refused_not_found(broker):
    with pytest.raises(AMQPException) as e:
        send(plain_endpoint(broker), "nowhere/x", [msg(b"x")])
    assert e.value.condition == b"amqp:not-found", e.value
    assert b"unknown address prefix" in (e.value.description or b""), e.value


def test_a_receiver_asking_for_rcv_settle_mode_second_is_refused_not_implemented(broker):
    ep = plain_endpoint(broker)
    ch = f"queues/{uid('az')}"
    send(ep, ch, [msg(b"kept")])
    c = ReceiveClient(source=ch, auth=anonymous(), retry_policy=NO_RETRY,
                      receive_settle_mode=ReceiverSettleMode.Second, **ep)
    try:
        with pytest.raises(AMQPException) as e:
            c.receive_message_batch(max_batch_size=1, timeout=5)
    finally:
        c.close()
    assert e.value.condition == b"amqp:not-implemented", e.value
    # The refused link took nothing.
    assert bodies(receive(ep, ch, 1)) == [b"kept"]


def test_events_store_replays_from_the_first(broker):
    ep = plain_endpoint(broker)
    store = f"events-store/{uid('az')}"
    send(ep, store, [msg(f"{i}".encode()) for i in range(3)])
    got = receive(ep, store, 3, link_properties={"x-opt-kubemq-start": "first"})
    assert bodies(got) == [b"0", b"1", b"2"]


def test_events_reach_a_subscriber(broker):
    """An event that meets no credit is dropped (the contract), and the client grants
    its credit only once its link is up: probe events until one arrives, then the real
    ones (a late probe is stepped over)."""
    ep = plain_endpoint(broker)
    ch = f"events/{uid('az')}"
    r = ReceiveClient(source=ch, auth=anonymous(), retry_policy=NO_RETRY,
                      receive_settle_mode=ReceiverSettleMode.First,
                      send_settle_mode=SenderSettleMode.Settled, link_credit=10, **ep)

    def events(n, timeout):
        got = []
        deadline = time.monotonic() + timeout
        while len(got) < n and time.monotonic() < deadline:
            got.extend(b"".join(m.data) for m in r.receive_message_batch(max_batch_size=n - len(got), timeout=0.2))
        return got

    try:
        for _ in range(20):
            send(ep, ch, [msg(b"probe")])
            if events(1, 0.5) == [b"probe"]:
                break
        else:
            pytest.fail("no probe event reached the subscriber")
        send(ep, ch, [msg(f"e{i}".encode()) for i in range(5)])
        got = [e for e in events(5, 5) if e != b"probe"]
        while len(got) < 5:
            more = [e for e in events(5 - len(got), 2) if e != b"probe"]
            if not more:
                break
            got.extend(more)
        assert got == [f"e{i}".encode() for i in range(5)]
    finally:
        r.close()


def held_connection(b, ep, auth):
    """A receiver kept open on a queue while the admin API is read; returns its client
    and the broker's view of its connection (the one not seen before it opened)."""
    before = {c["id"] for c in b.get_json("/api/amqp10/connections")["connections"]}
    c = ReceiveClient(source=f"queues/{uid('az')}", auth=auth, retry_policy=NO_RETRY,
                      receive_settle_mode=ReceiverSettleMode.First, **ep)
    c.open()
    deadline = time.monotonic() + 10
    while not c.client_ready() and time.monotonic() < deadline:
        c.do_work()
    while time.monotonic() < deadline:
        new = [x for x in b.get_json("/api/amqp10/connections")["connections"] if x["id"] not in before]
        if new:
            return c, new[0]
        time.sleep(0.05)
    c.close()
    pytest.fail("the connection was never listed")


def test_sasl_plain_over_tls(tls, pki):  # noqa: F811
    ep = tls_endpoint(tls, pki)
    ch = f"queues/{uid('az')}"
    auth = SASLPlainAuth("azure-user", "secret")
    send(ep, ch, [msg(b"p")], auth=auth)
    assert bodies(receive(ep, ch, 1, auth=auth)) == [b"p"]
    c, seen = held_connection(tls, ep, auth)
    try:
        assert (seen["sasl"], seen["tls"]) == ("plain", True), seen
    finally:
        c.close()


def test_anonymous_over_tls(tls, pki):  # noqa: F811
    ep = tls_endpoint(tls, pki)
    ch = f"queues/{uid('az')}"
    send(ep, ch, [msg(b"a")])
    assert bodies(receive(ep, ch, 1)) == [b"a"]
    c, seen = held_connection(tls, ep, anonymous())
    try:
        assert (seen["sasl"], seen["tls"]) == ("anonymous", True), seen
    finally:
        c.close()


def test_external_with_a_client_certificate(tls, pki):  # noqa: F811
    ep = tls_endpoint(tls, pki, client_cert=True)
    ch = f"queues/{uid('az')}"
    auth = Sasl(SASLExternalCredential())
    send(ep, ch, [msg(b"x")], auth=auth)
    assert bodies(receive(ep, ch, 1, auth=auth)) == [b"x"]
    c, seen = held_connection(tls, ep, auth)
    try:
        assert (seen["sasl"], seen["tls"], seen["client_id"]) == ("external", True, "worker-7"), seen
    finally:
        c.close()
