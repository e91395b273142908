//! The HTTP/2 downstream, live: an in-process gateway (one worker, cleartext HTTP/2) in front
//! of an HTTP/1.1 node. Each input is written after the connection preface as raw frames;
//! then a new connection must still get its answer (no worker lost), and every request head
//! that reached the node must be strict HTTP/1.1 (Sluice's own parser, which refuses what
//! smuggling needs: CR or LF in a field, ambiguous framing, a bad target), so no frame
//! sequence writes an HTTP/1.1 request the gateway would itself refuse.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Request heads the node refused: what the check reports.
static REFUSED: parking_lot::Mutex<Vec<String>> = parking_lot::Mutex::new(Vec::new());

/// The node: reads one request head per connection, checks it, answers 200 and closes.
fn node() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a port for the node");
    let addr = listener.local_addr().expect("its address");
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            std::thread::spawn(move || serve(conn));
        }
    });
    addr
}

fn serve(mut conn: TcpStream) {
    let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        match conn.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let limits = sluice_core::http::request::HeadLimits {
        max_request_line: 65536,
        max_header_size: 1 << 20,
        max_headers: sluice_core::http::request::MAX_HEADERS_CEILING,
    };
    if !matches!(
        sluice_core::http::request::parse(&buf[..end], &limits, &mut Vec::new()),
        Ok(Some(_))
    ) {
        REFUSED
            .lock()
            .push(String::from_utf8_lossy(&buf[..end]).into_owned());
    }
    let _ = conn.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok");
}

/// The gateway's address, started once per process.
fn gateway() -> SocketAddr {
    static ADDR: OnceLock<SocketAddr> = OnceLock::new();
    *ADDR.get_or_init(|| {
        let node = node();
        let yaml = format!(
            "listen:\n  - {{addr: 127.0.0.1:0, http2: true}}\nworkers: 1\nroutes:\n  - uri: /*\n    upstream: {{nodes: {{\"{node}\": 1}}}}\n  - uri: /own/*\n    plugins: {{mocking: {{response_example: own}}}}\n"
        );
        let plugins = sluice_plugins::shared();
        let cfg = sluice_config::load_str_with(&yaml, &*plugins).expect("the gateway's configuration");
        let server = sluice_proxy::Server::start(&cfg, plugins).expect("the gateway starts");
        let addr = server.local_addrs()[0];
        // Serves for the rest of the process, held where LeakSanitizer sees it (forgotten,
        // it was reported as leaked on the first input).
        static SERVER: parking_lot::Mutex<Option<sluice_proxy::Server>> =
            parking_lot::Mutex::new(None);
        *SERVER.lock() = Some(server);
        addr
    })
}

/// Writes `bytes` after the preface, then reads what comes back until the gateway closes or
/// is quiet for a moment.
fn exchange(addr: SocketAddr, bytes: &[u8]) {
    let Ok(mut s) = TcpStream::connect(addr) else {
        return;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(20)));
    let _ = s.write_all(PREFACE);
    let _ = s.write_all(bytes);
    let mut chunk = [0u8; 16384];
    let until = Instant::now() + Duration::from_millis(200);
    while Instant::now() < until {
        match s.read(&mut chunk) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut =>
            {
                break;
            }
            Err(_) => break,
        }
    }
}

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len();
    let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// Whether a well-formed GET on a new connection is answered within 5 s.
fn answers(addr: SocketAddr) -> bool {
    let Ok(mut s) = TcpStream::connect(addr) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let mut block = Vec::new();
    for (n, v) in [
        (":method", "GET"),
        (":scheme", "http"),
        (":path", "/own/live"),
        (":authority", "a"),
    ] {
        block.extend_from_slice(&[0, n.len() as u8]);
        block.extend_from_slice(n.as_bytes());
        block.push(v.len() as u8);
        block.extend_from_slice(v.as_bytes());
    }
    let mut out = PREFACE.to_vec();
    out.extend(frame(4, 0, 0, &[]));
    out.extend(frame(1, 0x5, 1, &block));
    if s.write_all(&out).is_err() {
        return false;
    }
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16384];
    loop {
        while buf.len() >= 9 {
            let len =
                (usize::from(buf[0]) << 16) | (usize::from(buf[1]) << 8) | usize::from(buf[2]);
            if buf.len() < 9 + len {
                break;
            }
            let (kind, stream) = (buf[3], u32::from_be_bytes([buf[5], buf[6], buf[7], buf[8]]));
            if kind == 1 && stream == 1 {
                return true;
            }
            buf.drain(..9 + len);
        }
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => return false,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// One input: frames, written after the connection preface.
pub fn check(data: &[u8]) {
    let addr = gateway();
    exchange(addr, data);
    assert!(
        answers(addr),
        "the gateway stopped answering after {data:?}"
    );
    let refused = std::mem::take(&mut *REFUSED.lock());
    assert!(
        refused.is_empty(),
        "the node was sent heads HTTP/1.1 refuses: {refused:?}"
    );
}
