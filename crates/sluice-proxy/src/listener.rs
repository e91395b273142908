//! Listening sockets: one per worker and address, with `SO_REUSEPORT`, so the kernel spreads
//! new connections over the workers and no accept lock is shared between them.

use std::io;
use std::net::{SocketAddr, TcpListener};

use socket2::{Domain, Protocol, Socket, Type};

/// Backlog of each listening socket.
const BACKLOG: i32 = 4096;

/// Binds one socket to `addr` with `SO_REUSEPORT`.
pub(crate) fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = reuse_port_socket(addr, Type::STREAM, Protocol::TCP)?;
    socket.set_tcp_nodelay(true)?;
    socket.bind(&addr.into())?;
    socket.listen(BACKLOG)?;
    Ok(socket.into())
}

/// Binds `count` sockets to `addr`. Port 0 is resolved by the first bind, and the others join
/// that port, so all workers share one address.
pub(crate) fn bind_group(
    addr: SocketAddr,
    count: usize,
) -> io::Result<(SocketAddr, Vec<TcpListener>)> {
    let first = bind(addr)?;
    let actual = first.local_addr()?;
    let mut all = vec![first];
    for _ in 1..count {
        all.push(bind(actual)?);
    }
    Ok((actual, all))
}

/// Binds `count` UDP sockets to `addr` with `SO_REUSEPORT` (the kernel sends one client's
/// datagrams to the same socket). Port 0 is resolved by the first.
pub(crate) fn bind_udp_group(
    addr: SocketAddr,
    count: usize,
) -> io::Result<(SocketAddr, Vec<std::net::UdpSocket>)> {
    let bind = |addr: SocketAddr| -> io::Result<std::net::UdpSocket> {
        let socket = reuse_port_socket(addr, Type::DGRAM, Protocol::UDP)?;
        socket.bind(&addr.into())?;
        Ok(socket.into())
    };
    let first = bind(addr)?;
    let actual = first.local_addr()?;
    let mut all = vec![first];
    for _ in 1..count {
        all.push(bind(actual)?);
    }
    Ok((actual, all))
}

/// A non-blocking socket with `SO_REUSEADDR` and `SO_REUSEPORT` (IPv6 sockets v6-only).
fn reuse_port_socket(addr: SocketAddr, ty: Type, proto: Protocol) -> io::Result<Socket> {
    let socket = Socket::new(Domain::for_address(addr), ty, Some(proto))?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.set_nonblocking(true)?;
    Ok(socket)
}
