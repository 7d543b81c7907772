#!/usr/bin/env python3
"""Pre-settled events 1 -> 1 with python-qpid-proton: one sender (AtMostOnce) and one
receiver on events/<channel>; prints messages/s received end to end. Events that meet a
receiver without credit are dropped by design (at-most-once): the run ends when all
arrived or when nothing arrived for 1 s after the last send, and reports both counts.

usage: events_presettled.py URL COUNT [BODY_BYTES]
"""
import sys, time, uuid
from proton import Message
from proton.handlers import MessagingHandler
from proton.reactor import Container, AtMostOnce

class Bench(MessagingHandler):
    def __init__(self, url, count, size):
        super().__init__(prefetch=10000, auto_accept=False)
        self.url, self.count, self.body = url, count, b"x" * size
        self.addr = "events/bench-" + uuid.uuid4().hex[:8]
        self.sent = self.received = 0
        self.start = None
        self.last = time.perf_counter()
        self.done = False

    def on_start(self, event):
        self.conn = event.container.connect(self.url)
        self.receiver = event.container.create_receiver(self.conn, self.addr)
        event.container.schedule(0.2, self)

    def on_link_opened(self, event):
        if event.receiver == self.receiver:
            self.sender = event.container.create_sender(self.conn, self.addr, options=AtMostOnce())

    def on_sendable(self, event):
        if self.start is None:
            self.start = time.perf_counter()
        while event.sender.credit > 0 and self.sent < self.count:
            event.sender.send(Message(body=self.body))
            self.sent += 1

    def on_message(self, event):
        self.received += 1
        self.last = time.perf_counter()
        if self.received == self.count:
            self.finish()

    def on_timer_task(self, event):
        if self.done:
            return
        if self.sent == self.count and time.perf_counter() - self.last > 1.0:
            self.finish()
        else:
            event.container.schedule(0.2, self)

    def finish(self):
        if self.done:
            return
        self.done = True
        elapsed = self.last - self.start
        print(f"sent={self.sent} received={self.received} dropped={self.sent - self.received} "
              f"seconds={elapsed:.3f} msgs_per_s={self.received / elapsed:.0f}")
        self.conn.close()

if __name__ == "__main__":
    url, count = sys.argv[1], int(sys.argv[2])
    size = int(sys.argv[3]) if len(sys.argv) > 3 else 100
    Container(Bench(url, count, size)).run()
