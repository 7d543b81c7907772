"""Commands and queries: a requester with a dynamic reply node, a responder replying
through the anonymous terminus (or a fixed responses/<id> sender), executed/error
application-properties, correlation, timeouts, reply-to guard, pending limit."""

import pytest

from amqp_harness import Delivery, Message, uid

ACCEPTED = Delivery.ACCEPTED
REJECTED = Delivery.REJECTED
EXECUTED = "x-opt-kubemq-executed"
ERROR = "x-opt-kubemq-error"


class Rpc:
    """Requester (dynamic reply receiver + request sender) and responder on one channel."""

    def __init__(self, amqp, url, pattern, responder=True):
        self.amqp = amqp
        self.ch = f"{pattern}/{uid(pattern)}"
        self.req_conn = amqp.connect(url)
        self.replies = self.req_conn.receiver(None, dynamic=True, credit=50)
        self.reply_to = self.replies.remote_address
        self.requests = self.req_conn.sender(self.ch)
        self.requests.wait_credit()
        self.resp_conn = None
        if responder:
            self.resp_conn = amqp.connect(url)
            self.inbox = self.resp_conn.receiver(self.ch, credit=50)
            self.answer = self.resp_conn.sender(None)  # anonymous terminus
            self.answer.wait_credit()
            amqp.pump(0.2)

    def request(self, body="req", reply_to=True, **props):
        m = Message(body=body)
        if reply_to is True:
            m.reply_to = self.reply_to
        elif reply_to:
            m.reply_to = reply_to
        for k, v in props.items():
            setattr(m, k, v)
        return self.requests.send_and_wait(m)

    def respond(self, req, body="resp", props=None):
        m = Message(body=body, address=req.message.reply_to, correlation_id=req.message.correlation_id)
        if props is not None:
            m.properties = props
        d = self.answer.send_and_wait(m)
        assert d.remote_state == ACCEPTED, (d.remote_state, d.remote.condition)
        return d


def rejected_with(d, condition):
    assert d.remote_state == REJECTED, f"expected rejected, got state {d.remote_state}"
    cond = d.remote.condition
    assert cond is not None and cond.name == condition, cond
    return cond


def test_dynamic_reply_node_address(broker, amqp):
    rpc = Rpc(amqp, broker.url, "commands", responder=False)
    assert rpc.reply_to and rpc.reply_to.startswith("_amqp10.tmp."), rpc.reply_to


def test_command_round_trip(broker, amqp):
    rpc = Rpc(amqp, broker.url, "commands")
    d = rpc.request(body="do-it", correlation_id="corr-1")
    assert d.remote_state == ACCEPTED
    req = rpc.inbox.take(1)[0]
    assert req.body == "do-it"
    assert req.message.reply_to.startswith("/responses/"), req.message.reply_to
    req.accept()
    rpc.respond(req, props={EXECUTED: True})
    reply = rpc.replies.take(1)[0]
    assert reply.message.correlation_id == "corr-1"
    assert reply.message.properties.get(EXECUTED) is True
    assert ERROR not in (reply.message.properties or {})
    reply.accept()


@pytest.mark.parametrize("form", ["/{}", "amqps://localhost:5671/{}"])
def test_a_reply_to_written_with_a_slash_or_as_a_url_names_the_node(broker, amqp, form):
    rpc = Rpc(amqp, broker.url, "commands")
    d = rpc.request(reply_to=form.format(rpc.reply_to), correlation_id="c-url")
    assert d.remote_state == ACCEPTED, d.remote.condition
    req = rpc.inbox.take(1)[0]
    req.accept()
    rpc.respond(req)
    assert rpc.replies.take(1)[0].message.correlation_id == "c-url"


def test_command_reply_without_executed_flag_counts_as_executed(broker, amqp):
    rpc = Rpc(amqp, broker.url, "commands")
    rpc.request(correlation_id="c-2")
    req = rpc.inbox.take(1)[0]
    req.accept()
    rpc.respond(req)
    reply = rpc.replies.take(1)[0]
    assert reply.message.correlation_id == "c-2"
    assert reply.message.properties.get(EXECUTED) is True


