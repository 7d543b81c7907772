"""Addresses: anonymous terminus, bare addresses (JMS capability hint, default
pattern), channel validation and the attach-time refusals."""

import pytest

from amqp_harness import Capabilities, Delivery, Harness, Link, LinkProperties, Message, SettleModes, uid
from proton import byte, symbol
from proton.reactor import Copy, Move

ACCEPTED = Delivery.ACCEPTED
REJECTED = Delivery.REJECTED


def refused(link_w):
    cond = link_w.wait_detached()
    assert cond is not None, "detached without an error condition"
    return cond


# ------------------------------------------------------------------ anonymous terminus


def test_anonymous_sender_routes_by_to(broker, amqp):
    q = f"queues/{uid('q')}"
    ev = f"events/{uid('ev')}"
    es = f"events-store/{uid('es')}"
    c = amqp.connect(broker.url)
    sub = c.receiver(ev, credit=10)
    amqp.pump(0.3)
    s = c.sender(None)
    s.wait_credit()
    for addr, body in [(q, "to-queue"), (ev, "to-events"), (es, "to-store"), ("/" + q, "slash"),
                       ("amqps://localhost:5671/" + q, "url")]:
        d = s.send_and_wait(Message(body=body, address=addr))
        assert d.remote_state == ACCEPTED, (addr, d.remote.condition)
    assert [m.body for m in sub.take(1)] == ["to-events"]
    qr = c.receiver(q, credit=10)
    assert [m.body for m in qr.take(3)] == ["to-queue", "slash", "url"]
    sr = c.receiver(es, options=LinkProperties({"x-opt-kubemq-start": "first"}), credit=10)
    assert [m.body for m in sr.take(1)] == ["to-store"]


@pytest.mark.parametrize("to", [None, "", "foo/bar", "queues/", "queues/a b", "queues/a*", "events/x.",
                                "_amqp10.tmp.0-0.nonexistent", "amqps://h/queues/a?x=1", "amqp://h:5672"])
def test_anonymous_bad_to_rejected_precondition_failed(broker, amqp, to):
    q = f"queues/{uid('q')}"
    c = amqp.connect(broker.url)
    s = c.sender(None)
    s.wait_credit()
    m = Message(body="x")
    if to is not None:
        m.address = to
    d = s.send_and_wait(m)
    assert d.remote_state == REJECTED, f"state {d.remote_state}"
    cond = d.remote.condition
    assert cond is not None and cond.name == "amqp:precondition-failed", cond
    # The link stays usable.
    assert s.is_open()
    d2 = s.send_and_wait(Message(body="fine", address=q))
    assert d2.remote_state == ACCEPTED
    assert [m.body for m in c.receiver(q, credit=1).take(1)] == ["fine"]


def test_anonymous_presettled_bad_to_dropped_and_counted(broker, amqp):
    c = amqp.connect(broker.url)
    before = broker.metric("kubemq_amqp10_transfers_in_dropped_total")
    s = c.sender(None, options=SettleModes(snd=Link.SND_SETTLED))
    s.wait_credit()
    s.send(Message(body="x", address="foo/bar"))
    broker.wait_metric("kubemq_amqp10_transfers_in_dropped_total", lambda v: v >= before + 1, pump=amqp)
    assert s.is_open()


def test_open_offers_anonymous_relay(broker, amqp):
    # Clients that use the anonymous terminus only when the broker offers it (Qpid JMS's
    # anonymous producers, proton's example server) look for this capability.
    c = amqp.connect(broker.url)
    caps = c.conn.remote_offered_capabilities
    assert caps is not None and "ANONYMOUS-RELAY" in [str(x) for x in caps], caps


# ------------------------------------------------------------------ dynamic nodes


