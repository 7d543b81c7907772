//! The `broker` fuzz target: the whole broker (shards, connection drivers, homes)
//! runs in-process, started once per process, and every input is played over a real
//! loopback socket after a valid handshake. Shared by `fuzz_targets/broker.rs` and
//! the corpus replay test `tests/fuzz_corpus.rs` (both include this file with
//! `#[path]`), so `cargo test` replays exactly what was fuzzed.
//!
//! Input: the first byte picks how far the handshake goes before the rest of the
//! input is written (see [`Stage`]); the rest is written as it is. Then the
//! harness reads what the broker answers (briefly), half-closes, and reads until the
//! broker closes. Checked for every input:
//! * everything the broker wrote is protocol headers and frames that decode;
//! * the broker closes the connection after end of input (no hang);
//! * after every input, a fresh well-behaved client still gets its OPEN answered
//!   (so an input that leaves the broker hung is the one reported).
//!
//! libFuzzer's coverage counters are process-wide, so the broker's shard thread
//! contributes the coverage of the input it is handling.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use bytes::{Bytes, BytesMut};
use sluice_proto::codec::{Encode, Symbol};
use sluice_proto::frame::{write_frame, Deframer, AMQP_HEADER, FRAME_TYPE_AMQP, FRAME_TYPE_SASL, SASL_HEADER};
use sluice_proto::types::{
    Attach, AttachTarget, Begin, Body, Flow, Message, Open, Performative, Properties, Role, SaslFrame, SaslInit,
    SenderSettleMode, Source, Target, Transfer,
};
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How long the broker may take to close a connection after our end of input.
const CLOSE_WITHIN: Duration = Duration::from_secs(10);
/// How long a fresh client waits for the broker's OPEN in a health check.
const HEALTHY_WITHIN: Duration = Duration::from_secs(10);

static BROKER: OnceLock<SocketAddr> = OnceLock::new();
static INPUTS: AtomicU64 = AtomicU64::new(0);

/// The in-process broker, started on first use: one shard, memory durability,
/// loopback only, admin on an ephemeral port, no TLS listener, no connection limit.
pub(crate) fn broker_addr() -> SocketAddr {
    *BROKER.get_or_init(|| {
        // A free port, kept bound (SO_REUSEPORT, not listening) for the life of the
        // process: the broker's SO_REUSEPORT listener can still bind it, but no other
        // process's bind-to-port-0 probe can be handed the same port and then share
        // it (the kernel would split our connections between two brokers).
        let probe = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("socket");
        probe.set_reuse_address(true).expect("SO_REUSEADDR");
        probe.set_reuse_port(true).expect("SO_REUSEPORT");
        probe.bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into()).expect("bind a free port");
        let port = probe.local_addr().ok().and_then(|a| a.as_socket()).map(|a| a.port()).expect("free port");
        std::mem::forget(probe);
        let s = sluice::config::Settings {
            shards: 1,
            durability: sluice::config::Durability::Memory,
            host: "127.0.0.1".into(),
            port,
            tls_port: 0,
            admin_addr: "127.0.0.1:0".into(),
            max_connections: 0,
            max_message_size: 1 << 20,
            events_store_retention_bytes: 1 << 20,
            data_dir: std::env::temp_dir().join(format!("sluice-fuzz-broker-{}", std::process::id())),
            ..Default::default()
        };
        let global = sluice::server::global(s).expect("broker settings");
        // `serve` installs the global metrics recorder: it runs exactly once per process.
        std::thread::Builder::new()
            .name("sluice-fuzz-broker".into())
            .spawn(move || {
                if let Err(e) = sluice::server::serve(global) {
                    eprintln!("in-process broker stopped: {e}");
                }
            })
            .expect("spawn broker thread");
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let deadline = Instant::now() + Duration::from_secs(30);
        while !healthy(addr) {
            assert!(Instant::now() < deadline, "in-process broker did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        addr
    })
}

/// How far the handshake goes before the input bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stage {
    /// SASL header and sasl-init ANONYMOUS: the input starts where the AMQP header goes.
    Sasl,
    /// SASL ANONYMOUS, AMQP header, OPEN.
    Open,
    /// SASL PLAIN (identity `fuzz`), OPEN, BEGIN on channel 0, and an ATTACH of a
    /// sending link (handle 0, `queues/fuzz`) whose credit has arrived.
    Attach,
    /// As `Attach`, plus handle 1 receiving pre-settled from `queues/fuzz` with 20
    /// credits, and handle 2 sending to the anonymous terminus.
    Links,
}

