"""Admin HTTP: the 11 kubemq_amqp10_* Prometheus families, live gauges and moving
counters, /api/amqp10/connections and /api/amqp10/links, /healthz."""

import json
import re

from proton import symbol

from amqp_harness import Delivery, ExpiryNever, Message, uid

ACCEPTED = Delivery.ACCEPTED

PATTERNS = ["queues", "events", "events-store", "commands", "queries"]

FAMILIES = {
    "kubemq_amqp10_connections": [{}],
    "kubemq_amqp10_sessions": [{}],
    "kubemq_amqp10_links": [{"role": "sender"}, {"role": "receiver"}],
    "kubemq_amqp10_transfers_total": [{"direction": d, "pattern": p} for d in ("in", "out") for p in PATTERNS],
    "kubemq_amqp10_dispositions_total": [{"outcome": o} for o in ("accepted", "released", "modified", "rejected")],
    "kubemq_amqp10_rpc_requests_total": [{"pattern": "commands"}, {"pattern": "queries"}],
    "kubemq_amqp10_errors_total": [{"scope": s} for s in ("conn", "session", "link")],
    "kubemq_amqp10_transfers_in_dropped_total": [{}],
    "kubemq_amqp10_events_dropped_no_credit_total": [{}],
    "kubemq_amqp10_events_store_dropped_stalled_total": [{}],
    "kubemq_amqp10_rpc_late_responses_total": [{}],
}
GAUGES = {"kubemq_amqp10_connections", "kubemq_amqp10_sessions", "kubemq_amqp10_links"}

RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")


def key(name, **labels):
    return (name, frozenset(labels.items()))


def test_all_families_present_with_labels_and_types(broker_factory):
    b = broker_factory()
    status, text = b.get("/metrics")
    assert status == 200
    m = b.metrics()
    for name, label_sets in FAMILIES.items():
        for labels in label_sets:
            assert key(name, **labels) in m, f"missing {name}{labels}"
        kind = "gauge" if name in GAUGES else "counter"
        assert re.search(rf"^# TYPE {name} {kind}$", text, re.M), f"{name} is not a {kind}"
    # A fresh broker: gauges at zero.
    assert m[key("kubemq_amqp10_connections")] == 0
    assert m[key("kubemq_amqp10_links", role="sender")] == 0


def test_gauges_follow_open_connections(broker_factory, amqp):
    b = broker_factory()
    ch = f"queues/{uid('q')}"
    c1 = amqp.connect(b.url)
    c1.sender(ch)                 # server role: receiver
    c2 = amqp.connect(b.url)
    c2.receiver(ch, credit=1)     # server role: sender
    c2.receiver(f"events/{uid('ev')}", credit=1)

    def expect(conns, sessions, senders, receivers):
        want = {key("kubemq_amqp10_connections"): conns, key("kubemq_amqp10_sessions"): sessions,
                key("kubemq_amqp10_links", role="sender"): senders,
                key("kubemq_amqp10_links", role="receiver"): receivers}
        got = {}
        for _ in range(60):
            m = b.metrics()
            got = {k: m.get(k) for k in want}
            if got == want:
                return
            amqp.pump(0.05)
        assert got == want

    expect(2, 2, 2, 1)
    c1.close()
    expect(1, 1, 2, 0)
    c2.close()
    expect(0, 0, 0, 0)


def test_counters_move(broker_factory, amqp):
    b = broker_factory()
    before = b.metrics()
    c = amqp.connect(b.url)
    q = f"queues/{uid('q')}"
    s = c.sender(q)
    for i in range(4):
        s.send(Message(body=f"m{i}"))
    assert s.wait_settled() == [ACCEPTED] * 4
    r = c.receiver(q, credit=4)
    got = r.take(4)
    got[0].accept()
    got[1].release()
    got[2].modify()
    got[3].reject()
    ev = f"events/{uid('ev')}"
    sub = c.receiver(ev, credit=1)
    amqp.pump(0.3)
    c.sender(ev).send_and_wait(Message(body="e"))
    sub.take(1)
    refused = c.sender("foo/bar", wait=False)
    refused.wait_detached()

    def delta(name, **labels):
        return b.metrics().get(key(name, **labels), 0) - before.get(key(name, **labels), 0)

    for _ in range(60):
        if delta("kubemq_amqp10_dispositions_total", outcome="rejected") >= 1 and \
                delta("kubemq_amqp10_errors_total", scope="link") >= 1:
            break
        amqp.pump(0.05)
    assert delta("kubemq_amqp10_transfers_total", direction="in", pattern="queues") == 4
    assert delta("kubemq_amqp10_transfers_total", direction="out", pattern="queues") >= 4
    assert delta("kubemq_amqp10_transfers_total", direction="in", pattern="events") == 1
    assert delta("kubemq_amqp10_transfers_total", direction="out", pattern="events") == 1
    assert delta("kubemq_amqp10_dispositions_total", outcome="accepted") >= 1
    assert delta("kubemq_amqp10_dispositions_total", outcome="released") >= 1
    assert delta("kubemq_amqp10_dispositions_total", outcome="modified") >= 1
    assert delta("kubemq_amqp10_dispositions_total", outcome="rejected") >= 1
    assert delta("kubemq_amqp10_errors_total", scope="link") >= 1


