'use strict';
// Events fan-out and events-store replay with rhea.

const assert = require('node:assert/strict');
const { useBroker, uniqueChannel } = require('./lib/broker');
const { Clients, openSender, openReceiver, collector, waitCredit, waitEvent, sleep } = require('./lib/amqp');

const { test } = useBroker();

/** Collect exactly `n` messages, then make sure no more arrive for `quietMs`. */
async function receiveExactly(receiver, n, { timeout = 10_000, quietMs = 500 } = {}) {
    const col = collector(receiver, n);
    let got;
    try {
        got = await col.wait(timeout);
    } finally {
        col.stop();
    }
    const extra = [];
    const onExtra = (ctx) => extra.push(ctx.message.application_properties);
    receiver.on('message', onExtra);
    await sleep(quietMs);
    receiver.removeListener('message', onExtra);
    assert.deepStrictEqual(extra, [], `more than ${n} messages`);
    return got;
}

test('events fan-out: two subscribers each get all 50 events, pre-settled and in order', { timeout: 20_000 }, async (t, broker) => {
    const c = new Clients(broker, 'fanout');
    try {
        const address = `events/${uniqueChannel('fanout')}`;
        const subs = [];
        for (let k = 0; k < 2; k++) {
            const conn = await c.connect();
            // The broker answers the ATTACH once the subscription is live.
            subs.push(await openReceiver(conn, { source: address, credit_window: 100 }));
        }
        const waits = subs.map((r) => receiveExactly(r, 50));
        const pconn = await c.connect();
        const sender = await openSender(pconn, { target: address, snd_settle_mode: 1 });
        await waitCredit(sender);
        for (let i = 0; i < 50; i++) sender.send({ application_properties: { i }, body: `event-${i}` });
        const results = await Promise.all(waits);
        results.forEach((got, k) => {
            assert.deepStrictEqual(got.map((ctx) => ctx.message.application_properties.i), [...Array(50).keys()], `subscriber ${k} order`);
            assert.deepStrictEqual(got.map((ctx) => ctx.message.body), [...Array(50).keys()].map((i) => `event-${i}`));
            for (const ctx of got) assert.equal(ctx.delivery.remote_settled, true, 'events deliveries are pre-settled');
        });
    } finally {
        await c.closeAll();
    }
});

test('events-store replay: start "first" gets all 20 in order, "sequence:11" gets the last 10', { timeout: 30_000 }, async (t, broker) => {
    const c = new Clients(broker, 'estore');
    try {
        const address = `events-store/${uniqueChannel('replay')}`;
        const pconn = await c.connect();
        const sender = await openSender(pconn, { target: address });
        const accepted = [];
        const allAccepted = new Promise((resolve, reject) => {
            const timer = setTimeout(() => reject(new Error(`only ${accepted.length}/20 accepted`)), 10_000);
            sender.on('accepted', (ctx) => {
                accepted.push(ctx.delivery);
                if (accepted.length === 20) { clearTimeout(timer); resolve(); }
            });
            for (const ev of ['rejected', 'released', 'modified']) {
                sender.on(ev, (ctx) => { clearTimeout(timer); reject(new Error(`publish got '${ev}': ${JSON.stringify(ctx.delivery.remote_state)}`)); });
            }
        });
        for (let i = 1; i <= 20; i++) sender.send({ application_properties: { i }, body: { seq: i, text: `stored-${i}` } });
        await allAccepted;

        const conn1 = await c.connect();
        const first = await openReceiver(conn1, {
            source: address,
            credit_window: 50,
            properties: { 'x-opt-kubemq-start': 'first' },
        });
        const all = await receiveExactly(first, 20);
        assert.deepStrictEqual(all.map((ctx) => ctx.message.application_properties.i), [...Array(20).keys()].map((i) => i + 1));
        assert.deepStrictEqual(all[0].message.body, { seq: 1, text: 'stored-1' });
        assert.deepStrictEqual(all[19].message.body, { seq: 20, text: 'stored-20' });

        const conn2 = await c.connect();
        const from11 = await openReceiver(conn2, {
            source: address,
            credit_window: 50,
            properties: { 'x-opt-kubemq-start': 'sequence:11' },
        });
        const tail = await receiveExactly(from11, 10);
        assert.deepStrictEqual(tail.map((ctx) => ctx.message.application_properties.i), [...Array(10).keys()].map((i) => i + 11));
    } finally {
        await c.closeAll();
    }
});

