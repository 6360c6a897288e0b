//! TCP keepalive for the sockets sqlx opens. sqlx has no socket option
//! (launchbadge/sqlx#3540), so each SQL pool's `after_connect` hook calls
//! [`keep_alive_sockets_to`], which finds in this process's descriptor table the TCP sockets
//! connected to the server that have no keepalive yet (the one just opened among them) and
//! sets `support::tcp_keepalive`'s settings on them. Here because reading another owner's
//! descriptor takes an `unsafe` call. Linux only: elsewhere SQL connections rely on the
//! statement bounds alone.

use std::net::SocketAddr;

/// Sets keepalive on this process's TCP sockets connected to `host:port` that have none yet;
/// returns how many it set. Best effort: a socket it cannot inspect is left as it is.
pub async fn keep_alive_sockets_to(host: &str, port: u16) -> usize {
    // IPv6 literals come bracketed from URLs.
    let host = host.trim_matches(&['[', ']'][..]);
    let Ok(peers) = tokio::net::lookup_host((host, port)).await else {
        return 0;
    };
    let peers: Vec<SocketAddr> = peers.collect();
    if peers.is_empty() {
        return 0;
    }
    // Off the async workers: a process with many descriptors takes a while to go through.
    tokio::task::spawn_blocking(move || descriptors::keep_alive_connected_to(&peers))
        .await
        .unwrap_or(0)
}

#[cfg(target_os = "linux")]
mod descriptors {
    use crate::support::tcp_keepalive::{keepalive, USER_TIMEOUT};
    use std::net::SocketAddr;
    use std::os::fd::{FromRawFd, OwnedFd, RawFd};

    pub fn keep_alive_connected_to(peers: &[SocketAddr]) -> usize {
        let Ok(entries) = std::fs::read_dir("/proc/self/fd") else {
            return 0;
        };
        let mut set = 0;
        for entry in entries.flatten() {
            let is_socket = std::fs::read_link(entry.path())
                .is_ok_and(|target| target.to_string_lossy().starts_with("socket:"));
            let fd = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<RawFd>().ok());
            let (true, Some(fd)) = (is_socket, fd) else {
                continue;
            };
            // A duplicate of our own: the original may be closed (and its number reused)
            // meanwhile, so every check below is made on what the duplicate refers to.
            let Some(socket) = duplicate(fd) else {
                continue;
            };
            let socket = socket2::SockRef::from(&socket);
            let stream = socket.r#type().is_ok_and(|t| t == socket2::Type::STREAM);
            let without = socket.keepalive().is_ok_and(|on| !on);
            let to_server = socket
                .peer_addr()
                .ok()
                .and_then(|addr| addr.as_socket())
                .is_some_and(|addr| peers.contains(&addr));
            if stream && without && to_server && socket.set_tcp_keepalive(&keepalive()).is_ok() {
                let _ = socket.set_tcp_user_timeout(Some(USER_TIMEOUT));
                set += 1;
            }
        }
        set
    }

    /// A new descriptor for what `fd` refers to now, owned by the caller; `None` if `fd` is
    /// not open.
    fn duplicate(fd: RawFd) -> Option<OwnedFd> {
        // SAFETY: F_DUPFD_CLOEXEC only reads `fd` (any integer is acceptable: a closed one is
        // EBADF) and returns a new descriptor that nothing else owns.
        let copy = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
        // SAFETY: `copy` is a freshly made descriptor, owned by nobody else.
        (copy >= 0).then(|| unsafe { OwnedFd::from_raw_fd(copy) })
    }
}

#[cfg(not(target_os = "linux"))]
mod descriptors {
    pub fn keep_alive_connected_to(_peers: &[std::net::SocketAddr]) -> usize {
        0
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use crate::support::tcp_keepalive::USER_TIMEOUT;

    #[tokio::test]
    async fn sets_keepalive_on_own_sockets_to_the_server_only() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let other = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let to_server = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
        let elsewhere =
            std::net::TcpStream::connect(other.local_addr().expect("addr")).expect("connect");
        assert!(keep_alive_sockets_to("127.0.0.1", port).await >= 1);
        assert!(socket2::SockRef::from(&to_server)
            .keepalive()
            .expect("read"));
        assert_eq!(
            socket2::SockRef::from(&to_server)
                .tcp_user_timeout()
                .expect("read"),
            Some(USER_TIMEOUT)
        );
        assert!(!socket2::SockRef::from(&elsewhere)
            .keepalive()
            .expect("read"));
        // Already set: nothing left to do.
        assert_eq!(keep_alive_sockets_to("127.0.0.1", port).await, 0);
    }
}
