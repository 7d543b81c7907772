'use strict';
// Starts the real `sluice` binary as a child process on free ports, waits for
// GET /healthz to answer 200, and stops it (SIGTERM, then SIGKILL after 5 s).
//
// `useBroker()` wires this into a test file: it starts one broker in a `before`
// hook, stops it in an `after` hook, and returns a `test` wrapper that records
// failures (including our own timeouts) so the broker's stderr is printed when
// any test of the file failed.

const { spawn } = require('node:child_process');
const fs = require('node:fs');
const http = require('node:http');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');
const nodeTest = require('node:test');

const DEFAULT_BIN = path.resolve(__dirname, '..', '..', '..', 'target', 'release', 'sluice');
const HEALTH_DEADLINE_MS = 10_000;
const KILL_GRACE_MS = 5_000;
const STDERR_KEEP_BYTES = 256 * 1024;

/** A free TCP port on 127.0.0.1 (listen on port 0, read it, close). */
function freePort() {
    return new Promise((resolve, reject) => {
        const srv = net.createServer();
        srv.unref();
        srv.on('error', reject);
        srv.listen(0, '127.0.0.1', () => {
            const { port } = srv.address();
            srv.close((err) => (err ? reject(err) : resolve(port)));
        });
    });
}

/** Several distinct free ports. */
async function freePorts(n) {
    const ports = new Set();
    while (ports.size < n) ports.add(await freePort());
    return [...ports];
}

function sleep(ms) {
    return new Promise((resolve) => setTimeout(resolve, ms));
}

/** One GET; resolves with the status code, or rejects on a socket error/timeout. */
function httpGet(port, urlPath, timeoutMs = 1000) {
    return new Promise((resolve, reject) => {
        const req = http.get({ host: '127.0.0.1', port, path: urlPath, timeout: timeoutMs }, (res) => {
            let body = '';
            res.setEncoding('utf8');
            res.on('data', (c) => { body += c; });
            res.on('end', () => resolve({ status: res.statusCode, body }));
        });
        req.on('timeout', () => req.destroy(new Error(`GET ${urlPath} timed out`)));
        req.on('error', reject);
    });
}

class Broker {
    constructor(opts = {}) {
        this.bin = process.env.SLUICE_BIN ? path.resolve(process.env.SLUICE_BIN) : DEFAULT_BIN;
        this.extraEnv = opts.env || {};
        this.stderr = '';
        this.stdout = '';
        this.child = null;
        this.exit = null; // {code, signal} once exited
        this.failed = false; // set by the test wrapper
        this.failures = [];
    }

    async start() {
        if (!fs.existsSync(this.bin)) {
            throw new Error(`sluice binary not found at ${this.bin} (set SLUICE_BIN or run cargo build --release --bin sluice)`);
        }
        const [amqpPort, adminPort] = await freePorts(2);
        this.amqpPort = amqpPort;
        this.adminPort = adminPort;
        this.dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-node-'));
        const env = {
            ...process.env,
            CONNECTORS_AMQP10_PORT: String(amqpPort),
            CONNECTORS_AMQP10_TLS_PORT: '0',
            SLUICE_ADMIN_ADDR: `127.0.0.1:${adminPort}`,
            SLUICE_HOST: '127.0.0.1',
            SLUICE_SHARDS: '2',
            SLUICE_DATA_DIR: this.dataDir,
            ...this.extraEnv,
        };
        this.child = spawn(this.bin, [], { env, stdio: ['ignore', 'pipe', 'pipe'] });
        this.child.stdout.setEncoding('utf8');
        this.child.stderr.setEncoding('utf8');
        this.child.stdout.on('data', (c) => { this.stdout = keepTail(this.stdout + c); });
        this.child.stderr.on('data', (c) => { this.stderr = keepTail(this.stderr + c); });
        this.exited = new Promise((resolve) => {
            this.child.on('exit', (code, signal) => {
                this.exit = { code, signal };
                resolve(this.exit);
            });
        });
        this.child.on('error', (err) => { this.stderr += `\n[spawn error] ${err.message}\n`; });
        // Never leave a broker behind if this test process dies.
        this._onExit = () => { try { this.child.kill('SIGKILL'); } catch (_) { /* gone */ } };
        process.on('exit', this._onExit);

        await this.waitHealthy();
        return this;
    }