impl Stage {
    pub(crate) fn from_byte(b: u8) -> Stage {
        match b % 4 {
            0 => Stage::Sasl,
            1 => Stage::Open,
            2 => Stage::Attach,
            _ => Stage::Links,
        }
    }

    pub(crate) fn byte(self) -> u8 {
        match self {
            Stage::Sasl => 0,
            Stage::Open => 1,
            Stage::Attach => 2,
            Stage::Links => 3,
        }
    }
}

fn frame(ch: u16, p: &Performative, payload: &[u8]) -> Vec<u8> {
    let mut b = BytesMut::new();
    write_frame(&mut b, FRAME_TYPE_AMQP, ch, p, payload);
    b.to_vec()
}

fn sasl_frame(f: &SaslFrame) -> Vec<u8> {
    let mut b = BytesMut::new();
    write_frame(&mut b, FRAME_TYPE_SASL, 0, f, &[]);
    b.to_vec()
}

fn sasl_init(user: Option<&str>) -> Vec<u8> {
    let init = match user {
        Some(u) => SaslInit {
            mechanism: Symbol::new("PLAIN"),
            initial_response: Some(Bytes::from(format!("\0{u}\0secret").into_bytes())),
            hostname: None,
        },
        None => SaslInit { mechanism: Symbol::new("ANONYMOUS"), initial_response: None, hostname: None },
    };
    let mut v = SASL_HEADER.to_vec();
    v.extend(sasl_frame(&SaslFrame::Init(init)));
    v
}

fn open_frame() -> Vec<u8> {
    frame(
        0,
        &Performative::Open(Box::new(Open {
            container_id: "fuzz".into(),
            max_frame_size: Some(65536),
            ..Default::default()
        })),
        &[],
    )
}

pub(crate) fn attach(handle: u32, role: Role, address: Option<&str>, presettled: bool) -> Performative {
    let addr = address.map(str::to_owned);
    Performative::Attach(Box::new(Attach {
        name: format!("fuzz-{handle}"),
        handle,
        role,
        snd_settle_mode: Some(if presettled { SenderSettleMode::Settled } else { SenderSettleMode::Unsettled }),
        source: Some(Source {
            address: if role == Role::Receiver { addr.clone() } else { None },
            ..Default::default()
        }),
        target: Some(AttachTarget::Target(Target {
            address: if role == Role::Sender { addr } else { None },
            ..Default::default()
        })),
        initial_delivery_count: (role == Role::Sender).then_some(0),
        ..Default::default()
    }))
}

/// The bytes written before the input for `stage`.
pub(crate) fn handshake(stage: Stage) -> Vec<u8> {
    let mut v = sasl_init(if matches!(stage, Stage::Attach | Stage::Links) { Some("fuzz") } else { None });
    if stage == Stage::Sasl {
        return v;
    }
    v.extend(AMQP_HEADER);
    v.extend(open_frame());
    if stage == Stage::Open {
        return v;
    }
    v.extend(frame(
        0,
        &Performative::Begin(Begin {
            next_outgoing_id: 0,
            incoming_window: 2048,
            outgoing_window: 2048,
            ..Default::default()
        }),
        &[],
    ));
    v.extend(frame(0, &attach(0, Role::Sender, Some("queues/fuzz"), false), &[]));
    if stage == Stage::Links {
        v.extend(frame(0, &attach(1, Role::Receiver, Some("queues/fuzz"), true), &[]));
        v.extend(frame(0, &attach(2, Role::Sender, None, false), &[]));
        v.extend(frame(
            0,
            &Performative::Flow(Flow {
                next_incoming_id: Some(0),
                incoming_window: 2048,
                next_outgoing_id: 0,
                outgoing_window: 2048,
                handle: Some(1),
                delivery_count: Some(0),
                link_credit: Some(20),
                ..Default::default()
            }),
            &[],
        ));
    }
    v
}

/// What the broker has written so far, parsed.
#[derive(Default)]
struct Seen {
    de: Option<Deframer>,
    sasl_outcome: Option<u8>,
    open: bool,
    close: bool,
    /// The broker's ATTACH frames.
    attaches: u32,
    /// The broker's FLOW frames that carry link credit.
    credit_flows: u32,
    bytes: usize,
}

