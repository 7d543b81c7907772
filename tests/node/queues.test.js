'use strict';
// Queue pattern with rhea: unsettled round trip, pre-settled bursts cut short by
// rhea's DETACH/CLOSE, drain, channel validation and produce-link credit.

const assert = require('node:assert/strict');
const { useBroker, uniqueChannel } = require('./lib/broker');
const {
    rhea, Clients, waitEvent, openSender, openReceiver, collector, waitCredit, closeConnection, bodyOf, sleep,
} = require('./lib/amqp');

const { test } = useBroker();

/** Resolve when `n` deliveries of `sender` were settled by the broker; reject on a non-accepted outcome. */
function outcomes(sender, n, timeout) {
    const accepted = [];
    const others = [];
    let timer;
    const done = new Promise((resolve, reject) => {
        timer = setTimeout(() => reject(new Error(`only ${accepted.length}/${n} accepted within ${timeout} ms; other outcomes: ${JSON.stringify(others)}`)), timeout);
        sender.on('accepted', (ctx) => {
            accepted.push(ctx.delivery);
            if (accepted.length === n) { clearTimeout(timer); resolve(accepted); }
        });
        for (const ev of ['rejected', 'released', 'modified']) {
            sender.on(ev, (ctx) => {
                others.push({ outcome: ev, tag: String(ctx.delivery.tag), state: ctx.delivery.remote_state });
                clearTimeout(timer);
                reject(new Error(`delivery ${ctx.delivery.tag} got '${ev}': ${JSON.stringify(ctx.delivery.remote_state)}`));
            });
        }
        sender.on('sender_close', (ctx) => {
            clearTimeout(timer);
            const e = ctx.sender.error;
            reject(new Error(`sender detached after ${accepted.length}/${n} accepted: ${e ? `${e.condition}: ${e.description}` : 'no error'}`));
        });
    });
    return { accepted, done };
}

/** rhea hands a null terminus over as a null-valued wrapper. */
function isNullTerminus(x) {
    return x === null || x === undefined || JSON.stringify(x) === 'null';
}

function bodyFor(i) {
    switch (i % 3) {
        case 0: return { kind: 'string', body: `message-${i} ünïcødé ✓` };
        case 1: return { kind: 'object', body: { n: i, text: `obj-${i}`, flag: i % 2 === 0, list: [1, 'two', 3.5], nested: { k: 'v' } } };
        default: {
            const buf = Buffer.alloc(64 + i);
            for (let k = 0; k < buf.length; k++) buf[k] = (k * 7 + i) & 0xff;
            return { kind: 'buffer', body: buf };
        }
    }
}

test('queue round trip: 100 unsettled sends are accepted, then received in order with credit window 10', { timeout: 30_000 }, async (t, broker) => {
    const c = new Clients(broker, 'rt');
    try {
        const address = `queues/${uniqueChannel('roundtrip')}`;
        const conn = await c.connect();
        const sender = await openSender(conn, { target: address });
        const acks = outcomes(sender, 100, 10_000);
        for (let i = 0; i < 100; i++) {
            const { kind, body } = bodyFor(i);
            sender.send({
                message_id: `m-${i}`,
                application_properties: { i, kind },
                body: kind === 'buffer' ? rhea.message.data_section(body) : body,
            });
        }
        const accepted = await acks.done;
        assert.equal(accepted.length, 100);
        for (const d of accepted) assert.equal(d.remote_settled, true, `delivery ${d.tag} accepted but not settled by the broker`);

        const rconn = await c.connect();
        const receiver = await openReceiver(rconn, { source: address, credit_window: 10, autoaccept: true });
        const col = collector(receiver, 100);
        const got = await col.wait(15_000);
        col.stop();
        got.forEach((ctx, idx) => {
            const m = ctx.message;
            assert.equal(m.application_properties.i, idx, `message ${idx} out of order`);
            assert.equal(m.message_id, `m-${idx}`);
            const { kind, body } = bodyFor(idx);
            assert.equal(m.application_properties.kind, kind);
            if (kind === 'buffer') {
                assert.ok(Buffer.isBuffer(bodyOf(m)), `message ${idx}: expected a data section, got ${JSON.stringify(m.body)}`);
                assert.ok(bodyOf(m).equals(body), `message ${idx}: data body differs`);
            } else {
                assert.deepStrictEqual(m.body, body, `message ${idx}: amqp-value body differs`);
            }
        });

        // Everything was accepted, so the queue is now empty: a fresh receiver gets nothing.
        await closeConnection(rconn);
        const r2conn = await c.connect();
        const r2 = await openReceiver(r2conn, { source: address, credit_window: 10 });
        const extra = [];
        r2.on('message', (ctx) => extra.push(ctx.message));
        await sleep(1_500);
        assert.equal(extra.length, 0, `accepted messages were delivered again: ${JSON.stringify(extra.map((m) => m.message_id))}`);
    } finally {
        await c.closeAll();
    }
});

