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
//! State goes with the sockets, so that nothing resets: the health of upstream nodes comes
//! with the sockets (the new process's first health checks start from it); once the new
//! process has its configuration compiled, its workers started but not accepting, and its
//! first round of active health checks done, it says `prepared`, and the old process stops
//! accepting (the sockets' queues hold new connections meanwhile), freezes its metrics and
//! sends its plugin state (local limit counters, circuit breakers) and its counters; the new
//! process takes them, says `ready` and starts accepting. While the old process drains, it
//! sends what it counted since (every 250 ms, and last when it exits), which the new process
//! adds: limits and Prometheus counters go on from where they were (see [`crate::Carrier`]).
//! When the link closes, the new process takes back what of the old one's state was only true
//! while it served (its requests in flight), whether its last changes came or not.
//! A new process that fails after the old one paused makes it accept again.
//!
//! The link is a `SOCK_SEQPACKET` socket (messages keep their bounds) at a path in a fresh
//! directory only the user can enter; the old process checks that what connected is the
//! process it started (`SO_PEERCRED`) before it sends anything. Documents (JSON) larger than
//! a message go in pieces: each message starts with `+` (more follow) or `.` (the last).

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

/// The largest message: a batch's keys as JSON, or a piece of a document.
const MAX_MESSAGE: usize = 64 * 1024;

/// The largest piece of a document in one message (with its mark).
const PIECE: usize = 60 * 1024;

/// The largest document: far above any real state (a million limit keys is about 40 MB).
const MAX_DOC: usize = 1 << 30;

/// How often a draining old process sends what it counted since.
const CHANGES_EVERY: Duration = Duration::from_millis(250);

/// Sends `doc` over the link, in pieces.
fn send_doc(fd: &OwnedFd, doc: &serde_json::Value) -> Result<(), String> {
    let bytes = serde_json::to_vec(doc).map_err(|e| format!("upgrade: {e}"))?;
    let mut pieces = bytes.chunks(PIECE).peekable();
    if pieces.peek().is_none() {
        return send_piece(fd, b'.', &[]);
    }
    while let Some(p) = pieces.next() {
        send_piece(fd, if pieces.peek().is_some() { b'+' } else { b'.' }, p)?;
    }
    Ok(())
}

fn send_piece(fd: &OwnedFd, mark: u8, piece: &[u8]) -> Result<(), String> {
    let mut message = Vec::with_capacity(piece.len() + 1);
    message.push(mark);
    message.extend_from_slice(piece);
    loop {
        match rustix::net::send(fd, &message, SendFlags::empty()) {
            Ok(_) => return Ok(()),
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(format!("upgrade: sending state: {e}")),
        }
    }
}

/// Receives a document; None when the link closed first.
fn recv_doc(fd: &OwnedFd) -> Result<Option<serde_json::Value>, String> {
    let mut doc = Vec::new();
    let mut buf = vec![0u8; MAX_MESSAGE];
    loop {
        let (n, _) = match rustix::net::recv(fd, &mut buf, RecvFlags::empty()) {
            Ok(got) => got,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(format!("upgrade: reading state: {e}")),
        };
        let Some((&mark, piece)) = buf[..n].split_first() else {
            return Ok(None);
        };
        if doc.len() + piece.len() > MAX_DOC {
            return Err(format!(
                "upgrade: a document past {MAX_DOC} bytes on the link"
            ));
        }
        doc.extend_from_slice(piece);
        match mark {
            b'+' => {}
            b'.' => break,
            _ => return Err("upgrade: an unreadable message on the link".into()),
        }
    }
    serde_json::from_slice(&doc)
        .map(Some)
        .map_err(|e| format!("upgrade: unreadable state: {e}"))
}

/// In a process started by an upgrade: the link to the process it replaces, to take its
/// state and say when this process serves (or, dropped, that it will not).
#[derive(Debug)]
pub struct Link(OwnedFd);

