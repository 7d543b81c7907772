//! The admin endpoint's HTTP/1.1 server: plain threads and blocking sockets, sized for
//! a few scrapers and operators, hardened so that no client can stop it answering the
//! others (`/healthz` above all, which an orchestrator may restart the broker on).
//!
//! * Each connection has its own thread, so a client that sends requests and does not
//!   read the answers (or reads them slowly) holds only its own thread: an answer must
//!   be taken within [`IO_TIMEOUT`] plus a second per MiB ([`WRITE_MIN_RATE`]), else
//!   the connection is dropped.
//! * A request must arrive whole within [`IO_TIMEOUT`] of the previous answer (or of
//!   the connection), however its bytes trickle in, else the connection is closed
//!   (`408` when part of one came).
//! * At most [`MAX_CONNECTIONS`] connections at a time, and [`MAX_PER_ADDRESS`] from
//!   one IP address, so one client cannot take them all. One more takes the place of
//!   the oldest connection (of that address, at its limit) that has been waiting for a
//!   request for [`EVICTABLE_AFTER`] or more, which is shut down: silent sockets and
//!   idle keep-alives cannot keep a probe of `/healthz` out. With none such, it is
//!   answered `503` and closed at once, without a thread.
//! * Request heads are capped at [`MAX_HEAD`] bytes (`431`), bodies at [`MAX_BODY`]
//!   (`413`; a GET has none, and a chunked one is refused with `411`), malformed
//!   requests get `400`, methods other than GET and HEAD `405`.
//! * Accept errors (out of file descriptors, say) are logged at most once every
//!   [`FailureLog::EVERY`] and retried after a short pause: the endpoint comes back
//!   as soon as descriptors are free again.
//! * Keep-alive (HTTP/1.1 by default, 1.0 on `Connection: keep-alive`) and pipelined
//!   requests are served in order.

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::net::FailureLog;

/// Read and write timeout of every admin connection.
pub const IO_TIMEOUT: Duration = Duration::from_secs(10);
/// Admin connections served at once.
pub const MAX_CONNECTIONS: usize = 128;
/// Admin connections served at once from one IP address.
pub const MAX_PER_ADDRESS: usize = 32;
/// The slowest an answer may be taken, in bytes per second, past [`IO_TIMEOUT`].
pub const WRITE_MIN_RATE: usize = 1 << 20;
/// Largest request head (request line and headers).
pub const MAX_HEAD: usize = 8 * 1024;
/// Largest request body read (and ignored).
pub const MAX_BODY: usize = 64 * 1024;
/// Pause after a failed accept.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);
/// A connection waiting this long for a request (a request takes a client
/// milliseconds) may be shut down for a new one at the limits.
pub const EVICTABLE_AFTER: Duration = Duration::from_secs(1);

/// One parsed request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// `GET` or `HEAD` (others are answered before a handler sees them).
    pub head_only: bool,
    /// The path, before any `?`.
    pub path: String,
    /// What follows the `?` (empty when none).
    pub query: String,
}

/// A handler's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// HTTP status code.
    pub status: u16,
    /// Content-Type.
    pub content_type: &'static str,
    /// Body.
    pub body: String,
}

impl Response {
    /// A JSON answer.
    pub fn json(status: u16, body: String) -> Self {
        Response { status, content_type: "application/json", body }
    }
}

/// Serve `listener` for ever on this thread, answering each request with `handler`
/// (called from the connection threads, possibly at the same time).
pub fn serve<H>(listener: TcpListener, handler: H)
where
    H: Fn(&Request) -> Response + Send + Sync + 'static,
{
    let handler = Arc::new(handler);
    let active = Arc::new(Mutex::new(Active::default()));
    let mut failures = FailureLog::default();
    loop {
        let (stream, peer) = match listener.accept() {
            Ok((s, a)) => (s, a.ip()),
            Err(e) => {
                // EMFILE, ENFILE, ENOBUFS, ECONNABORTED...: none of them ends the endpoint.
                failures.failed(&e, "admin endpoint: accept failed; retrying");
                std::thread::sleep(ACCEPT_BACKOFF);
                continue;
            }
        };
        // A second handle on the socket, to shut it down should its place be given up.
        let Ok(handle) = stream.try_clone() else {
            refuse(stream, "no descriptor for the connection");
            continue;
        };
        let id = match lock(&active).admit(peer, handle) {
            Ok(id) => id,
            Err(why) => {
                refuse(stream, why);
                continue;
            }
        };
        // Its place is given back when the thread ends, even by a panic (a handler's
        // panic ends only its connection), or when no thread could be started (the
        // closure and the stream in it are dropped: the client sees a close).
        let place = Place { active: active.clone(), id };
        let h = handler.clone();
        let spawned =
            std::thread::Builder::new().name("sluice-admin-conn".into()).stack_size(512 * 1024).spawn(move || {
                connection(stream, &*h, &place);
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "admin endpoint: no thread for a connection; closed it");
        }
    }
}

