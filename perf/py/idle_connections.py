#!/usr/bin/env python3
"""Open N idle AMQP connections (header + OPEN, no SASL) to a broker and report the
broker's RSS before and after, from /proc/<pid>/status.

usage: idle_connections.py HOST PORT PID N
"""
import socket, struct, sys, time

def open_frame(cid: bytes) -> bytes:
    body = b"\xa1" + bytes([len(cid)]) + cid
    lst = b"\xc0" + bytes([1 + len(body)]) + b"\x01" + body
    perf = b"\x00\x53\x10" + lst
    return struct.pack(">I", 8 + len(perf)) + b"\x02\x00\x00\x00" + perf

def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0

def main():
    host, port, pid, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    before = rss_kib(pid)
    socks = []
    for i in range(n):
        s = socket.create_connection((host, port))
        s.sendall(b"AMQP\x00\x01\x00\x00" + open_frame(b"idle-%d" % i))
        socks.append(s)
    # Read each reply (header + OPEN) so every connection is fully open.
    for s in socks:
        s.settimeout(10)
        got = b""
        while len(got) < 16:
            chunk = s.recv(4096)
            if not chunk:
                raise SystemExit("connection closed during handshake")
            got += chunk
    time.sleep(1.0)
    after = rss_kib(pid)
    per = (after - before) / n
    print(f"connections={n} rss_before_kib={before} rss_after_kib={after} per_connection_kib={per:.1f}")
    for s in socks:
        s.close()

if __name__ == "__main__":
    main()