def test_command_failure_reply(broker, amqp):
    rpc = Rpc(amqp, broker.url, "commands")
    rpc.request(correlation_id="c-3")
    req = rpc.inbox.take(1)[0]
    req.accept()
    rpc.respond(req, props={EXECUTED: False, ERROR: "boom"})
    reply = rpc.replies.take(1)[0]
    assert reply.message.correlation_id == "c-3"
    assert reply.message.properties.get(EXECUTED) is False
    assert reply.message.properties.get(ERROR) == "boom"


def test_command_reply_through_fixed_responses_sender(broker, amqp):
    rpc = Rpc(amqp, broker.url, "commands")
    rpc.request(correlation_id="c-4")
    req = rpc.inbox.take(1)[0]
    req.accept()
    s = rpc.resp_conn.sender(req.message.reply_to)
    s.wait_credit()
    d = s.send_and_wait(Message(body="ok", correlation_id=req.message.correlation_id,
                                properties={EXECUTED: True}))
    assert d.remote_state == ACCEPTED
    reply = rpc.replies.take(1)[0]
    assert reply.message.correlation_id == "c-4"
    assert reply.message.properties.get(EXECUTED) is True


def test_correlation_falls_back_to_message_id(broker, amqp):
    rpc = Rpc(amqp, broker.url, "commands")
    rpc.request(id="mid-77")  # proton: Message.id is the message-id
    req = rpc.inbox.take(1)[0]
    req.accept()
    rpc.respond(req, props={EXECUTED: True})
    reply = rpc.replies.take(1)[0]
    assert reply.message.correlation_id == "mid-77"


def test_query_round_trip_carries_body(broker, amqp):
    rpc = Rpc(amqp, broker.url, "queries")
    d = rpc.request(body="what?", correlation_id="q-1")
    assert d.remote_state == ACCEPTED
    req = rpc.inbox.take(1)[0]
    assert req.message.reply_to.startswith("/responses/")
    req.accept()
    rpc.respond(req, body="forty-two", props={"k": "v"})
    reply = rpc.replies.take(1)[0]
    assert reply.message.correlation_id == "q-1"
    assert reply.body == "forty-two"


def test_query_failure_delivers_nothing(broker, amqp):
    rpc = Rpc(amqp, broker.url, "queries")
    rpc.request(correlation_id="q-2")
    req = rpc.inbox.take(1)[0]
    req.accept()
    rpc.respond(req, props={EXECUTED: False, ERROR: "no"})
    amqp.pump(1.0)
    assert rpc.replies.received == []


def test_command_timeout_answers_executed_false(broker, amqp):
    rpc = Rpc(amqp, broker.url, "commands", responder=False)
    d = rpc.request(correlation_id="t-1", ttl=1.5)  # header ttl 1500 ms
    assert d.remote_state == ACCEPTED
    reply = rpc.replies.take(1, timeout=8)[0]
    assert reply.message.correlation_id == "t-1"
    assert reply.message.properties.get(EXECUTED) is False
    assert reply.message.properties.get(ERROR), "a timeout reply carries an error"


def test_command_ttl_below_floor_still_answered(broker, amqp):
    rpc = Rpc(amqp, broker.url, "commands", responder=False)
    rpc.request(correlation_id="t-2", ttl=0.2)  # clamped up to 1 s
    reply = rpc.replies.take(1, timeout=8)[0]
    assert reply.message.correlation_id == "t-2"
    assert reply.message.properties.get(EXECUTED) is False


def test_query_timeout_delivers_nothing(broker, amqp):
    rpc = Rpc(amqp, broker.url, "queries", responder=False)
    d = rpc.request(correlation_id="t-3", ttl=1.0)
    assert d.remote_state == ACCEPTED
    amqp.pump(2.5)
    assert rpc.replies.received == []


