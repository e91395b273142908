//! The built-in origin: a small, fast HTTP/1.1 server for demos, tests and benchmarks.
//!
//! | path | answer |
//! |---|---|
//! | `/` | a welcome text |
//! | `/hello`, `/hello...` | `hello world` |
//! | `/bytes/N` | N bytes (`x`), at most 1 GiB |
//! | `/chunked/N` | N chunks of `chunk i\n`, chunked encoding |
//! | `/status/CODE` | that status (200-599) |
//! | `/delay/MS` | `hello world` after MS milliseconds (at most 60000) |
//! | `/echo` | the request as JSON: method, path, version, headers (pairs, in order), body |
//!
//! Anything else is 404. It uses the proxy's own strict request parser.

use std::net::SocketAddr;
use std::thread::JoinHandle;
use std::time::Duration;

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tracing::{error, info};

use sluice_core::http::RequestHead;
use sluice_core::http::chunked::{Decoder, Step};
use sluice_core::http::request::{self, HeadLimits};
use sluice_core::http::write::default_reason;
use sluice_core::http::{Framing, HeaderPos};

const LIMITS: HeadLimits = HeadLimits {
    max_request_line: 64 << 10,
    max_header_size: 64 << 10,
    max_headers: 256,
};
const MAX_ECHO_BODY: usize = 16 << 20;
const MAX_BYTES: u64 = 1 << 30;
const IDLE: Duration = Duration::from_secs(60);
/// Once stopped: how long an idle connection may still send a request, and how long the
/// requests in progress may take.
const DRAIN_IDLE: Duration = Duration::from_millis(250);
const DRAIN: Duration = Duration::from_secs(5);

/// A running origin server.
#[derive(Debug)]
pub struct Origin {
    addr: SocketAddr,
    shutdown: watch::Sender<bool>,
    threads: Vec<JoinHandle<()>>,
}