/** Send `n` pre-settled messages as soon as there is credit, then close (link and/or connection) in the same tick. */
async function presettledBurstThenClose(c, address, n, { closeLink }) {
    const conn = await c.connect();
    // Record the order of the performatives rhea writes.
    const written = [];
    const writeFrame = conn._write_frame.bind(conn);
    conn._write_frame = (channel, frame, payload) => {
        const d = frame && frame.constructor && frame.constructor.descriptor;
        written.push(d ? d.symbolic.split(':')[1] : '?');
        return writeFrame(channel, frame, payload);
    };
    const sender = await openSender(conn, { target: address, snd_settle_mode: 1 });
    const credit = await waitCredit(sender);
    for (let i = 0; i < n; i++) {
        sender.send({ message_id: i, application_properties: { i }, body: `burst-${i}` });
    }
    if (closeLink) sender.close();
    conn.close();
    // rhea writes the transfers (as far as credit allows), then DETACH/END/CLOSE, in one go;
    // a later FLOW from the broker can make it write the rest after its DETACH/CLOSE.
    await closeConnection(conn, 5_000);
    const firstEnd = written.findIndex((p) => p === 'detach' || p === 'end' || p === 'close');
    const beforeEnd = written.slice(0, firstEnd < 0 ? written.length : firstEnd).filter((p) => p === 'transfer').length;
    return { credit, total: sender.delivery_count, beforeEnd, firstEnd: written[firstEnd] };
}

async function receiveExactly(c, address, expected, t) {
    const rconn = await c.connect();
    const receiver = await openReceiver(rconn, { source: address, credit_window: 200 });
    const col = collector(receiver, expected);
    let got;
    try {
        got = await col.wait(15_000);
    } finally {
        col.stop();
    }
    // And nothing beyond that.
    const extra = [];
    receiver.on('message', (ctx) => extra.push(ctx.message.application_properties.i));
    await sleep(1_200);
    assert.deepStrictEqual(extra, [], 'more messages than the client wrote');
    got.forEach((ctx, idx) => {
        assert.equal(ctx.message.application_properties.i, idx, `message ${idx} out of order`);
        assert.equal(ctx.message.body, `burst-${idx}`);
    });
    t.diagnostic(`received ${got.length} messages`);
}

test('pre-settled burst of 1000 then an immediate connection close: all 1000 are delivered', { timeout: 40_000 }, async (t, broker) => {
    const c = new Clients(broker, 'burst');
    try {
        const address = `queues/${uniqueChannel('burst')}`;
        const { credit, total, beforeEnd, firstEnd } = await presettledBurstThenClose(c, address, 1000, { closeLink: false });
        assert.ok(credit >= 1000, `initial credit ${credit} < 1000`);
        assert.equal(total, 1000);
        assert.equal(beforeEnd, 1000, `rhea should have written all 1000 transfers before its ${firstEnd}`);
        await receiveExactly(c, address, 1000, t);
    } finally {
        await c.closeAll();
    }
});

test('pre-settled burst of 1000 then link DETACH and CLOSE in the same write: all 1000 are delivered', { timeout: 40_000 }, async (t, broker) => {
    const c = new Clients(broker, 'burst-detach');
    try {
        const address = `queues/${uniqueChannel('burstdetach')}`;
        const { total, beforeEnd, firstEnd } = await presettledBurstThenClose(c, address, 1000, { closeLink: true });
        assert.equal(total, 1000);
        assert.equal(firstEnd, 'detach');
        assert.equal(beforeEnd, 1000, 'rhea should have written all 1000 transfers before its DETACH');
        await receiveExactly(c, address, 1000, t);
    } finally {
        await c.closeAll();
    }
});

// rhea writes as many transfers as its credit allows, then DETACH/END/CLOSE; the
// broker's top-up FLOW then makes rhea write the rest AFTER its DETACH and CLOSE.
// Whatever arrived before the DETACH is delivered; transfers after it belong to a
// detached handle and are not.
test('pre-settled burst beyond the credit then close: exactly what rhea wrote before its DETACH is delivered', { timeout: 40_000 }, async (t, broker) => {
    const c = new Clients(broker, 'burst-over');
    try {
        const address = `queues/${uniqueChannel('burstover')}`;
        const { credit, total, beforeEnd, firstEnd } = await presettledBurstThenClose(c, address, 1500, { closeLink: true });
        t.diagnostic(`credit ${credit}; rhea wrote ${beforeEnd} transfers before its ${firstEnd} and ${total - beforeEnd} after`);
        assert.equal(firstEnd, 'detach');
        assert.equal(beforeEnd, credit, `rhea wrote ${beforeEnd} before DETACH with credit ${credit}`);
        await receiveExactly(c, address, beforeEnd, t);
    } finally {
        await c.closeAll();
    }
});

