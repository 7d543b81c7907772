//! Listeners and connections: SO_REUSEPORT listeners per shard, plain and TLS; each
//! accepted connection is served by the shard with the fewest live connections
//! (handed over through the shard rings when that is not the one that accepted it),
//! one driver task per connection.

mod conn;
mod link_map;
pub mod tls;

use crate::broker::ShardMsg;
use crate::config::Settings;
use crate::shard::Shard;
use conn::Peer;
use glommio::net::{AcceptedTcpStream, TcpListener};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{FromRawFd, IntoRawFd};
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Bind a listener on `port` (SO_REUSEPORT, so every shard binds the same port).
pub fn bind(settings: &Settings, port: u16) -> std::io::Result<(TcpListener, ListenerFd)> {
    let ip: IpAddr = settings.host.parse().map_err(|_| std::io::Error::other("invalid host address"))?;
    let addr = SocketAddr::new(ip, port);
    let socket = socket2::Socket::new(socket2::Domain::for_address(addr), socket2::Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    socket.set_nodelay(true)?;
    socket.bind(&addr.into())?;
    socket.listen(1024)?;
    socket.set_nonblocking(true)?;
    let fd = socket.into_raw_fd();
    Ok((from_fd(fd), ListenerFd(fd)))
}

/// The descriptor of a listener owned by an accept loop, kept to stop listening.
#[derive(Debug, Clone, Copy)]
pub struct ListenerFd(i32);

impl ListenerFd {
    /// Stop listening now: queued and new connection attempts are refused at once.
    ///
    /// Dropping the listener is not enough: its accept is still pending in the
    /// shard's io_uring, which keeps the socket open (and in the SO_REUSEPORT group,
    /// taking a share of new connections) until the kernel tears the ring down,
    /// after the process has exited. A restarted broker on the same port would see
    /// clients reset by the dead one's socket.
    #[allow(unsafe_code)]
    pub fn shutdown(self) {
        // SAFETY: the fd belongs to a listener that the caller's accept task still
        // owns (it is cancelled only after this call); shutdown(2) neither closes
        // nor invalidates it.
        unsafe {
            libc::shutdown(self.0, libc::SHUT_RDWR);
        }
    }
}

#[allow(unsafe_code)]
fn from_fd(fd: i32) -> TcpListener {
    // SAFETY: `fd` is a freshly created, bound and listening TCP socket that
    // nothing else owns (it was just released by `into_raw_fd`).
    unsafe { TcpListener::from_raw_fd(fd) }
}

/// Count a new connection against MaxConnections; true when over the limit.
fn admit(shard: &Shard) -> bool {
    let max = shard.global.settings.max_connections as usize;
    let live = shard.global.connections.fetch_add(1, Ordering::SeqCst) + 1;
    max > 0 && live > max
}

/// A connection still in its handshake (TLS or AMQP) this long may be dropped for a new one
/// when the broker is at MaxConnections (a client's handshake takes milliseconds).
const EVICTABLE_AFTER: Duration = Duration::from_secs(1);

/// How long a shard waits for another to answer an eviction (then the new
/// connection is refused).
const EVICT_REPLY_WAIT: Duration = Duration::from_millis(250);

/// Make room for a new connection at MaxConnections on another shard, `elsewhere`,
/// which has a connection in its handshake for [`EVICTABLE_AFTER`] (connections are
/// placed on the shard with the fewest, so silent sockets may all sit on another one
/// than the accepting one): asked by a message, and the new connection waits for the
/// answer (at most [`EVICT_REPLY_WAIT`]), so it is admitted only once one was dropped.
/// True when one was.
async fn evict_a_handshake(shard: &Shard, elsewhere: usize) -> bool {
    let token = shard.next_evict.get();
    shard.next_evict.set(token.wrapping_add(1));
    let answer = Rc::new(crate::shard::Answer::default());
    shard.evict_waits.borrow_mut().insert(token, answer.clone());
    shard.route(ShardMsg::EvictHandshake { shard: elsewhere as u16, from: shard.id, token });
    let late = async {
        glommio::timer::sleep(EVICT_REPLY_WAIT).await;
        false
    };
    let ok = futures_lite::future::or(answer.wait(), late).await;
    shard.evict_waits.borrow_mut().remove(&token);
    ok
}

/// Another shard whose oldest connection in its handshake has been for
/// [`EVICTABLE_AFTER`] (the oldest such).
fn handshake_elsewhere(shard: &Shard) -> Option<usize> {
    let g = &shard.global;
    let now = g.epoch.elapsed().as_millis() as u64;
    let oldest = g
        .oldest_handshake
        .iter()
        .enumerate()
        .filter(|(j, _)| *j != shard.id as usize)
        .filter_map(|(j, a)| Some((a.load(Ordering::Relaxed).checked_sub(1)?, j)))
        .min();
    oldest.filter(|(since, _)| now.saturating_sub(*since) >= EVICTABLE_AFTER.as_millis() as u64).map(|(_, j)| j)
}

/// Drop this shard's oldest connection still in its handshake, if it has been for
/// [`EVICTABLE_AFTER`]; true if one was. (One whose OPEN comes in the same turn as
/// the eviction is closed with resource-limit-exceeded.)
pub(crate) fn evict_local(shard: &Shard) -> bool {
    let Some((conn, h)) = shard.take_oldest_handshake(EVICTABLE_AFTER) else { return false };
    crate::shard::metrics::add(&shard.counters.handshakes_evicted, 1);
    match h.tls {
        Some(tls) => tls.set(true),
        None => shard.route(ShardMsg::Evict { conn }),
    }
    true
}

/// The shard that serves a new connection accepted on `shard`: this one, unless
/// another shard has fewer live connections (then the one with the fewest). The
/// kernel's SO_REUSEPORT choice is a hash of the peer's address and port, so a few
/// connections often land on one shard and leave the other core idle; a producer and
/// its consumer on one shard with their channel homed on the other cost two hops per
/// message. The connection is counted on the chosen shard at once, so a burst of
/// accepts spreads as well.
fn place(shard: &Shard) -> usize {
    let counts = &shard.global.shard_connections;
    let mut best = shard.id as usize;
    let mut least = counts.get(best).map_or(0, |c| c.load(Ordering::SeqCst));
    for (i, c) in counts.iter().enumerate() {
        let n = c.load(Ordering::SeqCst);
        if n < least {
            best = i;
            least = n;
        }
    }
    claim(shard, best)
}

/// Count a connection on shard `i` (undone by [`release`] on that shard); returns `i`.
fn claim(shard: &Shard, i: usize) -> usize {
    if let Some(c) = shard.global.shard_connections.get(i) {
        c.fetch_add(1, Ordering::SeqCst);
    }
    i
}

async fn next(listener: &TcpListener, failures: &mut FailureLog) -> AcceptedTcpStream {
    loop {
        match listener.shared_accept().await {
            Ok(s) => return s,
            Err(e) => {
                failures.failed(&e, "AMQP listener: accept failed; retrying");
                glommio::timer::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

/// Repeated failures (accepts out of file descriptors, say) logged at most once every
/// [`FailureLog::EVERY`], with the count left out since, not once per retry (nor once
/// per success in between, when a shortage lets every other accept through).
#[derive(Debug, Default)]
pub(crate) struct FailureLog {
    last_logged: Option<std::time::Instant>,
    not_logged: u64,
}

impl FailureLog {
    /// The least time between two logged failures.
    pub(crate) const EVERY: Duration = Duration::from_secs(10);

    /// One more failure: logged at warn unless one was logged less than `EVERY` ago.
    pub(crate) fn failed(&mut self, e: &dyn std::fmt::Display, what: &str) {
        if self.last_logged.is_some_and(|t| t.elapsed() < Self::EVERY) {
            self.not_logged += 1;
            return;
        }
        tracing::warn!(error = %e, not_logged = self.not_logged, "{what}");
        self.last_logged = Some(std::time::Instant::now());
        self.not_logged = 0;
    }
}

/// Accept connections (plain, or TLS when `tls`) for the life of the shard and hand
/// each to the shard that serves it ([`place`]).
pub async fn accept_loop(shard: Rc<Shard>, listener: TcpListener, tls: bool) {
    let mut failures = FailureLog::default();
    loop {
        let accepted = next(&listener, &mut failures).await;
        // At MaxConnections, a connection still in its handshake after a second gives
        // its place to the new one: silent sockets cannot keep every client out.
        if !admit(&shard) || evict_local(&shard) {
            hand(&shard, accepted, tls, false);
            continue;
        }
        match handshake_elsewhere(&shard) {
            // Another shard's, once it says it dropped it: the wait is the new
            // connection's own task, so this loop goes on accepting meanwhile.
            Some(j) => {
                let shard = shard.clone();
                glommio::spawn_local(async move {
                    let ok = evict_a_handshake(&shard, j).await;
                    hand(&shard, accepted, tls, !ok);
                })
                .detach();
            }
            None => hand(&shard, accepted, tls, true),
        }
    }
}

/// Serve an accepted connection here or hand it to the shard with the fewest; one
/// over MaxConnections is only told so, where it landed, and holds no place: it is
/// uncounted at once (a silent socket over the limit, which no new connection may
/// take the place of, would otherwise keep a place freed meanwhile shut until its
/// handshake timeout).
fn hand(shard: &Rc<Shard>, accepted: AcceptedTcpStream, tls: bool, over_limit: bool) {
    if over_limit {
        shard.global.connections.fetch_sub(1, Ordering::SeqCst);
    }
    let target = if over_limit { claim(shard, shard.id as usize) } else { place(shard) };
    if target == shard.id as usize {
        serve(shard, accepted, tls, over_limit);
    } else {
        crate::shard::metrics::add(&shard.counters.connections_handed_over, 1);
        shard.route(ShardMsg::Adopt { shard: target as u16, stream: accepted, tls });
    }
}

/// Serve a connection on this shard: a plain one at once; a TLS one after an optional
/// AMQP TLS protocol header (answered in kind) and the TLS handshake, both within the
/// handshake timeout. The connection was counted by [`admit`] and on this shard.
pub fn serve(shard: &Rc<Shard>, accepted: AcceptedTcpStream, tls: bool, over_limit: bool) {
    let stream = accepted.bind_to_executor();
    if shard.global.shutting_down.load(Ordering::SeqCst) {
        // Handed over while this shard was closing its connections: it would never
        // be told to close. Refused (the socket is closed) like one that came too late.
        drop(stream);
        release(shard, over_limit);
        return;
    }
    let _ = stream.set_nodelay(true);
    // A peer that stops reading would keep the connection blocked in a write for ever
    // (its idle timer is not looked at meanwhile): a write that makes no progress for
    // this long fails with `TimedOut` and the connection is dropped. glommio arms the
    // timer only when a send would block, and disarms it on the next one that goes.
    let write_timeout = shard.global.settings.write_timeout_seconds;
    if write_timeout > 0 {
        let _ = stream.set_write_timeout(Some(Duration::from_secs(u64::from(write_timeout))));
    }
    let shard2 = shard.clone();
    // Two separate tasks, not one with both branches: a task is as large as its
    // largest state, and a plain connection must not carry the TLS one's (measured:
    // +1.3 KiB per idle plain connection when they shared one task).
    if !tls {
        glommio::spawn_local(async move {
            let ip = stream.peer_addr().map(|a| a.ip().to_string()).unwrap_or_default();
            let peer = Peer { ip, tls: false, client_cn: None, handshake_spent: Duration::ZERO, conn_id: None };
            conn::run(shard2.clone(), stream, peer, over_limit).await;
            release(&shard2, over_limit);
        })
        .detach();
        return;
    }
    let acceptor = shard.tls.clone();
    let started = std::time::Instant::now();
    glommio::spawn_local(async move {
        let ip = stream.peer_addr().map(|a| a.ip().to_string()).unwrap_or_default();
        match acceptor {
            Some(acceptor) => {
                // In the handshake map from accept, so that at MaxConnections a socket
                // silent in its TLS handshake gives its place up like one silent in
                // AMQP's; the connection keeps this id.
                // (Not one over the limit: see conn::run.)
                let id = shard2.next_conn_id();
                let eviction = Rc::new(crate::shard::Answer::default());
                if !over_limit {
                    let entry = crate::shard::Handshake { since: started, tls: Some(eviction.clone()) };
                    shard2.handshake_begin(id, entry);
                }
                let limit = Duration::from_secs(shard2.global.settings.handshake_timeout_seconds.max(1) as u64);
                let handshake = async move {
                    let mut stream = stream;
                    tls::amqp_tls_header(&mut stream).await?;
                    acceptor.accept(stream).await
                };
                let timeout = async {
                    glommio::timer::sleep(limit).await;
                    Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "TLS handshake timed out"))
                };
                let evicted = async {
                    eviction.wait().await;
                    Err(std::io::Error::other("dropped in its TLS handshake for a new connection at MaxConnections"))
                };
                match futures_lite::future::or(evicted, futures_lite::future::or(handshake, timeout)).await {
                    // Done, unless its place was given up meanwhile (counted already).
                    Ok(tls) if !eviction.is_set() => {
                        let client_cn = tls::client_cn(tls.get_ref().1);
                        let handshake_spent = started.elapsed();
                        let peer = Peer { ip, tls: true, client_cn, handshake_spent, conn_id: Some(id) };
                        conn::run(shard2.clone(), tls, peer, over_limit).await;
                    }
                    Ok(_) => tracing::debug!(peer = %ip, "dropped after its TLS handshake: its place was given up"),
                    Err(e) => tracing::debug!(peer = %ip, error = %e, "TLS handshake failed"),
                }
                shard2.handshake_end(id);
            }
            // Every shard has the acceptor when any has the TLS listener (one
            // configuration); not reached.
            None => tracing::warn!(peer = %ip, "TLS connection handed to a shard without TLS; closed"),
        }
        release(&shard2, over_limit);
    })
    .detach();
}

/// A connection of this shard ended: uncount it.
fn release(shard: &Shard, over_limit: bool) {
    // One over MaxConnections was uncounted when it was found so ([`hand`]).
    if !over_limit {
        shard.global.connections.fetch_sub(1, Ordering::SeqCst);
    }
    if let Some(c) = shard.global.shard_connections.get(shard.id as usize) {
        c.fetch_sub(1, Ordering::SeqCst);
    }
}
