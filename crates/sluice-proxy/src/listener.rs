//! Listening sockets: one per worker and address, with `SO_REUSEPORT`, so the kernel spreads
//! new connections over the workers and no accept lock is shared between them.

use std::io;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsFd, OwnedFd};

use parking_lot::Mutex;
use socket2::{Domain, Protocol, Socket, Type};

/// What a listening socket is matched by when one process hands its sockets to the next (a
/// binary upgrade): its address, and whether it is UDP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SocketKey {
    /// The address it is bound to.
    pub addr: SocketAddr,
    /// A UDP socket (a stream route's); else TCP.
    pub udp: bool,
}

/// Sockets handed over by the process this one replaces, taken by the binds that want them.
static INHERITED: Mutex<Vec<(SocketKey, OwnedFd)>> = Mutex::new(Vec::new());

/// A copy of each listening socket this process serves, kept for a handover once
/// [`keep_for_handover`] is called (the binary does; a library user's sockets are its own).
static HELD: Mutex<Option<Vec<(SocketKey, OwnedFd)>>> = Mutex::new(None);

/// Gives this process the sockets the process it replaces served: the binds of the same
/// addresses take them instead of binding anew, so connections waiting in their queues are
/// accepted here.
pub fn inherit(sockets: Vec<(SocketKey, OwnedFd)>) {
    INHERITED.lock().extend(sockets);
}

/// Whether this process's workers accept connections: closed while a binary upgrade hands the
/// process's state to the next one (the old process pauses, and the new one waits for that
/// state before it accepts anything). Connections meanwhile wait in the sockets' queues, which
/// both processes share: none is refused. Open unless an upgrade closes it.
static GATE: std::sync::LazyLock<tokio::sync::watch::Sender<bool>> =
    std::sync::LazyLock::new(|| tokio::sync::watch::channel(true).0);

/// Workers stop accepting (connections they serve go on) until [`open_gate`].
pub fn close_gate() {
    GATE.send_replace(false);
}

/// Workers accept again (or, in a process started by an upgrade, for the first time).
pub fn open_gate() {
    GATE.send_replace(true);
}

/// What a worker's accept loops follow.
pub(crate) fn gate() -> tokio::sync::watch::Receiver<bool> {
    GATE.subscribe()
}

/// From now on, keeps a copy of each socket bound, for [`held`].
pub fn keep_for_handover() {
    HELD.lock().get_or_insert_with(Vec::new);
}

/// Copies of the sockets this process serves, in the order they were bound, for the process
/// that replaces it.
pub fn held() -> io::Result<Vec<(SocketKey, OwnedFd)>> {
    HELD.lock()
        .iter()
        .flatten()
        .map(|(k, fd)| Ok((*k, fd.try_clone()?)))
        .collect()
}

/// Closes the copies kept for a handover (at shutdown: a socket nobody accepts on must not
/// keep taking connections while the process drains), and those inherited but not taken.
pub fn release() {
    HELD.lock().take();
    INHERITED.lock().clear();
}

/// An inherited socket for `key`, if one is left.
fn take_inherited(key: SocketKey) -> Option<OwnedFd> {
    let mut all = INHERITED.lock();
    let i = all.iter().position(|(k, _)| *k == key)?;
    Some(all.remove(i).1)
}

fn is_inherited(key: SocketKey) -> bool {
    INHERITED.lock().iter().any(|(k, _)| *k == key)
}

/// Keeps a copy of `socket` for a handover, when copies are kept.
fn hold(key: SocketKey, socket: &impl AsFd) -> io::Result<()> {
    if let Some(held) = HELD.lock().as_mut() {
        held.push((key, socket.as_fd().try_clone_to_owned()?));
    }
    Ok(())
}

