"""Events: pre-settled fan-out, drops at zero credit (counted), consumer groups; and
SQL-92 selectors on events and events-store."""

import pytest

from amqp_harness import Delivery, LinkProperties, Message, uid
from proton.reactor import Selector

ACCEPTED = Delivery.ACCEPTED
DROPPED = "kubemq_amqp10_events_dropped_no_credit_total"

# Subscriptions become live on the channel's home shard a moment after the ATTACH
# reply and the FLOW; publishing before that is allowed to miss (c/pubsub).
SETTLE = 0.3


def group(name):
    return LinkProperties({"x-opt-kubemq-group": name})


def publish(conn, ch, bodies, props=None):
    s = conn.sender(ch)
    for i, b in enumerate(bodies):
        m = Message(body=b)
        if props is not None:
            m.properties = props[i]
        s.send(m)
    assert s.wait_settled() == [ACCEPTED] * len(bodies)
    return s


def test_fan_out_to_every_subscriber(broker, amqp):
    ch = f"events/{uid('ev')}"
    c = amqp.connect(broker.url)
    r1 = c.receiver(ch, credit=50)
    r2 = amqp.connect(broker.url).receiver(ch, credit=50)
    assert r1.link.remote_snd_settle_mode == r1.link.SND_SETTLED
    amqp.pump(SETTLE)
    publish(amqp.connect(broker.url), ch, [f"e{i}" for i in range(10)])
    for r in (r1, r2):
        got = r.take(10)
        assert [m.body for m in got] == [f"e{i}" for i in range(10)]
        assert all(m.settled for m in got), "events are delivered pre-settled"
    amqp.pump(0.3)
    assert r1.received == [] and r2.received == []


def test_one_connection_publishing_to_two_channels_keeps_each_in_order(broker, amqp):
    """A connection's events travel in per-turn batches (one channel at a time, at
    most 64 each): interleaved runs to two channels, longer than a batch, still
    arrive complete and in publish order on each channel."""
    a, b = f"events/{uid('ev')}", f"events/{uid('ev')}"
    ra = amqp.connect(broker.url).receiver(a, credit=2000)
    rb = amqp.connect(broker.url).receiver(b, credit=2000)
    amqp.pump(SETTLE)
    c = amqp.connect(broker.url)
    sa, sb = c.sender(a), c.sender(b)
    want = {a: [], b: []}
    n = 0
    for run, (sender, ch) in zip([150, 1, 70, 3, 64, 65, 200, 1], [(sa, a), (sb, b)] * 4):
        for _ in range(run):
            body = f"m{n}"
            n += 1
            want[ch].append(body)
            sender.send(Message(body=body))
    assert sa.wait_settled() == [ACCEPTED] * len(want[a])
    assert sb.wait_settled() == [ACCEPTED] * len(want[b])
    assert [m.body for m in ra.take(len(want[a]))] == want[a]
    assert [m.body for m in rb.take(len(want[b]))] == want[b]
    amqp.pump(0.3)
    assert ra.received == [] and rb.received == []


def test_events_are_not_stored(broker, amqp):
    ch = f"events/{uid('ev')}"
    c = amqp.connect(broker.url)
    publish(c, ch, ["before"])
    r = c.receiver(ch, credit=10)
    amqp.pump(0.5)
    assert r.received == []


def test_zero_credit_subscriber_misses_and_is_counted(broker, amqp):
    ch = f"events/{uid('ev')}"
    c = amqp.connect(broker.url)
    live = c.receiver(ch, credit=10)
    starved = amqp.connect(broker.url).receiver(ch)  # never grants credit
    amqp.pump(SETTLE)
    before = broker.metric(DROPPED)
    assert before is not None, f"{DROPPED} missing from /metrics"
    publish(c, ch, ["x", "y", "z"])
    assert [m.body for m in live.take(3)] == ["x", "y", "z"]
    broker.wait_metric(DROPPED, lambda v: v >= before + 3)
    amqp.pump(0.3)
    assert broker.metric(DROPPED) == before + 3
    assert starved.received == []
    # Credit granted later does not bring the missed events back.
    starved.flow(10)
    amqp.pump(0.5)
    assert starved.received == []


def test_partial_credit_gets_the_first_then_drops(broker, amqp):
    ch = f"events/{uid('ev')}"
    c = amqp.connect(broker.url)
    r = c.receiver(ch, credit=2)
    amqp.pump(SETTLE)
    before = broker.metric(DROPPED)
    publish(c, ch, ["a", "b", "c", "d"])
    assert [m.body for m in r.take(2)] == ["a", "b"]
    broker.wait_metric(DROPPED, lambda v: v >= before + 2)
    amqp.pump(0.3)
    assert r.received == []


def test_consumer_groups_load_balance_and_each_group_gets_all(broker, amqp):
    ch = f"events/{uid('ev')}"
    c = amqp.connect(broker.url)
    g1a = c.receiver(ch, options=group("g1"), credit=100)
    g1b = amqp.connect(broker.url).receiver(ch, options=group("g1"), credit=100)
    g2 = c.receiver(ch, options=group("g2"), credit=100)
    plain = c.receiver(ch, credit=100)
    amqp.pump(SETTLE)
    n = 20
    publish(c, ch, [f"e{i}" for i in range(n)])
    expected = [f"e{i}" for i in range(n)]
    amqp.wait(lambda: len(g1a.received) + len(g1b.received) >= n and len(g2.received) >= n
              and len(plain.received) >= n, 5, "events in every group")
    amqp.pump(0.3)
    g1 = [m.body for m in g1a.received + g1b.received]
    assert sorted(g1) == sorted(expected), "group g1 must get every event exactly once"
    assert g1a.received and g1b.received, "group members must share the load"
    assert [m.body for m in g2.received] == expected
    assert [m.body for m in plain.received] == expected


