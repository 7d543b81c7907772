"""Run a third party's test suite against sluice in a network namespace of its own.

    unshare --net --pid --fork --kill-child python3 netns_suite.py \
        <sluice binary> <scratch dir> <suite dir> <command>...

Inside the namespace (`unshare --net`, root): bring its loopback up, start sluice on
5672 there (the port the suites' examples use, some with no way to name another), copy
the suite to <scratch dir>/work (the suites write files where they run) and run the
command there, at most 60 s. Exits with the command's status. sluice's output goes to
<scratch dir>/sluice.log. Standard library only: the Python and Node tests both use it.

In a PID namespace of its own too (`--pid --fork --kill-child`): when this process dies,
however it dies (a caller's timeout kills it), the kernel kills everything it started,
sluice and whatever the suite left running (an example server), with it. sluice gets none
of the caller's SLUICE_* and CONNECTORS_AMQP10_* settings: its defaults, as the suites
expect.
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
# The suite's limit; with sluice's start (10 s) and stop (10 s) at most 80 s in all, which
# the callers' own timeouts (95 s) exceed.
SUITE_TIMEOUT_S = 60


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
    sluice, scratch, suite = sys.argv[1:4]
    command = sys.argv[4:]
    loopback_up()
    data = os.path.join(scratch, "data")
    os.makedirs(data)
    with open(os.path.join(scratch, "sluice.log"), "wb") as log:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLUICE_", "CONNECTORS_AMQP10_"))}
        broker = subprocess.Popen(
            [sluice, "--shards", "2", "--data-dir", data, "--port", "5672", "--admin-addr", "127.0.0.1:8080"],
            stdout=log, stderr=subprocess.STDOUT, env=env)
        try:
            wait_port(5672, broker)
            work = os.path.join(scratch, "work")
            shutil.copytree(suite, work)
            sys.stdout.flush()
            status = subprocess.run(command, cwd=work, timeout=SUITE_TIMEOUT_S).returncode
        finally:
            broker.terminate()
            try:
                broker.wait(10)
            except subprocess.TimeoutExpired:
                broker.kill()
    if broker.returncode not in (0, -15):
        print(f"sluice exited with status {broker.returncode}")
        status = status or 1
    sys.exit(status)


if __name__ == "__main__":
    main()