impl Seen {
    fn push(&mut self, data: &[u8]) {
        self.bytes += data.len();
        let de = self.de.get_or_insert_with(|| Deframer::new(u32::MAX));
        de.push(data);
        loop {
            if de.buffered_bytes().starts_with(b"AMQP") {
                if de.take_raw(8).is_some() {
                    continue;
                }
                return;
            }
            let f = match de.next_frame() {
                Ok(Some(f)) => f,
                Ok(None) => return,
                Err(e) => panic!("the broker wrote a malformed frame header: {e:?}"),
            };
            if f.frame_type == FRAME_TYPE_SASL {
                match f.decode_sasl() {
                    Ok(SaslFrame::Outcome(o)) => self.sasl_outcome = Some(o.code),
                    Ok(_) => {}
                    Err(e) => panic!("the broker wrote an undecodable SASL frame: {e:?}: {:02x?}", f.body),
                }
                continue;
            }
            if f.is_empty() {
                continue;
            }
            match f.decode_amqp() {
                Ok(a) => match a.performative {
                    Performative::Open(_) => self.open = true,
                    Performative::Close(_) => self.close = true,
                    Performative::Attach(_) => self.attaches += 1,
                    Performative::Flow(fl) if fl.link_credit.is_some_and(|c| c > 0) => self.credit_flows += 1,
                    _ => {}
                },
                Err(e) => panic!("the broker wrote an undecodable AMQP frame: {e:?}: {:02x?}", f.body),
            }
        }
    }
}

/// Read once (with the socket's timeout); false at end of stream.
fn read_some(s: &mut TcpStream, buf: &mut [u8], seen: &mut Seen) -> Option<bool> {
    match s.read(buf) {
        Ok(0) => Some(false),
        Ok(n) => {
            seen.push(&buf[..n]);
            Some(true)
        }
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted) => None,
        // A reset (the broker closed with unread input) is an end of stream too.
        Err(_) => Some(false),
    }
}

/// Read until `done(seen)` or end of stream or `within` has passed; true at EOF.
fn read_until(s: &mut TcpStream, seen: &mut Seen, within: Duration, mut done: impl FnMut(&Seen) -> bool) -> bool {
    let deadline = Instant::now() + within;
    let mut buf = [0u8; 64 * 1024];
    while !done(seen) {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        let _ = s.set_read_timeout(Some(left.min(Duration::from_millis(100))));
        if read_some(s, &mut buf, seen) == Some(false) {
            return true;
        }
    }
    false
}

/// A well-behaved client gets its OPEN answered.
pub(crate) fn healthy(addr: SocketAddr) -> bool {
    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_secs(2)) else { return false };
    let _ = s.set_nodelay(true);
    let mut bytes = handshake(Stage::Open);
    bytes.extend(frame(0, &Performative::Close(Default::default()), &[]));
    if s.write_all(&bytes).is_err() {
        return false;
    }
    let mut seen = Seen::default();
    read_until(&mut s, &mut seen, HEALTHY_WITHIN, |s| s.open && s.close);
    seen.open
}

/// What the threads of this process are doing (state, CPU ticks, kernel wait
/// channel), for a broker that stopped answering; with `SLUICE_FUZZ_STACKS` set,
/// also every thread's backtrace from gdb.
fn diagnose() -> String {
    let mut out = String::new();
    if let Ok(tasks) = std::fs::read_dir("/proc/self/task") {
        for t in tasks.flatten() {
            let p = t.path();
            let stat = std::fs::read_to_string(p.join("stat")).unwrap_or_default();
            let wchan = std::fs::read_to_string(p.join("wchan")).unwrap_or_default();
            // comm is in parentheses; state, then utime/stime at fields 14/15.
            let (comm, rest) = match (stat.find('('), stat.rfind(')')) {
                (Some(a), Some(b)) if b > a => (&stat[a + 1..b], &stat[b + 1..]),
                _ => ("?", ""),
            };
            let f: Vec<&str> = rest.split_whitespace().collect();
            let get = |i: usize| f.get(i).copied().unwrap_or("?");
            out += &format!(
                "  {:?} {comm}: state {} utime {} stime {} wchan {wchan}\n",
                t.file_name(),
                get(0),
                get(11),
                get(12)
            );
        }
    }
    if std::env::var_os("SLUICE_FUZZ_STACKS").is_some() {
        let pid = std::process::id().to_string();
        if let Ok(o) =
            std::process::Command::new("gdb").args(["-p", &pid, "-batch", "-ex", "thread apply all bt 40"]).output()
        {
            out += &String::from_utf8_lossy(&o.stdout);
        }
    }
    out
}

