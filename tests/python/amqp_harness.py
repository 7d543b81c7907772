"""A small synchronous driver around python-qpid-proton's event loop.

One `Harness` owns one proton `Container` and any number of connections. Every
wait pumps the whole container with a bounded deadline, so a test never hangs and
several connections (requester, responder, publisher, subscribers) all make
progress while the test waits for one condition.

The handler is a plain `proton.Handler`, not a `MessagingHandler`: nothing is
auto-accepted, auto-settled or auto-flowed, so the tests control credit, drain
and settlement frame by frame and see exactly what the broker sent.
"""

import time
import uuid

from proton import (
    Condition,
    Data,
    Delivery,
    Endpoint,
    Handler,
    Link,
    Message,
    Terminus,
    symbol,
)
from proton.reactor import Container, LinkOption

DEFAULT_TIMEOUT = 10.0


def uid(prefix="t"):
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


class WaitTimeout(AssertionError):
    pass


# --------------------------------------------------------------------- link options


class LinkProperties(LinkOption):
    """Link properties on the ATTACH (e.g. x-opt-kubemq-group, x-opt-kubemq-start)."""

    def __init__(self, props):
        self.props = {symbol(k): v for k, v in props.items()}

    def apply(self, link):
        link.properties = dict(self.props)


class Capabilities(LinkOption):
    """Terminus capabilities: on the target of a sender, the source of a receiver."""

    def __init__(self, *caps):
        self.caps = caps

    def apply(self, link):
        term = link.source if link.is_receiver else link.target
        d = term.capabilities
        d.put_array(False, Data.SYMBOL)
        d.enter()
        for c in self.caps:
            d.put_symbol(symbol(c))
        d.exit()


class SettleModes(LinkOption):
    def __init__(self, snd=None, rcv=None):
        self.snd, self.rcv = snd, rcv

    def apply(self, link):
        if self.snd is not None:
            link.snd_settle_mode = self.snd
        if self.rcv is not None:
            link.rcv_settle_mode = self.rcv


class ExpiryNever(LinkOption):
    """A durable subscription as Qpid JMS asks for one: source expiry-policy never."""

    def apply(self, link):
        link.source.durability = Terminus.DELIVERIES
        link.source.expiry_policy = Terminus.EXPIRE_NEVER


class NullTarget(LinkOption):
    """A sender whose ATTACH carries no target address (the anonymous terminus)."""

    def apply(self, link):
        pass


# --------------------------------------------------------------------- handler


class _Recorder(Handler):
    def __init__(self, harness):
        super().__init__()
        self.h = harness

    def on_delivery(self, event):
        d = event.delivery
        link = d.link
        w = self.h._links.get(link)
        if link.is_receiver:
            if d.aborted:
                d.settle()
                return
            if d.readable and not d.partial:
                data = link.recv(d.pending)
                link.advance()
                m = Message()
                m.decode(data)
                rec = Received(d, m, len(data), d.settled)
                if w is not None:
                    w.received.append(rec)
                    w.all_received.append(rec)
        # sender-side outcomes are read straight from the Delivery objects

    def on_link_remote_detach(self, event):
        w = self.h._links.get(event.link)
        if w is not None:
            w.remote_detached = True
        if event.link.state & Endpoint.LOCAL_ACTIVE:
            event.link.detach()

    # Answer the broker's DETACH / END / CLOSE as stock clients do; the remote
    # condition stays readable on the endpoint.
    def on_link_remote_close(self, event):
        if event.link.state & Endpoint.LOCAL_ACTIVE:
            event.link.close()

    def on_session_remote_close(self, event):
        if event.session.state & Endpoint.LOCAL_ACTIVE:
            event.session.close()

    def on_connection_remote_close(self, event):
        # proton reads a connection's remote condition through its transport, and
        # the container unbinds the transport once it closes: keep it here, on the
        # reactor thread, before the test thread can miss it.
        c = self.h._conns.get(event.connection)
        if c is not None:
            c.close_condition = event.connection.remote_condition
            c.close_seen = True
        if event.connection.state & Endpoint.LOCAL_ACTIVE:
            event.connection.close()

    def on_transport_error(self, event):
        t = event.transport
        self.h.transport_errors.append(t.condition)

    def on_transport_closed(self, event):
        conn = event.connection
        if conn is not None:
            c = self.h._conns.get(conn)
            if c is not None:
                c.transport_closed = True


