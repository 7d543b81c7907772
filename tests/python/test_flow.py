"""Flow control: produce-link credit window and top-up, consumer credit, drain,
competing consumers and the MaxUnsettledPerLink bound (PRODUCT.md, "Flow control")."""

import pytest

from amqp_harness import Delivery, LinkProperties, text_message, uid

ACCEPTED = Delivery.ACCEPTED


# ------------------------------------------------------------------ produce links


@pytest.mark.parametrize("pattern", ["queues", "events", "events-store", "commands", "queries"])
def test_produce_link_granted_default_window(broker, amqp, pattern):
    c = amqp.connect(broker.url)
    s = c.sender(f"{pattern}/{uid('ch')}")
    s.wait_credit(1)
    amqp.pump(0.1)
    assert s.credit == 1024


def test_anonymous_produce_link_granted_default_window(broker, amqp):
    c = amqp.connect(broker.url)
    s = c.sender(None)
    s.wait_credit(1)
    amqp.pump(0.1)
    assert s.credit == 1024


@pytest.mark.parametrize("setting,expected", [("10", 10), ("1", 1), ("2000000", 1 << 20)])
def test_produce_link_window_follows_max_unsettled(broker_factory, amqp, setting, expected):
    b = broker_factory(CONNECTORS_AMQP10_MAX_UNSETTLED_PER_LINK=setting)
    c = amqp.connect(b.url)
    s = c.sender(f"queues/{uid('q')}")
    s.wait_credit(1)
    amqp.pump(0.1)
    assert s.credit == expected


def test_produce_credit_topped_up_when_below_half(broker_factory, amqp):
    b = broker_factory(CONNECTORS_AMQP10_MAX_UNSETTLED_PER_LINK="10")
    c = amqp.connect(b.url)
    s = c.sender(f"queues/{uid('q')}")
    s.wait_credit(10)
    for i in range(5):
        s.send(text_message(f"m{i}"))
    assert s.wait_settled() == [ACCEPTED] * 5
    amqp.pump(0.2)
    # 5 of 10 left: not below half, no top-up yet.
    assert s.credit == 5
    s.send(text_message("m5"))
    assert s.wait_settled() == [ACCEPTED] * 6
    # 4 of 10 left: below half, the full window comes back.
    amqp.wait(lambda: s.credit == 10, 3, "credit topped up to 10")
    amqp.pump(0.1)
    assert s.credit == 10


def test_a_window_of_one_is_topped_up_after_every_message(broker_factory, amqp):
    """MaxUnsettledPerLink=1: credit 1, then 0 after each message, which is below half
    of 1; before, the check compared with 1/2 = 0 and the producer never got credit
    again after its first message."""
    b = broker_factory(CONNECTORS_AMQP10_MAX_UNSETTLED_PER_LINK="1")
    c = amqp.connect(b.url)
    s = c.sender(f"queues/{uid('q')}")
    for i in range(3):
        s.wait_credit(1)
        s.send(text_message(f"m{i}"))
        assert s.wait_settled() == [ACCEPTED] * (i + 1)


def test_produce_credit_topped_up_default_window(broker, amqp):
    c = amqp.connect(broker.url)
    s = c.sender(f"queues/{uid('q')}")
    s.wait_credit(1024)
    for i in range(600):
        s.send(text_message(f"m{i}"))
    assert set(s.wait_settled()) == {ACCEPTED}
    amqp.wait(lambda: s.credit == 1024, 3, "credit back to 1024")


# ------------------------------------------------------------------ consume links


def test_nothing_delivered_before_consumer_credit(broker, amqp):
    ch = f"queues/{uid('q')}"
    c = amqp.connect(broker.url)
    r = c.receiver(ch)  # no credit
    s = c.sender(ch)
    for i in range(3):
        s.send(text_message(f"m{i}"))
    assert s.wait_settled() == [ACCEPTED] * 3
    amqp.pump(0.5)
    assert r.received == []
    r.flow(1)
    got = r.take(1)
    assert got[0].body == "m0"
    amqp.pump(0.3)
    assert r.received == [], "more delivered than the credit granted"
    r.flow(2)
    assert [m.body for m in r.take(2)] == ["m1", "m2"]


