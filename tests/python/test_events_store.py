"""Events-store: sequence numbers from 1, start positions (x-opt-kubemq-start),
durable subscriptions (container-id + link name, source expiry-policy never),
"durable subscription in use", and the compatible-mode credit stall."""

import datetime
import time

import pytest

from amqp_harness import Delivery, ExpiryNever, LinkProperties, Message, uid
from proton import Endpoint

ACCEPTED = Delivery.ACCEPTED
STALLED = "kubemq_amqp10_events_store_dropped_stalled_total"


def start(pos):
    return LinkProperties({"x-opt-kubemq-start": pos})


def publish(sender, bodies):
    ds = [sender.send(Message(body=b)) for b in bodies]
    assert sender.wait_settled(ds) == [ACCEPTED] * len(bodies), "events-store publish must be accepted once stored"


def bodies(msgs):
    return [m.body for m in msgs]


def drain_all(amqp, r, n, settle=0.3):
    got = r.take(n)
    amqp.pump(settle)
    assert r.received == [], f"more than {n} events: {bodies(r.received)}"
    return bodies(got)


def test_all_events_delivered_presettled(broker, amqp):
    ch = f"events-store/{uid('es')}"
    c = amqp.connect(broker.url)
    publish(c.sender(ch), ["a", "b"])
    r = c.receiver(ch, options=start("first"), credit=10)
    got = r.take(2)
    assert all(m.settled for m in got)
    assert r.link.remote_snd_settle_mode == r.link.SND_SETTLED


@pytest.mark.parametrize("pos,expected", [
    ("first", ["e1", "e2", "e3", "e4", "e5"]),
    ("sequence:1", ["e1", "e2", "e3", "e4", "e5"]),
    ("sequence:3", ["e3", "e4", "e5"]),
    ("sequence:5", ["e5"]),
    ("last", ["e5"]),
    ("time-delta:3600", ["e1", "e2", "e3", "e4", "e5"]),
])
def test_start_positions_replay(broker, amqp, pos, expected):
    # Sequence numbers start at 1: e<n> is sequence n on a fresh channel.
    ch = f"events-store/{uid('es')}"
    c = amqp.connect(broker.url)
    s = c.sender(ch)
    publish(s, [f"e{i}" for i in range(1, 6)])
    r = c.receiver(ch, options=start(pos), credit=100)
    assert drain_all(amqp, r, len(expected)) == expected
    # and then live events follow
    publish(s, ["e6"])
    assert bodies(r.take(1)) == ["e6"]


@pytest.mark.parametrize("opts", [None, "new-only"], ids=["default", "new-only"])
def test_new_only_is_the_default(broker, amqp, opts):
    ch = f"events-store/{uid('es')}"
    c = amqp.connect(broker.url)
    s = c.sender(ch)
    publish(s, ["old1", "old2"])
    r = c.receiver(ch, options=start(opts) if opts else None, credit=100)
    amqp.pump(0.4)
    assert r.received == []
    publish(s, ["new1"])
    assert drain_all(amqp, r, 1) == ["new1"]


def test_sequence_beyond_the_end_waits_for_new(broker, amqp):
    ch = f"events-store/{uid('es')}"
    c = amqp.connect(broker.url)
    s = c.sender(ch)
    publish(s, ["e1", "e2"])
    r = c.receiver(ch, options=start("sequence:3"), credit=100)
    amqp.pump(0.3)
    assert r.received == []
    publish(s, ["e3"])
    assert drain_all(amqp, r, 1) == ["e3"]


def test_start_time_rfc3339(broker, amqp):
    ch = f"events-store/{uid('es')}"
    c = amqp.connect(broker.url)
    s = c.sender(ch)
    publish(s, ["e1", "e2"])
    amqp.pump(0.3)
    t = datetime.datetime.now(datetime.timezone.utc)
    amqp.pump(0.3)
    publish(s, ["e3", "e4"])
    stamp = t.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    r = c.receiver(ch, options=start(f"time:{stamp}"), credit=100)
    assert drain_all(amqp, r, 2) == ["e3", "e4"]


def test_start_time_unix_seconds(broker, amqp):
    ch = f"events-store/{uid('es')}"
    c = amqp.connect(broker.url)
    s = c.sender(ch)
    publish(s, ["e1", "e2"])
    boundary = int(time.time()) + 1
    amqp.pump(max(0.0, boundary - time.time()) + 0.05)
    publish(s, ["e3"])
    r = c.receiver(ch, options=start(f"time:{boundary}"), credit=100)
    assert drain_all(amqp, r, 1) == ["e3"]