class Received:
    __slots__ = ("delivery", "message", "size", "settled")

    def __init__(self, delivery, message, size, settled):
        self.delivery = delivery
        self.message = message
        self.size = size
        self.settled = settled

    @property
    def body(self):
        return self.message.body

    def accept(self):
        self.delivery.update(Delivery.ACCEPTED)
        self.delivery.settle()

    def release(self):
        self.delivery.update(Delivery.RELEASED)
        self.delivery.settle()

    def modify(self, failed=True, undeliverable=False):
        self.delivery.local.failed = failed
        self.delivery.local.undeliverable = undeliverable
        self.delivery.update(Delivery.MODIFIED)
        self.delivery.settle()

    def reject(self):
        self.delivery.local.condition = Condition("test:rejected", "rejected by test")
        self.delivery.update(Delivery.REJECTED)
        self.delivery.settle()


# --------------------------------------------------------------------- wrappers


class _LinkW:
    def __init__(self, harness, conn, link):
        self.h = harness
        self.conn = conn
        self.link = link
        self.remote_detached = False  # a DETACH without closed=true

    @property
    def name(self):
        return self.link.name

    @property
    def credit(self):
        return self.link.credit

    @property
    def remote_condition(self):
        return self.link.remote_condition

    def is_open(self):
        return bool(self.link.state & Endpoint.REMOTE_ACTIVE) and not self.is_remote_closed()

    def is_remote_closed(self):
        return bool(self.link.state & Endpoint.REMOTE_CLOSED) or self.remote_detached

    def wait_open(self, timeout=DEFAULT_TIMEOUT):
        """Wait for the ATTACH reply; fails if the broker detached instead."""
        self.h.wait(lambda: self.link.state & (Endpoint.REMOTE_ACTIVE | Endpoint.REMOTE_CLOSED) or self.remote_detached,
                    timeout, f"attach reply for {self.name}")
        # A refusal is ATTACH + DETACH; give the DETACH a moment to arrive.
        self.h.pump(0.05)
        if self.is_remote_closed():
            c = self.link.remote_condition
            raise AssertionError(f"link {self.name} refused: {c and c.name} {c and c.description}")
        return self

    def wait_detached(self, timeout=DEFAULT_TIMEOUT):
        """Wait for the broker's DETACH and return its error condition (or None)."""
        self.h.wait(lambda: self.is_remote_closed() or self.conn.is_remote_closed(), timeout,
                    f"detach of {self.name}")
        if not self.is_remote_closed():
            c = self.conn.remote_condition
            raise AssertionError(f"expected a DETACH of {self.name}, but the broker closed the connection: "
                                 f"{c and c.name} {c and c.description}")
        return self.link.remote_condition

    def close(self, wait=True, timeout=DEFAULT_TIMEOUT):
        if not (self.link.state & Endpoint.LOCAL_CLOSED):
            self.link.close()
        if wait:
            self.h.wait(self.is_remote_closed, timeout, f"detach reply for {self.name}")

    def detach(self, wait=True, timeout=DEFAULT_TIMEOUT):
        """A DETACH without closed=true."""
        self.link.detach()
        if wait:
            self.h.wait(self.is_remote_closed, timeout, f"detach reply for {self.name}")


class SenderW(_LinkW):
    def __init__(self, harness, conn, link):
        super().__init__(harness, conn, link)
        self.deliveries = []

    def wait_credit(self, n=1, timeout=DEFAULT_TIMEOUT):
        self.h.wait(lambda: self.link.credit >= n, timeout, f"credit >= {n} on {self.name}")
        return self.link.credit

    def send(self, msg=None, body=None, settle=None, **props):
        if msg is None:
            msg = Message(body=body, **props)
        d = self.link.send(msg)
        if settle:
            d.settle()
            return None
        self.deliveries.append(d)
        return d

    def wait_settled(self, deliveries=None, timeout=DEFAULT_TIMEOUT):
        ds = self.deliveries if deliveries is None else deliveries
        self.h.wait(lambda: all(d.remote_state or d.settled for d in ds) or self.is_remote_closed(),
                    timeout, f"outcomes on {self.name}")
        return [d.remote_state for d in ds]

    def send_and_wait(self, msg=None, timeout=DEFAULT_TIMEOUT, **kw):
        d = self.send(msg, **kw)
        self.h.wait(lambda: d.remote_state or self.is_remote_closed(), timeout, f"outcome on {self.name}")
        return d


class ReceiverW(_LinkW):
    def __init__(self, harness, conn, link):
        super().__init__(harness, conn, link)
        self.received = []
        self.all_received = []

    def flow(self, n):
        self.link.flow(n)
        return self

    def drain(self, n):
        self.link.drain(n)
        return self

    def wait_count(self, n, timeout=DEFAULT_TIMEOUT):
        self.h.wait(lambda: len(self.received) >= n, timeout,
                    f"{n} messages on {self.name} (have {len(self.received)})")
        return self.received

    def take(self, n, timeout=DEFAULT_TIMEOUT):
        """Wait for n messages and remove them from the pending list."""
        self.wait_count(n, timeout)
        out, self.received = self.received[:n], self.received[n:]
        return out

    def bodies(self):
        return [r.body for r in self.received]

    @property
    def remote_address(self):
        return self.link.remote_source.address


