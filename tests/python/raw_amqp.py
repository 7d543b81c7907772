"""Hand-encoded AMQP 1.0 frames over a plain socket, for what proton will not do:
an OPEN without idle-time-out followed by silence, an empty container-id, a second
OPEN, BEGIN beyond the advertised channel-max.

Only the few encodings these tests need; the reader splits frames and reports each
performative's descriptor code and any `amqp:*` condition symbol inside it.
"""

import re
import socket
import struct
import time

AMQP_HEADER = b"AMQP\x00\x01\x00\x00"

OPEN, BEGIN, ATTACH, FLOW, TRANSFER, DISPOSITION, DETACH, END, CLOSE = range(0x10, 0x19)
NAMES = {OPEN: "open", BEGIN: "begin", ATTACH: "attach", FLOW: "flow", TRANSFER: "transfer",
         DISPOSITION: "disposition", DETACH: "detach", END: "end", CLOSE: "close"}


def null():
    return b"\x40"


def string(s):
    b = s.encode()
    return (b"\xa1" + bytes([len(b)]) + b) if len(b) < 256 else (b"\xb1" + struct.pack(">I", len(b)) + b)


def uint(n):
    return b"\x70" + struct.pack(">I", n)


def ushort(n):
    return b"\x60" + struct.pack(">H", n)


def described_list(code, fields):
    body = b"".join(fields)
    return b"\x00\x53" + bytes([code]) + b"\xd0" + struct.pack(">II", len(body) + 4, len(fields)) + body


def frame(body, channel=0):
    return struct.pack(">IBBH", 8 + len(body), 2, 0, channel) + body


def open_frame(container_id="raw-client", idle_timeout_ms=None):
    fields = [string(container_id)]
    if idle_timeout_ms is not None:
        # container-id, hostname, max-frame-size, channel-max, idle-time-out
        fields += [null(), null(), null(), uint(idle_timeout_ms)]
    return frame(described_list(OPEN, fields))


def begin_frame(channel):
    # remote-channel (null), next-outgoing-id, incoming-window, outgoing-window
    return frame(described_list(BEGIN, [null(), uint(0), uint(2048), uint(2048)]), channel)


def boolean(b):
    return b"\x41" if b else b"\x42"


def attach_frame(name, handle, address, client_is_sender=True, channel=0):
    """ATTACH with a source and target; `address` goes on the target of a sender,
    the source of a receiver."""
    src = described_list(0x28, [] if client_is_sender else [string(address)])
    tgt = described_list(0x29, [string(address)] if client_is_sender else [])
    # name, handle, role, snd-settle-mode, rcv-settle-mode, source, target
    fields = [string(name), uint(handle), boolean(not client_is_sender), null(), null(), src, tgt]
    if client_is_sender:
        fields += [null(), null(), uint(0)]  # unsettled, incomplete-unsettled, initial-delivery-count
    return frame(described_list(ATTACH, fields), channel)


def flow_frame(handle, link_credit, delivery_count=0, channel=0):
    # next-incoming-id, incoming-window, next-outgoing-id, outgoing-window,
    # handle, delivery-count, link-credit
    fields = [uint(0), uint(2048), uint(0), uint(2048), uint(handle), uint(delivery_count), uint(link_credit)]
    return frame(described_list(FLOW, fields), channel)


_COND = re.compile(rb"amqp:[a-z:\-]+")


class Described:
    def __init__(self, descriptor, value):
        self.descriptor, self.value = descriptor, value

    def __repr__(self):
        return f"Described({self.descriptor!r}, {self.value!r})"