impl Link {
    /// Says this process is about to serve: the old process stops accepting and sends its
    /// state ([`crate::Carrier::pause`]'s document), which this returns.
    pub fn prepared(&self, timeout: Duration) -> Result<serde_json::Value, String> {
        rustix::net::send(&self.0, b"prepared", SendFlags::empty())
            .map_err(|e| format!("upgrade: {e}"))?;
        rustix::net::sockopt::set_socket_timeout(
            &self.0,
            rustix::net::sockopt::Timeout::Recv,
            Some(timeout),
        )
        .map_err(|e| format!("upgrade: {e}"))?;
        let doc = recv_doc(&self.0)?
            .ok_or("upgrade: the old process closed the link instead of sending its state")?;
        rustix::net::sockopt::set_socket_timeout(
            &self.0,
            rustix::net::sockopt::Timeout::Recv,
            None,
        )
        .map_err(|e| format!("upgrade: {e}"))?;
        Ok(doc)
    }

    /// Says this process serves: the old one drains and exits. `changes` is given what it
    /// counts meanwhile ([`crate::Carrier::changes`]'s documents), on a thread of its own,
    /// until it has gone; then `gone` is called (the link closed, whether the old process
    /// sent its last changes or was killed first).
    pub fn ready(
        self,
        changes: impl Fn(serde_json::Value) + Send + 'static,
        gone: impl FnOnce() + Send + 'static,
    ) {
        let _ = rustix::net::send(&self.0, b"ready", SendFlags::empty());
        let spawned = std::thread::Builder::new()
            .name("sluice-upgrade".into())
            .spawn(move || {
                let mut docs = 0;
                loop {
                    match recv_doc(&self.0) {
                        Ok(Some(doc)) => {
                            docs += 1;
                            changes(doc);
                        }
                        Ok(None) => break,
                        Err(e) => {
                            tracing::warn!("{e}");
                            break;
                        }
                    }
                }
                gone();
                tracing::info!(
                    updates = docs,
                    "upgrade: the old process has gone; what it counted while it drained is added"
                );
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "upgrade: cannot follow the old process's drain");
        }
    }
}

/// In the old process, once the new one serves: the link, to send what this process counts
/// while it drains.
#[derive(Debug)]
pub struct Handed {
    /// The new process.
    pub pid: u32,
    conn: OwnedFd,
    before: sluice_core::state::Exported,
}

impl Handed {
    /// Sends `carrier`'s changes every 250 ms until `drained` returns (the node has drained),
    /// then a last time, and closes the link.
    pub fn drain_with(mut self, carrier: &crate::Carrier, drained: impl FnOnce()) {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let before = std::mem::take(&mut self.before);
        let sender = {
            let (stop, carrier, conn) = (stop.clone(), carrier.clone(), self.conn);
            std::thread::Builder::new()
                .name("sluice-upgrade".into())
                .spawn(move || {
                    let mut before = before;
                    let mut warned = false;
                    loop {
                        let last = stop.load(std::sync::atomic::Ordering::Acquire);
                        // What was not sent is sent with the next changes (they are counted
                        // from the last export the new process has).
                        let (doc, now) = carrier.changes(&before);
                        match send_doc(&conn, &doc) {
                            Ok(()) => before = now,
                            Err(e) if !warned => {
                                tracing::warn!("{e}; trying again with the next changes");
                                warned = true;
                            }
                            Err(_) => {}
                        }
                        if last {
                            break;
                        }
                        let until = Instant::now() + CHANGES_EVERY;
                        while Instant::now() < until
                            && !stop.load(std::sync::atomic::Ordering::Acquire)
                        {
                            std::thread::sleep(Duration::from_millis(10));
                        }
                    }
                })
        };
        drained();
        stop.store(true, std::sync::atomic::Ordering::Release);
        match sender {
            Ok(t) => {
                let _ = t.join();
            }
            Err(e) => {
                tracing::warn!(error = %e, "upgrade: cannot send what this process counted while it drained")
            }
        }
    }
}

