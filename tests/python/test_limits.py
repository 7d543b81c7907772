"""Admission and size limits: MaxConnections, SessionMax, MaxLinksPerSession,
container-id and second OPEN, multi-frame messages under a small max-frame-size,
MaxMessageSize, AmqpSequence bodies."""

import hashlib
import os
import time

import pytest

import raw_amqp as raw
from amqp_harness import Delivery, Message, data_message, uid

ACCEPTED = Delivery.ACCEPTED
REJECTED = Delivery.REJECTED


# ------------------------------------------------------------------ admission


def test_max_connections(broker_factory, amqp):
    b = broker_factory(CONNECTORS_AMQP10_MAX_CONNECTIONS="2")
    c1 = amqp.connect(b.url)
    c2 = amqp.connect(b.url)
    c3 = amqp.connect(b.url, wait=False)
    cond = c3.wait_closed()
    assert cond is not None and cond.name == "amqp:resource-limit-exceeded", cond
    for c in (c1, c2):
        assert not c.is_remote_closed()
        c.sender(f"queues/{uid('q')}")  # still fully usable
    # A slot frees up when a connection goes away: once the broker has seen the client
    # close its socket (it lingers up to 500 ms for that), which takes longer on a busy
    # machine. A refused connection holds no place, so trying again is safe.
    c1.close()
    amqp.wait(lambda: c1.transport_closed, 10, "c1's transport closed")
    deadline = time.monotonic() + 10
    while True:
        c4 = amqp.connect(b.url)
        amqp.pump(0.3)
        if not c4.is_remote_closed() or time.monotonic() > deadline:
            break
        cond = c4.remote_condition
        assert cond is not None and cond.name == "amqp:resource-limit-exceeded", cond
    assert not c4.is_remote_closed(), c4.remote_condition
    c4.sender(f"queues/{uid('q')}")


def test_session_max_extra_session_ended(broker_factory):
    # SessionMax=2 advertises channel-max 1, and proton will not open a third
    # session, so a raw client opens it on channel 2.
    b = broker_factory(CONNECTORS_AMQP10_SESSION_MAX="2")
    c = raw.handshake(b.port)
    try:
        c.send(raw.begin_frame(0) + raw.begin_frame(1) + raw.begin_frame(2))
        frames = c.read_until("end")
        end = frames[-1]
        assert end.channel == 2, frames
        assert end.condition == "amqp:resource-limit-exceeded", frames
        assert not any(f.name == "close" for f in frames), frames
        # the connection and the two admitted sessions live on
        nxt = c.read_frame(timeout=0.5)
        assert nxt is None or nxt.name != "close", nxt
        assert not c.eof
    finally:
        c.close()


def test_max_links_per_session(broker_factory, amqp):
    b = broker_factory(CONNECTORS_AMQP10_MAX_LINKS_PER_SESSION="2")
    c = amqp.connect(b.url)
    s = c.session()
    # Attached before the BEGIN reply arrives (as pipelining clients do), so the
    # client does not yet know handle-max.
    links = [c.sender(f"queues/{uid('q')}", session=s, wait=False) for _ in range(3)]
    cond = links[2].wait_detached()
    assert cond is not None and cond.name == "amqp:resource-limit-exceeded", cond
    assert links[0].wait_open().is_open() and links[1].is_open()
    assert not c.is_remote_closed(), c.remote_condition


def test_max_links_per_session_counts_only_that_session(broker_factory, amqp):
    b = broker_factory(CONNECTORS_AMQP10_MAX_LINKS_PER_SESSION="2")
    c = amqp.connect(b.url)
    for _ in range(2):
        s = c.session()
        for _ in range(2):
            c.sender(f"queues/{uid('q')}", session=s)


