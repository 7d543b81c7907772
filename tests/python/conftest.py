"""Fixtures: the real `sluice` binary on loopback, on free ports.

* `broker`          one broker per test module (SLUICE_SHARDS=2, default settings);
                    tests sharing it use unique channel names.
* `broker_factory`  `broker_factory(**env)` starts a broker with extra settings for
                    one test (e.g. CONNECTORS_AMQP10_MAX_UNSETTLED_PER_LINK="10").
* `amqp`            a fresh `Harness` (proton container) closed at teardown.

A broker's stderr goes to a file that is printed when a test using it fails.
"""

import faulthandler
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from amqp_harness import Harness  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SLUICE_BIN = os.environ.get("SLUICE_BIN", os.path.join(ROOT, "target", "release", "sluice"))
if not os.path.isabs(SLUICE_BIN):
    SLUICE_BIN = os.path.join(ROOT, SLUICE_BIN)

PER_TEST_WATCHDOG_S = 90
STARTUP_TIMEOUT_S = 10


def free_port():
    # Below the kernel's ephemeral range (32768 and up): the clients' own connections
    # take their local ports from that range and cannot grab this one before the
    # broker binds it.
    for _ in range(10000):
        port = random.randrange(10000, 32000)
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.bind(("127.0.0.1", port))
            return port
        except OSError:
            continue
        finally:
            s.close()
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_prometheus(text):
    """{(name, frozenset(labels.items())): value}"""
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            continue
        name, _, labels, value = m.groups()
        lab = frozenset(_LABEL.findall(labels or ""))
        try:
            out[(name, lab)] = float(value)
        except ValueError:
            pass
    return out


class Broker:
    def __init__(self, env=None):
        self.extra = dict(env or {})
        self.proc = None
        self.log_path = None
        self.start()

    def start(self):
        self.port = free_port()
        self.admin_port = free_port()
        # Two random picks can be the same port (it happened: the broker then failed
        # to bind its admin endpoint, "Address already in use").
        while self.admin_port == self.port:
            self.admin_port = free_port()
        env = dict(os.environ)
        env.update({
            "CONNECTORS_AMQP10_PORT": str(self.port),
            "CONNECTORS_AMQP10_TLS_PORT": "0",
            "SLUICE_ADMIN_ADDR": f"127.0.0.1:{self.admin_port}",
            "SLUICE_SHARDS": "2",
            "SLUICE_HOST": "127.0.0.1",
        })
        env["SLUICE_DATA_DIR"] = tempfile.mkdtemp(prefix="sluice-data-")
        env.update({k: str(v) for k, v in self.extra.items()})
        fd, self.log_path = tempfile.mkstemp(prefix="sluice-", suffix=".log")
        self._log = os.fdopen(fd, "wb")
        if not os.path.exists(SLUICE_BIN):
            pytest.fail(f"broker binary not found: {SLUICE_BIN} (build it or set SLUICE_BIN)")
        self.proc = subprocess.Popen([SLUICE_BIN], env=env, stdout=self._log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        self.url = f"amqp://127.0.0.1:{self.port}"
        self.admin = f"http://127.0.0.1:{self.admin_port}"
        started = time.monotonic()
        deadline = started + STARTUP_TIMEOUT_S
        last = None
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}:\n{self.log()}")
            try:
                status, body = self.get("/healthz", timeout=0.5)
                last = (status, body)
                if status == 200:
                    break
            except (urllib.error.URLError, ConnectionError, OSError) as e:
                last = repr(e)
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"broker not healthy within {STARTUP_TIMEOUT_S} s (last /healthz: {last}):\n"
                                   f"{self.log()}")
            time.sleep(0.05)
        self.startup_s = time.monotonic() - started
        if self.startup_s > 2:
            sys.stderr.write(f"\nnote: broker took {self.startup_s:.1f} s to become healthy\n")
        # The AMQP listener too. The probe half-closes and reads until the broker has
        # closed its end: the broker ends that connection (and uncounts it) before the
        # probe returns, so a test at CONNECTORS_AMQP10_MAX_CONNECTIONS does not find
        # the probe still holding a place (a CI run once saw its second client refused
        # and its third let in, the probe's place freed between them).
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as probe:
                    probe.shutdown(socket.SHUT_WR)
                    probe.settimeout(STARTUP_TIMEOUT_S)
                    try:
                        while probe.recv(64):
                            pass
                    except ConnectionResetError:
                        pass  # closed by the broker all the same
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"AMQP port not listening:\n{self.log()}")
                time.sleep(0.05)

    def log(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def get(self, path, timeout=5):
        try:
            with urllib.request.urlopen(self.admin + path, timeout=timeout) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def get_json(self, path):
        status, body = self.get(path)
        assert status == 200, f"GET {path} -> {status} {body}"
        return json.loads(body)

    def metrics(self):
        status, body = self.get("/metrics")
        assert status == 200, f"GET /metrics -> {status}"
        return parse_prometheus(body)

    def metric(self, name, **labels):
        return self.metrics().get((name, frozenset(labels.items())), None)

    def wait_metric(self, name, pred, timeout=5, pump=None, **labels):
        """Poll until pred(value) holds (metrics are summed on the shards' control tick).
        `pump` (a Harness) keeps the clients' event loop running meanwhile."""
        deadline = time.monotonic() + timeout
        v = None
        while time.monotonic() < deadline:
            v = self.metric(name, **labels)
            if v is not None and pred(v):
                return v
            if pump is not None:
                pump.pump(0.05)
            else:
                time.sleep(0.05)
        raise AssertionError(f"metric {name}{labels} = {v}, condition not met within {timeout}s")

    def signal(self, sig):
        self.proc.send_signal(sig)

    def stop(self, timeout=5):
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        rc = self.proc.returncode
        try:
            self._log.close()
        except Exception:
            pass
        return rc

    def restart(self, **env):
        self.stop()
        self.extra.update(env)
        self.start()


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)


def _failed(request):
    rep = getattr(request.node, "rep_call", None)
    return rep is not None and rep.failed


def pytest_configure(config):
    config.addinivalue_line("markers", "watchdog(seconds): this test's own watchdog (default 90 s)")


@pytest.fixture(autouse=True)
def _watchdog(request):
    # A last resort against a hang: dump every thread's stack and exit.
    mark = request.node.get_closest_marker("watchdog")
    faulthandler.dump_traceback_later(mark.args[0] if mark else PER_TEST_WATCHDOG_S, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture(scope="module")
def broker(request):
    b = Broker()
    failures_before = request.session.testsfailed
    yield b
    rc = b.stop()
    if request.session.testsfailed > failures_before:
        sys.stderr.write(f"\n----- sluice log (module {request.module.__name__}, exit {rc}) -----\n")
        sys.stderr.write(b.log()[-20000:])


@pytest.fixture
def broker_factory(request):
    started = []

    def make(**env):
        b = Broker(env)
        started.append(b)
        return b

    yield make
    for b in started:
        rc = b.stop()
        if _failed(request):
            sys.stderr.write(f"\n----- sluice log ({request.node.name}, env {b.extra}, exit {rc}) -----\n")
            sys.stderr.write(b.log()[-20000:])


@pytest.fixture
def amqp():
    h = Harness()
    yield h
    h.close()