static TAKING_OVER: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// This process was started by an upgrade and took the old process's sockets.
pub fn taking_over() -> bool {
    TAKING_OVER.load(std::sync::atomic::Ordering::Relaxed)
}

/// In a process started by an upgrade (its environment names the link): takes the sockets of
/// the process it replaces, for the binds of the same addresses. None: not an upgrade.
pub fn take_over() -> Result<Option<Link>, String> {
    let Some(path) = std::env::var_os(ENV) else {
        return Ok(None);
    };
    TAKING_OVER.store(true, std::sync::atomic::Ordering::Relaxed);
    // Nothing is accepted, nor any metric answered, before the old process's state is here.
    sluice_proxy::handover::close_gate();
    sluice_core::exposition::carried::expect();
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
    let health = recv_doc(&fd)?.ok_or("upgrade: the old process closed the link")?;
    sluice_proxy::handover::import_health(&health);
    Ok(Some(Link(fd)))
}

/// In the running process: starts `argv` (the binary now at its path, with this process's
/// arguments) as an upgrade, hands it this process's sockets and state and waits until it is
/// ready. Ok: it serves, and this process should drain (sending what it counts meanwhile,
/// [`Handed::drain_with`]) and exit. Err(why): it does not (it exited, or was not prepared
/// within `timeout`, and is stopped), and this process serves on.
pub fn hand_over(
    argv: &[OsString],
    timeout: Duration,
    carrier: &crate::Carrier,
) -> Result<Handed, String> {
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
        match serve_child(&listener, &mut child, timeout, carrier) {
            Ok((conn, before)) => Ok(Handed { pid, conn, before }),
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

/// Accepts the child's connection, checks who it is, sends the sockets and the nodes' health,
/// waits for "prepared", pauses this process and sends its state, waits for "ready".
fn serve_child(
    listener: &OwnedFd,
    child: &mut Child,
    timeout: Duration,
    carrier: &crate::Carrier,
) -> Result<(OwnedFd, sluice_core::state::Exported), String> {
    let deadline = Instant::now() + timeout;
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
    // A new process that stops reading must not hold this one up for ever.
    rustix::net::sockopt::set_socket_timeout(
        &conn,
        rustix::net::sockopt::Timeout::Send,
        Some(Duration::from_secs(10)),
    )
    .map_err(|e| format!("upgrade: {e}"))?;
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
    send_doc(&conn, &sluice_proxy::handover::export_health())?;
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
    wait_for(&conn, child, b"prepared", deadline, timeout)?;
    // From here on this process takes no new connection until the new one does (or fails).
    let (doc, before) = carrier.pause();
    let took = send_doc(&conn, &doc).and_then(|()| {
        // Taking the state and opening its workers is quick; 15 s is for a loaded machine.
        let short = Duration::from_secs(15);
        wait_for(&conn, child, b"ready", Instant::now() + short, short)
    });
    match took {
        Ok(()) => Ok((conn, before)),
        Err(e) => {
            carrier.resume();
            Err(e)
        }
    }
}

/// Whether `child` has exited, in words.
fn exited(child: &mut Child) -> Option<String> {
    match child.try_wait() {
        Ok(Some(status)) => Some(format!(
            "upgrade: the new process exited ({status}) before it was ready; still serving"
        )),
        _ => None,
    }
}

/// Waits for `word` from the new process (the link's receive timeout is short), while it
/// lives and until `deadline`.
fn wait_for(
    conn: &OwnedFd,
    child: &mut Child,
    word: &[u8],
    deadline: Instant,
    timeout: Duration,
) -> Result<(), String> {
    let mut buf = [0u8; 64];
    loop {
        match rustix::net::recv(conn, &mut buf, RecvFlags::empty()) {
            Ok((n, _)) if &buf[..n] == word => return Ok(()),
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
