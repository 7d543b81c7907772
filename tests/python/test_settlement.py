"""Queue settlement: accepted/rejected remove, released/modified requeue with the
receive count raised (header delivery-count, first-acquirer), detach/close return
unsettled deliveries exactly once; pre-settled produce and consume."""

import pytest

from amqp_harness import Delivery, Link, SettleModes, text_message, uid

ACCEPTED = Delivery.ACCEPTED


def publish(conn, ch, bodies):
    s = conn.sender(ch)
    for b in bodies:
        s.send(text_message(b))
    assert s.wait_settled() == [ACCEPTED] * len(bodies)
    return s


def assert_nothing_left(amqp, conn, ch):
    r = conn.receiver(ch, credit=10)
    amqp.pump(0.5)
    assert [m.body for m in r.received] == [], "the queue still holds the message"
    r.close()


def test_first_delivery_header(broker, amqp):
    ch = f"queues/{uid('q')}"
    c = amqp.connect(broker.url)
    publish(c, ch, ["a"])
    r = c.receiver(ch, credit=1)
    m = r.take(1)[0]
    assert m.message.delivery_count == 0
    assert m.message.first_acquirer is True
    assert m.settled is False, "queue deliveries are unsettled by default"
    m.accept()


def test_accepted_removes(broker, amqp):
    ch = f"queues/{uid('q')}"
    c = amqp.connect(broker.url)
    publish(c, ch, ["a"])
    r = c.receiver(ch, credit=1)
    r.take(1)[0].accept()
    amqp.pump(0.1)
    r.close()
    assert_nothing_left(amqp, c, ch)


def test_rejected_removes(broker, amqp):
    ch = f"queues/{uid('q')}"
    c = amqp.connect(broker.url)
    publish(c, ch, ["a"])
    r = c.receiver(ch, credit=1)
    r.take(1)[0].reject()
    r.flow(1)
    amqp.pump(0.5)
    assert r.received == []
    r.close()
    assert_nothing_left(amqp, c, ch)


@pytest.mark.parametrize("outcome", ["release", "modify", "modify_undeliverable"])
def test_requeue_raises_receive_count(broker, amqp, outcome):
    ch = f"queues/{uid('q')}"
    c = amqp.connect(broker.url)
    publish(c, ch, ["a"])
    r = c.receiver(ch, credit=1)
    for attempt in range(3):
        m = r.take(1)[0]
        assert m.body == "a"
        assert m.message.delivery_count == attempt, "delivery-count must be receive count - 1"
        assert m.message.first_acquirer is (attempt == 0)
        if outcome == "release":
            m.release()
        elif outcome == "modify":
            m.modify(failed=True)
        else:
            # undeliverable-here is treated as delivery-failed: requeued for everyone
            m.modify(failed=True, undeliverable=True)
        r.flow(1)
    m = r.take(1)[0]
    assert m.message.delivery_count == 3
    m.accept()


def test_released_goes_to_the_tail(broker, amqp):
    ch = f"queues/{uid('q')}"
    c = amqp.connect(broker.url)
    publish(c, ch, ["a", "b", "c"])
    r = c.receiver(ch, credit=1)
    m = r.take(1)[0]
    assert m.body == "a"
    m.release()
    r.flow(3)
    got = r.take(3)
    assert [x.body for x in got] == ["b", "c", "a"]
    assert [x.message.first_acquirer for x in got] == [True, True, False]
    for x in got:
        x.accept()


@pytest.mark.parametrize("how", ["close", "detach", "connection_close"])
def test_unsettled_returned_exactly_once(broker, amqp, how):
    ch = f"queues/{uid('q')}"
    c1 = amqp.connect(broker.url)
    c2 = amqp.connect(broker.url)
    publish(c2, ch, ["a", "b", "c"])
    r1 = c1.receiver(ch, credit=3)
    got = r1.take(3)
    assert [m.body for m in got] == ["a", "b", "c"]
    if how == "close":
        r1.close()
    elif how == "detach":
        r1.detach()
    else:
        c1.close()
    r2 = c2.receiver(ch, credit=10)
    again = r2.take(3)
    amqp.pump(0.5)
    assert len(r2.received) == 0, "an unsettled delivery came back more than once"
    assert sorted(m.body for m in again) == ["a", "b", "c"]
    for m in again:
        assert m.message.delivery_count == 1
        assert m.message.first_acquirer is False
        m.accept()


