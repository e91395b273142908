//! Memory the gateway holds for what waits (issue 12): idle keep-alive connections. Not timed:
//! the resident memory of a real `sluice run` process is read from /proc before and after, and
//! its growth must stay under a stated bound, so that a change that gives every idle connection
//! its buffers back cannot pass unnoticed. Figures beside NGINX's: bench/idle_memory.sh.

#![allow(clippy::unwrap_used)]

mod common;

use common::free_port;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_sluice");

/// Connections held idle by the test.
const IDLE: usize = 2_000;

/// Growth allowed per idle connection, in the dev profile the tests are built with (its futures
/// are larger than the release build's; bench/idle_memory.sh measures ~1.3 KiB per connection
/// in release). Before connections gave their buffers and request state back while waiting,
/// this grew by more than 20 KiB per connection.
const BOUND_PER_CONN: usize = 4 * 1024;

struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A field of /proc/PID/smaps_rollup, in KiB.
fn rollup_kib(pid: u32, field: &str) -> usize {
    let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap();
    let line = rollup.lines().find(|l| l.starts_with(field)).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Resident memory less what was freed lazily (`MADV_FREE`: the kernel takes it back whenever
/// it needs memory, and a cgroup's working set leaves it out), in KiB.
fn rss_kib(pid: u32) -> usize {
    rollup_kib(pid, "Rss:") - lazy_free_kib(pid)
}

/// Pages the process gave back with `MADV_FREE` that the kernel has not taken yet, in KiB.
fn lazy_free_kib(pid: u32) -> usize {
    rollup_kib(pid, "LazyFree:")
}

fn wait_port(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "port {port} never opened");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Sends one GET and reads the whole response (status line, head, `Content-Length` body).
fn request(r: &mut BufReader<TcpStream>) -> String {
    r.get_mut()
        .write_all(b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut status = String::new();
    r.read_line(&mut status).unwrap();
    let mut length = 0;
    loop {
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        if line == "\r\n" {
            break;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = v.trim().parse().unwrap();
        }
    }
    let mut body = vec![0; length];
    r.read_exact(&mut body).unwrap();
    status
}

/// A `sluice run` with one worker, room for the connections held, the given routes.
fn gateway(routes: &str) -> (Running, u16) {
    gateway_with(routes, &[])
}

/// [`gateway`], with these variables in its environment.
fn gateway_with(routes: &str, env: &[(&str, &str)]) -> (Running, u16) {
    let port = free_port();
    let file = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("sluice-memory-{port}.yaml"));
    std::fs::write(
        &file,
        format!(
            "listen: 127.0.0.1:{port}\nworkers: 1\nlog: {{level: warn}}\n\
             limits: {{max_connections: 5000}}\ntimeouts: {{keepalive: 300s}}\n\
             admin: {{enabled: false}}\n{routes}"
        ),
    )
    .unwrap();
    let gw = Running(
        Command::new(BIN)
            .args(["run", "-c"])
            .arg(&file)
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_port(port);
    (gw, port)
}

/// Opens `n` connections to the gateway (`pid`, `port`), each readied by `ready`, waits
/// `settle_ms`, and asserts the gateway's resident memory grew by at most `bound` bytes each.
/// The connections, still open.
fn hold(
    pid: u32,
    port: u16,
    n: usize,
    what: &str,
    bound: usize,
    settle_ms: u64,
    mut ready: impl FnMut(&mut BufReader<TcpStream>),
) -> Vec<BufReader<TcpStream>> {
    let before = rss_kib(pid);
    let mut held = Vec::with_capacity(n);
    for _ in 0..n {
        let mut c = BufReader::new(TcpStream::connect(("127.0.0.1", port)).unwrap());
        ready(&mut c);
        held.push(c);
    }
    std::thread::sleep(Duration::from_millis(settle_ms));
    let after = rss_kib(pid);
    let each = (after.saturating_sub(before) * 1024) / n;
    eprintln!(
        "resident memory: {before} KiB before, {after} KiB with {n} {what}: {each} bytes each \
         (bound {bound})"
    );
    assert!(
        each <= bound,
        "each of the {what} holds {each} bytes (bound {bound})"
    );
    held
}

/// Raises this process's open-file limit (the gateway it starts inherits it), and fails when
/// the hard limit is below `n`.
fn need_open_files(n: u64) {
    let limit = sluice::raise_open_files();
    assert!(
        limit >= n,
        "this test needs {n} open files, the hard limit is {limit}"
    );
}

/// `sluice origin` on a free port, and that port.
fn origin() -> (Running, u16) {
    let port = free_port();
    let origin = Running(
        Command::new(BIN)
            .args(["origin", "--listen", &format!("127.0.0.1:{port}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_port(port);
    (origin, port)
}

#[test]
fn idle_keepalive_connections_give_their_buffers_back() {
    // This test holds 2,000 client sockets and the gateway 4,000 (it raises its own limit).
    need_open_files(IDLE as u64 * 3);
    let (_origin, origin_port) = origin();
    let (gw, port) = gateway(&format!(
        "routes:\n  - uri: /hello\n    upstream: {{nodes: {{\"127.0.0.1:{origin_port}\": 1}}}}\n"
    ));
    let pid = gw.0.id();

    // Warm up: the worker's pools, the upstream connection, the allocator's first pages.
    let mut warm = BufReader::new(TcpStream::connect(("127.0.0.1", port)).unwrap());
    for _ in 0..50 {
        assert!(request(&mut warm).starts_with("HTTP/1.1 200"));
    }
    std::thread::sleep(Duration::from_millis(300));
    let mut held = hold(
        pid,
        port,
        IDLE,
        "idle connections",
        BOUND_PER_CONN,
        500,
        |c| assert!(request(c).starts_with("HTTP/1.1 200")),
    );

    // They are idle, not dead: the first and the last still serve.
    for i in [0, IDLE - 1] {
        assert!(request(&mut held[i]).starts_with("HTTP/1.1 200"));
    }
}

/// Tunnels held open by the test.
const TUNNELS: usize = 1_000;

/// Growth allowed per idle WebSocket tunnel (dev profile). Before a tunnel ran without the
/// request future that upgraded it, each held that future and its buffers: ~21 KiB in release
/// (bench/idle_memory.sh), more in the dev profile; ~3 KiB in release now.
const BOUND_PER_TUNNEL: usize = 8 * 1024;

/// Upgrades `c` to a WebSocket through the gateway, and has one message echoed.
fn upgrade(c: &mut BufReader<TcpStream>) {
    c.get_mut()
        .write_all(
            b"GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
        )
        .unwrap();
    let mut status = String::new();
    c.read_line(&mut status).unwrap();
    assert!(status.starts_with("HTTP/1.1 101"), "{status}");
    loop {
        let mut line = String::new();
        c.read_line(&mut line).unwrap();
        if line == "\r\n" {
            break;
        }
    }
    // A masked text frame "hi" (RFC 6455 §5.2), echoed back unmasked.
    let mask = [1u8, 2, 3, 4];
    let mut frame = vec![0x81, 0x82];
    frame.extend_from_slice(&mask);
    frame.extend(b"hi".iter().zip(mask).map(|(b, m)| b ^ m));
    c.get_mut().write_all(&frame).unwrap();
    let mut back = [0u8; 4];
    c.read_exact(&mut back).unwrap();
    assert_eq!(back, [0x81, 0x02, b'h', b'i']);
}

#[test]
fn idle_websocket_tunnels_hold_no_request_state() {
    // 1,000 tunnels: the test holds 1,000 client and 1,000 echo sockets, the gateway 2,000.
    need_open_files(TUNNELS as u64 * 5);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let echo = rt.block_on(common::ws_echo());
    let (gw, port) = gateway(&format!(
        "routes:\n  - uri: /ws\n    enable_websocket: true\n    timeout: {{connect: 5, send: 300, read: 300}}\n    upstream: {{nodes: {{\"{echo}\": 1}}}}\n"
    ));
    let pid = gw.0.id();
    // Warm up: the worker's pools, the allocator's first pages.
    for _ in 0..50 {
        let mut c = BufReader::new(TcpStream::connect(("127.0.0.1", port)).unwrap());
        upgrade(&mut c);
    }
    std::thread::sleep(Duration::from_millis(1500));
    // (The worker trims its pool of request futures every second: 2.5 s to settle.)
    let _held = hold(
        pid,
        port,
        TUNNELS,
        "idle tunnels",
        BOUND_PER_TUNNEL,
        2500,
        upgrade,
    );
}

/// Requests in flight at once in [`a_bursts_memory_is_kept_for_the_next_one_unless_the_operator_says`].
const BURST: usize = 400;

/// [`BURST`] requests at once through the gateway on `port`, each waiting 300 ms at the origin:
/// as many request futures and buffers in use together, given back to the worker's pool as
/// the answers go, and by the pool to the allocator a second or two later.
fn burst(port: u16) {
    let mut conns: Vec<_> = (0..BURST)
        .map(|_| {
            let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
            c.write_all(b"GET /delay/300 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                .unwrap();
            c
        })
        .collect();
    for c in &mut conns {
        let mut answer = String::new();
        c.read_to_string(&mut answer).unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    }
}

/// Memory a burst freed stays mapped for the next burst, given back with `MADV_FREE` (the kernel
/// takes such pages first when it needs memory) rather than unmapped, where a burst after an
/// idle spell faulted every page in again (issue 28: the first chunk's tail). jemalloc hands
/// pages on after 10 s unused; the test says 1 s (`dirty_decay_ms:1000`) so as not to wait. An
/// operator's own `muzzy_decay_ms` wins: with 0, pages are unmapped at once, nothing is kept.
#[test]
fn a_bursts_memory_is_kept_for_the_next_one_unless_the_operator_says() {
    need_open_files(BURST as u64 * 4);
    let (_origin, origin_port) = origin();
    let routes = format!(
        "routes:\n  - uri: /delay/*\n    upstream: {{nodes: {{\"127.0.0.1:{origin_port}\": 1}}}}\n"
    );
    for (conf, kept) in [
        ("dirty_decay_ms:1000", true),
        ("dirty_decay_ms:1000,muzzy_decay_ms:0", false),
    ] {
        let (gw, port) = gateway_with(&routes, &[("_RJEM_MALLOC_CONF", conf)]);
        let pid = gw.0.id();
        burst(port);
        // The pool keeps the last second's peak: the futures go back within 2 s of the burst.
        let deadline = Instant::now() + Duration::from_secs(15);
        let mut lazy = lazy_free_kib(pid);
        while kept && lazy < 2048 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
            lazy = lazy_free_kib(pid);
        }
        if !kept {
            std::thread::sleep(Duration::from_secs(5));
            lazy = lazy_free_kib(pid);
        }
        eprintln!(
            "_RJEM_MALLOC_CONF={conf}: {lazy} KiB lazily freed after {BURST} requests at once, {} KiB resident besides",
            rss_kib(pid)
        );
        if kept {
            assert!(
                lazy >= 2048,
                "{lazy} KiB kept after a burst of {BURST} (at least 2 MiB expected)"
            );
        } else {
            assert!(
                lazy < 1024,
                "{lazy} KiB kept, the operator said unmap at once"
            );
        }
    }
}