def test_other_connections_reach_a_dynamic_node(broker, amqp):
    """A reply node (a temporary queue) is reached from every connection of the broker:
    by an anonymous sender's `to` and by a sender attached to its address, from the
    node's shard and from the other one (a connection's shard is in the name of a node
    it makes: `_amqp10.tmp.<shard>-<conn>.<uuid>`)."""
    def shard_of(address):
        return address[len("_amqp10.tmp."):].split("-", 1)[0]

    owner = amqp.connect(broker.url)
    node = owner.receiver(None, dynamic=True, credit=100)
    addr = node.remote_address
    assert addr and addr.startswith("_amqp10.tmp."), addr
    sent, shards = [], set()
    # Connections go to the shard with the fewest: a few reach both.
    for i in range(10):
        c = amqp.connect(broker.url)
        shards.add(shard_of(c.receiver(None, dynamic=True).remote_address) == shard_of(addr))
        anon = c.sender(None)
        anon.wait_credit()
        d = anon.send_and_wait(Message(body=f"anon-{i}", address=addr))
        assert d.remote_state == ACCEPTED, (i, d.remote.condition)
        fixed = c.sender(addr)
        fixed.wait_credit()
        d = fixed.send_and_wait(Message(body=f"fixed-{i}"))
        assert d.remote_state == ACCEPTED, (i, d.remote.condition)
        sent += [f"anon-{i}", f"fixed-{i}"]
        if i >= 2 and shards == {True, False}:
            break
    assert shards == {True, False}, "every sender was on one side of the node's shard"
    assert [m.body for m in node.take(len(sent))] == sent


def test_a_gone_dynamic_node_is_unreachable_from_other_connections(broker, amqp):
    owner = amqp.connect(broker.url)
    node = owner.receiver(None, dynamic=True, credit=10)
    addr = node.remote_address
    c = amqp.connect(broker.url)
    anon = c.sender(None)
    fixed = c.sender(addr)
    anon.wait_credit()
    fixed.wait_credit()
    # The node's link goes, then its whole connection: each message is rejected, and
    # the links stay up.
    for gone in (node.close, owner.close):
        gone()
        for s in (anon, fixed):
            d = s.send_and_wait(Message(body="late", address=addr) if s is anon else Message(body="late"))
            assert d.remote_state == REJECTED, d.remote_state
            cond = d.remote.condition
            assert cond is not None and cond.name == "amqp:precondition-failed", cond
            assert "unreachable dynamic node" in (cond.description or ""), cond
            assert s.is_open()
    # Pre-settled, it is dropped and counted.
    before = broker.metric("kubemq_amqp10_transfers_in_dropped_total")
    ps = c.sender(None, options=SettleModes(snd=Link.SND_SETTLED))
    ps.wait_credit()
    ps.send(Message(body="x", address=addr))
    broker.wait_metric("kubemq_amqp10_transfers_in_dropped_total", lambda v: v >= before + 1, pump=amqp)


def test_a_full_dynamic_node_refuses_other_connections(broker, amqp):
    # No credit on the node: it holds 4,096 messages, then refuses.
    owner = amqp.connect(broker.url)
    node = owner.receiver(None, dynamic=True)
    addr = node.remote_address
    c = amqp.connect(broker.url)
    s = c.sender(addr)
    ds = []
    for i in range(4097):
        s.wait_credit()
        ds.append(s.send(Message(body=i)))
    states = s.wait_settled(ds, timeout=30)
    assert states[:4096] == [ACCEPTED] * 4096
    assert states[4096] == REJECTED
    cond = ds[4096].remote.condition
    assert cond is not None and cond.name == "amqp:resource-limit-exceeded", cond
    assert "dynamic node is full" in (cond.description or ""), cond
    node.flow(5)
    assert [m.body for m in node.take(5)] == [0, 1, 2, 3, 4]