def test_empty_container_id_refused(broker):
    c = raw.RawConn(broker.port)
    try:
        c.send(raw.AMQP_HEADER + raw.open_frame(""))
        assert c.read_header() == raw.AMQP_HEADER
        frames = c.frames_until_eof(timeout=5)
        closes = [f for f in frames if f.name == "close"]
        assert closes and closes[0].condition == "amqp:invalid-field", frames
    finally:
        c.close()


def test_second_open_refused(broker):
    c = raw.handshake(broker.port)
    try:
        c.send(raw.open_frame("again"))
        frames = c.frames_until_eof(timeout=5)
        closes = [f for f in frames if f.name == "close"]
        assert closes and closes[0].condition == "amqp:not-allowed", frames
    finally:
        c.close()


def test_connection_without_sasl_layer(broker):
    c = raw.handshake(broker.port, container_id=uid("raw"))
    try:
        c.send(raw.begin_frame(0))
        frames = c.read_until("begin")
        assert frames[-1].name == "begin"
    finally:
        c.close()


def test_proton_without_sasl(broker, amqp):
    c = amqp.connect(broker.url, sasl_enabled=False)
    s = c.sender(f"queues/{uid('q')}")
    assert s.send_and_wait(Message(body="x")).remote_state == ACCEPTED


# ------------------------------------------------------------------ sizes


def test_large_message_over_small_frames_bit_exact(broker_factory, amqp):
    b = broker_factory(CONNECTORS_AMQP10_MAX_FRAME_SIZE="4096")
    payload = os.urandom(10 * 1024 * 1024)
    digest = hashlib.sha256(payload).hexdigest()
    ch = f"queues/{uid('big')}"
    # The client also caps its frames at 4096, so every frame the broker sends
    # must respect it too (proton fails the connection otherwise).
    c = amqp.connect(b.url, max_frame_size=4096)
    assert c.conn.transport.remote_max_frame_size == 4096
    s = c.sender(ch)
    d = s.send_and_wait(data_message(payload), timeout=60)
    assert d.remote_state == ACCEPTED, d.remote.condition
    r = c.receiver(ch, credit=1)
    m = r.take(1, timeout=60)[0]
    body = bytes(m.body)
    assert len(body) == len(payload)
    assert hashlib.sha256(body).hexdigest() == digest
    m.accept()
    assert not c.is_remote_closed(), c.remote_condition


def sized_message(total):
    """A Data-section message whose encoding is exactly `total` bytes."""
    n = total - 8
    while True:
        m = data_message(b"\x5a" * n)
        size = len(m.encode())
        if size == total:
            return m
        n += total - size


def test_max_message_size_exact_limit_accepted_one_over_refused(broker_factory, amqp):
    limit = 65536
    b = broker_factory(CONNECTORS_AMQP10_MAX_MESSAGE_SIZE=str(limit), CONNECTORS_AMQP10_MAX_FRAME_SIZE="4096")
    ch = f"queues/{uid('q')}"
    c = amqp.connect(b.url)
    s = c.sender(ch)
    assert s.link.remote_max_message_size == limit
    at_limit = sized_message(limit)
    body_len = len(at_limit.body)
    ok = s.send_and_wait(at_limit)
    assert ok.remote_state == ACCEPTED, ok.remote.condition
    over = s.send(sized_message(limit + 1))
    amqp.wait(lambda: over.remote_state or s.is_remote_closed(), 5, "oversize refusal")
    amqp.pump(0.2)
    conds = []
    if over.remote_state == REJECTED and over.remote.condition is not None:
        conds.append(over.remote.condition.name)
    if s.is_remote_closed() and s.remote_condition is not None:
        conds.append(s.remote_condition.name)
    assert conds and set(conds) == {"amqp:link:message-size-exceeded"}, (over.remote_state, conds)
    # Counted as an inbound transfer dropped (the reference's "oversize").
    assert b.wait_metric("kubemq_amqp10_transfers_in_dropped_total", lambda v: v == 1, pump=amqp) == 1
    # The message at the limit is there, the oversize one is not.
    r = c.receiver(ch, credit=5)
    got = r.take(1)
    amqp.pump(0.3)
    assert len(bytes(got[0].body)) == body_len and r.received == []
    assert not c.is_remote_closed()


