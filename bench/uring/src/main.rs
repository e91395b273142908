//! The io_uring experiment of issue 12, step one: how much CPU per request can io_uring take
//! off a proxy's system calls at all?
//!
//! The smallest HTTP/1.1 keep-alive proxy with Sluice's I/O shape in scenario 1: read a
//! request, write it to a pooled upstream connection, read the response (Content-Length
//! framed), write it back; one thread, one task per client connection, no hand-off. The same
//! code runs on monoio's two drivers:
//!
//! - `uring`: io_uring; every operation of every connection queued during a turn of the loop
//!   goes to the kernel in one `io_uring_enter`, which also reaps the completions;
//! - `uring-tuned`: the same with the ring set up for one thread that submits and reaps
//!   (`IORING_SETUP_SINGLE_ISSUER`, `COOP_TASKRUN`, `DEFER_TASKRUN`: completions are run
//!   when the loop waits, not by interrupting it);
//! - `epoll`: monoio's `legacy` driver, readiness through epoll and one `read`/`write` system
//!   call per operation, as Sluice (tokio) does.
//!
//! The difference between the two is the system-call layer alone: the most an io_uring
//! worker loop could take off Sluice's CPU per request, whatever else it costs to port. No
//! parsing, no routing, no plugins, nothing a real gateway checks: never serve with it.
//!
//!   uring-proxy LISTEN UPSTREAM uring|uring-tuned|epoll

use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::Rc;

use monoio::buf::IoBufMut;
use monoio::io::{AsyncReadRent, AsyncWriteRentExt};
use monoio::net::{TcpListener, TcpStream};

type Pool = Rc<RefCell<Vec<TcpStream>>>;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 4 {
        eprintln!("usage: uring-proxy LISTEN UPSTREAM uring|uring-tuned|epoll");
        std::process::exit(2);
    }
    let listen: SocketAddr = args[1].parse().expect("LISTEN: an address");
    let upstream: SocketAddr = args[2].parse().expect("UPSTREAM: an address");
    match args[3].as_str() {
        "uring" => monoio::RuntimeBuilder::<monoio::IoUringDriver>::new()
            .with_entries(4096)
            .build()
            .expect("io_uring runtime")
            .block_on(serve(listen, upstream)),
        "uring-tuned" => {
            let mut ring = io_uring::IoUring::builder();
            ring.setup_single_issuer()
                .setup_coop_taskrun()
                .setup_defer_taskrun();
            monoio::RuntimeBuilder::<monoio::IoUringDriver>::new()
                .with_entries(4096)
                .uring_builder(ring)
                .build()
                .expect("io_uring runtime (single issuer, deferred task run: Linux 6.1 or later)")
                .block_on(serve(listen, upstream))
        }
        "epoll" => monoio::RuntimeBuilder::<monoio::LegacyDriver>::new()
            .build()
            .expect("epoll runtime")
            .block_on(serve(listen, upstream)),
        other => {
            eprintln!("driver {other}: expected uring, uring-tuned or epoll");
            std::process::exit(2);
        }
    }
}

async fn serve(listen: SocketAddr, upstream: SocketAddr) {
    let listener = TcpListener::bind(listen).expect("bind");
    eprintln!("listening on {listen}");
    let pool: Pool = Rc::default();
    loop {
        let Ok((client, _)) = listener.accept().await else {
            continue;
        };
        let _ = client.set_nodelay(true);
        monoio::spawn(proxy(client, upstream, pool.clone()));
    }
}

/// Reads until `buf` holds a whole message (head, and a Content-Length body when `body`);
/// returns its length, or None at the end of the stream or on an error.
async fn read_message(s: &mut TcpStream, buf: &mut Vec<u8>, body: bool) -> Option<usize> {
    loop {
        if let Some(len) = complete(buf, body) {
            return Some(len);
        }
        if buf.len() == buf.capacity() {
            buf.reserve(buf.capacity());
        }
        let len = buf.len();
        let (r, slice) = s.read(std::mem::take(buf).slice_mut(len..)).await;
        *buf = slice.into_inner();
        match r {
            Ok(0) | Err(_) => return None,
            Ok(_) => {}
        }
    }
}

/// The length of the message at the start of `buf`, when it is all there.
fn complete(buf: &[u8], body: bool) -> Option<usize> {
    let head = buf.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    if !body {
        return Some(head);
    }
    let length = buf[..head]
        .split(|&b| b == b'\n')
        .find_map(|line| {
            let (name, value) = line.split_at(line.iter().position(|&b| b == b':')?);
            name.eq_ignore_ascii_case(b"content-length").then(|| {
                std::str::from_utf8(&value[1..])
                    .ok()?
                    .trim()
                    .parse::<usize>()
                    .ok()
            })?
        })
        .unwrap_or(0);
    (buf.len() >= head + length).then_some(head + length)
}

async fn proxy(mut client: TcpStream, upstream: SocketAddr, pool: Pool) {
    let mut req = Vec::with_capacity(16 * 1024);
    let mut resp = Vec::with_capacity(16 * 1024);
    let mut out = Vec::with_capacity(16 * 1024);
    loop {
        let Some(n) = read_message(&mut client, &mut req, false).await else {
            return;
        };
        let pooled = pool.borrow_mut().pop();
        let mut up = match pooled {
            Some(up) => up,
            None => match TcpStream::connect(upstream).await {
                Ok(up) => {
                    let _ = up.set_nodelay(true);
                    up
                }
                Err(_) => return,
            },
        };
        // GET requests only: the head goes as it came.
        out.clear();
        out.extend_from_slice(&req[..n]);
        req.drain(..n);
        let (r, back) = up.write_all(std::mem::take(&mut out)).await;
        out = back;
        if r.is_err() {
            return;
        }
        resp.clear();
        let Some(m) = read_message(&mut up, &mut resp, true).await else {
            return;
        };
        resp.truncate(m);
        let (r, back) = client.write_all(std::mem::take(&mut resp)).await;
        resp = back;
        if r.is_err() {
            return;
        }
        pool.borrow_mut().push(up);
    }
}