# ------------------------------------------------------------------ JSON endpoints


def test_healthz(broker):
    status, body = broker.get("/healthz")
    assert status == 200
    assert json.loads(body).get("status") == "ok"


def test_unknown_path_404(broker):
    status, _ = broker.get("/api/nope")
    assert status == 404


def find_conn(broker, cid):
    data = broker.get_json("/api/amqp10/connections")
    assert set(data) >= {"connections", "total"}
    assert data["total"] == len(data["connections"])
    return [c for c in data["connections"] if c["container_id"] == cid]


def test_connections_endpoint(broker, amqp):
    cid = uid("json-client")
    c = amqp.connect(broker.url, container_id=cid,
                     properties={symbol("product"): "pytest-client", symbol("version"): "9.9.9"})
    c.sender(f"queues/{uid('q')}")
    c.receiver(f"events/{uid('ev')}", credit=3)
    amqp.pump(0.1)
    mine = find_conn(broker, cid)
    assert len(mine) == 1, mine
    e = mine[0]
    expected_fields = {"client_id", "container_id", "product", "version", "sessions", "links", "connected_at",
                       "source_ip", "sasl", "tls"}
    assert expected_fields <= set(e), set(e) ^ expected_fields
    assert e["client_id"] == cid
    assert e["product"] == "pytest-client"
    assert e["version"] == "9.9.9"
    assert e["sessions"] == 1
    assert e["links"] == 2
    assert RFC3339.match(e["connected_at"]), e["connected_at"]
    assert e["source_ip"] == "127.0.0.1"
    assert e["tls"] is False
    assert e["sasl"] in ("plain", "anonymous", "external", "none")
    c.close()
    amqp.pump(0.2)
    assert find_conn(broker, cid) == []


def test_connections_endpoint_sasl_anonymous(broker, amqp):
    # proton negotiates SASL ANONYMOUS (the broker offers ANONYMOUS and PLAIN)
    cid = uid("anon")
    amqp.connect(broker.url, container_id=cid)
    amqp.pump(0.1)
    mine = find_conn(broker, cid)
    assert len(mine) == 1 and mine[0]["sasl"] == "anonymous", mine


def test_connections_endpoint_without_sasl(broker, amqp):
    cid = uid("nosasl")
    amqp.connect(broker.url, container_id=cid, sasl_enabled=False)
    amqp.pump(0.1)
    mine = find_conn(broker, cid)
    assert len(mine) == 1 and mine[0]["sasl"] == "none", mine