def test_start_time_delta_excludes_older(broker, amqp):
    ch = f"events-store/{uid('es')}"
    c = amqp.connect(broker.url)
    s = c.sender(ch)
    publish(s, ["old"])
    amqp.pump(2.2)
    publish(s, ["recent"])
    r = c.receiver(ch, options=start("time-delta:1"), credit=100)
    assert drain_all(amqp, r, 1) == ["recent"]


@pytest.mark.parametrize("pos", ["bogus", "sequence:abc", "sequence:", "time:notatime", "time-delta:x",
                                 "time-delta:-5", "FIRST "])
def test_invalid_start_refused(broker, amqp, pos):
    c = amqp.connect(broker.url)
    r = c.receiver(f"events-store/{uid('es')}", options=start(pos), wait=False)
    cond = r.wait_detached()
    assert cond is not None and cond.name == "amqp:invalid-field", cond


# ------------------------------------------------------------------ shard placement (best effort)


def home_shard(pattern, channel, shards=2):
    """The channel's home shard as the broker computes it (FNV-1a of pattern/name)."""
    h = 0x811C9DC5
    for b in f"{pattern}/{channel}".encode():
        h ^= b
        h = (h * 0x01000193) & 0xFFFFFFFF
    return h % shards


def connect_on_shard(amqp, url, shard, container_id=None, tries=24):
    """A connection accepted by `shard`, learnt from the shard id the broker puts in a
    dynamic node's name (`_amqp10.tmp.<shard>-<conn>.<uuid>`). Best effort: falls back
    to any connection if the name does not say."""
    conn = None
    for _ in range(tries):
        conn = amqp.connect(url, container_id=container_id)
        probe = conn.receiver(None, dynamic=True)
        addr = probe.remote_address or ""
        probe.close()
        rest = addr[len("_amqp10.tmp."):] if addr.startswith("_amqp10.tmp.") else ""
        head = rest.split("-", 1)[0]
        if not head.isdigit() or int(head) == shard:
            return conn
        conn.close()
    return conn


# ------------------------------------------------------------------ durable subscriptions


def durable(pos=None):
    opts = [ExpiryNever()]
    if pos:
        opts.append(start(pos))
    return opts


@pytest.mark.parametrize("how", ["link_close", "link_detach", "connection_close"])
def test_durable_resumes_where_it_left_off(broker, amqp, how):
    ch = f"events-store/{uid('es')}"
    cid = uid("durable-client")
    name = uid("sub")
    pub = amqp.connect(broker.url).sender(ch)
    publish(pub, ["e1", "e2", "e3"])
    c = amqp.connect(broker.url, container_id=cid)
    r = c.receiver(ch, name=name, options=durable("first"), credit=100)
    assert drain_all(amqp, r, 3) == ["e1", "e2", "e3"]
    if how == "link_close":
        r.close()
    elif how == "link_detach":
        r.detach()
    else:
        c.close()
    publish(pub, ["e4", "e5"])
    c2 = c if how != "connection_close" else amqp.connect(broker.url, container_id=cid)
    # The stored cursor wins over the start position given again.
    r2 = c2.receiver(ch, name=name, options=durable("first"), credit=100)
    assert drain_all(amqp, r2, 2) == ["e4", "e5"]


def test_a_lossless_subscriber_receiving_unsettled_gets_back_what_it_did_not_accept(broker, amqp):
    """python-qpid-proton's AtLeastOnce (snd-settle-mode unsettled) on a lossless durable
    subscription: events come unsettled, and after a reconnect the ones it had not
    accepted come again (before, they were pre-settled and the cursor had passed them)."""
    from proton.reactor import AtLeastOnce

    ch = f"events-store/{uid('es')}"
    cid = uid("acked-client")
    name = uid("sub")
    pub = amqp.connect(broker.url).sender(ch)
    publish(pub, ["e1", "e2", "e3", "e4"])
    opts = [ExpiryNever(), AtLeastOnce(),
            LinkProperties({"x-opt-kubemq-start": "first", "x-opt-sluice-stall": "hold"})]
    c = amqp.connect(broker.url, container_id=cid)
    r = c.receiver(ch, name=name, options=opts, credit=100)
    got = r.take(4)
    assert bodies(got) == ["e1", "e2", "e3", "e4"]
    assert not any(g.settled for g in got), "sent pre-settled"
    got[0].accept()
    got[1].accept()
    amqp.pump(0.3)
    c.close()
    c2 = amqp.connect(broker.url, container_id=cid)
    r2 = c2.receiver(ch, name=name, options=opts, credit=100)
    assert drain_all(amqp, r2, 2) == ["e3", "e4"]