def test_dynamic_node_names_do_not_tell_each_other(broker, amqp):
    """Other connections may send to a node whose name they know, so one name must not
    tell a connection's others. The names were two outputs each of a per-connection
    xorshift64* generator: its output is its state times an odd constant, so the last
    8 bytes of one name gave the state and with it every later name."""
    mult = 0x2545F4914F6CDD1D
    inverse = pow(mult, -1, 1 << 64)

    def successor(output):
        x = (output * inverse) % (1 << 64)
        x ^= x >> 12
        x ^= (x << 25) % (1 << 64)
        x ^= x >> 27
        return (x * mult) % (1 << 64)

    c = amqp.connect(broker.url)
    names = [c.receiver(None, dynamic=True).remote_address for _ in range(8)]
    raw = [bytes.fromhex(n.rsplit(".", 1)[1].replace("-", "")) for n in names]
    assert len(set(raw)) == len(raw), names
    for a, b in zip(raw, raw[1:]):
        assert successor(int.from_bytes(a[8:], "big")) != int.from_bytes(b[:8], "big"), names


def test_a_dynamic_node_whose_connection_stops_reading_refuses_other_connections(broker_factory, amqp):
    """The node's connection stops reading its socket: its driver waits for the socket
    and takes nothing from its inbox. Messages other connections send it are refused
    "dynamic node is full" once 64 MiB wait there; those that did get in are answered
    when the write timeout drops the connection. Before, every message waited there,
    unanswered and held in memory, until then: no limit (with no write timeout, for ever)."""
    # Time enough for the producer to offer more than 64 MiB and the sockets' buffers
    # while the owner's driver waits, with both cores busy.
    b = broker_factory(SLUICE_WRITE_TIMEOUT_SECONDS="20")
    owner_h = Harness()
    try:
        owner = owner_h.connect(b.url)
        node = owner.receiver(None, dynamic=True, credit=100000)
        addr = node.remote_address
        # From here the owner's harness is never pumped: its socket is not read.
        c = amqp.connect(b.url)
        s = c.sender(addr)
        payload = b"x" * (1 << 20)
        ds = []
        for _ in range(200):
            s.wait_credit()
            ds.append(s.send(Message(body=payload)))
        s.wait_settled(ds, timeout=60)
        conds = [d.remote.condition for d in ds if d.remote_state == REJECTED]
        assert all(d.remote_state in (ACCEPTED, REJECTED) for d in ds), [d.remote_state for d in ds]
        full = [x for x in conds if x is not None and x.name == "amqp:resource-limit-exceeded"
                and "dynamic node is full" in (x.description or "")]
        gone = [x for x in conds if x is not None and x.name == "amqp:precondition-failed"
                and "unreachable dynamic node" in (x.description or "")]
        assert len(full) + len(gone) == len(conds), conds
        assert full, f"no message refused as full ({len(gone)} unreachable, {len(ds) - len(conds)} accepted)"
    finally:
        owner_h.close()


URL = "amqps://localhost/{}"


@pytest.mark.parametrize("kind,pattern,form", [(0, "queues", "{}"), (1, "events", "{}"), (2, "queues", "{}"),
                                               (3, "events", "{}"), (0, "queues", URL), (1, "events", URL)])
def test_anonymous_bare_to_follows_the_jms_destination_annotation(broker_factory, amqp, kind, pattern, form):
    """Qpid JMS sends through the anonymous terminus when the broker offers
    ANONYMOUS-RELAY, naming a bare destination's type in `x-opt-jms-dest` (0 queue, 1
    topic, 2 temporary queue, 3 temporary topic): a topic must reach events and a queue
    queues, as a sender attached with the capability `topic` or `queue` does. The
    broker's default pattern is the other one, so the annotation is what decides. A bare
    address written as a URL (`form`) is as bare."""
    other = "events" if pattern == "queues" else "queues"
    b = broker_factory(CONNECTORS_AMQP10_DEFAULT_PATTERN=other)
    name = uid("jms")
    c = amqp.connect(b.url)
    r = c.receiver(f"{pattern}/{name}", credit=10)
    amqp.pump(0.2)
    s = c.sender(None)
    s.wait_credit()
    m = Message(body="hi", address=form.format(name), annotations={symbol("x-opt-jms-dest"): byte(kind)})
    d = s.send_and_wait(m)
    assert d.remote_state == ACCEPTED, d.remote.condition
    assert [x.body for x in r.take(1)] == ["hi"]


