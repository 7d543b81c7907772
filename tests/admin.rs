//! The admin endpoint against careless and hostile HTTP clients, over real sockets
//! against the real broker binary: whatever one client does, /healthz and /metrics keep
//! answering everyone else (an orchestrator may restart the broker on /healthz).
//! README, "Admin endpoint".
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::Broker;
use sluice_perf::client::{data_message, Client, LinkOptions};
use sluice_proto::types::DeliveryState;
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// Connections the endpoint serves at once, in all and from one address
/// (src/admin/http.rs MAX_CONNECTIONS, MAX_PER_ADDRESS).
const MAX_CONNECTIONS: usize = 128;
const MAX_PER_ADDRESS: usize = 32;

/// Poll `f` until it holds or `limit` passes (a liveness bound, not a timing claim).
fn eventually(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    loop {
        if f() {
            return true;
        }
        if Instant::now() > end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn admin(b: &Broker) -> TcpStream {
    admin_from(b, 1)
}

/// A connection to the admin port from 127.0.0.<host> (loopback takes them all).
fn admin_from(b: &Broker, host: u8) -> TcpStream {
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    sock.bind(&std::net::SocketAddr::from(([127, 0, 0, host], 0)).into()).unwrap();
    sock.connect(&std::net::SocketAddr::from(([127, 0, 0, 1], b.admin)).into()).unwrap();
    let s: TcpStream = sock.into();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s
}

/// GET /healthz from 127.0.0.<host>: the status.
fn healthz_from(b: &Broker, host: u8) -> Option<u16> {
    let mut s = admin_from(b, host);
    s.write_all(b"GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n").ok()?;
    let (got, _) = read_until_closed(&mut s);
    String::from_utf8_lossy(&got).split(' ').nth(1)?.parse().ok()
}

/// Everything the endpoint sends on `s` until it closes the connection (EOF or reset)
/// or stays silent for the read timeout (then `closed` is false).
fn read_until_closed(s: &mut TcpStream) -> (Vec<u8>, bool) {
    let mut got = Vec::new();
    let mut buf = [0u8; 64 * 1024];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return (got, true),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return (got, true),
            Err(_) => return (got, false),
        }
    }
}

/// The metrics every scrape has (so a 200 with an empty body does not pass).
fn scrape_ok(b: &Broker) -> bool {
    b.http("/metrics").is_some_and(|(s, body)| s == 200 && body.contains("kubemq_amqp10_connections"))
}