def test_late_response_is_counted(broker, amqp):
    rpc = Rpc(amqp, broker.url, "commands")
    before = broker.metric("kubemq_amqp10_rpc_late_responses_total")
    rpc.request(correlation_id="late", ttl=1.0)
    req = rpc.inbox.take(1)[0]
    req.accept()
    reply = rpc.replies.take(1, timeout=8)[0]  # the timeout reply
    assert reply.message.properties.get(EXECUTED) is False
    rpc.respond(req, props={EXECUTED: True})
    broker.wait_metric("kubemq_amqp10_rpc_late_responses_total", lambda v: v >= before + 1)
    amqp.pump(0.3)
    assert rpc.replies.received == []


def test_a_response_naming_a_pending_request_with_a_wrong_nonce_is_not_delivered(broker, amqp):
    """The request id is <shard>.<conn>.<seq>.<nonce>: a response that keeps the first
    three but guesses the random part, or adds a part, is counted late and reaches no one;
    the real response still answers the request."""
    rpc = Rpc(amqp, broker.url, "commands")
    before = broker.metric("kubemq_amqp10_rpc_late_responses_total")
    rpc.request(correlation_id="c-1")
    req = rpc.inbox.take(1)[0]
    req.accept()
    real = req.message.reply_to
    head, nonce = real.rsplit(".", 1)
    wrong = "%016x" % (int(nonce, 16) ^ 1)
    for forged in (f"{head}.{wrong}", f"{real}.0", head):
        m = Message(body="forged", address=forged, correlation_id=req.message.correlation_id)
        d = rpc.answer.send_and_wait(m)
        assert d.remote_state == ACCEPTED, (forged, d.remote_state)
    broker.wait_metric("kubemq_amqp10_rpc_late_responses_total", lambda v: v >= before + 3)
    amqp.pump(0.3)
    assert rpc.replies.received == []
    rpc.respond(req, body="real", props={EXECUTED: True})
    reply = rpc.replies.take(1)[0]
    assert reply.message.body == "real" and reply.message.correlation_id == "c-1"


@pytest.mark.parametrize("pattern", ["commands", "queries"])
def test_request_without_reply_to_rejected(broker, amqp, pattern):
    rpc = Rpc(amqp, broker.url, pattern, responder=False)
    d = rpc.request(reply_to=None)
    rejected_with(d, "amqp:not-allowed")
    assert rpc.requests.is_open(), "the request link stays usable"


@pytest.mark.parametrize("reply_to", ["_amqp10.tmp.0-999.00000000-0000-0000-0000-000000000000", "queues/somewhere",
                                      "other-connection"])
def test_reply_to_not_owned_rejected(broker, amqp, reply_to):
    rpc = Rpc(amqp, broker.url, "commands", responder=False)
    if reply_to == "other-connection":
        other = amqp.connect(broker.url).receiver(None, dynamic=True, credit=1)
        reply_to = other.remote_address
    d = rpc.request(reply_to=reply_to)
    rejected_with(d, "amqp:not-allowed")


def test_rpc_requests_counted(broker, amqp):
    def val(p):
        return broker.metric("kubemq_amqp10_rpc_requests_total", pattern=p)

    c0, q0 = val("commands"), val("queries")
    assert c0 is not None and q0 is not None
    cmd = Rpc(amqp, broker.url, "commands", responder=False)
    qry = Rpc(amqp, broker.url, "queries", responder=False)
    cmd.request(ttl=30)
    cmd.request(ttl=30)
    qry.request(ttl=30)
    broker.wait_metric("kubemq_amqp10_rpc_requests_total", lambda v: v >= c0 + 2, pattern="commands")
    broker.wait_metric("kubemq_amqp10_rpc_requests_total", lambda v: v >= q0 + 1, pattern="queries")
    assert val("commands") == c0 + 2
    assert val("queries") == q0 + 1


def test_rpc_max_pending(broker_factory, amqp):
    b = broker_factory(CONNECTORS_AMQP10_RPC_MAX_PENDING="2")
    rpc = Rpc(amqp, b.url, "commands", responder=False)
    assert rpc.request(correlation_id="1").remote_state == ACCEPTED
    assert rpc.request(correlation_id="2").remote_state == ACCEPTED
    cond = rejected_with(rpc.request(correlation_id="3"), "amqp:resource-limit-exceeded")
    assert "rpc pending limit" in (cond.description or "")


