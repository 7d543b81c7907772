'use strict';
// A third party's suite against sluice: rhea's own example tests (examples/test_examples.js
// of rhea 3.0.4, run with mocha as rhea's `npm run run-examples` does), vendored unchanged
// with the examples they run in tests/third_party/rhea-examples.
//
// Its brokered examples connect to localhost:5672 with the bare address `examples`
// (sluice's default pattern: queues), so the suite runs in a network namespace of its own
// with a sluice of its own on 5672 there (tests/third_party/netns_suite.py, `unshare
// --net --pid`: needs root, as CI has; skipped without root, failed when root cannot make
// one; everything the run started dies with it).
//
// Of its six brokered tests, three pass against sluice and are asserted here: hello world,
// send and receive of 100 messages, and client/server (a server that replies through an
// anonymous sender to the client's dynamic reply node, from another connection). Not run,
// because sluice does not do what they need: `selector` (a selector on a queue: sluice
// evaluates selectors on events and events-store only), `pub-sub` (the address
// `topic://PRICE.STOCK.NYSE.RHT`: `:` is not allowed in a channel name, refused
// amqp:not-found "unknown address prefix"), `queue browser` (distribution-mode copy on a
// queue, refused as the reference refuses it). The suite's direct (peer-to-peer) tests do
// not involve a broker and are not run.

const assert = require('node:assert/strict');
const { test } = require('node:test');
const { spawnSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const ROOT = path.resolve(__dirname, '..', '..');
const SLUICE_BIN = process.env.SLUICE_BIN
    ? path.resolve(process.env.SLUICE_BIN) : path.join(ROOT, 'target', 'release', 'sluice');
const SUITE = path.join(ROOT, 'tests', 'third_party', 'rhea-examples');
const RUNNER = path.join(ROOT, 'tests', 'third_party', 'netns_suite.py');
const MOCHA = path.join(__dirname, 'node_modules', '.bin', 'mocha');
const PASSING = ['helloworld', 'send and receive', 'client/server'];

test("rhea's example suite passes against sluice", { skip: process.getuid() !== 0 && 'needs root' }, () => {
    const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-rhea-examples-'));
    try {
        const grep = `^brokered examples (${PASSING.map((t) => t.replace('/', '\\/')).join('|')})$`;
        const r = spawnSync('unshare', ['--net', '--pid', '--fork', '--kill-child', 'python3', RUNNER, SLUICE_BIN,
            scratch, SUITE, MOCHA, '--timeout', '10000', '--reporter', 'spec', 'test_examples.js', '--grep', grep], {
            encoding: 'utf8',
            // Longer than the runner's own limits (the suite 60 s, sluice's start and stop 20 s).
            timeout: 95000,
            killSignal: 'SIGKILL',
            maxBuffer: 16 << 20,
            // The examples `require('rhea')` and `require('minimist')` from this package's modules.
            env: { ...process.env, NODE_PATH: path.join(__dirname, 'node_modules') },
        });
        const log = path.join(scratch, 'sluice.log');
        const detail = `${r.error || ''}\n${r.stdout}\n${r.stderr}\n--- sluice log ---\n` +
            `${fs.existsSync(log) ? fs.readFileSync(log, 'utf8') : ''}`;
        assert.equal(r.status, 0, detail);
        assert.match(r.stdout, new RegExp(`${PASSING.length} passing`), detail);
        assert.doesNotMatch(r.stdout, /failing/, detail);
        for (const t of PASSING) {
            assert.ok(r.stdout.includes(t), `${t} did not run\n${detail}`);
        }
    } finally {
        fs.rmSync(scratch, { recursive: true, force: true });
    }
});