/// The connections being served, in all and by address.
#[derive(Debug, Default)]
struct Active {
    total: usize,
    by_address: HashMap<IpAddr, usize>,
    conns: HashMap<u64, Served>,
    next_id: u64,
}

/// One connection being served.
#[derive(Debug)]
struct Served {
    peer: IpAddr,
    /// Shut down to take its place.
    handle: TcpStream,
    /// Since when it has been waiting for a request (None: answering one).
    waiting_since: Option<Instant>,
}

impl Active {
    /// Count a new connection, first giving up the place of one waiting for a request
    /// for [`EVICTABLE_AFTER`] when at a limit; its id, or why it is refused.
    fn admit(&mut self, peer: IpAddr, handle: TcpStream) -> Result<u64, &'static str> {
        if self.by_address.get(&peer).is_some_and(|&n| n >= MAX_PER_ADDRESS) && !self.evict(Some(peer)) {
            return Err("too many admin connections from this address");
        }
        if self.total >= MAX_CONNECTIONS && !self.evict(None) {
            return Err("too many admin connections");
        }
        *self.by_address.entry(peer).or_default() += 1;
        self.total += 1;
        let id = self.next_id;
        self.next_id += 1;
        self.conns.insert(id, Served { peer, handle, waiting_since: Some(Instant::now()) });
        Ok(id)
    }

    /// Shut down the connection (of `peer`, if given) that has waited longest for a
    /// request, if for [`EVICTABLE_AFTER`] or more; true if one was.
    fn evict(&mut self, peer: Option<IpAddr>) -> bool {
        let oldest = self
            .conns
            .iter()
            .filter(|(_, c)| peer.is_none_or(|p| c.peer == p))
            .filter_map(|(id, c)| Some((c.waiting_since?, *id)))
            .min();
        let Some((_, id)) = oldest.filter(|(since, _)| since.elapsed() >= EVICTABLE_AFTER) else { return false };
        if let Some(c) = self.leave(id) {
            tracing::debug!(peer = %c.peer, "admin endpoint: an idle connection gave its place to a new one");
            let _ = c.handle.shutdown(std::net::Shutdown::Both);
        }
        true
    }

    /// Uncount a connection (once: it may have been given up already).
    fn leave(&mut self, id: u64) -> Option<Served> {
        let c = self.conns.remove(&id)?;
        self.total -= 1;
        if let Some(n) = self.by_address.get_mut(&c.peer) {
            *n -= 1;
            if *n == 0 {
                self.by_address.remove(&c.peer);
            }
        }
        Some(c)
    }
}

/// One connection's place in [`Active`], given back when dropped.
struct Place {
    active: Arc<Mutex<Active>>,
    id: u64,
}

impl Place {
    /// The connection waits for a request (true) or answers one (false).
    fn waiting(&self, waiting: bool) {
        if let Some(c) = lock(&self.active).conns.get_mut(&self.id) {
            c.waiting_since = waiting.then(Instant::now);
        }
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        lock(&self.active).leave(self.id);
    }
}

fn lock(a: &Mutex<Active>) -> std::sync::MutexGuard<'_, Active> {
    a.lock().unwrap_or_else(|p| p.into_inner())
}

/// One connection over a limit: told so without blocking, then closed.
fn refuse(stream: TcpStream, why: &str) {
    let _ = stream.set_nonblocking(true);
    let body = serde_json::json!({ "error": why }).to_string();
    let mut out = head(503, "application/json", body.len(), false);
    out.extend_from_slice(body.as_bytes());
    let mut s = stream;
    let _ = s.write_all(&out);
}

fn head(status: u16, content_type: &str, len: usize, keep_alive: bool) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status} {}\r\nContent-Type: {content_type}\r\nContent-Length: {len}\r\nConnection: {}\r\n\r\n",
        reason(status),
        if keep_alive { "keep-alive" } else { "close" }
    )
    .into_bytes()
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        411 => "Length Required",
        413 => "Payload Too Large",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        505 => "HTTP Version Not Supported",
        _ => "",
    }
}