# ------------------------------------------------------------------ bare addresses


def test_bare_address_defaults_to_queues(broker, amqp):
    name = uid("examples")
    c = amqp.connect(broker.url)
    s = c.sender(name)
    assert s.send_and_wait(Message(body="bare")).remote_state == ACCEPTED
    r = c.receiver(f"queues/{name}", credit=1)
    assert [m.body for m in r.take(1)] == ["bare"]
    r2 = c.receiver(name, credit=1)  # a bare receiver reads the same queue
    s.send_and_wait(Message(body="bare2"))
    assert [m.body for m in r2.take(1)] == ["bare2"]


def test_bare_address_topic_hint_goes_to_events(broker, amqp):
    name = uid("examples")
    c = amqp.connect(broker.url)
    sub = c.receiver(f"events/{name}", credit=10)
    bare_sub = c.receiver(name, options=Capabilities("topic"), credit=10)
    amqp.pump(0.3)
    s = c.sender(name, options=Capabilities("topic"))
    assert s.send_and_wait(Message(body="ev")).remote_state == ACCEPTED
    assert [m.body for m in sub.take(1)] == ["ev"]
    assert [m.body for m in bare_sub.take(1)] == ["ev"]
    # nothing went to the queue of that name
    q = c.receiver(f"queues/{name}", credit=10)
    amqp.pump(0.4)
    assert q.received == []
    links = broker.get_json("/api/amqp10/links")["links"]
    mine = [lk for lk in links if lk["name"] == s.name]
    assert mine and mine[0]["pattern"] == "events" and mine[0]["channel"] == name


def test_default_pattern_setting(broker_factory, amqp):
    b = broker_factory(CONNECTORS_AMQP10_DEFAULT_PATTERN="events")
    name = uid("examples")
    c = amqp.connect(b.url)
    sub = c.receiver(f"events/{name}", credit=10)
    amqp.pump(0.3)
    s = c.sender(name)
    assert s.send_and_wait(Message(body="ev")).remote_state == ACCEPTED
    assert [m.body for m in sub.take(1)] == ["ev"]
    # The queue hint still wins over the default.
    qs = c.sender(name, options=Capabilities("queue"))
    assert qs.send_and_wait(Message(body="q")).remote_state == ACCEPTED
    assert [m.body for m in c.receiver(f"queues/{name}", credit=1).take(1)] == ["q"]


# A leading slash, and an address written as a URL (uAMQP puts the whole URL it was
# given in its termini, tests/python/test_uamqp.py), name the node of the bare address.
@pytest.mark.parametrize("sent_to,received_from", [("/queues/{}", "queues/{}"),
                                                   ("amqps://localhost:5671/queues/{}", "AMQP://127.0.0.1/queues/{}")],
                         ids=["leading-slash", "url"])
def test_address_forms_name_the_same_node(broker, amqp, sent_to, received_from):
    ch = uid("q")
    c = amqp.connect(broker.url)
    s = c.sender(sent_to.format(ch))
    assert s.send_and_wait(Message(body="x")).remote_state == ACCEPTED
    assert [m.body for m in c.receiver(received_from.format(ch), credit=1).take(1)] == ["x"]


# ------------------------------------------------------------------ channel validation


BAD_ADDRESSES = [
    ("empty", "queues/"),
    ("space", "queues/a b"),
    ("tab", "events/a\tb"),
    ("newline", "queues/a\nb"),
    ("star", "queues/a*"),
    ("gt", "events/orders.>"),
    ("semicolon", "queues/a;b"),
    ("colon", "events-store/a:b"),
    ("trailing-dot", "queues/a."),
    ("256-bytes", "queues/" + "x" * 256),
    ("256-bytes-multibyte", "queues/" + "\u00e9" * 128),
    ("unknown-prefix", "foo/bar"),
    ("bare-with-slash", "a/b"),
    ("bare-whitespace", "a b"),
    ("commands-empty", "commands/"),
    ("url-without-path", "amqps://localhost:5671"),
    ("url-with-query", "amqps://localhost/queues/a?x=1"),
    ("url-with-escape", "amqp://localhost/queues/a%20b"),
    ("url-host-256-bytes", "amqps://" + "h" * 256 + "/queues/a"),
]