def test_amqp_sequence_body_not_implemented(broker, amqp):
    ch = f"queues/{uid('q')}"
    c = amqp.connect(broker.url)
    s = c.sender(ch)
    m = Message(body=[1, 2, 3])
    m.inferred = True  # a list body becomes an AmqpSequence section
    d = s.send(m)
    amqp.wait(lambda: s.is_remote_closed(), 5, "detach after an AmqpSequence body")
    assert d.remote_state == REJECTED, f"state {d.remote_state}"
    assert d.remote.condition is not None and d.remote.condition.name == "amqp:not-implemented"
    assert s.remote_condition is not None and s.remote_condition.name == "amqp:not-implemented"
    # nothing was stored; AmqpValue lists are fine
    s2 = c.sender(ch)
    v = Message(body=[1, 2, 3])
    assert s2.send_and_wait(v).remote_state == ACCEPTED
    r = c.receiver(ch, credit=5)
    got = r.take(1)
    amqp.pump(0.3)
    assert got[0].body == [1, 2, 3] and r.received == []


@pytest.mark.parametrize("body", ["text", b"bytes-in-data", {"k": "v"}, None, 42])
def test_body_kinds_round_trip(broker, amqp, body):
    ch = f"queues/{uid('q')}"
    c = amqp.connect(broker.url)
    s = c.sender(ch)
    m = data_message(body) if isinstance(body, bytes) else Message(body=body)
    assert s.send_and_wait(m).remote_state == ACCEPTED
    got = c.receiver(ch, credit=1).take(1)[0]
    assert got.body == body
    if isinstance(body, bytes):
        assert got.message.inferred, "a Data body must come back as a Data section"


# ------------------------------------------------------------------ queue and channel limits


def test_full_queue_rejects_with_resource_limit_exceeded_and_keeps_what_it_accepted(broker_factory, amqp):
    # proton as the third-party client: the rejection is a normal AMQP outcome, the
    # link stays attached, and a consumer finds exactly the accepted messages.
    b = broker_factory(SLUICE_QUEUE_MAX_MESSAGES="3")
    ch = f"queues/{uid('q')}"
    c = amqp.connect(b.url)
    s = c.sender(ch)
    sent = [s.send(data_message(f"m{i}".encode())) for i in range(5)]
    states = s.wait_settled(sent)
    assert states == [ACCEPTED] * 3 + [REJECTED] * 2, states
    for d in sent[3:]:
        cond = d.remote.condition
        assert cond is not None and cond.name == "amqp:resource-limit-exceeded", cond
        assert cond.description == "queue full", cond.description
    assert not s.is_remote_closed()
    r = c.receiver(ch, credit=10)
    got = r.take(3)
    for m in got:
        m.accept()
    amqp.pump(0.3)
    assert [bytes(m.body) for m in got] == [b"m0", b"m1", b"m2"] and r.received == []
    # Room again: the next publish goes in (the link still holds credit from its
    # first window; the back-off only stops top-ups).
    assert s.send_and_wait(data_message(b"m5")).remote_state == ACCEPTED
    assert [bytes(m.body) for m in r.take(1)] == [b"m5"]


def test_channel_limit_refuses_the_attach_with_resource_limit_exceeded(broker_factory, amqp):
    b = broker_factory(SLUICE_SHARDS="1", SLUICE_MAX_CHANNELS="2")
    c = amqp.connect(b.url)
    c.receiver(f"queues/{uid('q')}")
    c.receiver(f"events/{uid('e')}")
    third = c.receiver(f"queues/{uid('q')}", wait=False)
    cond = third.wait_detached()
    assert cond is not None and cond.name == "amqp:resource-limit-exceeded", cond
    assert not c.is_remote_closed(), c.remote_condition