test('drain on an empty queue completes promptly with credit 0; held messages flow on new credit', { timeout: 20_000 }, async (t, broker) => {
    const c = new Clients(broker, 'drain');
    try {
        const address = `queues/${uniqueChannel('drain')}`;
        const conn = await c.connect();
        const receiver = await openReceiver(conn, { source: address, credit_window: 0, autoaccept: true });
        const received = [];
        receiver.on('message', (ctx) => received.push(ctx.message));
        receiver.flow(10);
        assert.equal(receiver.credit, 10);
        await sleep(200); // let the long-poll start on the empty queue
        const started = Date.now();
        const drained = waitEvent(receiver, 'receiver_drained', { timeout: 5_000, failOn: ['receiver_close'] });
        receiver.drain_credit();
        await drained;
        const elapsed = Date.now() - started;
        t.diagnostic(`drain answered after ${elapsed} ms`);
        assert.equal(receiver.credit, 0, 'credit after drain');
        assert.equal(receiver.delivery_count, 10, 'delivery-count must advance by the drained credit');
        assert.equal(received.length, 0);
        assert.ok(elapsed < 3_000, `drain took ${elapsed} ms`);

        // Messages that arrive at zero credit wait in the queue ...
        receiver.drain = false;
        const sconn = await c.connect();
        const sender = await openSender(sconn, { target: address });
        const acks = outcomes(sender, 3, 5_000);
        for (let i = 0; i < 3; i++) sender.send({ application_properties: { i }, body: `held-${i}` });
        await acks.done;
        await sleep(500);
        assert.equal(received.length, 0, 'no delivery without credit');
        // ... and flow once credit is granted again.
        const col = collector(receiver, 3);
        receiver.flow(5);
        const got = await col.wait(5_000);
        col.stop();
        assert.deepStrictEqual(got.map((ctx) => ctx.message.body), ['held-0', 'held-1', 'held-2']);
    } finally {
        await c.closeAll();
    }
});

test('invalid channel names are refused with amqp:not-found and the connection stays usable', { timeout: 20_000 }, async (t, broker) => {
    const c = new Clients(broker, 'badch');
    try {
        const conn = await c.connect();
        const bad = [
            'queues/bad channel',
            'queues/tab\tchannel',
            'queues/wild*card',
            'queues/wild>card',
            'queues/semi;colon',
            'queues/co:lon',
            'queues/trailing.',
            'queues/',
            `queues/${'x'.repeat(256)}`,
            'nosuchprefix/chan',
        ];
        // A refused link is answered, per AMQP 1.0 2.6.3, by an ATTACH with a null
        // terminus followed at once by DETACH(error): rhea reports 'receiver_open'
        // (with a null remote source), then 'receiver_error'.
        for (const address of bad) {
            const receiver = conn.open_receiver(address);
            const opened = [];
            receiver.on('receiver_open', (ctx) => opened.push(ctx.receiver.remote.attach.source));
            const ctx = await waitEvent(receiver, 'receiver_error', { timeout: 5_000 })
                .catch((err) => { throw new Error(`receiver on ${JSON.stringify(address)}: ${err.message}`); });
            const err = ctx.receiver.error;
            assert.equal(err && err.condition, 'amqp:not-found', `receiver on ${JSON.stringify(address)}: ${JSON.stringify(err)}`);
            for (const src of opened) {
                assert.ok(isNullTerminus(src), `refused receiver on ${JSON.stringify(address)} was attached with source ${JSON.stringify(src)}`);
            }
        }
        const sender = conn.open_sender('queues/bad channel');
        const sopened = [];
        sender.on('sender_open', (ctx) => sopened.push(ctx.sender.remote.attach.target));
        const sctx = await waitEvent(sender, 'sender_error', { timeout: 5_000 });
        assert.equal(sctx.sender.error && sctx.sender.error.condition, 'amqp:not-found');
        for (const tgt of sopened) assert.ok(isNullTerminus(tgt), `refused sender attached with target ${JSON.stringify(tgt)}`);

        // A valid 255-byte channel is fine, on the same connection.
        const ok = await openReceiver(conn, { source: `queues/${uniqueChannel('ok').padEnd(255, 'y')}` });
        assert.ok(ok.is_open());
    } finally {
        await c.closeAll();
    }
});