/// One fuzz input; see the module documentation.
pub(crate) fn broker(data: &[u8]) {
    let addr = broker_addr();
    let n = INPUTS.fetch_add(1, Ordering::Relaxed);
    let Some((&first, input)) = data.split_first() else { return };
    let stage = Stage::from_byte(first);

    let mut s = match TcpStream::connect(addr) {
        Ok(s) => s,
        Err(e) => panic!("cannot connect to the in-process broker: {e}"),
    };
    let _ = s.set_nodelay(true);
    let mut seen = Seen::default();
    if s.write_all(&handshake(stage)).is_err() {
        panic!("the broker closed the connection during a valid handshake");
    }
    // Wait for the broker's answer so that the input meets the state it was meant for.
    let (want_attaches, want_flows) = match stage {
        Stage::Sasl | Stage::Open => (0, 0),
        Stage::Attach => (1, 1),
        Stage::Links => (3, 2),
    };
    let eof = read_until(&mut s, &mut seen, HEALTHY_WITHIN, |seen| match stage {
        Stage::Sasl => seen.sasl_outcome.is_some(),
        Stage::Open => seen.open,
        _ => seen.open && seen.attaches >= want_attaches && seen.credit_flows >= want_flows,
    });
    let answered = match stage {
        Stage::Sasl => seen.sasl_outcome == Some(0),
        Stage::Open => seen.open,
        _ => seen.open && seen.attaches >= want_attaches && seen.credit_flows >= want_flows,
    };
    if !answered || eof {
        let ok = healthy(addr);
        panic!(
            "the broker did not answer a valid {stage:?} handshake in time (eof {eof}, {} bytes, healthy {ok})\n{}",
            seen.bytes,
            diagnose()
        );
    }

    // The input, as it is. The broker may close (and reset) before it has read it all.
    let _ = s.write_all(input);
    // Let it answer, then end our side and wait for it to close.
    let mut closed = read_until(&mut s, &mut seen, Duration::from_millis(2), |_| false);
    if !closed {
        let _ = s.shutdown(Shutdown::Write);
        closed = read_until(&mut s, &mut seen, CLOSE_WITHIN, |_| false);
    }
    if !closed {
        panic!("the broker did not close the connection within {CLOSE_WITHIN:?} of end of input\n{}", diagnose());
    }
    drop(s);

    // After every input, so that an input that leaves the broker hung is the one reported.
    if !healthy(addr) {
        panic!("the broker stopped answering OPEN after input {n}\n{}", diagnose());
    }
}

/// A valid message with a data body (for seeds).
pub(crate) fn message(body: &[u8], to: Option<&str>, user_id: Option<&[u8]>) -> Vec<u8> {
    let props = (to.is_some() || user_id.is_some()).then(|| Properties {
        to: to.map(str::to_owned),
        user_id: user_id.map(Bytes::copy_from_slice),
        ..Default::default()
    });
    Message { properties: props, body: Body::Data(Bytes::copy_from_slice(body)), ..Default::default() }
        .to_bytes()
        .to_vec()
}

/// A TRANSFER frame for seeds.
pub(crate) fn transfer(handle: u32, id: Option<u32>, more: bool, settled: bool, payload: &[u8]) -> Vec<u8> {
    let t = Transfer {
        handle,
        delivery_id: id,
        delivery_tag: id.and_then(|i| sluice_proto::types::DeliveryTag::from_slice(&i.to_be_bytes())),
        message_format: id.map(|_| 0),
        settled: Some(settled),
        more: more.then_some(true),
        ..Default::default()
    };
    frame(0, &Performative::Transfer(t), payload)
}

