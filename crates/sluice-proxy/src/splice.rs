//! Zero-copy relaying between two TCP sockets with splice(2): bytes move from one socket into
//! a pipe and from the pipe into the other socket inside the kernel, never copied into user
//! space. One pipe per direction, created per connection. Written here because neither tokio
//! nor a maintained crate offers a splice relay on tokio sockets; rustix provides the safe
//! system-call wrappers.

use std::cell::Cell;
use std::io;
use std::os::fd::OwnedFd;
use std::time::Duration;

use rustix::pipe::{PipeFlags, SpliceFlags, pipe_with, splice};
use tokio::io::Interest;
use tokio::net::TcpStream;

/// Most bytes moved by one splice call (the default pipe capacity).
const CHUNK: usize = 64 * 1024;

/// Relays both ways between `a` and `b` until both directions ended (each side's end of
/// input is passed on as a half-close), or nothing moved for `idle` (an error of kind
/// `TimedOut`, noticed between `idle` and twice that after the last byte). Returns the bytes
/// moved a→b and b→a, however it ended.
pub(crate) async fn relay(a: &TcpStream, b: &TcpStream, idle: Duration) -> crate::relay::Moved {
    let moved = Cell::new(0u64);
    let (ab, ba) = (Cell::new(0u64), Cell::new(0u64));
    let both = async { tokio::try_join!(one_way(a, b, &moved, &ab), one_way(b, a, &moved, &ba)) };
    let end = crate::relay::until_idle(both, &moved, idle).await.map(drop);
    crate::relay::Moved {
        from_a: ab.get(),
        to_a: ba.get(),
        end,
    }
}

/// Moves bytes from `src` to `dst` through a pipe until `src` ends, then half-closes `dst`.
async fn one_way(
    src: &TcpStream,
    dst: &TcpStream,
    moved: &Cell<u64>,
    total: &Cell<u64>,
) -> io::Result<()> {
    let (rd, wr): (OwnedFd, OwnedFd) = pipe_with(PipeFlags::NONBLOCK | PipeFlags::CLOEXEC)?;
    let flags = SpliceFlags::MOVE | SpliceFlags::NONBLOCK;
    loop {
        let n = loop {
            src.readable().await?;
            match src.try_io(Interest::READABLE, || {
                Ok(splice(src, None, &wr, None, CHUNK, flags)?)
            }) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        };
        if n == 0 {
            let _ = socket2::SockRef::from(dst).shutdown(std::net::Shutdown::Write);
            return Ok(());
        }
        let mut left = n;
        while left > 0 {
            dst.writable().await?;
            match dst.try_io(Interest::WRITABLE, || {
                Ok(splice(&rd, None, dst, None, left, flags)?)
            }) {
                Ok(m) => left -= m,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
        total.set(total.get() + n as u64);
        moved.set(moved.get() + 1);
    }
}
