"""Run inside a network namespace of its own (`unshare --net`, see
test_proton_examples.py): bring its loopback up, start sluice on 5672 there (the port
the examples use, some with no way to name another), copy proton's example suite to a
scratch directory and run its tests with pytest. Exits with pytest's status.

    python proton_examples_ns.py <sluice binary> <examples dir> <scratch dir> <test name>...
"""

import fcntl
import os
import shutil
import socket
import struct
import subprocess
import sys
import time

SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1


def loopback_up():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        ifr = struct.pack("16sh", b"lo", 0)
        flags = struct.unpack("16sh", fcntl.ioctl(s, SIOCGIFFLAGS, ifr))[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sh", b"lo", flags | IFF_UP))
    finally:
        s.close()


def wait_port(port, proc, timeout=10.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise SystemExit(f"sluice exited with status {proc.returncode} before listening")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"sluice did not listen on {port} within {timeout}s")


def main():
    sluice, examples, scratch = sys.argv[1:4]
    tests = [f"test_examples.py::ExamplesTest::{t}" for t in sys.argv[4:]]
    loopback_up()
    data = os.path.join(scratch, "data")
    os.makedirs(data)
    log = open(os.path.join(scratch, "sluice.log"), "wb")
    broker = subprocess.Popen(
        [sluice, "--shards", "2", "--data-dir", data, "--port", "5672", "--admin-addr", "127.0.0.1:8080"],
        stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_port(5672, broker)
        # A copy: the database examples write their files into the working directory.
        work = os.path.join(scratch, "examples")
        shutil.copytree(examples, work)
        # The suite runs each example as a program found on PATH (`#!/usr/bin/env
        # python3`): this interpreter's directory first, so they get its proton.
        env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
        r = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", "-q", *tests],
            cwd=work, env=env, timeout=60)
        status = r.returncode
    finally:
        broker.terminate()
        try:
            broker.wait(10)
        except subprocess.TimeoutExpired:
            broker.kill()
        log.close()
    if broker.returncode not in (0, -15):
        print(f"sluice exited with status {broker.returncode}")
        status = status or 1
    sys.exit(status)


if __name__ == "__main__":
    main()