impl Origin {
    /// Starts `workers` threads serving on `addr` (port 0 picks a free port).
    pub fn start(addr: SocketAddr, workers: usize) -> std::io::Result<Origin> {
        crate::listener::ensure_unserved(addr, false)?;
        let (addr, listeners) = crate::listener::bind_group(addr, workers.max(1))?;
        let (tx, rx) = watch::channel(false);
        let mut threads = Vec::new();
        for (i, l) in listeners.into_iter().enumerate() {
            let mut rx = rx.clone();
            threads.push(
                std::thread::Builder::new()
                    .name(format!("sluice-origin-{i}"))
                    .spawn(move || {
                        let rt = match tokio::runtime::Builder::new_current_thread()
                            .enable_all()
                            .build()
                        {
                            Ok(rt) => rt,
                            Err(e) => return error!(error = %e, "origin worker cannot start"),
                        };
                        rt.block_on(async move {
                            let Ok(l) = TcpListener::from_std(l) else {
                                return;
                            };
                            let mut conns = tokio::task::JoinSet::new();
                            let for_conns = rx.clone();
                            loop {
                                tokio::select! {
                                    accepted = l.accept() => if let Ok((io, _)) = accepted {
                                        let _ = io.set_nodelay(true);
                                        conns.spawn(serve(io, for_conns.clone()));
                                        while conns.try_join_next().is_some() {}
                                    },
                                    _ = rx.wait_for(|s| *s) => break,
                                }
                            }
                            // Stopped (the process exits, or a binary upgrade replaced it and
                            // the new process serves this socket): the connections finish
                            // their request and close, an idle one after DRAIN_IDLE for a
                            // request already on its way. Dropped at once, a connection the
                            // new process's proxy had just opened to it would be reset with
                            // its request unanswered.
                            drop(l);
                            let _ = tokio::time::timeout(DRAIN, async {
                                while conns.join_next().await.is_some() {}
                            })
                            .await;
                        });
                    })?,
            );
        }
        info!(%addr, workers, "built-in origin is serving");
        Ok(Origin {
            addr,
            shutdown: tx,
            threads,
        })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops it.
    pub fn stop(mut self) {
        let _ = self.shutdown.send(true);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

async fn serve(mut io: TcpStream, mut stop: watch::Receiver<bool>) {
    let mut buf = BytesMut::with_capacity(8192);
    let mut out = Vec::with_capacity(1024);
    let mut headers: Vec<HeaderPos> = Vec::new();
    loop {
        let head = loop {
            if !buf.is_empty() {
                match request::parse(&buf, &LIMITS, &mut headers) {
                    Ok(Some(h)) => break h,
                    Ok(None) => {}
                    Err(r) => {
                        out.clear();
                        simple(
                            &mut out,
                            r.status,
                            "text/plain",
                            r.message.as_bytes(),
                            false,
                            false,
                        );
                        let _ = io.write_all(&out).await;
                        return;
                    }
                }
            }
            buf.reserve(4096);
            let wait = if *stop.borrow() && buf.is_empty() {
                DRAIN_IDLE
            } else {
                IDLE
            };
            let idle_running = buf.is_empty() && !*stop.borrow();
            tokio::select! {
                r = tokio::time::timeout(wait, io.read_buf(&mut buf)) => match r {
                    Ok(Ok(n)) if n > 0 => {}
                    _ => return,
                },
                // Stopped while idle: the read starts again with DRAIN_IDLE.
                _ = stop.wait_for(|s| *s), if idle_running => {}
            }
        };
        let mut head = head;
        head.take_bytes(&mut buf);
        let Some(body) = read_body(&mut io, &mut buf, head.framing()).await else {
            return;
        };
        // Stopped: this answer is the connection's last.
        let keep = head.keep_alive() && !*stop.borrow();
        if answer(&mut io, &mut out, &head, &body, keep).await.is_err() || !keep {
            return;
        }
        let mut h = head.into_fields();
        h.clear();
        headers = h;
    }
}

/// Reads the whole request body (bounded).
async fn read_body(io: &mut TcpStream, buf: &mut BytesMut, framing: Framing) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    match framing {
        Framing::None | Framing::Close => {}
        Framing::Length(n) if n > MAX_ECHO_BODY as u64 => return discard(io, buf, n).await,
        Framing::Length(n) => {
            let n = n as usize;
            while buf.len() < n {
                buf.reserve(64 << 10);
                if io.read_buf(buf).await.ok()? == 0 {
                    return None;
                }
            }
            body.extend_from_slice(&buf[..n]);
            buf.advance(n);
        }
        Framing::Chunked => {
            let mut d = Decoder::new();
            loop {
                match d.decode(buf).ok()? {
                    Step::Data {
                        consumed,
                        start,
                        end,
                    } => {
                        if body.len() < MAX_ECHO_BODY {
                            body.extend_from_slice(&buf[start..end]);
                        }
                        buf.advance(consumed);
                    }
                    Step::NeedMore { consumed } => {
                        buf.advance(consumed);
                        buf.reserve(16 << 10);
                        if io.read_buf(buf).await.ok()? == 0 {
                            return None;
                        }
                    }
                    Step::Done { consumed } => {
                        buf.advance(consumed);
                        break;
                    }
                }
            }
        }
    }
    Some(body)
}

/// Reads and drops a body too large to echo; the echo then reports only its size.
async fn discard(io: &mut TcpStream, buf: &mut BytesMut, n: u64) -> Option<Vec<u8>> {
    let have = (buf.len() as u64).min(n);
    buf.advance(have as usize);
    let mut left = n - have;
    let mut scratch = vec![0u8; 64 << 10];
    while left > 0 {
        let want = left.min(scratch.len() as u64) as usize;
        let got = io.read(&mut scratch[..want]).await.ok()?;
        if got == 0 {
            return None;
        }
        left -= got as u64;
    }
    Some(format!("({n} bytes)").into_bytes())
}

async fn answer(
    io: &mut TcpStream,
    out: &mut Vec<u8>,
    head: &RequestHead,
    body: &[u8],
    keep: bool,
) -> std::io::Result<()> {
    let path = head.path();
    let head_only = head.method() == sluice_router::Method::Head;
    out.clear();
    if path.starts_with(b"/hello") {
        simple(out, 200, "text/plain", b"hello world", keep, head_only);
    } else if path == b"/" {
        simple(out, 200, "text/plain", WELCOME.as_bytes(), keep, head_only);
    } else if let Some(n) = number_after(path, b"/bytes/") {
        return bytes(io, out, n.min(MAX_BYTES), keep, head_only).await;
    } else if let Some(n) =
        memchr::memmem::rfind(path, b"/json/").and_then(|i| number_after(&path[i..], b"/json/"))
    {
        let doc = json_document(n.min(MAX_BYTES));
        simple(out, 200, "application/json", &doc, keep, head_only);
    } else if let Some(n) = number_after(path, b"/chunked/") {
        return chunked(io, out, n.min(10_000), keep, head_only).await;
    } else if let Some(code) = number_after(path, b"/status/").filter(|c| (200..=599).contains(c)) {
        let code = code as u16;
        let text = default_reason(code);
        let body: &[u8] = if code == 204 || code == 304 {
            b""
        } else {
            text.as_bytes()
        };
        simple(
            out,
            code,
            "text/plain",
            body,
            keep,
            head_only || body.is_empty(),
        );
    } else if let Some(ms) = number_after(path, b"/delay/") {
        tokio::time::sleep(Duration::from_millis(ms.min(60_000))).await;
        simple(out, 200, "text/plain", b"hello world", keep, head_only);
    } else if path == b"/echo" {
        let json = echo_json(head, body);
        simple(
            out,
            200,
            "application/json",
            json.as_bytes(),
            keep,
            head_only,
        );
    } else {
        simple(out, 404, "text/plain", b"not found", keep, head_only);
    }
    io.write_all(out).await
}

const WELCOME: &str = "Welcome to Sluice.\n\
This page comes from the built-in origin, through the gateway.\n\
Try /hello, /echo, /bytes/1024, /json/65536, /status/418 or /delay/100.\n";

/// A JSON document of about `n` bytes (an array of small records, as an API answers), the
/// same each time: what the compression benchmarks compress. The last one made is kept.
fn json_document(n: u64) -> std::rc::Rc<Vec<u8>> {
    thread_local! {
        static LAST: std::cell::RefCell<(u64, std::rc::Rc<Vec<u8>>)> = Default::default();
    }
    LAST.with_borrow_mut(|(size, doc)| {
        if *size != n || doc.is_empty() {
            let mut s = Vec::with_capacity(n as usize + 128);
            s.push(b'[');
            let mut i = 0u64;
            while (s.len() as u64) < n {
                if i > 0 {
                    s.push(b',');
                }
                let _ = std::io::Write::write_fmt(
                    &mut s,
                    format_args!(
                        r#"{{"id":{i},"name":"item {i}","tags":["red","green"],"price":{}.{},"stock":{}}}"#,
                        i * 7 % 1000,
                        i % 100,
                        i * 13 % 500
                    ),
                );
                i += 1;
            }
            s.push(b']');
            *size = n;
            *doc = std::rc::Rc::new(s);
        }
        doc.clone()
    })
}

fn number_after(path: &[u8], prefix: &[u8]) -> Option<u64> {
    std::str::from_utf8(path.strip_prefix(prefix)?)
        .ok()?
        .parse()
        .ok()
}

/// How an origin response declares its body.
#[derive(Clone, Copy)]
enum Body {
    /// No framing field (204, 304).
    Empty,
    Length(u64),
    Chunked,
}

/// Writes a response head.
fn head(out: &mut Vec<u8>, status: u16, ctype: &str, body: Body, keep: bool) {
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(itoa::Buffer::new().format(status).as_bytes());
    out.push(b' ');
    out.extend_from_slice(default_reason(status).as_bytes());
    out.extend_from_slice(b"\r\nServer: sluice-origin\r\nContent-Type: ");
    out.extend_from_slice(ctype.as_bytes());
    match body {
        Body::Empty => {}
        Body::Length(n) => {
            out.extend_from_slice(b"\r\nContent-Length: ");
            out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
        }
        Body::Chunked => out.extend_from_slice(b"\r\nTransfer-Encoding: chunked"),
    }
    out.extend_from_slice(if keep {
        b"\r\n\r\n"
    } else {
        b"\r\nConnection: close\r\n\r\n"
    });
}

fn simple(out: &mut Vec<u8>, status: u16, ctype: &str, body: &[u8], keep: bool, head_only: bool) {
    let framing = if status == 204 || status == 304 {
        Body::Empty
    } else {
        Body::Length(body.len() as u64)
    };
    head(out, status, ctype, framing, keep);
    if !head_only {
        out.extend_from_slice(body);
    }
}

async fn bytes(
    io: &mut TcpStream,
    out: &mut Vec<u8>,
    n: u64,
    keep: bool,
    head_only: bool,
) -> std::io::Result<()> {
    head(out, 200, "application/octet-stream", Body::Length(n), keep);
    io.write_all(out).await?;
    if head_only {
        return Ok(());
    }
    let block = vec![b'x'; 64 << 10];
    let mut left = n;
    while left > 0 {
        let k = left.min(block.len() as u64) as usize;
        io.write_all(&block[..k]).await?;
        left -= k as u64;
    }
    Ok(())
}

async fn chunked(
    io: &mut TcpStream,
    out: &mut Vec<u8>,
    n: u64,
    keep: bool,
    head_only: bool,
) -> std::io::Result<()> {
    head(out, 200, "text/plain", Body::Chunked, keep);
    io.write_all(out).await?;
    if head_only {
        return Ok(());
    }
    for i in 0..n {
        let line = format!("chunk {i}\n");
        io.write_all(format!("{:x}\r\n{line}\r\n", line.len()).as_bytes())
            .await?;
    }
    io.write_all(b"0\r\n\r\n").await
}

fn echo_json(head: &RequestHead, body: &[u8]) -> String {
    let hb = head.raw();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let headers: Vec<serde_json::Value> = head
        .fields()
        .iter()
        .map(|h| serde_json::json!([text(h.name(hb)), text(h.value(hb))]))
        .collect();
    serde_json::json!({
        "method": text(head.method_bytes()),
        "path": text(head.target()),
        "version": if head.version() == 0 { "HTTP/1.0" } else { "HTTP/1.1" },
        "headers": headers,
        "body": text(body),
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};

    use super::*;

    fn get(s: &mut std::net::TcpStream, path: &str) {
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: o\r\n\r\n").as_bytes())
            .unwrap();
    }

    fn read_all(s: &mut std::net::TcpStream) -> String {
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut out = Vec::new();
        let r = s.read_to_end(&mut out);
        assert!(r.is_ok(), "{r:?} after {:?}", String::from_utf8_lossy(&out));
        String::from_utf8(out).unwrap()
    }

    /// Stopped (a binary upgrade, an exit), the origin answers what it was asked and what
    /// arrives on an idle connection just after, each with `Connection: close`, instead of
    /// resetting the connections (a proxy's request on one would fail with a 502).
    #[test]
    fn a_stopped_origin_answers_the_requests_on_their_way_then_closes() {
        let o = Origin::start("127.0.0.1:0".parse().unwrap(), 1).unwrap();
        let addr = o.addr();
        let mut busy = std::net::TcpStream::connect(addr).unwrap();
        let mut idle = std::net::TcpStream::connect(addr).unwrap();
        // Both connections accepted, one with a request in progress.
        get(&mut idle, "/hello");
        let mut first = [0u8; 12];
        idle.read_exact(&mut first).unwrap();
        assert_eq!(&first, b"HTTP/1.1 200");
        let mut rest = [0u8; 1024];
        let _ = idle.read(&mut rest).unwrap();
        get(&mut busy, "/delay/300");
        std::thread::sleep(Duration::from_millis(50));
        let stopping = std::thread::spawn(move || o.stop());
        std::thread::sleep(Duration::from_millis(30));
        get(&mut idle, "/hello");
        let answer = read_all(&mut idle);
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(
            answer.to_ascii_lowercase().contains("connection: close"),
            "{answer}"
        );
        let answer = read_all(&mut busy);
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.ends_with("hello world"), "{answer}");
        stopping.join().unwrap();
    }
}