test('produce link gets link-credit 1024 (MaxUnsettledPerLink) and is topped up beyond it', { timeout: 30_000 }, async (t, broker) => {
    const c = new Clients(broker, 'credit');
    try {
        const address = `queues/${uniqueChannel('credit')}`;
        const conn = await c.connect();
        const sender = await openSender(conn, { target: address });
        const credit = await waitCredit(sender);
        assert.equal(credit, 1024);
        assert.equal(sender.credit, 1024);

        // 1500 unsettled sends need top-ups beyond the first window; all are accepted.
        const acks = outcomes(sender, 1500, 20_000);
        for (let i = 0; i < 1500; i++) sender.send({ body: `c-${i}` });
        await acks.done;
        assert.equal(sender.delivery_count, 1500);
        assert.ok(sender.credit > 0 && sender.credit <= 1024, `credit after top-ups: ${sender.credit}`);
    } finally {
        await c.closeAll();
    }
});

test('queue settlement: released and modified redeliver with a raised delivery-count, detach returns, rejected removes', { timeout: 30_000 }, async (t, broker) => {
    const c = new Clients(broker, 'settle');
    try {
        const address = `queues/${uniqueChannel('settle')}`;
        const sconn = await c.connect();
        const sender = await openSender(sconn, { target: address });
        const acks = outcomes(sender, 1, 5_000);
        sender.send({ message_id: 'only', body: 'settle-me' });
        await acks.done;

        const conn = await c.connect();
        const next = async (receiver) => {
            const p = waitEvent(receiver, 'message', { timeout: 5_000, failOn: ['receiver_close'] });
            receiver.flow(1);
            return p;
        };
        let receiver = await openReceiver(conn, { source: address, credit_window: 0, autoaccept: false });

        let ctx = await next(receiver);
        assert.equal(ctx.message.body, 'settle-me');
        assert.equal(ctx.message.delivery_count || 0, 0, 'fresh message delivery-count');
        assert.equal(ctx.message.first_acquirer, true, 'fresh message first-acquirer');
        ctx.delivery.release();

        ctx = await next(receiver);
        assert.equal(ctx.message.body, 'settle-me');
        assert.equal(ctx.message.delivery_count, 1, 'delivery-count after one release');
        assert.ok(!ctx.message.first_acquirer, 'first-acquirer only on the first delivery');
        ctx.delivery.modified({ delivery_failed: true });

        ctx = await next(receiver);
        assert.equal(ctx.message.body, 'settle-me');
        assert.equal(ctx.message.delivery_count, 2, 'delivery-count after release + modified');
        // Leave it unsettled and detach: the broker returns it to the queue.
        receiver.close();
        await waitEvent(receiver, 'receiver_close', { timeout: 5_000 });

        receiver = await openReceiver(conn, { source: address, credit_window: 0, autoaccept: false });
        ctx = await next(receiver);
        assert.equal(ctx.message.body, 'settle-me', 'an unsettled delivery comes back after DETACH');
        assert.ok(ctx.message.delivery_count >= 2, `delivery-count after detach: ${ctx.message.delivery_count}`);
        ctx.delivery.reject({ condition: 'amqp:internal-error', description: 'test reject' });

        const extra = [];
        receiver.on('message', (m) => extra.push(m.message.body));
        receiver.flow(5);
        await sleep(1_500);
        assert.deepStrictEqual(extra, [], 'a rejected message is removed');
    } finally {
        await c.closeAll();
    }
});

test('multi-frame messages: a 1 MiB body sent in broker-sized frames and received in 4096-byte frames is intact', { timeout: 30_000 }, async (t, broker) => {
    const c = new Clients(broker, 'bigmsg');
    try {
        const address = `queues/${uniqueChannel('big')}`;
        const body = Buffer.alloc(1024 * 1024);
        for (let k = 0; k < body.length; k++) body[k] = (k * 31 + (k >> 8)) & 0xff;
        const conn = await c.connect({ max_frame_size: 4096 });
        const sender = await openSender(conn, { target: address });
        const acks = outcomes(sender, 2, 15_000);
        sender.send({ message_id: 'big', body: rhea.message.data_section(body) });
        sender.send({ message_id: 'small', body: 'after the big one' });
        await acks.done;
        const rconn = await c.connect({ max_frame_size: 4096 });
        const receiver = await openReceiver(rconn, { source: address, credit_window: 2 });
        const col = collector(receiver, 2);
        const got = await col.wait(15_000);
        col.stop();
        assert.equal(got[0].message.message_id, 'big');
        assert.ok(bodyOf(got[0].message).equals(body), 'large body differs');
        assert.equal(got[1].message.body, 'after the big one');
    } finally {
        await c.closeAll();
    }
});