def test_durable_identity_is_container_and_link_name(broker, amqp):
    ch = f"events-store/{uid('es')}"
    name = uid("sub")
    pub = amqp.connect(broker.url).sender(ch)
    publish(pub, ["e1", "e2"])
    c = amqp.connect(broker.url, container_id=uid("A"))
    r = c.receiver(ch, name=name, options=durable("first"), credit=100)
    assert drain_all(amqp, r, 2) == ["e1", "e2"]
    c.close()
    # Same link name, another container: a different subscription.
    other = amqp.connect(broker.url, container_id=uid("B")).receiver(ch, name=name, options=durable("first"),
                                                                     credit=100)
    assert drain_all(amqp, other, 2) == ["e1", "e2"]


def test_durable_identities_of_container_ids_that_differ_only_in_punctuation_are_distinct(broker, amqp):
    """Container-ids are shown sanitized ('.' and ':' become '_'), but a durable
    subscription's identity hashes the raw one: "X.eu" and "X_eu" are two
    subscriptions (before, one: the second resumed from the first one's cursor)."""
    ch = f"events-store/{uid('es')}"
    name = uid("sub")
    base = uid("orders")
    pub = amqp.connect(broker.url).sender(ch)
    publish(pub, ["e1", "e2"])
    c = amqp.connect(broker.url, container_id=f"{base}.eu")
    r = c.receiver(ch, name=name, options=durable("first"), credit=100)
    assert drain_all(amqp, r, 2) == ["e1", "e2"]
    c.close()
    c2 = amqp.connect(broker.url, container_id=f"{base}_eu")
    other = c2.receiver(ch, name=name, options=durable("first"), credit=100)
    assert drain_all(amqp, other, 2) == ["e1", "e2"]


def test_durable_attach_waits_briefly_for_the_holder_to_let_go(broker, amqp):
    """A reconnecting client races its own old connection's teardown: an attach that
    finds the identity held waits up to a second for it instead of being refused."""
    ch = f"events-store/{uid('es')}"
    cid = uid("durable-client")
    name = uid("sub")
    pub = amqp.connect(broker.url).sender(ch)
    publish(pub, ["e1", "e2", "e3"])
    c1 = amqp.connect(broker.url, container_id=cid)
    r1 = c1.receiver(ch, name=name, options=durable("first"), credit=1)
    assert drain_all(amqp, r1, 1) == ["e1"]
    c2 = amqp.connect(broker.url, container_id=cid)
    r2 = c2.receiver(ch, name=name, options=durable("first"), credit=100, wait=False)
    amqp.pump(0.1)
    assert not r2.is_open() and not r2.is_remote_closed()
    c1.close()
    # e2 was in the first link's window but never sent: it is sent again.
    assert drain_all(amqp, r2, 2) == ["e2", "e3"]
    assert r2.is_open()


def test_second_live_attach_of_a_durable_is_refused(broker, amqp):
    ch = f"events-store/{uid('es')}"
    cid = uid("durable-client")
    name = uid("sub")
    c1 = amqp.connect(broker.url, container_id=cid)
    r1 = c1.receiver(ch, name=name, options=durable(), credit=10)
    c2 = amqp.connect(broker.url, container_id=cid)
    r2 = c2.receiver(ch, name=name, options=durable(), wait=False)
    cond = r2.wait_detached()
    assert cond is not None and cond.name == "amqp:not-allowed", cond
    assert "durable subscription in use" in (cond.description or "")
    assert r1.is_open()
    # Once the first lets go, the identity can be claimed again.
    r1.close()
    r3 = c2.receiver(ch, name=name, options=durable(), credit=10)
    assert r3.is_open()


def test_durable_resume_right_after_detach_loses_nothing(broker, amqp):
    # Events published after the client has seen the DETACH reply belong to the
    # next attach of the durable subscription; repeated to catch a race between
    # the DETACH reply and the subscription actually stopping.
    chan = uid("es")
    ch = f"events-store/{chan}"
    cid = uid("durable-client")
    name = uid("sub")
    home = home_shard("events-store", chan)
    # Publisher on the channel's home shard, subscriber on the other one: the
    # subscriber's detach travels between shards while the publish does not.
    pub = connect_on_shard(amqp, broker.url, home).sender(ch)
    c = connect_on_shard(amqp, broker.url, 1 - home, container_id=cid)
    r = c.receiver(ch, name=name, options=durable(), credit=100)
    amqp.pump(0.2)
    lost = []
    for cycle in range(10):
        r.close()
        batch = [f"c{cycle}-a", f"c{cycle}-b"]
        publish(pub, batch)
        r = c.receiver(ch, name=name, options=durable(), credit=100)
        try:
            got = bodies(r.take(2, timeout=5))
        except AssertionError:
            got = bodies(r.received)
        if got != batch:
            lost.append((cycle, got))
    assert lost == [], f"durable re-attach missed events published after the DETACH: {lost}"


