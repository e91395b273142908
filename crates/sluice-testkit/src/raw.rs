use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A bytes-in, bytes-out client for wire-level cases (framing, limits, smuggling).
#[derive(Debug)]
pub struct RawClient {
    io: TcpStream,
    buf: Vec<u8>,
}

/// A response read off the wire.
#[derive(Debug, Clone)]
pub struct RawResponse {
    pub status: u16,
    /// Header fields, names as sent.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl RawResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

const WAIT: Duration = Duration::from_secs(10);

impl RawClient {
    pub async fn connect(addr: SocketAddr) -> RawClient {
        let io = TcpStream::connect(addr).await.expect("connect");
        io.set_nodelay(true).unwrap();
        RawClient {
            io,
            buf: Vec::new(),
        }
    }

    pub async fn send(&mut self, bytes: &[u8]) {
        self.io.write_all(bytes).await.expect("send");
    }

    /// Sends and tolerates the peer having closed already.
    pub async fn try_send(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.io.write_all(bytes).await
    }

    async fn fill(&mut self) -> bool {
        let mut chunk = [0u8; 16384];
        match tokio::time::timeout(WAIT, self.io.read(&mut chunk)).await {
            Ok(Ok(n)) if n > 0 => {
                self.buf.extend_from_slice(&chunk[..n]);
                true
            }
            Ok(_) => false,
            Err(_) => panic!(
                "no bytes from the gateway within {WAIT:?}; have {:?}",
                String::from_utf8_lossy(&self.buf)
            ),
        }
    }

    /// Reads one response. `head_request`: no body follows regardless of framing.
    pub async fn response_to(&mut self, head_request: bool) -> RawResponse {
        let (status, headers, head_len) = loop {
            let mut hs = [httparse::EMPTY_HEADER; 64];
            let mut r = httparse::Response::new(&mut hs);
            match r.parse(&self.buf) {
                Ok(httparse::Status::Complete(n)) => {
                    let headers = r
                        .headers
                        .iter()
                        .map(|h| {
                            (
                                h.name.to_owned(),
                                String::from_utf8_lossy(h.value).into_owned(),
                            )
                        })
                        .collect::<Vec<_>>();
                    break (r.code.unwrap(), headers, n);
                }
                Ok(httparse::Status::Partial) => {
                    assert!(
                        self.fill().await,
                        "connection closed before a response head; got {:?}",
                        String::from_utf8_lossy(&self.buf)
                    );
                }
                Err(e) => panic!(
                    "bad response ({e}): {:?}",
                    String::from_utf8_lossy(&self.buf)
                ),
            }
        };
        self.buf.drain(..head_len);
        let find = |name: &str| {
            headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.clone())
        };
        let mut body = Vec::new();
        if !(head_request || status < 200 || status == 204 || status == 304) {
            if let Some(len) = find("content-length") {
                let len: usize = len.trim().parse().unwrap();
                while self.buf.len() < len {
                    assert!(
                        self.fill().await,
                        "connection closed inside a {len}-byte body"
                    );
                }
                body = self.buf.drain(..len).collect();
            } else if find("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
                body = self.read_chunked().await;
            } else {
                while self.fill().await {}
                body = std::mem::take(&mut self.buf);
            }
        }
        RawResponse {
            status,
            headers,
            body,
        }
    }

    pub async fn response(&mut self) -> RawResponse {
        self.response_to(false).await
    }

    async fn read_chunked(&mut self) -> Vec<u8> {
        let mut body = Vec::new();
        loop {
            let line_end = loop {
                if let Some(p) = self.buf.windows(2).position(|w| w == b"\r\n") {
                    break p;
                }
                assert!(self.fill().await, "connection closed inside a chunked body");
            };
            let size = usize::from_str_radix(
                std::str::from_utf8(&self.buf[..line_end]).unwrap().trim(),
                16,
            )
            .unwrap();
            self.buf.drain(..line_end + 2);
            if size == 0 {
                while !self.buf.starts_with(b"\r\n") {
                    assert!(
                        self.fill().await,
                        "connection closed before the end of a chunked body"
                    );
                }
                self.buf.drain(..2);
                return body;
            }
            while self.buf.len() < size + 2 {
                assert!(self.fill().await, "connection closed inside a chunk");
            }
            body.extend(self.buf.drain(..size));
            self.buf.drain(..2);
        }
    }

    /// True when the gateway closes the connection within `within` (and sends nothing more).
    pub async fn closed_within(&mut self, within: Duration) -> bool {
        let mut chunk = [0u8; 4096];
        match tokio::time::timeout(within, self.io.read(&mut chunk)).await {
            Ok(Ok(0)) | Ok(Err(_)) => true,
            Ok(Ok(n)) => {
                self.buf.extend_from_slice(&chunk[..n]);
                false
            }
            Err(_) => false,
        }
    }

    /// Everything until the gateway closes.
    pub async fn read_to_close(&mut self) -> Vec<u8> {
        while self.fill().await {}
        std::mem::take(&mut self.buf)
    }

    /// Bytes received but not consumed by a response.
    pub fn leftover(&self) -> &[u8] {
        &self.buf
    }

    pub fn stream(&mut self) -> &mut TcpStream {
        &mut self.io
    }
}