def decode(buf, i=0):
    """One AMQP value at buf[i:] -> (value, next index). Enough for performatives."""
    c = buf[i]
    i += 1
    fixed = {0x40: 0, 0x41: 0, 0x42: 0, 0x43: 0, 0x44: 0, 0x45: 0, 0x50: 1, 0x51: 1, 0x52: 1, 0x53: 1,
             0x54: 1, 0x55: 1, 0x56: 1, 0x60: 2, 0x61: 2, 0x70: 4, 0x71: 4, 0x72: 4, 0x73: 4, 0x80: 8,
             0x81: 8, 0x82: 8, 0x83: 8, 0x98: 16}
    if c == 0x00:
        d, i = decode(buf, i)
        v, i = decode(buf, i)
        return Described(d, v), i
    if c in fixed:
        n = fixed[c]
        raw = buf[i:i + n]
        i += n
        if c == 0x40:
            return None, i
        if c in (0x41, 0x42):
            return c == 0x41, i
        if c in (0x43, 0x44):
            return 0, i
        if c == 0x45:
            return [], i
        if c == 0x56:
            return raw[0] == 1, i
        if c in (0x51, 0x54, 0x55, 0x61, 0x71, 0x81, 0x83):
            return int.from_bytes(raw, "big", signed=True), i
        return int.from_bytes(raw, "big"), i
    if c in (0xa0, 0xa1, 0xa3, 0xb0, 0xb1, 0xb3):
        w = 1 if c < 0xb0 else 4
        n = int.from_bytes(buf[i:i + w], "big")
        i += w
        raw = buf[i:i + n]
        i += n
        return (bytes(raw) if c in (0xa0, 0xb0) else raw.decode()), i
    if c in (0xc0, 0xd0, 0xc1, 0xd1):
        w = 1 if c < 0xd0 else 4
        count = int.from_bytes(buf[i + w:i + 2 * w], "big")
        i += 2 * w
        items = []
        for _ in range(count):
            v, i = decode(buf, i)
            items.append(v)
        if c in (0xc1, 0xd1):
            return dict(zip(items[0::2], items[1::2])), i
        return items, i
    if c in (0xe0, 0xf0):
        w = 1 if c == 0xe0 else 4
        size = int.from_bytes(buf[i:i + w], "big")
        return ("<array>",), i + w + size
    raise ValueError(f"unsupported constructor 0x{c:02x}")


class Frame:
    def __init__(self, channel, body):
        self.channel = channel
        self.body = body
        self.code = body[2] if len(body) >= 3 and body[0] == 0 and body[1] == 0x53 else None
        self.name = NAMES.get(self.code, "empty" if not body else f"0x{self.code}")
        m = _COND.search(body)
        self.condition = m.group(0).decode() if m else None

    def fields(self):
        """The performative's fields, decoded (list; absent trailing fields omitted)."""
        v, _ = decode(self.body, 0)
        return v.value if isinstance(v, Described) else v

    def __repr__(self):
        return f"<{self.name} ch={self.channel} cond={self.condition} {self.body[:80]!r}>"


class RawConn:
    def __init__(self, port, host="127.0.0.1", timeout=10):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.buf = b""
        self.header = None
        self.eof = False

    def send(self, data):
        self.sock.sendall(data)

    def _fill(self, deadline):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        self.sock.settimeout(remaining)
        try:
            data = self.sock.recv(65536)
        except socket.timeout:
            return False
        except (ConnectionResetError, BrokenPipeError):
            self.eof = True
            return False
        if not data:
            self.eof = True
            return False
        self.buf += data
        return True

    def read_header(self, timeout=5):
        deadline = time.monotonic() + timeout
        while len(self.buf) < 8:
            if not self._fill(deadline):
                raise AssertionError(f"no protocol header from broker (eof={self.eof}, got {self.buf!r})")
        self.header, self.buf = self.buf[:8], self.buf[8:]
        return self.header

    def read_frame(self, timeout=5):
        """The next frame, or None on EOF / timeout."""
        deadline = time.monotonic() + timeout
        while True:
            if len(self.buf) >= 8:
                size, doff, _type, channel = struct.unpack(">IBBH", self.buf[:8])
                if len(self.buf) >= size:
                    body = self.buf[doff * 4:size]
                    self.buf = self.buf[size:]
                    return Frame(channel, body)
            if not self._fill(deadline):
                return None

    def frames_until_eof(self, timeout=10):
        """Every frame up to EOF; AssertionError if the socket stays open past timeout."""
        deadline = time.monotonic() + timeout
        out = []
        while True:
            f = self.read_frame(timeout=max(0.01, deadline - time.monotonic()))
            if f is not None:
                out.append(f)
                continue
            if self.eof:
                return out
            if time.monotonic() >= deadline:
                raise AssertionError(f"broker did not close the connection within {timeout}s; frames: {out}")

    def read_until(self, name, timeout=5):
        """Frames up to and including the first `name` performative."""
        deadline = time.monotonic() + timeout
        out = []
        while True:
            f = self.read_frame(timeout=max(0.01, deadline - time.monotonic()))
            if f is None:
                raise AssertionError(f"no {name} frame (eof={self.eof}); frames: {out}")
            out.append(f)
            if f.name == name:
                return out

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


def handshake(port, container_id="raw-client", idle_timeout_ms=None):
    """Bare AMQP header (no SASL layer) + OPEN; returns the connection after the broker's OPEN."""
    c = RawConn(port)
    c.send(AMQP_HEADER + open_frame(container_id, idle_timeout_ms))
    hdr = c.read_header()
    assert hdr == AMQP_HEADER, f"broker answered header {hdr!r}"
    c.read_until("open")
    return c