def test_durable_claim_released_by_detach(broker, amqp):
    # Once the DETACH reply is in, the identity is free for another connection.
    chan = uid("es")
    ch = f"events-store/{chan}"
    cid = uid("durable-client")
    name = uid("sub")
    home = home_shard("events-store", chan)
    # One connection on the home shard, one off it.
    conns = [connect_on_shard(amqp, broker.url, 1 - home, container_id=cid),
             connect_on_shard(amqp, broker.url, home, container_id=cid)]
    refused = []
    for cycle in range(20):
        r = conns[cycle % 2].receiver(ch, name=name, options=durable(), credit=10, wait=False)
        amqp.wait(lambda: r.link.state & Endpoint.REMOTE_ACTIVE or r.is_remote_closed(), 5, "attach reply")
        amqp.pump(0.02)
        if r.is_remote_closed():
            refused.append((cycle, r.remote_condition and r.remote_condition.description))
            continue
        r.close()
    assert refused == [], f"re-attach after a completed DETACH refused: {refused}"


def test_non_durable_does_not_resume(broker, amqp):
    ch = f"events-store/{uid('es')}"
    cid = uid("client")
    name = uid("sub")
    pub = amqp.connect(broker.url).sender(ch)
    c = amqp.connect(broker.url, container_id=cid)
    r = c.receiver(ch, name=name, credit=100)
    amqp.pump(0.2)
    publish(pub, ["e1"])
    assert drain_all(amqp, r, 1) == ["e1"]
    r.close()
    publish(pub, ["e2"])
    r2 = c.receiver(ch, name=name, credit=100)  # default start new-only, no cursor
    amqp.pump(0.4)
    assert r2.received == []


# ------------------------------------------------------------------ credit stall (compatible mode)


def test_credit_stall_detaches_and_durable_resumes_after_lost_window(broker_factory, amqp):
    b = broker_factory(CONNECTORS_AMQP10_MAX_UNSETTLED_PER_LINK="5")
    ch = f"events-store/{uid('es')}"
    cid = uid("durable-client")
    name = uid("sub")
    before = b.metric(STALLED)
    assert before is not None, f"{STALLED} missing from /metrics"
    c = amqp.connect(b.url, container_id=cid)
    r = c.receiver(ch, name=name, options=durable())  # new-only, never grants credit
    amqp.pump(0.2)
    pub = amqp.connect(b.url).sender(ch)
    publish(pub, [f"e{i}" for i in range(1, 8)])
    cond = r.wait_detached(timeout=5)
    assert cond is not None and cond.name == "amqp:resource-limit-exceeded", cond
    assert "credit stalled" in (cond.description or "")
    assert r.received == []
    # The window (5 buffered) plus the event that found it full are lost and counted.
    b.wait_metric(STALLED, lambda v: v >= before + 6)
    # A durable re-attach resumes after the lost window: e7 only.
    r2 = c.receiver(ch, name=name, options=durable(), credit=100)
    assert drain_all(amqp, r2, 1, settle=0.5) == ["e7"]
    publish(pub, ["e8"])
    assert bodies(r2.take(1)) == ["e8"]


def test_slow_consumer_with_credit_is_not_detached(broker_factory, amqp):
    b = broker_factory(CONNECTORS_AMQP10_MAX_UNSETTLED_PER_LINK="5")
    ch = f"events-store/{uid('es')}"
    c = amqp.connect(b.url)
    r = c.receiver(ch, credit=1)
    amqp.pump(0.2)
    pub = amqp.connect(b.url).sender(ch)
    publish(pub, [f"e{i}" for i in range(1, 6)])  # fits the window of 5
    got = r.take(1)
    assert bodies(got) == ["e1"]
    amqp.pump(0.3)
    assert not r.is_remote_closed(), r.remote_condition
    r.flow(10)
    assert bodies(r.take(4)) == ["e2", "e3", "e4", "e5"]


