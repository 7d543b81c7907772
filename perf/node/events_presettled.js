#!/usr/bin/env node
// Pre-settled events 1 -> 1 with rhea (an independent AMQP 1.0 client): one publisher
// connection (snd-settle-mode settled) and one subscriber connection (asks for settled
// deliveries, keeps a credit window), the same scenario as `sluice-perf events`.
// The publisher runs in a second node process (forked once the subscriber's link is
// attached), so each side has a core of its own, as sluice-perf's threads do: in one
// process the two sides share one JavaScript thread and rhea itself is the limit.
// Prints one JSON line: sent, received, seconds (first send -> last receive), msgs_per_s.
// Each burst of sends goes out in one write: rhea calls socket.write once per frame, and
// Node passes each to the kernel at once unless the socket is corked (one system call per
// message was the publisher's limit against sluice; the same code runs against every broker).
// Deliveries are settled locally on arrival (autoaccept; no disposition is sent for
// pre-settled ones), which frees rhea's session window.
// An event that meets a subscriber without credit is dropped by design (at-most-once):
// the run ends when all arrived, or IDLE_END seconds (default 5) after the last
// delivery once all were sent.
//
// usage: events_presettled.js URL ADDRESS COUNT [BODY_BYTES] [CREDIT] [IDLE_END]
//   URL: amqp://[user:pass@]host:port (PLAIN with a user, else ANONYMOUS)
//   PROCESSES=1 in the environment keeps both sides in one process.
// rhea is resolved from tests/node/node_modules (npm ci there) or NODE_PATH.
'use strict';
const path = require('path');
const { fork } = require('child_process');
let rhea;
try {
    rhea = require('rhea');
} catch (e) {
    rhea = require(path.join(__dirname, '..', '..', 'tests', 'node', 'node_modules', 'rhea'));
}

const [url, address, countArg, sizeArg, creditArg, idleArg, role] = process.argv.slice(2);
if (!url || !address || !countArg) {
    console.error('usage: events_presettled.js URL ADDRESS COUNT [BODY_BYTES] [CREDIT] [IDLE_END]');
    process.exit(2);
}
const count = parseInt(countArg, 10);
const size = parseInt(sizeArg || '100', 10);
const credit = parseInt(creditArg || '10000', 10);
const idleEndMs = parseFloat(idleArg || '5') * 1000;
const u = new URL(url);
const opts = { host: u.hostname, port: parseInt(u.port || '5672', 10), reconnect: false };
if (u.username) {
    opts.username = decodeURIComponent(u.username);
    opts.password = decodeURIComponent(u.password);
}
// Encoded once and sent as it is (`send(payload, tag, format)`), as sluice-perf encodes a
// message once per batch: per-message encoding in rhea's sender was the run's limit.
const payload = rhea.message.encode({ body: rhea.message.data_section(Buffer.alloc(size, 0x2e)) });
const container = rhea.create_container({ id: 'rhea-perf-' + process.pid });

// The publisher: sends COUNT events as credit allows, reports when it starts and ends.
function publish(report) {
    const pubConn = container.connect(opts);
    const sender = pubConn.open_sender({ target: address, snd_settle_mode: 1 });
    let sent = 0, start = 0;
    sender.on('sendable', () => {
        if (!start) {
            start = Date.now();
            report({ start });
        }
        // One write system call per burst, not one per message: rhea writes each frame
        // with its own socket.write, which Node hands to the kernel at once unless the
        // socket is corked (the same for every broker measured).
        const sock = pubConn.socket;
        if (sock) sock.cork();
        while (sent < count && sender.sendable()) {
            sender.send(payload, undefined, 0);
            sent++;
        }
        if (sock) process.nextTick(() => sock.uncork());
        if (sent === count) report({ sent });
    });
    pubConn.on('connection_error', (ctx) => { console.error('connection error', ctx.connection.error); process.exit(1); });
    return pubConn;
}

if (role === 'publisher') {
    // The forked side: reports to the parent; the parent ends it.
    let reported = false;
    publish((m) => {
        if (m.sent !== undefined) {
            if (reported) return;
            reported = true;
        }
        process.send(m);
    });
    container.on('error', () => {});
    process.on('disconnect', () => process.exit(0));
} else {
    let sent = 0, received = 0, start = 0, last = 0, done = false, child = null, pubConn = null;
    const subConn = container.connect(opts);
    const onReport = (m) => {
        if (m.start !== undefined && !start) start = m.start;
        if (m.sent !== undefined) sent = m.sent;
    };
    const receiver = subConn.open_receiver({
        source: address, credit_window: credit, autoaccept: true, snd_settle_mode: 1,
    });
    receiver.on('receiver_open', () => {
        if (process.env.PROCESSES === '1') {
            pubConn = publish(onReport);
        } else {
            child = fork(__filename, [url, address, countArg, String(size), String(credit), String(idleEndMs / 1000), 'publisher']);
            child.on('message', onReport);
            child.on('exit', (code) => { if (!done && code) { console.error('publisher exited', code); process.exit(1); } });
        }
    });
    receiver.on('message', () => {
        received++;
        last = Date.now();
        if (received === count) finish();
    });

    const timer = setInterval(() => {
        if (sent === count && received < count && Date.now() - Math.max(last, start) > idleEndMs) finish();
    }, 100);

    function finish() {
        if (done) return;
        done = true;
        clearInterval(timer);
        const seconds = (last - start) / 1000;
        console.log(JSON.stringify({
            client: 'rhea', processes: child ? 2 : 1, sent: sent || received, received,
            dropped: (sent || received) - received, seconds,
            msgs_per_s: seconds > 0 ? Math.round(received / seconds) : 0,
        }));
        subConn.close();
        if (pubConn) pubConn.close();
        if (child) child.kill();
        setTimeout(() => process.exit(0), 200);
    }

    // After the end, transfers still in flight may meet a closed link: not an error here.
    container.on('error', (e) => { if (!done) { console.error('error', e); process.exit(1); } });
    subConn.on('connection_error', (ctx) => { console.error('connection error', ctx.connection.error); process.exit(1); });
    subConn.on('disconnected', (ctx) => { if (!done) { console.error('disconnected', ctx.error); process.exit(1); } });
}