# ------------------------------------------------------------------ selectors


SELECTOR_CASES = [
    (
        "color = 'red' AND size > 3",
        [
            ("m1", {"color": "red", "size": 5}, True),
            ("m2", {"color": "red", "size": 2}, False),
            ("m3", {"color": "blue", "size": 9}, False),
            ("m4", {"size": 7}, False),            # color missing: unknown
            ("m5", {"color": "red"}, False),       # size missing: unknown AND true = unknown
            ("m6", {"color": "red", "size": 4}, True),
        ],
    ),
    (
        "NOT (color = 'red')",
        [
            ("n1", {"color": "blue"}, True),
            ("n2", {"color": "red"}, False),
            ("n3", {"size": 1}, False),            # NOT unknown = unknown
        ],
    ),
    (
        "color <> 'red'",
        [
            ("o1", {"color": "green"}, True),
            ("o2", {}, False),
            ("o3", {"color": "red"}, False),
        ],
    ),
    (
        "size > 3 OR color = 'red'",
        [
            ("p1", {"color": "red"}, True),        # unknown OR true = true
            ("p2", {"color": "blue"}, False),      # unknown OR false = unknown
            ("p3", {"size": 10}, True),
        ],
    ),
    (
        "color IS NULL",
        [
            ("q1", {"size": 1}, True),
            ("q2", {"color": "red"}, False),
        ],
    ),
    (
        "color IN ('red', 'green') AND name LIKE 'ab%'",
        [
            ("r1", {"color": "green", "name": "abc"}, True),
            ("r2", {"color": "blue", "name": "abc"}, False),
            ("r3", {"color": "red", "name": "xab"}, False),
        ],
    ),
]


@pytest.mark.parametrize("selector,cases", SELECTOR_CASES, ids=[c[0] for c in SELECTOR_CASES])
def test_events_selector(broker, amqp, selector, cases):
    ch = f"events/{uid('sel')}"
    c = amqp.connect(broker.url)
    r = c.receiver(ch, options=Selector(selector), credit=100)
    amqp.pump(SETTLE)
    before = broker.metric(DROPPED)
    publish(c, ch, [b for b, _, _ in cases], [p for _, p, _ in cases])
    want = [b for b, _, match in cases if match]
    r.wait_count(len(want))
    amqp.pump(0.3)
    assert [m.body for m in r.received] == want
    # A selector non-match is not a drop.
    assert broker.metric(DROPPED) == before


def test_events_store_selector(broker, amqp):
    ch = f"events-store/{uid('sel')}"
    c = amqp.connect(broker.url)
    bodies = ["a", "b", "c", "d"]
    props = [{"color": "red", "size": 5}, {"color": "blue", "size": 5}, {"size": 5}, {"color": "red", "size": 9}]
    publish(c, ch, bodies, props)
    r = c.receiver(ch, options=[Selector("color = 'red' AND size > 3"),
                                LinkProperties({"x-opt-kubemq-start": "first"})], credit=100)
    got = r.take(2)
    amqp.pump(0.3)
    assert [m.body for m in got] == ["a", "d"]
    assert r.received == []


@pytest.mark.parametrize("pattern", ["events", "events-store"])
@pytest.mark.parametrize("selector", ["color = = 'red'", "size >", "color IN (", "'unterminated",
                                      "color = 'x' AND"])
def test_invalid_selector_refused(broker, amqp, pattern, selector):
    c = amqp.connect(broker.url)
    r = c.receiver(f"{pattern}/{uid('sel')}", options=Selector(selector), wait=False)
    cond = r.wait_detached()
    assert cond is not None and cond.name == "amqp:invalid-field", cond


@pytest.mark.parametrize("selector", ["color = '" + "x" * 5000 + "'",
                                      " OR ".join(f"a = {i}" for i in range(50))],
                         ids=["over-4KiB", "over-64-nodes"])
def test_oversized_selector_refused(broker, amqp, selector):
    c = amqp.connect(broker.url)
    r = c.receiver(f"events/{uid('sel')}", options=Selector(selector), wait=False)
    cond = r.wait_detached()
    assert cond is not None and cond.name == "amqp:invalid-field", cond


def test_selector_on_queue_not_implemented(broker, amqp):
    c = amqp.connect(broker.url)
    r = c.receiver(f"queues/{uid('q')}", options=Selector("color = 'red'"), wait=False)
    cond = r.wait_detached()
    assert cond is not None and cond.name == "amqp:not-implemented", cond


@pytest.mark.parametrize("selector", ["", "   "], ids=["empty", "blank"])
def test_an_empty_selector_is_no_selector(broker, amqp, selector):
    # As in JMS: before 2026-12-06 the attach was refused with "selector is empty".
    ch = f"events/{uid('sel')}"
    c = amqp.connect(broker.url)
    r = c.receiver(ch, options=Selector(selector), credit=100)
    amqp.pump(SETTLE)
    publish(c, ch, ["a", "b"], [{"color": "red"}, {}])
    got = r.take(2)
    assert [m.body for m in got] == ["a", "b"]


def test_a_selector_that_is_not_a_string_is_refused(broker, amqp):
    # Before 2026-12-06 a binary selector was skipped: the link was attached without
    # the filter its peer asked for, which the broker echoed back as if set.
    from proton import Described, symbol
    from proton.reactor import Filter

    value = Described(symbol("apache.org:selector-filter:string"), b"color = 'red'")
    c = amqp.connect(broker.url)
    r = c.receiver(f"events/{uid('sel')}", options=Filter({symbol("jms-selector"): value}), wait=False)
    cond = r.wait_detached()
    assert cond is not None and cond.name == "amqp:invalid-field", cond