@pytest.mark.parametrize("stall", ["detach", "hold"])
def test_events_a_group_member_never_sent_go_to_the_members_that_stay(broker, amqp, stall):
    """A member of a consumer group leaves with events in its window it never sent
    (it had credit for one): the member that stays gets them, so the group gets every
    event once (before, they were lost to the group)."""
    ch = f"events-store/{uid('es')}"
    g = LinkProperties({"x-opt-kubemq-group": "workers", "x-opt-sluice-stall": stall})
    a = amqp.connect(broker.url).receiver(ch, options=g, credit=1)
    b = amqp.connect(broker.url).receiver(ch, options=g, credit=100)
    amqp.pump(0.2)
    n = 10
    publish(amqp.connect(broker.url).sender(ch), [f"e{i}" for i in range(n)])
    amqp.wait(lambda: a.received and len(b.received) >= n // 2, 5, "each member's first deliveries")
    amqp.pump(0.3)
    assert len(a.received) == 1, "a had credit for one"
    assert len(b.received) == n // 2, "round-robin: the rest of a's share waits in its window"
    a.detach()
    amqp.wait(lambda: len(a.received) + len(b.received) >= n, 5, "the events a never sent")
    amqp.pump(0.3)
    assert sorted(bodies(a.received) + bodies(b.received)) == sorted(f"e{i}" for i in range(n))


def test_a_lossless_durable_group_comes_back_before_what_a_member_never_sent(broker, amqp):
    """Members of a lossless durable group send at their own pace: one that sent its
    whole share does not move the group's cursor past events another still held unsent
    (it had credit for two), so when the group comes back it gets them (before, the
    cursor took the furthest member's report and they were lost to the group)."""
    ch = f"events-store/{uid('es')}"
    props = {"x-opt-kubemq-group": "workers", "x-opt-kubemq-start": "first", "x-opt-sluice-stall": "hold"}
    opts = [ExpiryNever(), LinkProperties(props)]
    ca, cb = amqp.connect(broker.url), amqp.connect(broker.url)
    a = ca.receiver(ch, name=uid("a"), options=opts, credit=100)
    b = cb.receiver(ch, name=uid("b"), options=opts, credit=2)
    amqp.pump(0.2)
    n = 10
    publish(amqp.connect(broker.url).sender(ch), [f"e{i}" for i in range(n)])
    amqp.wait(lambda: len(a.received) >= n // 2 and len(b.received) >= 2, 5, "each member's share")
    amqp.pump(0.3)
    assert (len(a.received), len(b.received)) == (n // 2, 2)
    got = set(bodies(a.received) + bodies(b.received))
    ca.close()
    amqp.pump(0.3)
    cb.close()
    amqp.pump(0.3)
    c = amqp.connect(broker.url).receiver(ch, name=uid("c"), options=opts, credit=100)
    amqp.wait(lambda: got | set(bodies(c.received)) == {f"e{i}" for i in range(n)}, 5,
              f"the events b never sent, after {sorted(got)}")


def test_a_group_member_with_another_stall_mode_is_refused(broker, amqp):
    """A consumer group's members are lossless all or none: a member asking for the
    other stall mode is refused with amqp:invalid-field, and the group goes on."""
    ch = f"events-store/{uid('es')}"
    group = {"x-opt-kubemq-group": "workers"}
    a = amqp.connect(broker.url).receiver(ch, options=LinkProperties({**group, "x-opt-sluice-stall": "hold"}),
                                          credit=10)
    amqp.pump(0.2)
    b = amqp.connect(broker.url).receiver(ch, options=LinkProperties({**group, "x-opt-sluice-stall": "detach"}),
                                          wait=False)
    cond = b.wait_detached()
    assert cond is not None and cond.name == "amqp:invalid-field", cond
    assert "stall" in cond.description
    publish(amqp.connect(broker.url).sender(ch), ["e1"])
    assert bodies(a.take(1)) == ["e1"]


def test_consumer_group_shares_one_cursor(broker, amqp):
    ch = f"events-store/{uid('es')}"
    c = amqp.connect(broker.url)
    g = LinkProperties({"x-opt-kubemq-group": "workers", "x-opt-kubemq-start": "first"})
    a = c.receiver(ch, options=g, credit=100)
    b = amqp.connect(broker.url).receiver(ch, options=g, credit=100)
    other = c.receiver(ch, options=LinkProperties({"x-opt-kubemq-group": "audit", "x-opt-kubemq-start": "first"}),
                       credit=100)
    amqp.pump(0.2)
    pub = c.sender(ch)
    n = 10
    publish(pub, [f"e{i}" for i in range(n)])
    amqp.wait(lambda: len(a.received) + len(b.received) >= n and len(other.received) >= n, 5, "group deliveries")
    amqp.pump(0.3)
    shared = bodies(a.received) + bodies(b.received)
    assert sorted(shared) == sorted(f"e{i}" for i in range(n)), "each event once per group"
    assert a.received and b.received, "group members must share the stream"
    assert bodies(other.received) == [f"e{i}" for i in range(n)]
