//! `llm-stream serve --listen ADDR --events N --interval-ms I`: answers every POST with a
//! chunked `text/event-stream` of N OpenAI chat completion chunks, one every I ms, each carrying
//! `"t":<nanoseconds since the epoch when it was written>`, then the usage chunk when the request
//! asked for it (`include_usage`), then `data: [DONE]`; answers every GET with `200 ok`.
//!
//! `llm-stream load --addr ADDR --path P --streams C --seconds S`: keeps C streams going on C
//! keep-alive connections for S seconds; prints, as one JSON line, the count of chunks and the
//! percentiles (µs) of each chunk's delay (arrival minus stamp) and of the time to the first
//! chunk (from writing the request), also apart for each connection's first stream (`new`: the
//! proxy accepts the connection and sets it up) and its later ones (`reused`: kept alive).
//! With `--control-addr SERVER [--control-streams N]` it also keeps N streams going straight to
//! the server during the same seconds and adds their figures as `"control"`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

fn arg(args: &[String], name: &str, default: &str) -> String {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
        .unwrap_or_else(|| default.to_owned())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let threads: usize = arg(&args, "--threads", "1").parse().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
        .unwrap();
    match args.get(1).map(String::as_str) {
        Some("serve") => rt.block_on(serve(
            arg(&args, "--listen", "127.0.0.1:1990"),
            arg(&args, "--events", "20").parse().unwrap(),
            arg(&args, "--interval-ms", "50").parse().unwrap(),
        )),
        Some("load") => rt.block_on(load(
            arg(&args, "--addr", "127.0.0.1:9080"),
            arg(&args, "--path", "/v1/chat/completions"),
            arg(&args, "--streams", "100").parse().unwrap(),
            arg(&args, "--seconds", "10").parse().unwrap(),
            args.iter().any(|a| a == "--control-addr").then(|| {
                (
                    arg(&args, "--control-addr", ""),
                    arg(&args, "--control-streams", "100").parse().unwrap(),
                )
            }),
        )),
        _ => {
            eprintln!("usage: llm-stream serve|load ...");
            std::process::exit(2);
        }
    }
}

async fn serve(listen: String, events: usize, interval_ms: u64) {
    let l = TcpListener::bind(&listen).await.unwrap();
    loop {
        let Ok((s, _)) = l.accept().await else {
            continue;
        };
        let _ = s.set_nodelay(true);
        tokio::spawn(async move {
            let _ = conn(s, events, interval_ms).await;
        });
    }
}

async fn conn(mut s: TcpStream, events: usize, interval_ms: u64) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(4096);
    loop {
        let (head_end, len, post) = loop {
            if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
                let len = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse::<usize>().ok())
                    .unwrap_or(0);
                break (end + 4, len, head.starts_with("post"));
            }
            let mut more = [0u8; 4096];
            let n = s.read(&mut more).await?;
            if n == 0 {
                return Ok(());
            }
            buf.extend_from_slice(&more[..n]);
        };
        while buf.len() < head_end + len {
            let mut more = [0u8; 4096];
            let n = s.read(&mut more).await?;
            if n == 0 {
                return Ok(());
            }
            buf.extend_from_slice(&more[..n]);
        }
        let usage = buf[head_end..head_end + len]
            .windows(13)
            .any(|w| w == b"include_usage");
        buf.drain(..head_end + len);
        if !post {
            s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                .await?;
            continue;
        }
        s.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
            .await?;
        // The first event goes right after the head: a timer's first tick waits for the
        // timer wheel's next millisecond, which put up to 1 ms of the server's own rounding in
        // every time to the first chunk.
        let period = Duration::from_millis(interval_ms.max(1));
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        for i in 0..events {
            if i > 0 {
                tick.tick().await;
            }
            let e = format!(
                "data: {{\"id\":\"chatcmpl-b\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"m\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"token \"}},\"finish_reason\":null}}],\"t\":{}}}\n\n",
                now_ns()
            );
            s.write_all(format!("{:x}\r\n{e}\r\n", e.len()).as_bytes())
                .await?;
        }
        let mut tail = String::new();
        if usage {
            tail.push_str("data: {\"id\":\"chatcmpl-b\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":20,\"total_tokens\":25}}\n\n");
        }
        tail.push_str("data: [DONE]\n\n");
        s.write_all(format!("{:x}\r\n{tail}\r\n0\r\n\r\n", tail.len()).as_bytes())
            .await?;
    }
}

#[derive(Default)]
struct Samples {
    delay_us: Vec<u32>,
    ttft_us: Vec<u32>,
    /// The time to the first chunk of a connection's first stream (its connection new).
    ttft_new_us: Vec<u32>,
    /// The time to the first chunk of the later streams of a connection (kept alive).
    ttft_reused_us: Vec<u32>,
    streams: u64,
    errors: u64,
}

async fn load(
    addr: String,
    path: String,
    streams: usize,
    seconds: u64,
    control: Option<(String, usize)>,
) {
    let stop = Arc::new(AtomicBool::new(false));
    let tasks = spawn_streams(&addr, &path, streams, &stop);
    // The control streams go straight to the server in the same run (same process, same
    // moments): what the machine does to every stream (another process on the CPU, the
    // hypervisor taking it away) shows in them too, and the difference is what the proxy adds.
    let control_tasks = control
        .as_ref()
        .map(|(a, n)| spawn_streams(a, "/v1/chat/completions", *n, &stop));
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    stop.store(true, Ordering::Relaxed);
    let mut json = summary(collect(tasks).await);
    if let Some(tasks) = control_tasks {
        json.pop();
        json.push_str(&format!(",\"control\":{}}}", summary(collect(tasks).await)));
    }
    println!("{json}");
}