def test_unsettled_returned_exactly_once_on_disconnect(broker, amqp):
    # A raw client takes 3 deliveries and drops the TCP connection without CLOSE.
    import raw_amqp as raw
    ch = f"queues/{uid('q')}"
    c = amqp.connect(broker.url)
    publish(c, ch, ["a", "b", "c"])
    rc = raw.handshake(broker.port, container_id=uid("raw"))
    try:
        rc.send(raw.begin_frame(0) + raw.attach_frame("raw-rcv", 0, ch, client_is_sender=False)
                + raw.flow_frame(0, 3))
        transfers = 0
        for _ in range(40):
            f = rc.read_frame(timeout=5)
            assert f is not None, "no transfer"
            assert f.name not in ("detach", "end", "close"), f
            transfers += f.name == "transfer"
            if transfers == 3:
                break
        assert transfers == 3
    finally:
        rc.close()
    r2 = c.receiver(ch, credit=10)
    again = r2.take(3)
    amqp.pump(0.5)
    assert r2.received == [], "an unsettled delivery came back more than once"
    assert sorted(m.body for m in again) == ["a", "b", "c"]
    assert all(m.message.delivery_count == 1 and m.message.first_acquirer is False for m in again)


def test_settled_ones_not_returned_on_detach(broker, amqp):
    ch = f"queues/{uid('q')}"
    c = amqp.connect(broker.url)
    publish(c, ch, ["a", "b"])
    r1 = c.receiver(ch, credit=2)
    got = r1.take(2)
    got[0].accept()
    amqp.pump(0.1)
    r1.close()
    r2 = c.receiver(ch, credit=10)
    back = r2.take(1)
    amqp.pump(0.4)
    assert [m.body for m in back] == ["b"]
    assert r2.received == []


# ------------------------------------------------------------------ pre-settled


def test_presettled_produce(broker, amqp):
    ch = f"queues/{uid('q')}"
    c = amqp.connect(broker.url)
    s = c.sender(ch, options=SettleModes(snd=Link.SND_SETTLED))
    assert s.link.remote_snd_settle_mode == Link.SND_SETTLED
    s.wait_credit(1)
    for i in range(3):
        s.send(text_message(f"p{i}"))  # settled at send time by proton
    r = c.receiver(ch, credit=10)
    got = r.take(3)
    assert [m.body for m in got] == ["p0", "p1", "p2"]
    for m in got:
        m.accept()


def test_presettled_consume(broker, amqp):
    ch = f"queues/{uid('q')}"
    c = amqp.connect(broker.url)
    publish(c, ch, ["a", "b", "c"])
    r = c.receiver(ch, options=SettleModes(snd=Link.SND_SETTLED), credit=10)
    assert r.link.remote_snd_settle_mode == Link.SND_SETTLED
    got = r.take(3)
    assert [m.body for m in got] == ["a", "b", "c"]
    assert all(m.settled for m in got), "AtMostOnce consumer must get pre-settled transfers"
    r.close()
    assert_nothing_left(amqp, c, ch)


def test_presettled_consume_not_bounded_by_max_unsettled(broker_factory, amqp):
    b = broker_factory(CONNECTORS_AMQP10_MAX_UNSETTLED_PER_LINK="5")
    ch = f"queues/{uid('q')}"
    c = amqp.connect(b.url)
    publish(c, ch, [f"m{i}" for i in range(12)])
    r = c.receiver(ch, options=SettleModes(snd=Link.SND_SETTLED), credit=20)
    got = r.take(12)
    assert [m.body for m in got] == [f"m{i}" for i in range(12)]
