'use strict';
// Small promise wrappers around rhea, with bounded waits everywhere and a
// per-test tracker that closes (then destroys) every connection it opened.

const rhea = require('rhea');

const DEFAULT_WAIT_MS = 5_000;

function deadlineError(what, ms, extra) {
    return new Error(`timed out after ${ms} ms waiting for ${what}${extra ? ` (${extra})` : ''}`);
}

/** Resolve on `event` from `emitter` (optionally matching `filter`), reject on timeout or a failure event. */
function waitEvent(emitter, event, { timeout = DEFAULT_WAIT_MS, filter, failOn = [] } = {}) {
    return new Promise((resolve, reject) => {
        const listeners = [];
        const cleanup = () => {
            clearTimeout(timer);
            for (const [ev, fn] of listeners) emitter.removeListener(ev, fn);
        };
        const on = (ev, fn) => { listeners.push([ev, fn]); emitter.on(ev, fn); };
        const timer = setTimeout(() => { cleanup(); reject(deadlineError(`'${event}'`, timeout)); }, timeout);
        on(event, (ctx) => {
            if (filter && !filter(ctx)) return;
            cleanup();
            resolve(ctx);
        });
        for (const ev of failOn) {
            on(ev, (ctx) => {
                cleanup();
                const err = linkOrConnError(ctx);
                reject(new Error(`got '${ev}' while waiting for '${event}': ${err ? `${err.condition}: ${err.description}` : 'no error'}`));
            });
        }
    });
}

function linkOrConnError(ctx) {
    if (!ctx) return undefined;
    if (ctx.receiver && ctx.receiver.error) return ctx.receiver.error;
    if (ctx.sender && ctx.sender.error) return ctx.sender.error;
    if (ctx.session && ctx.session.error) return ctx.session.error;
    if (ctx.connection && ctx.connection.error) return ctx.connection.error;
    return ctx.error;
}

/** Tracks the connections of one test; `closeAll()` in a finally block. */
class Clients {
    constructor(broker, label = 'node') {
        this.broker = broker;
        this.label = label;
        this.conns = [];
        this.errors = [];
        this.n = 0;
    }

    /** Open a connection; resolves once the broker's OPEN arrived. */
    async connect(options = {}) {
        this.n += 1;
        const id = `${this.label}-${process.pid}-${this.n}-${Math.random().toString(36).slice(2, 8)}`;
        const container = rhea.create_container({ id });
        container.on('error', (err) => { this.errors.push(err); });
        const conn = container.connect({
            host: '127.0.0.1',
            port: this.broker.amqpPort,
            reconnect: false,
            ...options,
        });
        // Keep 'disconnected' handled so rhea does not console.warn.
        conn.on('disconnected', () => {});
        conn.on('connection_error', (ctx) => { this.errors.push(linkOrConnError(ctx)); });
        this.conns.push(conn);
        await waitEvent(conn, 'connection_open', { failOn: ['connection_error', 'disconnected'] });
        return conn;
    }

    /** Close every connection politely, then destroy any socket still open after `ms`. */
    async closeAll(ms = 2_000) {
        await Promise.all(this.conns.map((conn) => closeConnection(conn, ms)));
        this.conns = [];
    }
}

async function closeConnection(conn, ms = 2_000) {
    const socketGone = () => !conn.socket || conn.socket.destroyed;
    if (socketGone()) return;
    const done = new Promise((resolve) => {
        const finish = () => resolve();
        conn.once('connection_close', finish);
        conn.once('disconnected', finish);
        conn.once('connection_error', finish);
        if (conn.socket) conn.socket.once('close', finish);
    });
    try {
        if (!conn.is_closed()) conn.close();
    } catch (_) { /* already closing */ }
    let timer;
    await Promise.race([done, new Promise((r) => { timer = setTimeout(r, ms); })]);
    clearTimeout(timer);
    if (conn.socket && !conn.socket.destroyed) {
        // Give rhea a moment to end the socket itself after CLOSE; then force it.
        await new Promise((r) => setTimeout(r, 50));
        if (conn.socket && !conn.socket.destroyed) conn.socket.destroy();
    }
}

/** Open a sender; resolves with it on 'sender_open'; rejects on error/close/timeout. */
async function openSender(conn, options, timeout = DEFAULT_WAIT_MS) {
    const sender = conn.open_sender(options);
    await waitEvent(sender, 'sender_open', { timeout, failOn: ['sender_error', 'sender_close'] });
    return sender;
}

/** Open a receiver; resolves with it on 'receiver_open'; rejects on error/close/timeout. */
async function openReceiver(conn, options, timeout = DEFAULT_WAIT_MS) {
    const receiver = conn.open_receiver(options);
    await waitEvent(receiver, 'receiver_open', { timeout, failOn: ['receiver_error', 'receiver_close'] });
    return receiver;
}

/**
 * Collect messages from `receiver` until `count` have arrived. Starts listening
 * immediately (call before producing). `done` resolves with the list of message
 * contexts, or rejects after `timeout` ms saying how many arrived.
 */
function collector(receiver, count, timeout = DEFAULT_WAIT_MS) {
    const got = [];
    let resolveFn;
    let rejectFn;
    const done = new Promise((resolve, reject) => { resolveFn = resolve; rejectFn = reject; });
    let timer = null;
    const onMessage = (ctx) => {
        got.push(ctx);
        if (got.length === count) {
            if (timer) clearTimeout(timer);
            resolveFn(got);
        }
    };
    const onError = (ctx) => {
        const err = linkOrConnError(ctx);
        if (timer) clearTimeout(timer);
        rejectFn(new Error(`receiver closed after ${got.length}/${count} messages: ${err ? `${err.condition}: ${err.description}` : 'no error'}`));
    };
    receiver.on('message', onMessage);
    receiver.on('receiver_close', onError);
    return {
        got,
        /** Start the clock (so setup time does not count) and wait. */
        wait(ms = timeout) {
            if (got.length >= count) return done;
            timer = setTimeout(() => rejectFn(deadlineError(`${count} messages`, ms, `got ${got.length}`)), ms);
            return done;
        },
        stop() {
            if (timer) clearTimeout(timer);
            receiver.removeListener('message', onMessage);
            receiver.removeListener('receiver_close', onError);
        },
    };
}

/** Wait for `sender` to have credit (a FLOW from the broker). */
async function waitCredit(sender, timeout = DEFAULT_WAIT_MS) {
    if (sender.credit > 0) return sender.credit;
    await waitEvent(sender, 'sender_flow', { timeout, filter: () => sender.credit > 0, failOn: ['sender_error', 'sender_close'] });
    return sender.credit;
}

/** Body as the broker handed it back: strings/objects as-is, data sections as a Buffer. */
function bodyOf(message) {
    const b = message.body;
    if (b && b.constructor && b.constructor.name === 'Section' && b.typecode === 0x75) {
        return b.multiple ? Buffer.concat(b.content) : b.content;
    }
    return b;
}

function sleep(ms) {
    return new Promise((resolve) => setTimeout(resolve, ms));
}

module.exports = {
    rhea,
    Clients,
    waitEvent,
    openSender,
    openReceiver,
    collector,
    waitCredit,
    closeConnection,
    linkOrConnError,
    bodyOf,
    sleep,
};