/// What reading the next request gave.
#[derive(Debug, PartialEq, Eq)]
enum Next {
    /// A request; `keep_alive` says whether another may follow.
    Request { req: Request, keep_alive: bool },
    /// The client closed, or stayed silent past the timeout, between requests.
    Gone,
    /// Something to answer with this status, then close.
    Refuse(u16, &'static str),
}

/// Serve requests on `stream` until it closes, fails or times out.
fn connection(mut stream: TcpStream, handler: &dyn Fn(&Request) -> Response, place: &Place) {
    let _ = stream.set_nodelay(true);
    // Bytes received and not yet parsed (pipelined requests wait here).
    let mut buf: Vec<u8> = Vec::with_capacity(1024);
    for n in 0u64.. {
        let deadline = Instant::now() + IO_TIMEOUT;
        // Waiting from accept (the place was made so), then after each answer.
        if n > 0 {
            place.waiting(true);
        }
        let next = read_request(&mut stream, &mut buf, deadline);
        place.waiting(false);
        let (status, content_type, body, head_only, keep_alive) = match next {
            Next::Gone => return,
            Next::Refuse(status, why) => {
                (status, "application/json", serde_json::json!({ "error": why }).to_string(), false, false)
            }
            Next::Request { req, keep_alive } => {
                let r = handler(&req);
                (r.status, r.content_type, r.body, req.head_only, keep_alive)
            }
        };
        let mut out = head(status, content_type, body.len(), keep_alive);
        let deadline = Instant::now() + IO_TIMEOUT + Duration::from_secs((body.len() / WRITE_MIN_RATE) as u64);
        let sent = if head_only {
            write_all(&mut stream, &out, deadline)
        } else if body.len() <= 64 * 1024 {
            out.extend_from_slice(body.as_bytes());
            write_all(&mut stream, &out, deadline)
        } else {
            write_all(&mut stream, &out, deadline).and_then(|()| write_all(&mut stream, body.as_bytes(), deadline))
        };
        // A write that timed out (the client is not reading) or failed ends it.
        if sent.is_err() || !keep_alive {
            return;
        }
    }
}

/// The time left until `deadline`, as a socket timeout (None once it has passed: a
/// zero timeout would mean none at all).
fn left(deadline: Instant) -> Option<Duration> {
    Some(deadline.saturating_duration_since(Instant::now())).filter(|d| !d.is_zero())
}

/// `Write::write_all` that gives up at `deadline`, however the peer trickles.
fn write_all(stream: &mut TcpStream, mut buf: &[u8], deadline: Instant) -> std::io::Result<()> {
    while !buf.is_empty() {
        let t = left(deadline).ok_or(ErrorKind::TimedOut)?;
        stream.set_write_timeout(Some(t))?;
        let n = stream.write(buf)?;
        if n == 0 {
            return Err(ErrorKind::WriteZero.into());
        }
        buf = &buf[n..];
    }
    Ok(())
}

/// `Read::read` that gives up at `deadline`.
fn read_by(stream: &mut TcpStream, buf: &mut [u8], deadline: Instant) -> std::io::Result<usize> {
    let t = left(deadline).ok_or(ErrorKind::TimedOut)?;
    stream.set_read_timeout(Some(t))?;
    stream.read(buf)
}

/// Read (into `buf`, which may already hold pipelined bytes) and parse one request,
/// all of it by `deadline`.
fn read_request(stream: &mut TcpStream, buf: &mut Vec<u8>, deadline: Instant) -> Next {
    let end = loop {
        if let Some(i) = find_end(buf) {
            break i;
        }
        if buf.len() >= MAX_HEAD {
            return Next::Refuse(431, "request head too large");
        }
        match read_some(stream, buf, MAX_HEAD - buf.len(), deadline) {
            Ok(0) if buf.is_empty() => return Next::Gone,
            Ok(0) => return Next::Refuse(400, "connection closed inside a request"),
            Ok(_) => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return if buf.is_empty() { Next::Gone } else { Next::Refuse(408, "request not received in time") };
            }
            Err(_) => return Next::Gone,
        }
    };
    let parsed = parse_head(&buf[..end]);
    buf.drain(..end + 4);
    let (req, keep_alive, body_len) = match parsed {
        Ok(p) => p,
        Err(refusal) => return refusal,
    };
    // A body is read and ignored, so the next pipelined request starts where it should.
    let mut left = body_len;
    let have = left.min(buf.len());
    buf.drain(..have);
    left -= have;
    while left > 0 {
        let mut sink = [0u8; 4096];
        let want = left.min(sink.len());
        match read_by(stream, &mut sink[..want], deadline) {
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return Next::Refuse(408, "request not received in time")
            }
            Ok(0) | Err(_) => return Next::Refuse(400, "request body not received"),
            Ok(n) => left -= n,
        }
    }
    Next::Request { req, keep_alive }
}

fn read_some(stream: &mut TcpStream, buf: &mut Vec<u8>, room: usize, deadline: Instant) -> std::io::Result<usize> {
    let mut chunk = [0u8; 2048];
    let want = room.min(chunk.len());
    let n = read_by(stream, &mut chunk[..want], deadline)?;
    buf.extend_from_slice(&chunk[..n]);
    Ok(n)
}