class ConnW:
    def __init__(self, harness, conn):
        self.h = harness
        self.conn = conn
        self.transport_closed = False
        self.close_seen = False
        self.close_condition = None

    @property
    def remote_condition(self):
        return self.close_condition if self.close_seen else self.conn.remote_condition

    def is_remote_closed(self):
        return self.close_seen or self.transport_closed

    def wait_closed(self, timeout=DEFAULT_TIMEOUT):
        self.h.wait(self.is_remote_closed, timeout, "connection close from broker")
        return self.remote_condition

    def session(self):
        s = self.conn.session()
        s.open()
        return s

    def sender(self, address, name=None, options=None, session=None, wait=True):
        ctx = session if session is not None else self.conn
        link = self.h.container.create_sender(ctx, address, name=name or uid("snd"), options=options)
        w = SenderW(self.h, self, link)
        self.h._links[link] = w
        if wait:
            w.wait_open()
        return w

    def receiver(self, address, name=None, options=None, session=None, dynamic=False, credit=0, wait=True):
        ctx = session if session is not None else self.conn
        link = self.h.container.create_receiver(ctx, address, name=name or uid("rcv"), dynamic=dynamic,
                                                options=options)
        w = ReceiverW(self.h, self, link)
        self.h._links[link] = w
        if credit:
            link.flow(credit)
        if wait:
            w.wait_open()
        return w

    def close(self, timeout=3.0):
        if not (self.conn.state & Endpoint.LOCAL_CLOSED):
            self.conn.close()
        try:
            self.h.wait(self.is_remote_closed, timeout, "close reply")
        except WaitTimeout:
            pass


class Harness:
    def __init__(self):
        self._rec = _Recorder(self)
        self.container = Container(self._rec)
        self.container.timeout = 0.05
        self.container.start()
        # A pending timer keeps the reactor alive while no connection is open
        # (it would otherwise shut itself down and never serve a new connection).
        self._keepalive = self.container.schedule(24 * 3600, Handler())
        self._links = {}
        self._conns = {}
        self.transport_errors = []
        self.connections = []

    def connect(self, url, container_id=None, wait=True, timeout=DEFAULT_TIMEOUT, **kw):
        conn = self.container.connect(url=url, reconnect=False, container_id=container_id or uid("c"), **kw)
        c = ConnW(self, conn)
        self._conns[conn] = c
        self.connections.append(c)
        if wait:
            self.wait(lambda: conn.state & (Endpoint.REMOTE_ACTIVE | Endpoint.REMOTE_CLOSED) or c.transport_closed,
                      timeout, "connection open")
        return c

    def wait(self, pred, timeout=DEFAULT_TIMEOUT, what="condition"):
        deadline = time.monotonic() + timeout
        while True:
            if pred():
                return
            if time.monotonic() > deadline:
                raise WaitTimeout(f"timed out after {timeout}s waiting for {what}")
            self.container.timeout = max(0.001, min(0.05, deadline - time.monotonic()))
            self.container.process()

    def pump(self, seconds):
        """Run the event loop for a while (used to show that nothing more arrives)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.container.timeout = max(0.001, min(0.05, deadline - time.monotonic()))
            self.container.process()

    def close(self):
        for c in self.connections:
            try:
                if not (c.conn.state & Endpoint.LOCAL_CLOSED):
                    c.conn.close()
            except Exception:
                pass
        try:
            self.wait(lambda: all(c.is_remote_closed() for c in self.connections), 2.0, "close")
        except Exception:
            pass
        try:
            self._keepalive.cancel()
            self.container.stop()
            for _ in range(50):
                self.container.timeout = 0.01
                if not self.container.process():
                    break
        except Exception:
            pass


def text_message(body, **props):
    m = Message(body=body)
    for k, v in props.items():
        setattr(m, k, v)
    return m


def data_message(payload, **props):
    m = Message(body=payload)
    m.inferred = True  # bytes -> a Data section
    for k, v in props.items():
        setattr(m, k, v)
    return m


__all__ = [
    "Harness", "uid", "LinkProperties", "Capabilities", "SettleModes", "ExpiryNever", "Delivery", "Link",
    "Message", "Terminus", "symbol", "text_message", "data_message", "WaitTimeout",
]