/// Keeps `n` streams going to `addr`, their starts spread over a second.
fn spawn_streams(
    addr: &str,
    path: &str,
    n: usize,
    stop: &Arc<AtomicBool>,
) -> Vec<tokio::task::JoinHandle<Samples>> {
    (0..n)
        .map(|i| {
            let (addr, path, stop) = (addr.to_owned(), path.to_owned(), stop.clone());
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis((i as u64 * 1000) / n.max(1) as u64))
                    .await;
                let mut out = Samples::default();
                while !stop.load(Ordering::Relaxed) {
                    if one_connection(&addr, &path, &stop, &mut out).await.is_err() {
                        out.errors += 1;
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
                out
            })
        })
        .collect()
}

async fn collect(tasks: Vec<tokio::task::JoinHandle<Samples>>) -> Samples {
    let mut all = Samples::default();
    for t in tasks {
        let s = t.await.unwrap();
        all.delay_us.extend(s.delay_us);
        all.ttft_us.extend(s.ttft_us);
        all.ttft_new_us.extend(s.ttft_new_us);
        all.ttft_reused_us.extend(s.ttft_reused_us);
        all.streams += s.streams;
        all.errors += s.errors;
    }
    all
}

/// The samples' counts and percentiles as one JSON object.
fn summary(all: Samples) -> String {
    let pct = |v: &mut Vec<u32>, p: f64| -> u32 {
        if v.is_empty() {
            return 0;
        }
        v.sort_unstable();
        v[((v.len() - 1) as f64 * p).round() as usize]
    };
    let (mut d, mut f, mut n) = (all.delay_us, all.ttft_us, all.ttft_new_us);
    let mut r = all.ttft_reused_us;
    format!(
        "{{\"streams\":{},\"errors\":{},\"chunks\":{},\"delay_p50_us\":{},\"delay_p90_us\":{},\"delay_p99_us\":{},\"delay_p999_us\":{},\"delay_max_us\":{},\"ttft_p50_us\":{},\"ttft_p99_us\":{},\"ttft_p999_us\":{},\"ttft_new_p50_us\":{},\"ttft_new_p99_us\":{},\"ttft_reused_p50_us\":{},\"ttft_reused_p99_us\":{}}}",
        all.streams,
        all.errors,
        d.len(),
        pct(&mut d, 0.50),
        pct(&mut d, 0.90),
        pct(&mut d, 0.99),
        pct(&mut d, 0.999),
        pct(&mut d, 1.0),
        pct(&mut f, 0.50),
        pct(&mut f, 0.99),
        pct(&mut f, 0.999),
        pct(&mut n, 0.50),
        pct(&mut n, 0.99),
        pct(&mut r, 0.50),
        pct(&mut r, 0.99),
    )
}

/// Streams one after another on one connection until `stop`.
async fn one_connection(
    addr: &str,
    path: &str,
    stop: &AtomicBool,
    out: &mut Samples,
) -> std::io::Result<()> {
    let mut s = TcpStream::connect(addr).await?;
    s.set_nodelay(true)?;
    let body = "{\"model\":\"m\",\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"hello\"}]}";
    let req = format!(
        "POST {path} HTTP/1.1\r\nHost: bench\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut buf = vec![0u8; 64 * 1024];
    let mut carry: Vec<u8> = Vec::new();
    let mut new_conn = true;
    while !stop.load(Ordering::Relaxed) {
        let sent = Instant::now();
        s.write_all(req.as_bytes()).await?;
        let mut first = true;
        carry.clear();
        // Where the next stamp is looked for; whether `[DONE]` arrived.
        let mut scan = 0;
        let mut done = false;
        loop {
            let n = s.read(&mut buf).await?;
            if n == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            let at = now_ns();
            carry.extend_from_slice(&buf[..n]);
            while let Some(p) = find(&carry[scan..], b"\"t\":") {
                let start = scan + p + 4;
                let digits = carry[start..]
                    .iter()
                    .take_while(|b| b.is_ascii_digit())
                    .count();
                if start + digits >= carry.len() {
                    break; // the number may go on in the next read
                }
                let t: u64 = std::str::from_utf8(&carry[start..start + digits])
                    .unwrap()
                    .parse()
                    .unwrap_or(0);
                out.delay_us.push((at.saturating_sub(t) / 1000) as u32);
                if first {
                    let us = sent.elapsed().as_micros() as u32;
                    out.ttft_us.push(us);
                    if new_conn {
                        out.ttft_new_us.push(us);
                        new_conn = false;
                    } else {
                        out.ttft_reused_us.push(us);
                    }
                    first = false;
                }
                scan = start + digits;
            }
            done = done || find(&carry, b"[DONE]").is_some();
            if done && carry.ends_with(b"\r\n0\r\n\r\n") {
                out.streams += 1;
                break;
            }
            // Drop what was scanned, keeping a tail for `[DONE]` split over two reads.
            let cut = scan.min(carry.len().saturating_sub(32));
            carry.drain(..cut);
            scan -= cut;
        }
    }
    Ok(())
}

fn find(h: &[u8], n: &[u8]) -> Option<usize> {
    h.windows(n.len()).position(|w| w == n)
}