    async waitHealthy() {
        const deadline = Date.now() + HEALTH_DEADLINE_MS;
        let last = 'no answer';
        while (Date.now() < deadline) {
            if (this.exit) {
                throw new Error(`sluice exited during start-up (${JSON.stringify(this.exit)}):\n${this.stderr}`);
            }
            try {
                const res = await httpGet(this.adminPort, '/healthz', 500);
                if (res.status === 200) return;
                last = `status ${res.status}`;
            } catch (err) {
                last = err.message;
            }
            await sleep(50);
        }
        await this.stop();
        throw new Error(`sluice not healthy within ${HEALTH_DEADLINE_MS} ms (last: ${last}):\n${this.stderr}`);
    }

    /** GET an admin path (e.g. /metrics); resolves {status, body}. */
    get(urlPath) {
        return httpGet(this.adminPort, urlPath, 2000);
    }

    async stop() {
        if (!this.child) return;
        if (!this.exit) {
            this.child.kill('SIGTERM');
            const timer = setTimeout(() => {
                if (!this.exit) this.child.kill('SIGKILL');
            }, KILL_GRACE_MS);
            await this.exited;
            clearTimeout(timer);
        }
        process.removeListener('exit', this._onExit);
        try { fs.rmSync(this.dataDir, { recursive: true, force: true }); } catch (_) { /* best effort */ }
    }

    report() {
        const lines = [
            `---- sluice stderr (${this.bin}, amqp port ${this.amqpPort}, admin port ${this.adminPort}, exit ${JSON.stringify(this.exit)}) ----`,
            `failed tests: ${this.failures.join('; ')}`,
            this.stderr || '(empty)',
            '---- end of sluice stderr ----',
        ];
        return lines.join('\n');
    }
}

function keepTail(s) {
    return s.length > STDERR_KEEP_BYTES ? s.slice(s.length - STDERR_KEEP_BYTES) : s;
}

let channelCounter = 0;
/** A channel name unique across test files, runs and tests (valid charset). */
function uniqueChannel(prefix) {
    channelCounter += 1;
    const rnd = Math.random().toString(36).slice(2, 8);
    return `${prefix}.${process.pid}.${Date.now().toString(36)}.${rnd}.${channelCounter}`;
}

/**
 * Start one broker for the current test file. Returns { broker, test } where
 * `test(name, {timeout}, fn)` is node:test's `test` with:
 *  - a mandatory bounded timeout (also enforced by the runner),
 *  - failure tracking, so the broker's stderr is printed after the file if any failed.
 * `fn` receives (t, broker).
 */
function useBroker(opts = {}) {
    const broker = new Broker(opts);
    nodeTest.before(async () => { await broker.start(); }, { timeout: HEALTH_DEADLINE_MS + 5_000 });
    nodeTest.after(async () => {
        await broker.stop();
        if (broker.failed) process.stderr.write(`\n${broker.report()}\n`);
    }, { timeout: KILL_GRACE_MS + 5_000 });

    function test(name, options, fn) {
        const timeout = options && options.timeout;
        if (!Number.isFinite(timeout) || timeout <= 0) throw new Error(`test "${name}" needs a bounded timeout`);
        return nodeTest(name, { ...options, timeout }, async (t) => {
            let timer;
            // Our own deadline, slightly before the runner's, so we can record it.
            const ownDeadline = new Promise((_, reject) => {
                timer = setTimeout(() => reject(new Error(`test timed out after ${timeout - 250} ms`)), timeout - 250);
            });
            try {
                await Promise.race([Promise.resolve().then(() => fn(t, broker)), ownDeadline]);
            } catch (err) {
                broker.failed = true;
                broker.failures.push(name);
                throw err;
            } finally {
                clearTimeout(timer);
            }
        });
    }
    return { broker, test };
}

module.exports = { Broker, useBroker, freePort, freePorts, uniqueChannel, sleep, httpGet };