/// Seed inputs: (name, bytes). The first byte is the [`Stage`].
pub(crate) fn seeds() -> Vec<(String, Vec<u8>)> {
    use sluice_proto::types::{DeliveryState, Detach, Disposition, End};
    let mut out = Vec::new();
    let mut add = |name: &str, stage: Stage, rest: Vec<u8>| {
        let mut v = vec![stage.byte()];
        v.extend(rest);
        out.push((name.to_owned(), v));
    };
    add("empty-after-sasl", Stage::Sasl, Vec::new());
    let mut amqp_open = AMQP_HEADER.to_vec();
    amqp_open.extend(open_frame());
    add("header-open", Stage::Sasl, amqp_open.clone());
    let mut all = amqp_open.clone();
    all.extend(frame(
        0,
        &Performative::Begin(Begin {
            next_outgoing_id: 0,
            incoming_window: 10,
            outgoing_window: 10,
            ..Default::default()
        }),
        &[],
    ));
    all.extend(frame(0, &attach(0, Role::Sender, Some("queues/fuzz-a"), false), &[]));
    all.extend(transfer(0, Some(0), false, false, &message(b"hello", None, None)));
    add("open-begin-attach-transfer", Stage::Sasl, all);
    add("garbage-header", Stage::Sasl, b"GET / HTTP/1.1\r\n\r\n".to_vec());
    add("nothing-after-open", Stage::Open, Vec::new());
    let mut v = frame(
        1,
        &Performative::Begin(Begin {
            next_outgoing_id: 7,
            incoming_window: 2,
            outgoing_window: 2,
            handle_max: Some(3),
            ..Default::default()
        }),
        &[],
    );
    v.extend(frame(1, &attach(0, Role::Receiver, Some("events/fuzz"), true), &[]));
    v.extend(frame(1, &attach(1, Role::Sender, Some("events/fuzz"), true), &[]));
    v.extend(frame(
        1,
        &Performative::Flow(Flow {
            next_incoming_id: Some(0),
            incoming_window: 2,
            next_outgoing_id: 7,
            outgoing_window: 2,
            handle: Some(0),
            delivery_count: Some(0),
            link_credit: Some(5),
            ..Default::default()
        }),
        &[],
    ));
    v.extend(transfer(1, Some(7), false, true, &message(b"evt", None, None)));
    v.extend(frame(1, &Performative::End(End { error: None }), &[]));
    add("second-session-events", Stage::Open, v);
    add("open-again", Stage::Open, open_frame());
    add("close", Stage::Open, frame(0, &Performative::Close(Default::default()), &[]));
    add("heartbeats", Stage::Open, [0, 0, 0, 8, 2, 0, 0, 0].repeat(4));

    add("one-transfer", Stage::Attach, transfer(0, Some(0), false, false, &message(b"x", None, None)));
    add("presettled-transfer", Stage::Attach, transfer(0, Some(0), false, true, &message(b"x", None, None)));
    let mut v = transfer(0, Some(0), true, false, b"\x00\x53\x75\xa0\x04ab");
    v.extend(transfer(0, None, true, false, b"cd"));
    v.extend(transfer(0, None, false, false, b""));
    add("multi-frame", Stage::Attach, v);
    let mut v = transfer(0, Some(0), true, false, b"\x00\x53\x75");
    v.extend(frame(0, &Performative::Transfer(Transfer { handle: 0, aborted: Some(true), ..Default::default() }), &[]));
    add("aborted", Stage::Attach, v);
    add("user-id-mismatch", Stage::Attach, transfer(0, Some(0), false, false, &message(b"x", None, Some(b"mallory"))));
    add("user-id-match", Stage::Attach, transfer(0, Some(0), false, false, &message(b"x", None, Some(b"fuzz"))));
    add(
        "detach",
        Stage::Attach,
        frame(0, &Performative::Detach(Detach { handle: 0, closed: Some(true), error: None }), &[]),
    );
    add("end", Stage::Attach, frame(0, &Performative::End(End { error: None }), &[]));
    add("bad-sections", Stage::Attach, transfer(0, Some(0), false, false, b"\x00\x53\x75\xa0\x01x\x00\x53\x70\x45"));

    let mut v = transfer(0, Some(0), false, false, &message(b"to-self", None, None));
    v.extend(transfer(2, Some(1), false, false, &message(b"anon", Some("queues/fuzz"), None)));
    v.extend(transfer(2, Some(2), false, false, &message(b"anon-events", Some("events/fuzz"), None)));
    add("publish-and-consume", Stage::Links, v);
    let d = Disposition {
        role: Role::Receiver,
        first: 0,
        last: Some(u32::MAX),
        settled: Some(true),
        state: Some(DeliveryState::Accepted),
        batchable: None,
    };
    let mut v = transfer(0, Some(0), false, false, &message(b"m", None, None));
    v.extend(frame(0, &Performative::Disposition(d), &[]));
    add("disposition-everything", Stage::Links, v);
    let v = frame(
        0,
        &Performative::Flow(Flow {
            next_incoming_id: Some(0),
            incoming_window: 2048,
            next_outgoing_id: 0,
            outgoing_window: 2048,
            handle: Some(1),
            delivery_count: Some(0),
            link_credit: Some(50),
            drain: Some(true),
            echo: Some(true),
            ..Default::default()
        }),
        &[],
    );
    add("drain", Stage::Links, v);
    out
}
