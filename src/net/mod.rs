//! Listeners and connections: an SO_REUSEPORT listener per shard (the kernel
//! spreads connections over shards) and one driver task per connection.

mod conn;

use crate::config::Settings;
use crate::shard::Shard;
use glommio::net::TcpListener;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{FromRawFd, IntoRawFd};
use std::rc::Rc;
use std::sync::atomic::Ordering;

/// Bind this shard's listener (SO_REUSEPORT, so every shard binds the same port).
pub fn bind(settings: &Settings) -> std::io::Result<TcpListener> {
    let ip: IpAddr = settings.host.parse().map_err(|_| std::io::Error::other("invalid host address"))?;
    let addr = SocketAddr::new(ip, settings.port);
    let socket = socket2::Socket::new(socket2::Domain::for_address(addr), socket2::Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    socket.set_nodelay(true)?;
    socket.bind(&addr.into())?;
    socket.listen(1024)?;
    socket.set_nonblocking(true)?;
    // SAFETY-free hand-over: the descriptor is owned by the socket until here.
    let fd = socket.into_raw_fd();
    Ok(from_fd(fd))
}

#[allow(unsafe_code)]
fn from_fd(fd: i32) -> TcpListener {
    // SAFETY: `fd` is a freshly created, bound and listening TCP socket that
    // nothing else owns (it was just released by `into_raw_fd`).
    unsafe { TcpListener::from_raw_fd(fd) }
}

/// Accept connections for the life of the shard.
pub async fn accept_loop(shard: Rc<Shard>, listener: TcpListener) {
    loop {
        let stream = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                glommio::timer::sleep(std::time::Duration::from_millis(10)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let max = shard.global.settings.max_connections as usize;
        let live = shard.global.connections.fetch_add(1, Ordering::SeqCst) + 1;
        let over_limit = max > 0 && live > max;
        let shard2 = shard.clone();
        glommio::spawn_local(async move {
            conn::run(shard2.clone(), stream, over_limit).await;
            shard2.global.connections.fetch_sub(1, Ordering::SeqCst);
        })
        .detach();
    }
}