/// A plain listening socket on `addr` (the admin and status listeners): the one handed over
/// for it, else a new one.
pub fn bind_plain(addr: SocketAddr) -> io::Result<TcpListener> {
    let key = SocketKey { addr, udp: false };
    let listener = match take_inherited(key) {
        Some(fd) => TcpListener::from(fd),
        None => TcpListener::bind(addr)?,
    };
    hold(key, &listener)?;
    Ok(listener)
}

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
/// that port, so all workers share one address. Check first that no other process serves it
/// ([`ensure_unserved`]).
///
/// Sockets handed over for `addr` come first, all of them (more than `count` when the process
/// replaced had more workers: their queues hold connections already made); new ones fill up
/// to `count`.
pub(crate) fn bind_group(
    addr: SocketAddr,
    count: usize,
) -> io::Result<(SocketAddr, Vec<TcpListener>)> {
    let key = SocketKey { addr, udp: false };
    let mut all: Vec<TcpListener> = std::iter::from_fn(|| take_inherited(key))
        .map(TcpListener::from)
        .collect();
    if all.is_empty() {
        all.push(bind(addr)?);
    }
    let actual = all[0].local_addr()?;
    while all.len() < count {
        all.push(bind(actual)?);
    }
    let key = SocketKey {
        addr: actual,
        udp: false,
    };
    for l in &all {
        hold(key, l)?;
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
    let key = SocketKey { addr, udp: true };
    let mut all: Vec<std::net::UdpSocket> = std::iter::from_fn(|| take_inherited(key))
        .map(std::net::UdpSocket::from)
        .collect();
    if all.is_empty() {
        all.push(bind(addr)?);
    }
    let actual = all[0].local_addr()?;
    while all.len() < count {
        all.push(bind(actual)?);
    }
    let key = SocketKey {
        addr: actual,
        udp: true,
    };
    for s in &all {
        hold(key, s)?;
    }
    Ok((actual, all))
}

/// Fails with `AddrInUse` when another process already has a socket on `addr`.
///
/// `SO_REUSEPORT` lets every process of the same user join a port: a second gateway started
/// with the same `listen` would start without a word and take half the connections, with its
/// own configuration. So before the workers' sockets are bound, one socket *without*
/// `SO_REUSEPORT` tries the address: the kernel refuses it while any other socket listens there
/// (or on an overlapping wildcard address). For TCP it keeps `SO_REUSEADDR`, so connections
/// of an earlier run left in TIME_WAIT do not count; for UDP, where `SO_REUSEADDR` would let it
/// share the port, it has neither. It is closed at once. Port 0 (any free port) needs no check.
///
/// A gateway probes every address it will serve before it binds any of them, so that its own
/// sockets on overlapping addresses (`0.0.0.0:9080` and `127.0.0.1:9080`) do not count.
pub fn ensure_unserved(addr: SocketAddr, udp: bool) -> io::Result<()> {
    let (ty, proto) = if udp {
        (Type::DGRAM, Protocol::UDP)
    } else {
        (Type::STREAM, Protocol::TCP)
    };
    // Port 0 is any free port; a socket handed over is served by the process being replaced,
    // which stops when this one is ready.
    if addr.port() == 0 || is_inherited(SocketKey { addr, udp }) {
        return Ok(());
    }
    let probe = Socket::new(Domain::for_address(addr), ty, Some(proto))?;
    probe.set_reuse_address(ty == Type::STREAM)?;
    if addr.is_ipv6() {
        probe.set_only_v6(true)?;
    }
    match probe.bind(&addr.into()) {
        Err(e) if e.kind() == io::ErrorKind::AddrInUse => Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            "the address is already in use by another process",
        )),
        other => other,
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_another_socket_serves_is_refused_and_one_group_shares_its_own() {
        // Another process's listener, as a second gateway would find it (SO_REUSEPORT set,
        // which without the check lets anyone join).
        let (addr, _theirs) = bind_group("127.0.0.1:0".parse().unwrap(), 1).unwrap();
        let err = ensure_unserved(addr, false).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AddrInUse, "{err}");
        // The wildcard address overlaps it too.
        let any: SocketAddr = format!("0.0.0.0:{}", addr.port()).parse().unwrap();
        assert!(ensure_unserved(any, false).is_err());
        // A free address passes, and all workers of one group share it.
        let free = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap()
        };
        ensure_unserved(free, false).unwrap();
        let (_, ours) = bind_group(free, 3).unwrap();
        assert_eq!(ours.len(), 3);
        let (udp, _theirs) = bind_udp_group("127.0.0.1:0".parse().unwrap(), 1).unwrap();
        let err = ensure_unserved(udp, true).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AddrInUse, "{err}");
    }
}