@pytest.mark.parametrize("role", ["sender", "receiver"])
@pytest.mark.parametrize("addr", [a for _, a in BAD_ADDRESSES], ids=[n for n, _ in BAD_ADDRESSES])
def test_invalid_address_not_found(broker, amqp, role, addr):
    c = amqp.connect(broker.url)
    if role == "sender":
        link = c.sender(addr, wait=False)
    else:
        link = c.receiver(addr, wait=False)
    cond = refused(link)
    assert cond.name == "amqp:not-found", cond
    assert len(cond.description or "") <= 512


def test_longest_valid_channel_accepted(broker, amqp):
    c = amqp.connect(broker.url)
    c.sender("queues/" + "x" * 255)
    c.receiver("events/" + "\u00e9" * 127)  # 254 bytes
    c.sender("queues/a.b-c_d")


def test_connection_usable_after_refusals(broker, amqp):
    c = amqp.connect(broker.url)
    for addr in ["foo/bar", "queues/", "queues/a*"]:
        refused(c.sender(addr, wait=False))
    ch = f"queues/{uid('q')}"
    s = c.sender(ch)
    assert s.send_and_wait(Message(body="ok")).remote_state == ACCEPTED


def test_receiver_on_responses_not_allowed(broker, amqp):
    c = amqp.connect(broker.url)
    cond = refused(c.receiver("responses/abc", wait=False))
    assert cond.name == "amqp:not-allowed", cond


def test_rcv_settle_mode_second_not_implemented(broker, amqp):
    c = amqp.connect(broker.url)
    for link in (c.receiver(f"queues/{uid('q')}", options=SettleModes(rcv=Link.RCV_SECOND), wait=False),
                 c.sender(f"queues/{uid('q')}", options=SettleModes(rcv=Link.RCV_SECOND), wait=False)):
        cond = refused(link)
        assert cond.name == "amqp:not-implemented", cond


def test_copy_on_queue_invalid_field(broker, amqp):
    c = amqp.connect(broker.url)
    cond = refused(c.receiver(f"queues/{uid('q')}", options=Copy(), wait=False))
    assert cond.name == "amqp:invalid-field", cond
    # move is the queue default and is fine; copy is fine on events
    c.receiver(f"queues/{uid('q')}", options=Move())
    c.receiver(f"events/{uid('ev')}", options=Copy())


def test_duplicate_link_name_not_allowed(broker):
    # python-qpid-proton itself refuses to carry two links of one name (it closes the
    # connection on the reply), so this one speaks raw frames.
    import raw_amqp as raw
    c = raw.handshake(broker.port)
    try:
        name = uid("dup")
        c.send(raw.begin_frame(0)
               + raw.attach_frame(name, 0, f"queues/{uid('q')}")
               + raw.attach_frame(name, 1, f"queues/{uid('q')}"))
        frames = c.read_until("detach")
        detach = frames[-1]
        assert detach.condition == "amqp:not-allowed", frames
        assert b"duplicate link name" in detach.body
        # The same name in the other role is a different link: attached, no detach.
        c.send(raw.attach_frame(name, 2, f"queues/{uid('q')}", client_is_sender=False))
        f = c.read_until("attach")
        more = c.read_frame(timeout=0.5)
        assert more is None or more.name != "detach", more
        assert not any(x.name == "close" for x in f)
    finally:
        c.close()


def test_attach_reply_echoes_terminus_and_max_message_size(broker, amqp):
    c = amqp.connect(broker.url)
    ch = f"queues/{uid('q')}"
    s = c.sender(ch)
    assert s.link.remote_target.address == ch
    assert s.link.remote_rcv_settle_mode == Link.RCV_FIRST
    assert s.link.remote_max_message_size == 100 * 1024 * 1024
    r = c.receiver(ch)
    assert r.link.remote_source.address == ch
