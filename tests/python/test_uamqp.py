"""uAMQP against sluice: Microsoft's AMQP 1.0 library in C (azure-uamqp-c, through its
Python binding uamqp 1.6.11 from PyPI), a stack of its own that shares no code with
proton, rhea, fe2o3-amqp or go-amqp.

uAMQP speaks only TLS (its plain-socket transport is not reachable from the binding), and
it puts the URL it is given, without its port (`amqps://localhost/queues/x`), in its
termini, which sluice reads as the address `queues/x` (README, Addresses and patterns). Its links ask for
rcv-settle-mode second unless told ReceiveAndDelete (what the library calls first), and
sluice refuses second by contract (`amqp:not-implemented`): the first two tests pin that
down, the others pass ReceiveAndDelete. Its consumers therefore ask for pre-settled
deliveries (ReceiveAndDelete with snd-settle-mode settled, as Azure's SDKs do): with
sluice, uAMQP consumes at most once, it cannot release or reject.
"""

import pytest
import uamqp
from uamqp import authentication
from uamqp.constants import MessageState, ReceiverSettleMode, SenderSettleMode
from uamqp.message import Message, MessageProperties
from uamqp.types import AMQPSymbol

from amqp_harness import uid
from test_security import pki, start_tls_broker  # noqa: F401  (pki is a fixture)

FIRST = ReceiverSettleMode.ReceiveAndDelete
SECOND = ReceiverSettleMode.PeekLock
OK = MessageState.SendComplete  # the outcome was accepted (rejected is SendFailed)


@pytest.fixture
def tls(broker_factory, pki):  # noqa: F811
    b = start_tls_broker(broker_factory, pki)
    b.ca = f"{pki}/ca.pem"
    return b


def url(b, address):
    return f"amqps://localhost:{b.tls_port}/{address}"


def anonymous(b):
    return authentication.SASLAnonymous("localhost", port=b.tls_port, verify=b.ca)


def send(b, address, messages, auth=None, **kw):
    with uamqp.SendClient(url(b, address), auth=auth or anonymous(b), receive_settle_mode=FIRST, **kw) as c:
        for m in messages:
            c.queue_message(m)
        return c.send_all_messages(close_on_done=False)


def receive(b, address, n, mode=FIRST, **kw):
    """Up to `n` messages, waiting at most 5 s for the first and between batches, asking
    for pre-settled deliveries as Azure's SDKs do with ReceiveAndDelete (uAMQP settles
    nothing itself in that mode: unsettled deliveries come back once the link goes)."""
    got = []
    kw.setdefault("send_settle_mode", SenderSettleMode.Settled)
    with uamqp.ReceiveClient(url(b, address), auth=anonymous(b), receive_settle_mode=mode, prefetch=n,
                             timeout=5000, **kw) as r:
        while len(got) < n:
            batch = r.receive_message_batch(max_batch_size=n - len(got), timeout=5000)
            if not batch:
                break
            got.extend(batch)
    return got


def body(m):
    return b"".join(m.get_data())


def props(m):
    return {(k.decode() if isinstance(k, bytes) else k): v for k, v in (m.application_properties or {}).items()}


def refused_on_send(b, address, condition, description, mode=FIRST):
    """A sender on `address` is detached with `condition` and `description`."""
    c = uamqp.SendClient(url(b, address), auth=anonymous(b), receive_settle_mode=mode)
    c.queue_message(Message(b"x"))
    try:
        with pytest.raises(uamqp.errors.LinkDetach) as e:
            c.send_all_messages()
    finally:
        c.close()
    assert e.value.condition.value == condition, e.value
    assert description in e.value.description, e.value


def test_a_sender_asking_for_rcv_settle_mode_second_is_refused_not_implemented(tls):
    refused_on_send(tls, f"queues/{uid('u')}", b"amqp:not-implemented", b"rcv-settle-mode second", mode=SECOND)