function metric(text, name) {
    const line = text.split('\n').find((l) => l.startsWith(`${name} `) || l.startsWith(`${name}{`));
    return line ? Number(line.trim().split(/\s+/).pop()) : 0;
}

test('events at zero credit are dropped and counted; the subscriber gets only what its credit allows', { timeout: 20_000 }, async (t, broker) => {
    const c = new Clients(broker, 'nocredit');
    try {
        const address = `events/${uniqueChannel('nocredit')}`;
        const before = metric((await broker.get('/metrics')).body, 'kubemq_amqp10_events_dropped_no_credit_total');
        const conn = await c.connect();
        const receiver = await openReceiver(conn, { source: address, credit_window: 0 });
        receiver.flow(5);
        const col = collector(receiver, 5);
        // The credit goes to the channel's home from this connection's shard; the
        // events may come through another one: give it time to land first.
        await sleep(300);
        const pconn = await c.connect();
        const sender = await openSender(pconn, { target: address, snd_settle_mode: 1 });
        await waitCredit(sender);
        for (let i = 0; i < 10; i++) sender.send({ application_properties: { i }, body: `e-${i}` });
        const got = await col.wait(5_000);
        col.stop();
        assert.deepStrictEqual(got.map((ctx) => ctx.message.application_properties.i), [0, 1, 2, 3, 4]);
        let after = before;
        const deadline = Date.now() + 3_000;
        while (after - before < 5 && Date.now() < deadline) {
            await sleep(100);
            after = metric((await broker.get('/metrics')).body, 'kubemq_amqp10_events_dropped_no_credit_total');
        }
        assert.equal(after - before, 5, 'kubemq_amqp10_events_dropped_no_credit_total delta');
        // Fresh credit does not resurrect dropped events.
        const extra = [];
        receiver.on('message', (ctx) => extra.push(ctx.message.application_properties.i));
        receiver.flow(10);
        await sleep(500);
        assert.deepStrictEqual(extra, []);
    } finally {
        await c.closeAll();
    }
});

for (const kind of ['events', 'events-store']) {
    test(`drain on an idle ${kind} subscription completes promptly with credit 0`, { timeout: 15_000 }, async (t, broker) => {
        const c = new Clients(broker, `drain-${kind}`);
        try {
            const address = `${kind}/${uniqueChannel('drain')}`;
            const conn = await c.connect();
            const receiver = await openReceiver(conn, { source: address, credit_window: 0 });
            receiver.flow(7);
            await sleep(100);
            const started = Date.now();
            const drained = waitEvent(receiver, 'receiver_drained', { timeout: 5_000, failOn: ['receiver_close'] });
            receiver.drain_credit();
            await drained;
            t.diagnostic(`drain answered after ${Date.now() - started} ms`);
            assert.equal(receiver.credit, 0);
            assert.equal(receiver.delivery_count, 7);
            // The link still works after the drain.
            receiver.drain = false;
            const col = collector(receiver, 1);
            receiver.flow(3);
            await sleep(100);
            const pconn = await c.connect();
            const sender = await openSender(pconn, { target: address, snd_settle_mode: 1 });
            await waitCredit(sender);
            sender.send({ body: 'after-drain' });
            const got = await col.wait(5_000);
            col.stop();
            assert.equal(got[0].message.body, 'after-drain');
        } finally {
            await c.closeAll();
        }
    });
}