def test_a_responder_that_never_settles_gets_at_most_its_unsettled_window(broker_factory, amqp):
    """A responder receiving unsettled gets at most MaxUnsettledPerLink requests it has
    not settled, whatever credit it grants (before: every request its credit allowed,
    its unsettled state growing without bound); settling makes room for the next."""
    b = broker_factory(CONNECTORS_AMQP10_MAX_UNSETTLED_PER_LINK="4")
    rpc = Rpc(amqp, b.url, "commands")  # the responder grants 50 credits
    for i in range(10):
        assert rpc.request(body=str(i), correlation_id=str(i)).remote_state == ACCEPTED
    first = rpc.inbox.take(4)
    amqp.pump(0.5)
    assert len(rpc.inbox.received) == 0, "more than 4 unsettled requests sent to one responder"
    for req in first[:2]:
        req.accept()
    more = rpc.inbox.take(2)
    amqp.pump(0.5)
    assert len(rpc.inbox.received) == 0, "more than 4 unsettled requests after settling 2"
    assert [r.body for r in first + more] == [str(i) for i in range(6)]


def test_a_command_whose_response_finds_its_reply_node_full_is_answered_at_its_deadline(broker, amqp):
    """Responses of 2 MiB to 40 commands, none settled by the requester: its reply node
    takes 64 MiB, so the last responses find it full. Their requests are answered at their
    deadline (executed=false, timeout) past the node's bound, and every command gets one
    answer. Before 2026-12-06 such a request was forgotten: no response, no timeout."""
    rpc = Rpc(amqp, broker.url, "commands")
    n = 40
    for i in range(n):
        assert rpc.request(body=str(i), correlation_id=f"full-{i}", ttl=8).remote_state == ACCEPTED
    big = "x" * (2 << 20)
    for req in rpc.inbox.take(n):
        rpc.respond(req, body=big, props={EXECUTED: True})
    replies = rpc.replies.take(n, timeout=20)
    assert sorted(r.message.correlation_id for r in replies) == sorted(f"full-{i}" for i in range(n))
    timeouts = [r for r in replies if r.message.properties.get(EXECUTED) is False]
    assert 1 <= len(timeouts) < n, len(timeouts)
    assert all(r.message.properties.get(ERROR) == "timeout" for r in timeouts)


def test_a_request_whose_correlation_id_is_too_long_is_refused(broker, amqp):
    """The correlation-id is kept until the response: at most 4096 bytes, so the pending
    limit bounds the memory (before 2026-12-06 an id could take the whole message size)."""
    rpc = Rpc(amqp, broker.url, "commands", responder=False)
    assert rpc.request(correlation_id="c" * 4096).remote_state == ACCEPTED
    cond = rejected_with(rpc.request(correlation_id="c" * 4097), "amqp:invalid-field")
    assert "4096" in (cond.description or "")
    rejected_with(rpc.request(id="m" * 5000), "amqp:invalid-field")  # the message-id stands for it


def test_a_reply_node_over_its_bound_takes_no_new_commands(broker, amqp):
    """A reply node holding 64 MiB or more (here one 65 MiB response, delivered and not
    settled) takes no new command: the timeout answers that enter it past its bounds are
    then at most one per pending request. Settling makes room again."""
    rpc = Rpc(amqp, broker.url, "commands")
    assert rpc.request(body="0", correlation_id="big", ttl=30).remote_state == ACCEPTED
    req = rpc.inbox.take(1)[0]
    rpc.respond(req, body="x" * (65 << 20), props={EXECUTED: True})
    reply = rpc.replies.take(1, timeout=30)[0]
    cond = rejected_with(rpc.request(body="more", correlation_id="more"), "amqp:resource-limit-exceeded")
    assert cond.description == "reply node is full", cond
    reply.accept()
    amqp.pump(0.5)
    assert rpc.request(body="again", correlation_id="again").remote_state == ACCEPTED