#[test]
fn an_admin_client_that_does_not_read_its_answers_holds_up_no_one_else() {
    let b = Broker::start(&[]);
    // A client with a small receive buffer pipelines far more /healthz requests than
    // the socket buffers can hold the answers to, and reads nothing.
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    sock.set_recv_buffer_size(4096).unwrap();
    sock.connect(&std::net::SocketAddr::from(([127, 0, 0, 1], b.admin)).into()).unwrap();
    let mut stuck: TcpStream = sock.into();
    const REQUESTS: usize = 200_000;
    let mut w = stuck.try_clone().unwrap();
    let writer = std::thread::spawn(move || {
        w.set_write_timeout(Some(Duration::from_secs(20))).unwrap();
        // Blocks (and fails at the timeout) once the broker stops reading: fine.
        let _ = w.write_all(&b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n".repeat(REQUESTS));
    });
    let sent = Instant::now();
    // Everyone else is served the whole time (one thread per admin connection): with a
    // single admin thread blocked in the write to `stuck`, these time out.
    for _ in 0..6 {
        std::thread::sleep(Duration::from_millis(500));
        assert_eq!(b.http("/healthz").map(|(s, _)| s), Some(200), "healthz while a client is not reading");
        assert!(scrape_ok(&b), "/metrics while a client is not reading");
    }
    // Its writes time out (10 s without progress) and it is dropped; read only then,
    // so the broker cannot have been unblocked by our reading.
    std::thread::sleep(Duration::from_secs(15).saturating_sub(sent.elapsed()));
    let (got, closed) = read_until_closed(&mut stuck);
    let answers = got.windows(12).filter(|w| w == b"HTTP/1.1 200").count();
    assert!(closed, "the non-reading client was never dropped ({answers} answers read)");
    assert!(answers < REQUESTS, "every request was answered: the client was not dropped");
    writer.join().unwrap();
    assert_eq!(b.http("/healthz").map(|(s, _)| s), Some(200));
}

#[test]
fn a_request_that_never_completes_is_answered_408_and_closed() {
    let b = Broker::start(&[]);
    let mut slow = admin(&b);
    slow.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: ").unwrap();
    std::thread::sleep(Duration::from_secs(1));
    assert!(scrape_ok(&b), "others are served meanwhile");
    let (got, closed) = read_until_closed(&mut slow);
    let text = String::from_utf8_lossy(&got);
    assert!(closed && text.starts_with("HTTP/1.1 408 "), "closed {closed}: {text}");
    // A silent connection is simply closed, with nothing sent.
    let mut silent = admin(&b);
    let (got, closed) = read_until_closed(&mut silent);
    assert!(closed && got.is_empty(), "closed {closed}: {:?}", String::from_utf8_lossy(&got));
}

#[test]
fn admin_connections_past_the_limits_are_refused_at_once_and_the_endpoint_recovers() {
    let b = Broker::start(&[]);
    // Each idle connection holds one of the endpoint's threads (until its request
    // deadline); past the limit for one address, that address is told so at once
    // instead of waiting for a thread, and the others are still served. (Connections
    // younger than a second: older idle ones give their place up, see
    // silent_admin_connections_give_their_place_to_a_probe.)
    let mut idle: Vec<TcpStream> = (0..MAX_PER_ADDRESS).map(|_| admin_from(&b, 2)).collect();
    let refused = |host: u8| {
        let mut extra = admin_from(&b, host);
        let (got, closed) = read_until_closed(&mut extra);
        let text = String::from_utf8_lossy(&got).into_owned();
        assert!(closed && text.starts_with("HTTP/1.1 503 "), "{text}");
        text
    };
    assert!(refused(2).contains("too many admin connections from this address"));
    assert_eq!(healthz_from(&b, 3), Some(200), "another address is served");
    // Past the limit for all addresses together, everyone is told so.
    for host in 4..(3 + (MAX_CONNECTIONS / MAX_PER_ADDRESS) as u8) {
        idle.extend((0..MAX_PER_ADDRESS).map(|_| admin_from(&b, host)));
    }
    assert_eq!(idle.len(), MAX_CONNECTIONS);
    assert!(eventually(Duration::from_secs(5), || refused(9).contains(r#""too many admin connections""#)));
    drop(idle);
    assert!(eventually(Duration::from_secs(5), || scrape_ok(&b)), "served again once the idle ones closed");
}

/// At the limits, a connection that has waited a second or more for a request gives
/// its place to the new one (it is shut down): sockets that connect and say nothing,
/// from one address or from many, cannot keep a probe of /healthz out. Before, the
/// probe was answered 503 until the silent sockets' request deadline (10 s), and
/// sockets renewed every 10 s kept it out for good.
#[test]
fn silent_admin_connections_give_their_place_to_a_probe() {
    let b = Broker::start(&[]);
    // Closed within 5 s (what was sent before is read past).
    let closed_at_once = |s: &mut TcpStream| {
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut buf = [0u8; 1024];
        loop {
            match s.read(&mut buf) {
                Ok(0) => return true,
                Ok(_) => continue,
                Err(e) => return !matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
            }
        }
    };
    let still_open = |s: &mut TcpStream| {
        s.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
        let mut buf = [0u8; 16];
        matches!(s.read(&mut buf), Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut))
    };
    // One address at its limit: first a keep-alive connection idle after an answer,
    // then silent sockets.
    let mut kept_alive = admin_from(&b, 2);
    kept_alive.write_all(b"GET /healthz HTTP/1.1\r\n\r\n").unwrap();
    let mut answer = [0u8; 12];
    kept_alive.read_exact(&mut answer).unwrap();
    assert_eq!(&answer, b"HTTP/1.1 200");
    // (Its thread marks it waiting right after writing the answer: give it the time.)
    std::thread::sleep(Duration::from_millis(300));
    let mut one: Vec<TcpStream> = (1..MAX_PER_ADDRESS).map(|_| admin_from(&b, 2)).collect();
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(healthz_from(&b, 2), Some(200), "the address's own probe is kept out by its silent sockets");
    assert!(closed_at_once(&mut kept_alive), "the connection idle longest was not shut down");
    assert!(still_open(&mut one[0]), "more than one gave its place up");
    // Every address together at the limit (31 + 96 + 1 silent sockets).
    let mut all: Vec<TcpStream> = one;
    for host in 3..(3 + (MAX_CONNECTIONS / MAX_PER_ADDRESS - 1) as u8) {
        all.extend((0..MAX_PER_ADDRESS).map(|_| admin_from(&b, host)));
    }
    all.push(admin_from(&b, 7));
    assert_eq!(all.len(), MAX_CONNECTIONS);
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(healthz_from(&b, 9), Some(200), "a probe from another address is kept out");
    assert!(closed_at_once(&mut all[0]), "the oldest silent socket was not shut down");
    assert!(still_open(&mut all[1]));
}

/// A request trickled in a byte at a time is cut off at its deadline (10 s from the
/// start of the wait), not kept alive by each byte: before, every byte restarted a
/// 10 s read timeout, so one byte every 9 s held a thread for about a day, and 128 such
/// connections would have shut /healthz out.
#[test]
fn a_request_trickled_in_a_byte_at_a_time_is_cut_off_at_its_deadline() {
    let b = Broker::start(&[]);
    let mut slow = admin(&b);
    let mut w = slow.try_clone().unwrap();
    let started = Instant::now();
    let trickle = std::thread::spawn(move || {
        for byte in b"GET /metrics HTTP/1.1\r\nX-Slow: ".iter().cycle().take(120) {
            if w.write_all(&[*byte]).is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    });
    let (got, closed) = read_until_closed(&mut slow);
    let text = String::from_utf8_lossy(&got);
    assert!(closed && text.starts_with("HTTP/1.1 408 "), "closed {closed} after {:?}: {text}", started.elapsed());
    trickle.join().unwrap();
}

#[test]
fn admin_requests_are_parsed_strictly_and_keep_alive_pipelines_are_answered_in_order() {
    let b = Broker::start(&[]);
    // Two pipelined requests in one write, a HEAD and a GET, on one keep-alive connection.
    let mut s = admin(&b);
    s.write_all(
        b"HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .unwrap();
    let (got, closed) = read_until_closed(&mut s);
    let text = String::from_utf8_lossy(&got);
    assert!(closed, "Connection: close is honoured: {text}");
    let (first, rest) = text.split_once("\r\n\r\n").unwrap();
    assert!(first.starts_with("HTTP/1.1 200 ") && first.contains("Content-Type: text/plain"), "{first}");
    let len: usize = first.lines().find_map(|l| l.strip_prefix("Content-Length: ")).unwrap().parse().unwrap();
    assert!(len > 0, "HEAD tells the length of the body it leaves out");
    assert!(rest.starts_with("HTTP/1.1 200 ") && rest.ends_with(r#"{"status":"ok"}"#), "no body after HEAD: {rest}");

    let status_of = |req: &[u8]| -> (String, bool) {
        let mut s = admin(&b);
        s.write_all(req).unwrap();
        let (got, closed) = read_until_closed(&mut s);
        (String::from_utf8_lossy(&got).split(' ').nth(1).unwrap_or("none").to_owned(), closed)
    };
    for (req, want) in [
        (b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n".to_vec(), "405"),
        (b"GET /metrics HTTP/2.0\r\n\r\n".to_vec(), "505"),
        (b"GET metrics HTTP/1.1\r\n\r\n".to_vec(), "400"),
        (b"GET /metrics HTTP/1.1\r\nno colon here\r\n\r\n".to_vec(), "400"),
        (b"GET /metrics HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec(), "411"),
        (b"GET /metrics HTTP/1.1\r\nContent-Length: 1048576\r\n\r\n".to_vec(), "413"),
        ([&b"GET /metrics HTTP/1.1\r\nX-Big: "[..], &[b'a'; 9000][..], b"\r\n\r\n"].concat(), "431"),
        (b"GET /nothing HTTP/1.0\r\n\r\n".to_vec(), "404"),
    ] {
        let (got, closed) = status_of(&req);
        assert_eq!(got, want, "{}", String::from_utf8_lossy(&req[..req.len().min(60)]));
        assert!(closed, "closed after {want}");
    }
    // A GET with a small body: the body is skipped, and the next request on the same
    // connection is read from the right place.
    let mut s = admin(&b);
    s.write_all(b"GET /healthz HTTP/1.1\r\nContent-Length: 5\r\n\r\nhelloGET /healthz HTTP/1.0\r\n\r\n").unwrap();
    let (got, _) = read_until_closed(&mut s);
    assert_eq!(String::from_utf8_lossy(&got).matches("HTTP/1.1 200 ").count(), 2);
}

/// A refused request whose rest the endpoint did not read still gets its answer
/// before the connection closes (on loopback the reset that a close with unread bytes
/// sends did not cost the answer, with or without draining them first).
#[test]
fn a_refused_request_with_bytes_behind_it_still_gets_its_answer() {
    let b = Broker::start(&[]);
    for _ in 0..5 {
        let mut s = admin(&b);
        let mut req = b"GET /metrics HTTP/1.1\r\nX-Big: ".to_vec();
        req.resize(100_000, b'a');
        // The endpoint stops reading after 8 KiB; the rest fits the socket buffers.
        let _ = s.write_all(&req);
        let (got, _) = read_until_closed(&mut s);
        let text = String::from_utf8_lossy(&got);
        assert!(text.starts_with("HTTP/1.1 431 "), "{text:?}");
    }
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

#[test]
fn running_out_of_file_descriptors_does_not_end_the_admin_endpoint_or_the_listener() {
    const LIMIT: u64 = 256;
    let b = Broker::start_with_open_files(&[], LIMIT, LIMIT);
    // Plain TCP connections to the AMQP port until the broker has no descriptor left.
    let mut held = Vec::new();
    for _ in 0..2 * LIMIT {
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], b.port));
        if let Ok(s) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) {
            held.push(s);
        }
        if open_fds(b.pid()) as u64 >= LIMIT {
            break;
        }
    }
    assert!(
        eventually(Duration::from_secs(10), || open_fds(b.pid()) as u64 >= LIMIT - 1),
        "the broker never ran out: {} descriptors open",
        open_fds(b.pid())
    );
    // The admin endpoint's accept fails now (EMFILE) for as long as this lasts.
    let _ = TcpStream::connect_timeout(&std::net::SocketAddr::from(([127, 0, 0, 1], b.admin)), Duration::from_secs(1))
        .and_then(|mut s| {
            s.set_read_timeout(Some(Duration::from_secs(1)))?;
            s.write_all(b"GET /healthz HTTP/1.1\r\n\r\n")?;
            s.read(&mut [0u8; 64])
        });
    std::thread::sleep(Duration::from_millis(500));
    drop(held);
    // Both come back once descriptors are free.
    assert!(
        eventually(Duration::from_secs(20), || b.http("/healthz").map(|(s, _)| s) == Some(200)),
        "the admin endpoint never came back"
    );
    assert!(scrape_ok(&b));
    let mut c = Client::connect(b.addr(), "after-emfile").unwrap();
    let ch = c.begin().unwrap();
    let s = c.attach_sender(ch, "s", Some("queues/after-emfile"), &LinkOptions::default()).unwrap();
    c.wait_credit(s).unwrap();
    let id = c.send(s, data_message(b"x"), false).unwrap();
    assert_eq!(c.wait_outcome(s, id).unwrap(), Some(DeliveryState::Accepted));
}

#[test]
fn the_open_files_soft_limit_is_raised_to_the_hard_limit() {
    let b = Broker::start_with_open_files(&[], 512, 4096);
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", b.pid())).unwrap();
    let line = limits.lines().find(|l| l.starts_with("Max open files")).unwrap();
    let nums: Vec<&str> = line.split_whitespace().skip(3).take(2).collect();
    assert_eq!(nums, ["4096", "4096"], "{line}");
}
