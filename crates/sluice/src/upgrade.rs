//! A binary upgrade that drops nothing, NGINX's way (`kill -USR2 <pid>`): the running process
//! starts the binary now on disk with its own arguments and hands it every listening socket
//! (each worker's `SO_REUSEPORT` socket, the stream, origin, admin and status listeners) over
//! a Unix socket, `SCM_RIGHTS`. The new process binds nothing it was given: it serves the same
//! sockets, so connections waiting in their queues are accepted by one process or the other,
//! never refused. Once it is ready (configuration loaded, from etcd too, listeners up) it says
//! so; only then does the old process stop accepting and drain (keep-alive connections end
//! after their response, HTTP/2 with GOAWAY, up to `timeouts.drain`) and exit. A new binary
//! that exits or says nothing in time leaves the old one serving, and the reason is logged
//! (the new process's own errors go to the same stderr).
//!
//! The link is a `SOCK_SEQPACKET` socket (messages keep their bounds) at a path in a fresh
//! directory only the user can enter; the old process checks that what connected is the
//! process it started (`SO_PEERCRED`) before it sends anything.

use std::ffi::OsString;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags, SocketAddrUnix, SocketFlags, SocketType,
};
use sluice_proxy::handover::SocketKey;

/// Set in the new process's environment: the path of the link to the process it replaces.
pub const ENV: &str = "SLUICE_UPGRADE_FROM";

/// Sockets per message: below the kernel's limit of file descriptors per message (253).
const PER_MESSAGE: usize = 200;

/// The largest message: a batch's keys as JSON.
const MAX_MESSAGE: usize = 64 * 1024;

/// In a process started by an upgrade: the link to the process it replaces, to say when it
/// is ready (or, dropped, that it is not).
#[derive(Debug)]
pub struct Link(OwnedFd);

impl Link {
    /// Tells the old process to stop accepting and drain.
    pub fn ready(self) {
        let _ = rustix::net::send(&self.0, b"ready", SendFlags::empty());
    }
}

/// In a process started by an upgrade (its environment names the link): takes the sockets of
/// the process it replaces, for the binds of the same addresses. None: not an upgrade.
pub fn take_over() -> Result<Option<Link>, String> {
    let Some(path) = std::env::var_os(ENV) else {
        return Ok(None);
    };
    let fd = rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )
    .map_err(|e| format!("upgrade: a socket for the link: {e}"))?;
    let addr = SocketAddrUnix::new(PathBuf::from(&path))
        .map_err(|e| format!("upgrade: {}: {e}", path.to_string_lossy()))?;
    rustix::net::connect(&fd, &addr)
        .map_err(|e| format!("upgrade: connecting to {}: {e}", path.to_string_lossy()))?;
    let mut taken = Vec::new();
    loop {
        let mut buf = vec![0u8; MAX_MESSAGE];
        let mut space = vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(PER_MESSAGE))];
        let mut cmsg = RecvAncillaryBuffer::new(&mut space);
        let got = rustix::net::recvmsg(
            &fd,
            &mut [std::io::IoSliceMut::new(&mut buf)],
            &mut cmsg,
            RecvFlags::CMSG_CLOEXEC,
        )
        .map_err(|e| format!("upgrade: reading the sockets: {e}"))?;
        let mut fds: Vec<OwnedFd> = Vec::new();
        for m in cmsg.drain() {
            if let RecvAncillaryMessage::ScmRights(r) = m {
                fds.extend(r);
            }
        }
        let text = &buf[..got.bytes];
        if text == b"done" {
            break;
        }
        if got.bytes == 0 {
            return Err("upgrade: the old process closed the link before handing over".into());
        }
        let keys: Vec<SocketKey> = serde_json::from_slice(text)
            .map_err(|e| format!("upgrade: an unreadable list of sockets: {e}"))?;
        if keys.len() != fds.len() {
            return Err(format!(
                "upgrade: {} sockets announced, {} received",
                keys.len(),
                fds.len()
            ));
        }
        taken.extend(keys.into_iter().zip(fds));
    }
    tracing::info!(
        sockets = taken.len(),
        "upgrade: took over the old process's sockets"
    );
    sluice_proxy::handover::inherit(taken);
    Ok(Some(Link(fd)))
}

