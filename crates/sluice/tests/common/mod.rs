//! A Sluice node started in-process in file mode, as `sluice run -c FILE` starts it: the
//! configuration in a temporary file, the admin API on its own port, the file watched.

#![allow(dead_code)]

pub mod pki;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use hyper::{Method, StatusCode};
use serde_json::Value;
use sluice_testkit::Client;

pub const KEY: &str = "test-admin-key-0123456789";

pub struct TestNode {
    pub node: Option<sluice::Node>,
    pub dir: PathBuf,
    pub file: PathBuf,
}

impl TestNode {
    /// A node whose file holds the usual test settings (ports 0, one worker, the admin key)
    /// followed by `resources` (YAML).
    pub fn start(resources: &str) -> TestNode {
        TestNode::start_with("", resources)
    }

    /// Like [`TestNode::start`], with more node settings (`extra`, YAML lines).
    pub fn start_with(extra: &str, resources: &str) -> TestNode {
        TestNode::start_text(&format!("{}{extra}{resources}", settings()))
    }

    /// A node whose file holds `text`, whole.
    pub fn start_text(text: &str) -> TestNode {
        sluice_testkit::init_logging();
        let dir = std::env::temp_dir().join(format!(
            "sluice-test-{}-{:x}",
            std::process::id(),
            fastrand_u64()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("sluice.yaml");
        std::fs::write(&file, text).unwrap();
        let node = sluice::Node::start(sluice::Source::File(file.clone()), |_| {})
            .unwrap_or_else(|e| panic!("node did not start: {e:#}"));
        TestNode {
            node: Some(node),
            dir,
            file,
        }
    }

    pub fn node(&self) -> &sluice::Node {
        self.node.as_ref().unwrap()
    }

    /// A client of the proxy port.
    pub fn proxy(&self) -> Client {
        Client::new(self.node().server().local_addrs()[0])
    }

    /// A client of the admin port.
    pub fn admin_client(&self) -> Client {
        Client::new(self.node().admin().unwrap().0)
    }

    /// An admin call with the right key; the answer's status and JSON body.
    pub async fn admin(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let r = self
            .admin_client()
            .send(
                method,
                path,
                &[("x-api-key", KEY), ("content-type", "application/json")],
                body,
            )
            .await;
        let v = if r.body.is_empty() {
            Value::Null
        } else {
            r.json()
        };
        (r.status, v)
    }

    /// The configuration version in service.
    pub fn version(&self) -> u64 {
        self.node().control().stats().version
    }

    /// Writes the file (settings + `resources`) atomically, as editors and tools do.
    pub fn write_file(&self, resources: &str) {
        let tmp = self.dir.join("edit.tmp");
        std::fs::write(&tmp, format!("{}{resources}", settings())).unwrap();
        std::fs::rename(&tmp, &self.file).unwrap();
    }

    /// Waits until the version in service differs from `from`.
    #[track_caller]
    pub fn wait_for_version_after(&self, from: u64) -> impl std::future::Future<Output = u64> + '_ {
        let caller = std::panic::Location::caller();
        self.wait_version(from, caller)
    }

    async fn wait_version(&self, from: u64, caller: &'static std::panic::Location<'static>) -> u64 {
        let started = Instant::now();
        loop {
            let v = self.version();
            if v != from {
                return v;
            }
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "the configuration did not change within 5 s (waited at {caller}): {:?}",
                self.node().control().stats()
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
}

impl Drop for TestNode {
    fn drop(&mut self) {
        let dir = std::mem::take(&mut self.dir);
        let _ = std::fs::remove_dir_all(&dir);
        if let Some(node) = self.node.take() {
            // Shut down off the test's runtime: draining may wait on the test's own origins.
            // The directory goes again after: the node may write its etcd cache there until
            // it stops (it was found left in /tmp with that file alone). (A test process that
            // ends first ends this thread too: hence the removal above as well.)
            std::thread::spawn(move || {
                node.shutdown();
                let _ = std::fs::remove_dir_all(&dir);
            });
        }
    }
}

pub fn settings() -> String {
    format!("listen: 127.0.0.1:0\nworkers: 1\nadmin: {{listen: \"127.0.0.1:0\", key: {KEY}}}\n")
}

pub fn fastrand_u64() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(Instant::now())
}

/// A WebSocket echo server on port 0.
pub async fn ws_echo() -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((io, _)) = listener.accept().await {
            tokio::spawn(async move {
                let Ok(mut ws) = tokio_tungstenite::accept_async(io).await else {
                    return;
                };
                while let Some(Ok(msg)) = ws.next().await {
                    if msg.is_close() || ws.send(msg).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    addr
}

/// A real etcd server (Debian's `etcd-server`) on free ports, with its own data directory.
/// Killed when dropped.
pub struct EtcdServer {
    child: Option<std::process::Child>,
    pub dir: PathBuf,
    pub client_port: u16,
    peer_port: u16,
    /// `https` when started with TLS arguments.
    scheme: &'static str,
    extra: Vec<String>,
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl EtcdServer {
    pub fn start() -> EtcdServer {
        EtcdServer::start_with("http", Vec::new())
    }

    /// With TLS on the client port: `args` name its certificate files
    /// (`--cert-file=...`, `--key-file=...`, `--trusted-ca-file=...`, `--client-cert-auth`).
    pub fn start_tls(args: Vec<String>) -> EtcdServer {
        EtcdServer::start_with("https", args)
    }

    fn start_with(scheme: &'static str, extra: Vec<String>) -> EtcdServer {
        let dir = std::env::temp_dir().join(format!(
            "sluice-etcd-{}-{:x}",
            std::process::id(),
            fastrand_u64()
        ));
        let mut e = EtcdServer {
            child: None,
            dir,
            client_port: free_port(),
            peer_port: free_port(),
            scheme,
            extra,
        };
        e.restart();
        e
    }

    /// `http://127.0.0.1:port` (`https://` with TLS).
    pub fn endpoint(&self) -> String {
        format!("{}://127.0.0.1:{}", self.scheme, self.client_port)
    }

    /// Starts it (again, on the same ports and data) and waits until it answers.
    pub fn restart(&mut self) {
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let child = std::process::Command::new("etcd")
            .arg("--name=sluice-test")
            .arg(format!("--data-dir={}", self.dir.display()))
            .arg(format!("--listen-client-urls={}", self.endpoint()))
            .arg(format!("--advertise-client-urls={}", self.endpoint()))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={peer}"))
            .arg(format!("--initial-cluster=sluice-test={peer}"))
            .args(&self.extra)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run etcd ({e}): these tests need etcd-server (apt-get install etcd-server)"));
        self.child = Some(child);
        let started = Instant::now();
        if self.scheme == "https" {
            // Accepting connections is enough here: the test's client checks the rest.
            while std::net::TcpStream::connect(("127.0.0.1", self.client_port)).is_err() {
                assert!(
                    started.elapsed() < Duration::from_secs(20),
                    "etcd did not start"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
            std::thread::sleep(Duration::from_millis(300));
            return;
        }
        loop {
            if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", self.client_port)) {
                use std::io::{Read, Write};
                let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
                let _ =
                    s.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
                let mut out = String::new();
                let _ = s.read_to_string(&mut out);
                if out.contains("\"health\":\"true\"") {
                    return;
                }
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "etcd did not start"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stops it (SIGSTOP) without closing anything: its connections stay open and silent, as
    /// across a network partition. [`EtcdServer::resume`] lets it go on.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// SIGCONT after [`EtcdServer::pause`].
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, sig: &str) {
        let pid = self.child.as_ref().expect("etcd is running").id();
        let ok = std::process::Command::new("kill")
            .args([sig, &pid.to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill {sig} {pid}");
    }

    /// Kills it (SIGKILL): a crash, not a shutdown.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A real Redis server (Debian's `redis-server`) on a free port, without persistence.
pub struct RedisServer {
    child: Option<std::process::Child>,
    pub port: u16,
}

impl RedisServer {
    pub fn start() -> RedisServer {
        let mut r = RedisServer {
            child: None,
            port: free_port(),
        };
        r.restart();
        r
    }

    pub fn restart(&mut self) {
        let child = std::process::Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run redis-server ({e}): these tests need it (apt-get install redis-server)"));
        self.child = Some(child);
        let started = Instant::now();
        loop {
            if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", self.port)) {
                use std::io::{Read, Write};
                let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
                let _ = s.write_all(b"PING\r\n");
                let mut buf = [0u8; 16];
                if matches!(s.read(&mut buf), Ok(n) if buf[..n].starts_with(b"+PONG")) {
                    return;
                }
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "redis did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `sluice validate [extra...] --config FILE` of `yaml` (written to a temporary file): whether
/// it accepted the file, and its output, stdout then stderr.
pub fn sluice_validate(yaml: &str, extra: &[&str]) -> (bool, String) {
    let file = std::env::temp_dir().join(format!(
        "sluice-validate-{}-{}.yaml",
        std::process::id(),
        free_port()
    ));
    std::fs::write(&file, yaml).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .arg("validate")
        .args(extra)
        .arg("--config")
        .arg(&file)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&file);
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

/// `sluice validate` of `yaml`: its output, after checking that it refused the file.
pub fn validate(yaml: &str) -> String {
    let (ok, text) = sluice_validate(yaml, &[]);
    assert!(!ok, "expected a refusal: {text}");
    text
}

/// A TCP service that accepts connections and never answers (a stalled authorizer or policy
/// server): its address, and the task that holds the connections (abort it to close them).
pub async fn stalled_service() -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
    let stalled = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = stalled.local_addr().unwrap();
    let held = tokio::spawn(async move {
        let mut conns = Vec::new();
        while let Ok((c, _)) = stalled.accept().await {
            conns.push(c);
        }
    });
    (addr, held)
}

/// A loopback address nobody listens on (bound, then closed).
pub async fn closed_port() -> std::net::SocketAddr {
    tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap()
}

/// The errors of loading a configuration whose one route has plugin `plugin` configured as
/// `conf` (YAML flow style); panics when it loads.
pub fn plugin_refusal(plugin: &str, conf: &str) -> String {
    let yaml = format!(
        "routes:\n  - {{uri: /a, upstream: {{nodes: {{\"127.0.0.1:1\": 1}}}}, plugins: {{{plugin}: {conf}}}}}\n"
    );
    match sluice_config::load_str_with(&yaml, &*sluice_plugins::shared()) {
        Ok(_) => panic!("accepted: {yaml}"),
        Err(e) => e.to_string(),
    }
}

/// Waits until a server the test started takes connections on a loopback port (30 s at most).
pub fn wait_for_port(port: u16, what: &str) {
    let started = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{what} did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Checks that each configuration of `plugin` is refused with an error containing its text.
pub fn assert_refusals(plugin: &str, cases: &[(&str, String)]) {
    for (conf, says) in cases {
        let e = plugin_refusal(plugin, conf);
        assert!(e.contains(says.as_str()), "{conf}: {e}");
    }
}
