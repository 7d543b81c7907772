//! Listeners and connections: SO_REUSEPORT listeners per shard (the kernel spreads
//! connections over shards), plain and TLS, and one driver task per connection.

mod conn;
pub mod tls;

use crate::config::Settings;
use crate::shard::Shard;
use conn::Peer;
use glommio::net::{TcpListener, TcpStream};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{FromRawFd, IntoRawFd};
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
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

async fn next(listener: &TcpListener) -> TcpStream {
    loop {
        match listener.accept().await {
            Ok(s) => {
                let _ = s.set_nodelay(true);
                return s;
            }
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                glommio::timer::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

/// Accept plain connections for the life of the shard.
pub async fn accept_loop(shard: Rc<Shard>, listener: TcpListener) {
    loop {
        let stream = next(&listener).await;
        let over_limit = admit(&shard);
        let shard2 = shard.clone();
        glommio::spawn_local(async move {
            let ip = stream.peer_addr().map(|a| a.ip().to_string()).unwrap_or_default();
            conn::run(shard2.clone(), stream, Peer { ip, tls: false, client_cn: None }, over_limit).await;
            shard2.global.connections.fetch_sub(1, Ordering::SeqCst);
        })
        .detach();
    }
}

/// Accept TLS connections: an optional AMQP TLS protocol header first (answered in
/// kind), then the TLS handshake, both within the handshake timeout.
pub async fn accept_tls_loop(shard: Rc<Shard>, listener: TcpListener, config: Arc<rustls::ServerConfig>) {
    let acceptor = futures_rustls::TlsAcceptor::from(config);
    loop {
        let stream = next(&listener).await;
        let over_limit = admit(&shard);
        let shard2 = shard.clone();
        let acceptor = acceptor.clone();
        glommio::spawn_local(async move {
            let ip = stream.peer_addr().map(|a| a.ip().to_string()).unwrap_or_default();
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
            match futures_lite::future::or(handshake, timeout).await {
                Ok(tls) => {
                    let client_cn = tls::client_cn(tls.get_ref().1);
                    let peer = Peer { ip, tls: true, client_cn };
                    conn::run(shard2.clone(), tls, peer, over_limit).await;
                }
                Err(e) => tracing::debug!(peer = %ip, error = %e, "TLS handshake failed"),
            }
            shard2.global.connections.fetch_sub(1, Ordering::SeqCst);
        })
        .detach();
    }
}