/// In the running process: starts `argv` (the binary now at its path, with this process's
/// arguments) as an upgrade, hands it this process's sockets and waits until it is ready.
/// Ok(pid): it serves, and this process should drain and exit. Err(why): it does not (it
/// exited, or was not ready within `timeout`, and is stopped), and this process serves on.
pub fn hand_over(argv: &[OsString], timeout: Duration) -> Result<u32, String> {
    let (exe, args) = argv.split_first().ok_or("upgrade: no program to start")?;
    let dir = private_dir()?;
    let path = dir.join("link");
    let result = (|| {
        let listener = rustix::net::socket_with(
            AddressFamily::UNIX,
            SocketType::SEQPACKET,
            SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
            None,
        )
        .map_err(|e| format!("upgrade: a socket for the link: {e}"))?;
        let addr = SocketAddrUnix::new(&path).map_err(|e| format!("upgrade: {e}"))?;
        rustix::net::bind(&listener, &addr).map_err(|e| format!("upgrade: {e}"))?;
        rustix::net::listen(&listener, 1).map_err(|e| format!("upgrade: {e}"))?;
        let mut child = Command::new(exe)
            .args(args)
            .env(ENV, &path)
            .spawn()
            .map_err(|e| format!("upgrade: cannot start {}: {e}", exe.to_string_lossy()))?;
        let pid = child.id();
        tracing::info!(pid, "upgrade: started {}", exe.to_string_lossy());
        match serve_child(&listener, &mut child, timeout) {
            Ok(()) => Ok(pid),
            Err(e) => {
                // Not ready: it must not serve beside this process with sockets half taken.
                let _ = child.kill();
                let _ = child.wait();
                Err(e)
            }
        }
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// Accepts the child's connection, checks who it is, sends the sockets, waits for "ready".
fn serve_child(listener: &OwnedFd, child: &mut Child, timeout: Duration) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    let exited = |child: &mut Child| -> Option<String> {
        match child.try_wait() {
            Ok(Some(status)) => Some(format!(
                "upgrade: the new process exited ({status}) before it was ready; still serving"
            )),
            _ => None,
        }
    };
    let conn = loop {
        match rustix::net::accept_with(listener, SocketFlags::CLOEXEC) {
            Ok(c) => break c,
            Err(rustix::io::Errno::AGAIN) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(format!("upgrade: accepting the new process: {e}")),
        }
        if let Some(e) = exited(child) {
            return Err(e);
        }
        if Instant::now() > deadline {
            return Err(format!(
                "upgrade: the new process did not connect within {timeout:?}; still serving"
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let peer = rustix::net::sockopt::socket_peercred(&conn)
        .map_err(|e| format!("upgrade: who connected: {e}"))?;
    if peer.pid.as_raw_nonzero().get() as u32 != child.id() {
        return Err(format!(
            "upgrade: process {} connected to the link, not the new process {}",
            peer.pid.as_raw_nonzero(),
            child.id()
        ));
    }
    let held = sluice_proxy::handover::held().map_err(|e| format!("upgrade: {e}"))?;
    for batch in held.chunks(PER_MESSAGE) {
        let keys: Vec<SocketKey> = batch.iter().map(|(k, _)| *k).collect();
        let text = serde_json::to_vec(&keys).map_err(|e| format!("upgrade: {e}"))?;
        let fds: Vec<_> = batch.iter().map(|(_, fd)| fd.as_fd()).collect();
        let mut space = vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(PER_MESSAGE))];
        let mut cmsg = SendAncillaryBuffer::new(&mut space);
        cmsg.push(SendAncillaryMessage::ScmRights(&fds));
        rustix::net::sendmsg(
            &conn,
            &[std::io::IoSlice::new(&text)],
            &mut cmsg,
            SendFlags::empty(),
        )
        .map_err(|e| format!("upgrade: sending the sockets: {e}"))?;
    }
    rustix::net::send(&conn, b"done", SendFlags::empty()).map_err(|e| format!("upgrade: {e}"))?;
    tracing::info!(
        sockets = held.len(),
        "upgrade: sockets handed over; waiting for the new process to be ready"
    );
    drop(held);
    rustix::net::sockopt::set_socket_timeout(
        &conn,
        rustix::net::sockopt::Timeout::Recv,
        Some(Duration::from_millis(200)),
    )
    .map_err(|e| format!("upgrade: {e}"))?;
    let mut buf = [0u8; 64];
    loop {
        match rustix::net::recv(&conn, &mut buf, RecvFlags::empty()) {
            Ok((n, _)) if &buf[..n] == b"ready" => return Ok(()),
            Ok((0, _)) => {
                // The new process closed the link: it failed to start (and says why on
                // its stderr), or is exiting.
                std::thread::sleep(Duration::from_millis(100));
                return Err(exited(child).unwrap_or_else(|| {
                    "upgrade: the new process gave up before it was ready; still serving".into()
                }));
            }
            Ok(_) | Err(rustix::io::Errno::AGAIN) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(format!("upgrade: waiting for the new process: {e}")),
        }
        if let Some(e) = exited(child) {
            return Err(e);
        }
        if Instant::now() > deadline {
            return Err(format!(
                "upgrade: the new process was not ready within {timeout:?}; stopped it, still serving"
            ));
        }
    }
}

/// A fresh directory only this user can enter, for the link.
fn private_dir() -> Result<PathBuf, String> {
    use std::os::unix::fs::DirBuilderExt;
    let base = std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    for n in 0..100u32 {
        let dir = base.join(format!("sluice-upgrade-{}-{n}", std::process::id()));
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(format!("upgrade: cannot create {}: {e}", dir.display())),
        }
    }
    Err(format!("upgrade: no free directory in {}", base.display()))
}

/// systemd's readiness protocol (`sd_notify`): sends `state` (`READY=1`, `MAINPID=..`,
/// `STOPPING=1`) to `$NOTIFY_SOCKET` when the service manager set it; nothing otherwise.
pub fn notify_systemd(state: &str) {
    let Some(socket) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let Ok(s) = std::os::unix::net::UnixDatagram::unbound() else {
        return;
    };
    let bytes = socket.as_encoded_bytes();
    let sent = if let Some(name) = bytes.strip_prefix(b"@") {
        use std::os::linux::net::SocketAddrExt;
        std::os::unix::net::SocketAddr::from_abstract_name(name)
            .and_then(|a| s.send_to_addr(state.as_bytes(), &a))
    } else {
        s.send_to(state.as_bytes(), PathBuf::from(&socket))
    };
    if let Err(e) = sent {
        tracing::warn!(error = %e, "cannot tell systemd {state:?}");
    }
}