def test_events_store_nothing_delivered_before_credit(broker, amqp):
    ch = f"events-store/{uid('es')}"
    c = amqp.connect(broker.url)
    s = c.sender(ch)
    for i in range(3):
        s.send(text_message(f"e{i}"))
    assert s.wait_settled() == [ACCEPTED] * 3
    r = c.receiver(ch, options=LinkProperties({"x-opt-kubemq-start": "first"}))
    amqp.pump(0.5)
    assert r.received == []
    r.flow(2)
    assert [m.body for m in r.take(2)] == ["e0", "e1"]
    amqp.pump(0.3)
    assert r.received == []


@pytest.mark.parametrize("pattern", ["queues", "events", "events-store", "commands"])
def test_drain_on_empty_node_completes(broker, amqp, pattern):
    c = amqp.connect(broker.url)
    r = c.receiver(f"{pattern}/{uid('d')}")
    r.drain(10)
    assert r.credit == 10
    # Answered promptly (never waits for the 1 s long-poll, never hangs): FLOW with
    # link-credit 0 and the delivery-count advanced by the unused credit.
    amqp.wait(lambda: r.credit == 0, 3, "drain answered (credit 0)")
    assert not r.link.draining()
    assert r.received == []


def test_drain_delivers_available_then_zeroes_credit(broker, amqp):
    ch = f"queues/{uid('q')}"
    c = amqp.connect(broker.url)
    s = c.sender(ch)
    for i in range(3):
        s.send(text_message(f"m{i}"))
    assert s.wait_settled() == [ACCEPTED] * 3
    r = c.receiver(ch)
    r.drain(10)
    amqp.wait(lambda: r.credit == 0, 3, "drain answered")
    assert [m.body for m in r.received] == ["m0", "m1", "m2"]


def test_after_drain_new_credit_resumes(broker, amqp):
    ch = f"queues/{uid('q')}"
    c = amqp.connect(broker.url)
    r = c.receiver(ch)
    r.drain(5)
    amqp.wait(lambda: r.credit == 0, 3, "drain answered")
    s = c.sender(ch)
    s.send(text_message("late"))
    assert s.wait_settled() == [ACCEPTED]
    amqp.pump(0.4)
    assert r.received == [], "delivered with no credit after a drain"
    r.flow(1)
    assert r.take(1)[0].body == "late"


# ------------------------------------------------------------------ queues: competing consumers


def test_competing_consumers_each_message_once(broker, amqp):
    ch = f"queues/{uid('q')}"
    n = 40
    c1 = amqp.connect(broker.url)
    c2 = amqp.connect(broker.url)
    # Half the messages' credit each: whichever credit reaches the queue first, the
    # other consumer still gets its half (what waits stays queued for it).
    r1 = c1.receiver(ch, credit=n // 2)
    r2 = c2.receiver(ch, credit=n // 2)
    amqp.pump(0.2)
    s = amqp.connect(broker.url).sender(ch)
    for i in range(n):
        s.send(text_message(f"m{i}"))
    assert s.wait_settled() == [ACCEPTED] * n
    amqp.wait(lambda: len(r1.received) + len(r2.received) >= n, 5, "all messages consumed")
    amqp.pump(0.3)
    bodies = [m.body for m in r1.received + r2.received]
    assert len(bodies) == n, f"duplicates: {len(bodies)} deliveries for {n} messages"
    assert sorted(bodies) == sorted(f"m{i}" for i in range(n))
    assert r1.received and r2.received, "one competing consumer got nothing"
    for m in r1.received + r2.received:
        m.accept()


def test_max_unsettled_bounds_outstanding_deliveries(broker_factory, amqp):
    b = broker_factory(CONNECTORS_AMQP10_MAX_UNSETTLED_PER_LINK="5")
    ch = f"queues/{uid('q')}"
    c = amqp.connect(b.url)
    r = c.receiver(ch, credit=100)
    s = c.sender(ch)
    for i in range(20):
        s.send(text_message(f"m{i}"))
    assert s.wait_settled(timeout=10) == [ACCEPTED] * 20
    r.wait_count(5)
    amqp.pump(0.5)
    assert len(r.received) == 5, "more unsettled deliveries than MaxUnsettledPerLink"
    for m in r.received[:2]:
        m.accept()
    r.wait_count(7)
    amqp.pump(0.5)
    assert len(r.received) == 7
    for m in r.received[2:]:
        m.accept()
    r.wait_count(12)
    amqp.pump(0.3)
    assert [m.body for m in r.received] == [f"m{i}" for i in range(12)]