/// Where the head ends (the index of its `\r\n\r\n`).
fn find_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n")
}

/// The request line and headers: the request, whether the connection stays open, and
/// the length of the body that follows.
fn parse_head(head: &[u8]) -> Result<(Request, bool, usize), Next> {
    let bad = |why| Next::Refuse(400, why);
    let text = std::str::from_utf8(head).map_err(|_| bad("request head is not UTF-8"))?;
    let mut lines = text.split("\r\n");
    let line = lines.next().unwrap_or_default();
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) = (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(bad("malformed request line"));
    };
    let http10 = match version {
        "HTTP/1.1" => false,
        "HTTP/1.0" => true,
        v if v.starts_with("HTTP/") => return Err(Next::Refuse(505, "only HTTP/1.0 and HTTP/1.1 are served")),
        _ => return Err(bad("malformed request line")),
    };
    if !target.starts_with('/') {
        return Err(bad("the request target must be a path"));
    }
    let mut keep_alive = !http10;
    let mut body_len = 0usize;
    for h in lines {
        let (name, value) = h.split_once(':').ok_or_else(|| bad("malformed header"))?;
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            body_len = value.parse().map_err(|_| bad("bad Content-Length"))?;
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(Next::Refuse(411, "a request body must have a Content-Length"));
        } else if name.eq_ignore_ascii_case("connection") {
            if value.eq_ignore_ascii_case("close") {
                keep_alive = false;
            } else if value.eq_ignore_ascii_case("keep-alive") {
                keep_alive = true;
            }
        }
    }
    if body_len > MAX_BODY {
        return Err(Next::Refuse(413, "request body too large"));
    }
    let head_only = match method {
        "GET" => false,
        "HEAD" => true,
        _ => return Err(Next::Refuse(405, "only GET and HEAD are served")),
    };
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    Ok((Request { head_only, path: path.to_owned(), query: query.to_owned() }, keep_alive, body_len))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(head: &str) -> Result<(Request, bool, usize), Next> {
        parse_head(head.as_bytes())
    }

    /// A connection's place is given back however its thread ends, a panic included,
    /// so a handler's panic cannot use up the limits.
    #[test]
    fn a_place_is_given_back_when_its_thread_panics() {
        let active = Arc::new(Mutex::new(Active::default()));
        let peer = IpAddr::from([127, 0, 0, 1]);
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        for _ in 0..MAX_PER_ADDRESS + 1 {
            let handle = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
            let id = lock(&active).admit(peer, handle).unwrap();
            let place = Place { active: active.clone(), id };
            let t = std::thread::spawn(move || {
                let _place = place;
                panic!("a handler failed");
            });
            assert!(t.join().is_err());
        }
        let a = lock(&active);
        assert_eq!((a.total, a.by_address.len(), a.conns.len()), (0, 0, 0));
    }

    #[test]
    fn request_heads_are_parsed_or_refused_with_the_right_status() {
        let (r, ka, n) = parsed("GET /api/channels?limit=2 HTTP/1.1\r\nHost: x").unwrap();
        assert_eq!(
            (r.path.as_str(), r.query.as_str(), r.head_only, ka, n),
            ("/api/channels", "limit=2", false, true, 0)
        );
        let (r, ka, _) = parsed("HEAD /metrics HTTP/1.0\r\nConnection: Keep-Alive").unwrap();
        assert!(r.head_only && ka);
        assert!(!parsed("GET / HTTP/1.0").unwrap().1, "1.0 closes by default");
        assert!(!parsed("GET / HTTP/1.1\r\nconnection: close").unwrap().1);
        assert_eq!(parsed("GET / HTTP/1.1\r\nContent-Length: 12").unwrap().2, 12);
        let status = |h: &str| match parsed(h) {
            Err(Next::Refuse(s, _)) => s,
            other => panic!("{h:?}: {other:?}"),
        };
        assert_eq!(status("POST / HTTP/1.1"), 405);
        assert_eq!(status("GET / HTTP/2.0"), 505);
        assert_eq!(status("GET /  HTTP/1.1"), 400);
        assert_eq!(status("GET http://x/ HTTP/1.1"), 400);
        assert_eq!(status("GET / HTTP/1.1\r\nno colon"), 400);
        assert_eq!(status("GET / HTTP/1.1\r\nContent-Length: -1"), 400);
        assert_eq!(status("GET / HTTP/1.1\r\nContent-Length: 65537"), 413);
        assert_eq!(status("GET / HTTP/1.1\r\nTransfer-Encoding: chunked"), 411);
        assert_eq!(
            match parse_head(b"GET /\xff HTTP/1.1") {
                Err(Next::Refuse(s, _)) => s,
                _ => 0,
            },
            400
        );
    }
}