def test_links_endpoint(broker, amqp):
    cid = uid("links-client")
    c = amqp.connect(broker.url, container_id=cid)
    qch = uid("q")
    snd = c.sender(f"queues/{qch}")
    for i in range(2):
        snd.send(Message(body=i))
    assert snd.wait_settled() == [ACCEPTED] * 2
    rcv = c.receiver(f"queues/{qch}", credit=5)
    rcv.take(2)  # left unsettled
    dyn = c.receiver(None, dynamic=True, credit=1)
    esch = uid("es")
    dur = c.receiver(f"events-store/{esch}", name=uid("durable"), options=ExpiryNever(), credit=4)
    amqp.pump(0.2)
    data = broker.get_json("/api/amqp10/links")
    assert set(data) >= {"links", "total"}
    assert data["total"] == len(data["links"])
    mine = {lk["name"]: lk for lk in data["links"] if lk["client_id"] == cid}
    assert set(mine) == {snd.name, rcv.name, dyn.name, dur.name}, mine
    fields = {"client_id", "name", "role", "address", "pattern", "channel", "credit", "unsettled", "durable",
              "dynamic"}
    for lk in mine.values():
        assert fields <= set(lk), set(lk) ^ fields

    s = mine[snd.name]
    assert (s["role"], s["address"], s["pattern"], s["channel"]) == ("receiver", f"queues/{qch}", "queues", qch)
    assert s["credit"] == 1022, "1024 granted, 2 used" 
    assert s["unsettled"] == 0
    assert s["durable"] is False and s["dynamic"] is False

    r = mine[rcv.name]
    assert (r["role"], r["address"], r["pattern"], r["channel"]) == ("sender", f"queues/{qch}", "queues", qch)
    assert r["credit"] == 3, "credit left after 2 of 5 were used"
    assert r["unsettled"] == 2
    assert r["durable"] is False and r["dynamic"] is False

    d = mine[dyn.name]
    assert d["role"] == "sender" and d["dynamic"] is True and d["durable"] is False
    assert d["address"] == dyn.remote_address

    e = mine[dur.name]
    assert (e["role"], e["pattern"], e["channel"]) == ("sender", "events-store", esch)
    assert e["durable"] is True and e["dynamic"] is False and e["credit"] == 4


def conn_key(conn_id):
    shard, number = conn_id.split("-")
    return int(shard), int(number)


def test_connections_and_links_endpoints_page_through_everything_in_order(broker, amqp):
    """`?limit=N` gives a page of connections (and of links, each connection's together)
    in (shard, number) order, `next` names the last connection for `&after=`, null on the
    last page; paging reads each connection and link once, as the whole answer lists them."""
    conns = [amqp.connect(broker.url, container_id=uid("page")) for _ in range(7)]
    for i, c in enumerate(conns):
        for _ in range(i % 4):  # 0 to 3 links each
            c.receiver(f"queues/{uid('pq')}", credit=1)
    amqp.pump(0.3)
    every = broker.get_json("/api/amqp10/connections")["connections"]
    assert len({c["id"] for c in every}) == len(every) >= 7
    assert {c["shard"] for c in every} == {0, 1}, "connections on both shards"

    def pages(path, items, limit):
        out, after, n = [], None, 0
        while True:
            q = f"{path}?limit={limit}" + (f"&after={after}" if after else "")
            page = broker.get_json(q)
            assert page["total"] == len(page[items]) and set(page) == {items, "total", "next"}, page
            out.append(page[items])
            after = page["next"]
            n += 1
            assert n <= 50, "paging does not end"
            if after is None:
                return out

    got = pages("/api/amqp10/connections", "connections", 2)
    assert all(len(p) <= 2 for p in got)
    ids = [c["id"] for p in got for c in p]
    assert ids == sorted(ids, key=conn_key), "in (shard, number) order"
    assert sorted(ids, key=conn_key) == sorted((c["id"] for c in every), key=conn_key)

    all_links = broker.get_json("/api/amqp10/links")["links"]
    assert len(all_links) >= 9
    got = pages("/api/amqp10/links", "links", 2)
    seen = set()
    for p in got:
        mine = {lk["connection"] for lk in p}
        assert not mine & seen, "a connection's links split over two pages"
        seen |= mine
        # Whole connections until 2 links or more: the page's last connection took it there.
        if len(mine) > 1:
            assert len([lk for lk in p if lk["connection"] != p[-1]["connection"]]) < 2, p
    key = lambda lk: (conn_key(lk["connection"]), lk["name"])
    paged = [lk for p in got for lk in p]
    assert sorted(map(key, paged)) == sorted(map(key, all_links))
    assert [conn_key(lk["connection"]) for lk in paged] == sorted(conn_key(lk["connection"]) for lk in paged)


def test_connection_pages_refuse_bad_parameters(broker):
    for path in ("/api/amqp10/connections", "/api/amqp10/links"):
        for q in ("?limit=0", "?limit=10001", "?after=0-1", "?limit=2&after=x", "?limit=2&after=0-", "?foo=1"):
            status, body = broker.get(path + q)
            assert status == 400 and "error" in json.loads(body), (path, q, status, body)
