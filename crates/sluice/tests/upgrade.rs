//! The binary upgrade (SIGUSR2) with real processes under load: keep-alive clients, clients
//! that open a connection per request, and POSTs, all running while the process that serves
//! is replaced again and again. No request may fail, every POST reaches the node exactly
//! once, and each old process exits. A new binary that exits at once leaves the running one
//! serving, and says why.

#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use sluice_testkit::{Reply, TestOrigin};

mod common;
use common::free_port;

const BIN: &str = env!("CARGO_BIN_EXE_sluice");

/// Whether process `pid` still runs: it exists and is not a zombie (an old generation's
/// parent exited before it, and whoever adopted it may reap it late).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(") ").map(|(_, rest)| !rest.starts_with('Z')))
        .unwrap_or(false)
}

fn signal(pid: u32, sig: &str) {
    assert!(
        Command::new("kill")
            .args([&format!("-{sig}"), &pid.to_string()])
            .status()
            .unwrap()
            .success()
    );
}

/// The gateway's processes, generation after generation; all stopped at the end, whatever
/// happened.
struct Gateways {
    first: Child,
    pids: Vec<u32>,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Gateways {
    fn start(program: &Path, config: &Path) -> Gateways {
        let mut first = Command::new(program)
            .args(["run", "-c"])
            .arg(config)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .env("NO_COLOR", "1")
            .spawn()
            .unwrap();
        let (tx, rx) = mpsc::channel();
        let err = first.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    // Keep reading: the gateways must never write to a closed pipe.
                }
            }
        });
        let pid = first.id();
        let mut g = Gateways {
            first,
            pids: vec![pid],
            lines: rx,
            seen: Vec::new(),
        };
        g.expect("listening on");
        g
    }

    /// Waits for a line with `needle`; returns it.
    fn expect(&mut self, needle: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if line.contains(needle) {
                        return line;
                    }
                }
                Err(_) => panic!(
                    "no line with {needle:?}; the log:\n{}",
                    self.seen.join("\n")
                ),
            }
        }
    }

    fn serving(&self) -> u32 {
        *self.pids.last().unwrap()
    }

    /// SIGUSR2 to the serving process; waits until the new one serves and the old one exited.
    fn upgrade(&mut self) {
        let old = self.serving();
        signal(old, "USR2");
        let started = self.expect("upgrade: started");
        let pid: u32 = started
            .split("pid=")
            .nth(1)
            .and_then(|p| p.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("no pid in {started:?}"));
        self.pids.push(pid);
        self.expect("upgrade: the new process is ready and serves");
        let deadline = Instant::now() + Duration::from_secs(30);
        while alive(old) {
            assert!(
                Instant::now() < deadline,
                "the old process {old} did not exit"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Gateways {
    /// SIGTERM to the serving process; waits until it has stopped.
    fn stop(&self) {
        let last = self.serving();
        signal(last, "TERM");
        let deadline = Instant::now() + Duration::from_secs(15);
        while alive(last) {
            assert!(Instant::now() < deadline, "the last process did not stop");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Gateways {
    fn drop(&mut self) {
        for &pid in &self.pids {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
        let _ = self.first.wait();
    }
}

/// What the clients saw.
#[derive(Default)]
struct Tally {
    ok: AtomicU64,
    failed: AtomicU64,
    /// Requests sent again because the server refused them unprocessed (HTTP/2).
    again: AtomicU64,
    errors: parking_lot::Mutex<Vec<String>>,
}

impl Tally {
    fn fail(&self, what: String) {
        self.failed.fetch_add(1, Ordering::Relaxed);
        let mut e = self.errors.lock();
        if e.len() < 20 {
            e.push(what);
        }
    }
}

/// Reads one response; its status and whether the server closes after it.
fn response(r: &mut BufReader<TcpStream>) -> Result<(u16, bool), String> {
    let mut line = String::new();
    if r.read_line(&mut line).map_err(|e| e.to_string())? == 0 {
        return Err("closed before an answer".into());
    }
    let status: u16 = line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or(format!("bad status line {line:?}"))?;
    let (mut len, mut close) = (0usize, false);
    loop {
        let mut h = String::new();
        if r.read_line(&mut h).map_err(|e| e.to_string())? == 0 {
            return Err("closed in the head".into());
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (n, v) = h.split_once(':').unwrap_or((h, ""));
        match n.to_ascii_lowercase().as_str() {
            "content-length" => len = v.trim().parse().unwrap_or(0),
            "connection" => close = v.trim().eq_ignore_ascii_case("close"),
            _ => {}
        }
    }
    let mut body = vec![0; len];
    r.read_exact(&mut body).map_err(|e| e.to_string())?;
    Ok((status, close))
}

/// A keep-alive client: one connection for as long as the server keeps it (reconnecting
/// after `Connection: close`), `make(n)` for each request.
fn client(
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    tally: Arc<Tally>,
    keep_alive: bool,
    make: impl Fn(u64) -> Vec<u8>,
) {
    let mut conn: Option<BufReader<TcpStream>> = None;
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let c = match conn.take() {
            Some(c) => c,
            None => match TcpStream::connect(addr) {
                Ok(s) => {
                    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                    BufReader::new(s)
                }
                Err(e) => {
                    tally.fail(format!("connect: {e}"));
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                }
            },
        };
        let mut c = c;
        if let Err(e) = c.get_mut().write_all(&make(n)) {
            tally.fail(format!("write: {e}"));
            continue;
        }
        match response(&mut c) {
            Ok((200, close)) => {
                tally.ok.fetch_add(1, Ordering::Relaxed);
                if keep_alive && !close {
                    conn = Some(c);
                }
            }
            Ok((status, _)) => tally.fail(format!("status {status}")),
            Err(e) => tally.fail(format!("request {n}: {e}")),
        }
    }
}

/// An HTTP/2 client (prior knowledge) sending POSTs, `STREAMS` at a time on one connection,
/// reconnecting when the gateway ends it. As RFC 9113 §6.8 allows, a request the server
/// refused unprocessed (a stream above its GOAWAY's last stream id, or one that could not be
/// opened after the GOAWAY) is sent again on the next connection; the test then checks that
/// the node received each POST once, so a retry of a request that was processed fails it.
async fn h2_client(addr: SocketAddr, stop: Arc<AtomicBool>, tally: Arc<Tally>, who: usize) {
    const STREAMS: usize = 4;
    let mut next = 0u64;
    let mut again: Vec<u64> = Vec::new();
    while !stop.load(Ordering::Relaxed) || !again.is_empty() {
        let Ok(tcp) = tokio::net::TcpStream::connect(addr).await else {
            tally.fail("h2 connect".into());
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let (mut send, conn) = match h2::client::handshake(tcp).await {
            Ok(x) => x,
            Err(e) => {
                tally.fail(format!("h2 handshake: {e}"));
                continue;
            }
        };
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let mut flight = tokio::task::JoinSet::new();
        let mut open = true;
        loop {
            while open && flight.len() < STREAMS {
                let n = match again.pop() {
                    Some(n) => n,
                    None if stop.load(Ordering::Relaxed) => break,
                    None => {
                        next += 1;
                        next
                    }
                };
                let req = http::Request::post(format!("http://a/h2post/{who}/{n}"))
                    .body(())
                    .unwrap();
                let sent = match send.clone().ready().await {
                    Ok(mut ready) => {
                        let sent = ready.send_request(req, false);
                        send = ready;
                        sent
                    }
                    Err(e) => Err(e),
                };
                match sent {
                    Ok((resp, mut body)) => {
                        let _ = body.send_data(bytes::Bytes::from(format!("h2 post {n}")), true);
                        flight.spawn(async move {
                            let answer = match resp.await {
                                Ok(r) => {
                                    let status = r.status().as_u16();
                                    let mut body = r.into_body();
                                    let mut done = Ok(status);
                                    while let Some(chunk) = body.data().await {
                                        match chunk {
                                            Ok(c) => {
                                                let _ =
                                                    body.flow_control().release_capacity(c.len());
                                            }
                                            Err(e) => done = Err(e),
                                        }
                                    }
                                    done
                                }
                                Err(e) => Err(e),
                            };
                            (n, answer)
                        });
                    }
                    Err(_) => {
                        // The connection takes no new stream (GOAWAY, or it ended): this
                        // request was never sent.
                        again.push(n);
                        tally.again.fetch_add(1, Ordering::Relaxed);
                        open = false;
                    }
                }
            }
            let Some(done) = flight.join_next().await else {
                break;
            };
            match done.unwrap() {
                (_, Ok(200)) => {
                    tally.ok.fetch_add(1, Ordering::Relaxed);
                }
                (n, Ok(status)) => tally.fail(format!("h2 POST {n}: status {status}")),
                (n, Err(e)) if e.reason() == Some(h2::Reason::REFUSED_STREAM) || e.is_go_away() => {
                    // Not processed (RFC 9113 §8.7): sent again.
                    again.push(n);
                    tally.again.fetch_add(1, Ordering::Relaxed);
                    open = false;
                }
                (n, Err(e)) => tally.fail(format!("h2 POST {n}: {e}")),
            }
        }
    }
}

/// A configuration on `port`, with the status listener on `status`.
fn config_with_status(dir: &Path, port: u16, status: u16, origin: &str) -> PathBuf {
    let path = dir.join("sluice.yaml");
    std::fs::write(
        &path,
        format!(
            "listen:\n  - {{addr: 127.0.0.1:{port}, http2: true}}\nworkers: 2\nadmin: {{enabled: false}}\nstatus: {{listen: 127.0.0.1:{status}}}\ntimeouts: {{drain: 10s}}\nroutes:\n  - uri: /*\n    upstream: {{nodes: {{\"{origin}\": 1}}}}\n",
        ),
    )
    .unwrap();
    path
}

fn config(dir: &Path, port: u16, origin: &str) -> PathBuf {
    config_with_status(dir, port, free_port(), origin)
}

fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("sluice-upgrade-test-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigusr2_replaces_the_process_under_load_and_no_request_fails() {
    let origin = TestOrigin::http1().route("/", "ok").run().await;
    let dir = temp_dir("load");
    let (port, status) = (free_port(), free_port());
    let cfg = config_with_status(&dir, port, status, &origin.node());
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let status_addr: SocketAddr = format!("127.0.0.1:{status}").parse().unwrap();
    let mut gw = Gateways::start(Path::new(BIN), &cfg);

    let stop = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Tally::default());
    let posts = Arc::new(Tally::default());
    let mut threads = Vec::new();
    for i in 0..3 {
        let (stop, tally) = (stop.clone(), tally.clone());
        threads.push(std::thread::spawn(move || {
            client(addr, stop, tally, true, |n| {
                format!("GET /keep/{i}/{n} HTTP/1.1\r\nHost: a\r\n\r\n").into_bytes()
            })
        }));
    }
    {
        let (stop, tally) = (stop.clone(), tally.clone());
        threads.push(std::thread::spawn(move || {
            client(addr, stop, tally, false, |n| {
                format!("GET /close/{n} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
                    .into_bytes()
            })
        }));
    }
    {
        let (stop, posts) = (stop.clone(), posts.clone());
        threads.push(std::thread::spawn(move || {
            client(addr, stop, posts, true, |n| {
                let body = format!("post {n}");
                format!(
                    "POST /post/{n} HTTP/1.1\r\nHost: a\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                )
                .into_bytes()
            })
        }));
    }
    let h2_posts = Arc::new(Tally::default());
    let h2_clients: Vec<_> = (0..2)
        .map(|who| tokio::spawn(h2_client(addr, stop.clone(), h2_posts.clone(), who)))
        .collect();
    // A scraper, a new connection each time: the requests counter never goes down, whichever
    // process answers.
    let scrapes = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let (mut last, mut n, mut backwards) = (0u64, 0u64, Vec::new());
            while !stop.load(Ordering::Relaxed) {
                let Ok(mut s) = TcpStream::connect(status_addr) else {
                    backwards.push("the status listener refused a connection".to_owned());
                    continue;
                };
                s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
                let _ =
                    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
                let mut out = String::new();
                let _ = s.read_to_string(&mut out);
                if !out.starts_with("HTTP/1.1 200") {
                    backwards.push(format!(
                        "scrape {n}: {}",
                        out.lines().next().unwrap_or("nothing")
                    ));
                    continue;
                }
                let total = counter(&out, "sluice_http_requests_total{", "");
                if total < last {
                    backwards.push(format!("scrape {n}: {last} then {total}"));
                }
                last = total;
                n += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
            (n, last, backwards)
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    const UPGRADES: usize = 5;
    for _ in 0..UPGRADES {
        let before = tally.ok.load(Ordering::Relaxed);
        gw.upgrade();
        // Traffic flows through the new process before the next switch.
        let deadline = Instant::now() + Duration::from_secs(10);
        while tally.ok.load(Ordering::Relaxed) < before + 50 {
            assert!(Instant::now() < deadline, "no traffic after an upgrade");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    for c in h2_clients {
        c.await.unwrap();
    }
    let (scraped, counted, backwards) = scrapes.join().unwrap();
    let (ok, failed) = (
        tally.ok.load(Ordering::Relaxed),
        tally.failed.load(Ordering::Relaxed),
    );
    let (posted, post_failed) = (
        posts.ok.load(Ordering::Relaxed),
        posts.failed.load(Ordering::Relaxed),
    );
    eprintln!(
        "{UPGRADES} upgrades: {ok} requests answered, {failed} failed; {posted} POSTs answered, {post_failed} failed"
    );
    let (h2_ok, h2_failed) = (
        h2_posts.ok.load(Ordering::Relaxed),
        h2_posts.failed.load(Ordering::Relaxed),
    );
    eprintln!(
        "{scraped} scrapes, the last counting {counted} requests; {h2_ok} HTTP/2 POSTs answered, {h2_failed} failed, {} sent again after a GOAWAY",
        h2_posts.again.load(Ordering::Relaxed)
    );
    assert_eq!(h2_failed, 0, "{:?}", h2_posts.errors.lock());
    assert!(h2_ok > 50, "too few HTTP/2 POSTs: {h2_ok}");
    assert_eq!(failed, 0, "{:?}", tally.errors.lock());
    assert_eq!(post_failed, 0, "{:?}", posts.errors.lock());
    assert!(backwards.is_empty(), "{backwards:?}");
    assert!(scraped > 20, "too few scrapes: {scraped}");
    // Every old process has gone: the counter holds every request any of them answered.
    std::thread::sleep(Duration::from_millis(100));
    let (_, last) = fetch(status_addr, "/metrics", None);
    let total = counter(&last, "sluice_http_requests_total{", "");
    assert!(
        total >= ok + posted + h2_ok && total >= counted,
        "the counters lost requests: {total} counted, {} answered",
        ok + posted + h2_ok
    );
    assert!(
        ok > 500 && posted > 50,
        "too little traffic: {ok} requests, {posted} POSTs"
    );
    // Every POST answered reached the node exactly once, over HTTP/1.1 and HTTP/2.
    let mut at_node: HashMap<String, usize> = HashMap::new();
    let mut h2_at_node: HashMap<String, usize> = HashMap::new();
    for r in origin.requests() {
        if r.uri.starts_with("/post/") {
            *at_node.entry(r.uri.clone()).or_default() += 1;
        } else if r.uri.starts_with("/h2post/") {
            *h2_at_node.entry(r.uri.clone()).or_default() += 1;
        }
    }
    assert!(
        h2_at_node.values().all(|&n| n == 1),
        "an HTTP/2 POST reached the node twice: {:?}",
        h2_at_node
            .iter()
            .filter(|(_, n)| **n > 1)
            .take(5)
            .collect::<Vec<_>>()
    );
    assert_eq!(
        h2_at_node.len() as u64,
        h2_ok,
        "HTTP/2 POSTs answered and at the node differ"
    );
    assert!(
        at_node.values().all(|&n| n == 1),
        "a POST reached the node twice"
    );
    assert_eq!(
        at_node.len() as u64,
        posted,
        "POSTs answered and POSTs at the node differ"
    );
    // The last generation stops on SIGTERM as any other.
    gw.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

/// `GET /metrics` on `port`, on a connection of its own: the status line and the body.
fn scrape_once(port: u16) -> (String, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    (
        head.lines().next().unwrap_or_default().to_owned(),
        body.to_owned(),
    )
}

/// A process started by an upgrade that does not yet have the old process's counters (its
/// first health checks can take 10 s) answers a scrape 503 after 5 s: a failed scrape, not
/// its own counters alone, which would go down for the scraper. It waited 10 s, past
/// Prometheus's scrape timeout, then answered without them. (In-process: the node is told an
/// upgrade's values are on their way, as a process started by an upgrade is.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_wait_for_the_old_process_values_then_answer_503() {
    let port = common::free_port();
    let _node = common::TestNode::start_with(
        &format!("status: {{listen: \"127.0.0.1:{port}\"}}\n"),
        "routes: []\n",
    );
    common::wait_for_port(port, "the status listener");
    sluice_core::exposition::carried::expect();
    let started = Instant::now();
    let (status, body) = tokio::task::spawn_blocking(move || scrape_once(port))
        .await
        .unwrap();
    let waited = started.elapsed();
    assert!(status.contains(" 503 "), "{status}\n{body}");
    assert!(body.contains("taking over"), "{body}");
    assert!(
        waited >= Duration::from_millis(4500) && waited < Duration::from_secs(9),
        "answered after {waited:?}"
    );
    // The old process's values come: they are in every answer from now on.
    sluice_core::exposition::carried::set(
        "# HELP sluice_carried_total A counter of the old process's.\n\
         # TYPE sluice_carried_total counter\nsluice_carried_total 7\n",
    );
    let (status, body) = tokio::task::spawn_blocking(move || scrape_once(port))
        .await
        .unwrap();
    assert!(status.contains(" 200 "), "{status}\n{body}");
    assert!(body.contains("sluice_carried_total 7"), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_binary_that_exits_at_once_leaves_the_old_one_serving() {
    let origin = TestOrigin::http1().route("/", "ok").run().await;
    let dir = temp_dir("fail");
    let port = free_port();
    let cfg = config(&dir, port, &origin.node());
    // Started through a link, as from a package's path: what the link names is "the binary
    // now on disk".
    let program = dir.join("sluice");
    std::os::unix::fs::symlink(BIN, &program).unwrap();
    let mut gw = Gateways::start(&program, &cfg);
    let pid = gw.serving();
    let broken = dir.join("broken");
    std::fs::write(&broken, "#!/bin/sh\necho 'broken build' >&2\nexit 3\n").unwrap();
    std::fs::set_permissions(&broken, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let swap = |to: &Path| {
        let tmp = dir.join("next");
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(to, &tmp).unwrap();
        std::fs::rename(&tmp, &program).unwrap();
    };
    swap(&broken);
    signal(pid, "USR2");
    let why = gw.expect("still serving");
    assert!(why.contains("exited"), "{why}");
    assert!(
        gw.seen.iter().any(|l| l.contains("broken build")),
        "the new binary's own words are in the log"
    );
    let get = || {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.write_all(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    };
    assert!(
        get().starts_with("HTTP/1.1 200"),
        "the old process serves on"
    );
    assert!(alive(pid));
    // The real binary back: the next upgrade succeeds.
    swap(Path::new(BIN));
    gw.upgrade();
    assert_ne!(gw.serving(), pid);
    assert!(get().starts_with("HTTP/1.1 200"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// One request on a new connection: its status and body.
fn fetch(addr: SocketAddr, target: &str, key: Option<&str>) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let auth = key
        .map(|k| format!("X-API-KEY: {k}\r\n"))
        .unwrap_or_default();
    s.write_all(
        format!("GET {target} HTTP/1.1\r\nHost: a\r\n{auth}Connection: close\r\n\r\n").as_bytes(),
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let status = out
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = out.split_once("\r\n\r\n").map_or("", |(_, b)| b).to_owned();
    (status, body)
}

/// The sum of a counter's series whose labels contain `labels`, from a Prometheus scrape.
fn counter(scrape: &str, name: &str, labels: &str) -> u64 {
    scrape
        .lines()
        .filter(|l| l.starts_with(name) && l.contains(labels))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<u64>().ok())
        .sum()
}

/// What an upgrade carries, each of which a new process would otherwise start from zero:
/// local limit counts (limit-count), a circuit breaker's count of failures (api-breaker), a
/// node taken out by traffic (passive health), and the Prometheus counters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_breakers_health_and_counters_go_on_in_the_new_process() {
    let origin = TestOrigin::http1()
        .route("/ok", "ok")
        .handler("/fail", |_| Reply::status(500))
        .run()
        .await;
    let dir = temp_dir("state");
    let (port, status, admin) = (free_port(), free_port(), free_port());
    let dead = free_port();
    let key = "upgrade-test-key-0123";
    let path = dir.join("sluice.yaml");
    std::fs::write(
        &path,
        format!(
            r#"listen: 127.0.0.1:{port}
workers: 2
admin: {{listen: "127.0.0.1:{admin}", key: {key}}}
status: {{listen: "127.0.0.1:{status}"}}
timeouts: {{drain: 10s}}
upstreams:
  - id: two
    nodes: {{"{origin}": 1, "127.0.0.1:{dead}": 1}}
routes:
  - id: limited
    uri: /ok/limited
    upstream: {{nodes: {{"{origin}": 1}}}}
    plugins: {{limit-count: {{count: 20, time_window: 600, rejected_code: 429}}}}
  - id: breaker
    uri: /fail
    upstream: {{nodes: {{"{origin}": 1}}}}
    plugins:
      api-breaker: {{break_response_code: 503, break_response_body: breaker open, unhealthy: {{http_statuses: [500], failures: 3}}}}
  - id: spread
    uri: /ok/spread
    upstream_id: two
"#,
            origin = origin.node()
        ),
    )
    .unwrap();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let status_addr: SocketAddr = format!("127.0.0.1:{status}").parse().unwrap();
    let admin_addr: SocketAddr = format!("127.0.0.1:{admin}").parse().unwrap();
    let mut gw = Gateways::start(Path::new(BIN), &path);

    // Before: 15 of the 20 requests the limit allows, 2 of the 3 failures that open the
    // breaker, and the dead node found dead by traffic.
    for _ in 0..15 {
        assert_eq!(fetch(addr, "/ok/limited", None).0, 200);
    }
    for _ in 0..2 {
        assert_eq!(fetch(addr, "/fail", None).0, 500);
    }
    for _ in 0..4 {
        assert_eq!(fetch(addr, "/ok/spread", None).0, 200);
    }
    let health = |who: &str| -> String {
        let (s, body) = fetch(admin_addr, "/admin/upstreams/two/health", Some(key));
        assert_eq!(s, 200, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        let node = v["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["node"] == format!("127.0.0.1:{dead}"))
            .unwrap_or_else(|| panic!("{who}: no dead node in {v}"))
            .clone();
        node["state"].as_str().unwrap().to_owned()
    };
    assert_eq!(health("before"), "unhealthy");
    let scrape = || fetch(status_addr, "/metrics", None).1;
    let before = scrape();
    let served = counter(&before, "sluice_http_requests_total{", "route=\"limited\"");
    assert_eq!(served, 15, "{before}");

    gw.upgrade();
    let said = gw
        .seen
        .iter()
        .find(|l| l.contains("upgrade: took the old process's"))
        .unwrap_or_else(|| panic!("the new process did not say what it took: {:?}", gw.seen));
    assert!(said.contains("states=2"), "{said}");

    // After: the node is still out (a new process would have sent it traffic), the third
    // failure opens the breaker, and the limit lets 5 more through, not 20.
    assert_eq!(health("after"), "unhealthy");
    assert_eq!(fetch(addr, "/fail", None).0, 500);
    assert_eq!(
        fetch(addr, "/fail", None),
        (503, "breaker open".into()),
        "the breaker forgot two failures"
    );
    let passed = (0..10)
        .filter(|_| fetch(addr, "/ok/limited", None).0 == 200)
        .count();
    assert_eq!(passed, 5, "limit-count started again from zero");
    let after = scrape();
    assert_eq!(
        counter(&after, "sluice_http_requests_total{", "route=\"limited\""),
        25,
        "the counter went on from 15 (and counts the refusals): {after}"
    );
    gw.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

/// The unit in packaging/ is one systemd accepts (with this build's binary at ExecStart's
/// path, which `verify` checks exists and is executable).
#[test]
fn the_systemd_unit_passes_systemd_analyze_verify() {
    let unit = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../packaging/systemd/sluice.service"),
    )
    .unwrap();
    for needed in [
        "Type=notify",
        "NotifyAccess=all",
        "ExecReload=/bin/kill -HUP $MAINPID",
    ] {
        assert!(unit.contains(needed), "the unit lacks {needed}");
    }
    let dir = temp_dir("unit");
    let path = dir.join("sluice.service");
    std::fs::write(&path, unit.replace("/usr/bin/sluice", BIN)).unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .expect("systemd-analyze (Debian's systemd package; test.sh installs it)");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && said.trim().is_empty(), "{said}");
    let _ = std::fs::remove_dir_all(&dir);
}
