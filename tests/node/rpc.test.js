'use strict';
// Commands RPC with rhea: a requester with a dynamic reply node, a responder
// answering through an anonymous sender.

const assert = require('node:assert/strict');
const { useBroker, uniqueChannel } = require('./lib/broker');
const { Clients, openSender, openReceiver, waitEvent, sleep } = require('./lib/amqp');

const { test } = useBroker();

test('commands RPC: dynamic reply node, anonymous-sender responder, executed=true and correlation-id kept', { timeout: 30_000 }, async (t, broker) => {
    const c = new Clients(broker, 'rpc');
    try {
        const address = `commands/${uniqueChannel('rpc')}`;

        // Responder: consumes commands/<ch>, replies to each request's reply-to.
        const rconn = await c.connect();
        const requests = [];
        const replyOutcomes = [];
        const anon = await openSender(rconn); // null target: route by properties.to
        anon.on('accepted', () => replyOutcomes.push('accepted'));
        for (const ev of ['rejected', 'released', 'modified']) {
            anon.on(ev, (ctx) => replyOutcomes.push(`${ev}: ${JSON.stringify(ctx.delivery.remote_state)}`));
        }
        const responder = await openReceiver(rconn, { source: address, credit_window: 10 });
        responder.on('message', (ctx) => {
            const req = ctx.message;
            requests.push(req);
            anon.send({
                to: req.reply_to,
                correlation_id: req.correlation_id,
                body: { echo: req.body, n: requests.length },
            });
        });

        // Requester: dynamic reply node + sender to commands/<ch>.
        const qconn = await c.connect();
        const replyRx = qconn.open_receiver({ source: { dynamic: true }, credit_window: 10 });
        const opened = await waitEvent(replyRx, 'receiver_open', { failOn: ['receiver_error', 'receiver_close'] });
        const replyAddress = opened.receiver.source.address;
        assert.ok(typeof replyAddress === 'string' && replyAddress.length > 0, `dynamic address: ${JSON.stringify(replyAddress)}`);
        t.diagnostic(`dynamic reply node: ${replyAddress}`);
        const sender = await openSender(qconn, { target: address });

        const N = 5;
        const replies = new Map();
        const allReplies = new Promise((resolve, reject) => {
            const timer = setTimeout(() => reject(new Error(`only ${replies.size}/${N} replies; requests seen ${requests.length}; reply outcomes ${JSON.stringify(replyOutcomes)}`)), 15_000);
            replyRx.on('message', (ctx) => {
                replies.set(ctx.message.correlation_id, ctx.message);
                if (replies.size === N) { clearTimeout(timer); resolve(); }
            });
            replyRx.on('receiver_close', (ctx) => {
                clearTimeout(timer);
                reject(new Error(`reply receiver closed: ${JSON.stringify(ctx.receiver.error)}`));
            });
        });
        for (let i = 0; i < N; i++) {
            sender.send({ reply_to: replyAddress, correlation_id: `corr-${i}-${process.pid}`, message_id: `req-${i}`, body: `ping-${i}` });
        }
        await allReplies;

        assert.equal(requests.length, N);
        for (const req of requests) {
            assert.ok(req.reply_to, 'the responder sees a reply-to');
            assert.match(req.body, /^ping-\d$/);
        }
        for (let i = 0; i < N; i++) {
            const corr = `corr-${i}-${process.pid}`;
            const reply = replies.get(corr);
            assert.ok(reply, `no reply with correlation-id ${corr}; got ${JSON.stringify([...replies.keys()])}`);
            assert.equal(reply.application_properties && reply.application_properties['x-opt-kubemq-executed'], true,
                `reply ${corr} application-properties: ${JSON.stringify(reply.application_properties)}`);
            assert.equal(reply.body.echo, `ping-${i}`);
        }
        // The reply can reach the requester before its DISPOSITION reaches the responder.
        const deadline = Date.now() + 5_000;
        while (replyOutcomes.length < N && Date.now() < deadline) await sleep(20);
        assert.deepStrictEqual(replyOutcomes, Array(N).fill('accepted'), 'the responder\'s replies are accepted');
    } finally {
        await c.closeAll();
    }
});

test('commands without a responder: the requester gets executed=false after the ttl', { timeout: 20_000 }, async (t, broker) => {
    const c = new Clients(broker, 'rpc-timeout');
    try {
        const address = `commands/${uniqueChannel('noresponder')}`;
        const conn = await c.connect();
        const replyRx = conn.open_receiver({ source: { dynamic: true }, credit_window: 10 });
        const opened = await waitEvent(replyRx, 'receiver_open', { failOn: ['receiver_error', 'receiver_close'] });
        const replyAddress = opened.receiver.source.address;
        const sender = await openSender(conn, { target: address });
        const started = Date.now();
        const reply = waitEvent(replyRx, 'message', { timeout: 10_000, failOn: ['receiver_close'] });
        sender.send({ reply_to: replyAddress, correlation_id: 'lonely', ttl: 1_000, body: 'anyone?' });
        const ctx = await reply;
        const elapsed = Date.now() - started;
        t.diagnostic(`timeout reply after ${elapsed} ms: ${JSON.stringify(ctx.message.application_properties)}`);
        assert.equal(ctx.message.correlation_id, 'lonely');
        assert.equal(ctx.message.application_properties['x-opt-kubemq-executed'], false);
        assert.ok(elapsed >= 900, `timed out too early (${elapsed} ms)`);
    } finally {
        await c.closeAll();
    }
});

test('queries: the responder\'s reply reaches the requester with its body and correlation-id', { timeout: 20_000 }, async (t, broker) => {
    const c = new Clients(broker, 'query');
    try {
        const address = `queries/${uniqueChannel('query')}`;
        const rconn = await c.connect();
        const anon = await openSender(rconn);
        const responder = await openReceiver(rconn, { source: address, credit_window: 10 });
        responder.on('message', (ctx) => {
            anon.send({ to: ctx.message.reply_to, correlation_id: ctx.message.correlation_id, body: { answer: 42, q: ctx.message.body } });
        });
        const qconn = await c.connect();
        const replyRx = qconn.open_receiver({ source: { dynamic: true }, credit_window: 10 });
        const opened = await waitEvent(replyRx, 'receiver_open', { failOn: ['receiver_error', 'receiver_close'] });
        const sender = await openSender(qconn, { target: address });
        const reply = waitEvent(replyRx, 'message', { timeout: 10_000, failOn: ['receiver_close'] });
        sender.send({ reply_to: opened.receiver.source.address, correlation_id: 'q-1', body: 'meaning?' });
        const ctx = await reply;
        assert.equal(ctx.message.correlation_id, 'q-1');
        assert.deepStrictEqual(ctx.message.body, { answer: 42, q: 'meaning?' });
    } finally {
        await c.closeAll();
    }
});