def test_queue_round_trip_with_sections(tls):
    ch = f"queues/{uid('u')}"
    msgs = [Message(f"body {i}".encode(), application_properties={"i": i, "s": "text", "b": True, "f": 1.5},
                    properties=MessageProperties(message_id=f"m{i}", subject="subj", correlation_id=f"c{i}"))
            for i in range(20)]
    assert send(tls, ch, msgs) == [OK] * 20
    got = receive(tls, ch, 20)
    assert [body(m) for m in got] == [f"body {i}".encode() for i in range(20)], [body(m) for m in got]
    for i, m in enumerate(got):
        p = props(m)
        assert (p["i"], p["s"], p["b"], p["f"]) == (i, b"text", True, 1.5), p
        assert m.properties.message_id == f"m{i}".encode() and m.properties.subject == b"subj"
        assert m.properties.correlation_id == f"c{i}".encode()
    # Accepted: nothing is left.
    left = receive(tls, ch, 1)
    assert left == [], [(body(m), m.header.delivery_count) for m in left]


def test_a_peek_lock_receiver_is_refused_not_implemented(tls):
    ch = f"queues/{uid('u')}"
    assert send(tls, ch, [Message(b"kept")]) == [OK]
    with pytest.raises(uamqp.errors.LinkDetach) as e:
        receive(tls, ch, 1, mode=SECOND)
    assert e.value.condition.value == b"amqp:not-implemented", e.value
    # The refused link took nothing: the message is still there.
    assert [body(m) for m in receive(tls, ch, 1)] == [b"kept"]


def test_a_presettled_consumer_gets_settled_deliveries(tls):
    ch = f"queues/{uid('u')}"
    assert send(tls, ch, [Message(f"{i}".encode()) for i in range(5)]) == [OK] * 5
    got = receive(tls, ch, 5)
    assert [body(m) for m in got] == [f"{i}".encode() for i in range(5)]
    assert all(m.settled for m in got)
    assert receive(tls, ch, 1) == []


@pytest.mark.parametrize("key", [AMQPSymbol("x-opt-kubemq-start"), "x-opt-kubemq-start"], ids=["symbol", "str"])
def test_events_store_replays_from_the_first(tls, key):
    ch = uid("u")
    store = f"events-store/{ch}"
    assert send(tls, store, [Message(f"{i}".encode()) for i in range(3)],
                send_settle_mode=SenderSettleMode.Unsettled) == [OK] * 3
    # Link properties are `fields`, a map keyed by symbols; uAMQP writes a str key as a
    # string, which sluice reads as the symbol it spells (before 2026-12-05 the ATTACH
    # could not be decoded and the connection was closed amqp:decode-error).
    replay = receive(tls, store, 3, link_properties={key: "first"})
    assert [body(m) for m in replay] == [b"0", b"1", b"2"]


def test_sasl_plain_over_tls(tls):
    ch = f"queues/{uid('u')}"
    auth = authentication.SASLPlain("localhost", "uamqp-user", "secret", port=tls.tls_port, verify=tls.ca)
    assert send(tls, ch, [Message(b"p")], auth=auth) == [OK]
    assert [body(m) for m in receive(tls, ch, 1)] == [b"p"]


def test_an_unknown_address_is_refused_not_found(tls):
    refused_on_send(tls, "nowhere/x", b"amqp:not-found", b"unknown address prefix")


def test_events_reach_a_subscriber_presettled(tls):
    ch = f"events/{uid('u')}"
    r = uamqp.ReceiveClient(url(tls, ch), auth=anonymous(tls), receive_settle_mode=FIRST,
                            send_settle_mode=SenderSettleMode.Settled, prefetch=10, timeout=5000)
    try:
        # uAMQP grants its credit in its first receive call, after its handshake, and an
        # event that meets no credit is dropped (the contract): probe events until one
        # arrives, then the real ones (a late probe is stepped over).
        for _ in range(20):
            send(tls, ch, [Message(b"probe")], send_settle_mode=SenderSettleMode.Settled)
            if [body(m) for m in r.receive_message_batch(max_batch_size=1, timeout=500)] == [b"probe"]:
                break
        else:
            pytest.fail("no probe event reached the subscriber")
        assert send(tls, ch, [Message(f"e{i}".encode()) for i in range(5)],
                    send_settle_mode=SenderSettleMode.Settled) == [OK] * 5
        got = []
        while len(got) < 5:
            batch = r.receive_message_batch(max_batch_size=5 - len(got), timeout=5000)
            assert batch, [body(m) for m in got]
            got.extend(m for m in batch if body(m) != b"probe")
        assert [body(m) for m in got] == [f"e{i}".encode() for i in range(5)]
        assert all(m.settled for m in got)
    finally:
        r.close()
