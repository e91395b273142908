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

fn rss_kib(pid: u32) -> usize {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
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

#[test]
fn idle_keepalive_connections_give_their_buffers_back() {
    // This test holds 2,000 client sockets and the gateway 4,000 (it raises its own limit).
    let limit = sluice::raise_open_files();
    assert!(
        limit >= (IDLE as u64) * 3,
        "this test needs {} open files, the hard limit is {limit}",
        IDLE * 3
    );
    let origin_port = free_port();
    let _origin = Running(
        Command::new(BIN)
            .args(["origin", "--listen", &format!("127.0.0.1:{origin_port}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_port(origin_port);
    let port = free_port();
    let file = std::env::temp_dir().join(format!("sluice-memory-{port}.yaml"));
    std::fs::write(
        &file,
        format!(
            "listen: 127.0.0.1:{port}\nworkers: 1\nlog: {{level: warn}}\n\
             limits: {{max_connections: 5000}}\ntimeouts: {{keepalive: 300s}}\n\
             admin: {{enabled: false}}\n\
             routes:\n  - uri: /hello\n    upstream: {{nodes: {{\"127.0.0.1:{origin_port}\": 1}}}}\n"
        ),
    )
    .unwrap();
    let gw = Running(
        Command::new(BIN)
            .args(["run", "-c"])
            .arg(&file)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_port(port);
    let pid = gw.0.id();

    // Warm up: the worker's pools, the upstream connection, the allocator's first pages.
    let mut warm = BufReader::new(TcpStream::connect(("127.0.0.1", port)).unwrap());
    for _ in 0..50 {
        assert!(request(&mut warm).starts_with("HTTP/1.1 200"));
    }
    std::thread::sleep(Duration::from_millis(300));
    let before = rss_kib(pid);

    let mut held = Vec::with_capacity(IDLE);
    for _ in 0..IDLE {
        let mut c = BufReader::new(TcpStream::connect(("127.0.0.1", port)).unwrap());
        assert!(request(&mut c).starts_with("HTTP/1.1 200"));
        held.push(c);
    }
    std::thread::sleep(Duration::from_millis(500));
    let after = rss_kib(pid);
    let per_conn = (after.saturating_sub(before) * 1024) / IDLE;
    eprintln!(
        "resident memory: {before} KiB before, {after} KiB with {IDLE} idle connections: \
         {per_conn} bytes each (bound {BOUND_PER_CONN})"
    );
    assert!(
        per_conn <= BOUND_PER_CONN,
        "each idle connection holds {per_conn} bytes (bound {BOUND_PER_CONN})"
    );

    // They are idle, not dead: the first and the last still serve.
    for i in [0, IDLE - 1] {
        assert!(request(&mut held[i]).starts_with("HTTP/1.1 200"));
    }
}
