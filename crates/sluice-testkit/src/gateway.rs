use std::net::SocketAddr;

use sluice_config::{Config, ListenConfig, Workers};
use sluice_proxy::Server;

use crate::client::Client;

/// The gateway, started in-process from a YAML configuration.
///
/// Listen addresses left at their default become `127.0.0.1:0`, and `workers: auto` becomes
/// one worker, so tests never collide on ports and stay cheap on a 2-core machine.
#[derive(Debug)]
pub struct Gateway {
    server: Option<Server>,
    pub config: Config,
}

impl Gateway {
    /// Starts the gateway; panics with every configuration error when the YAML is invalid.
    pub fn start(yaml: &str) -> Gateway {
        crate::init_logging();
        let plugins = sluice_plugins::shared();
        let mut config = match sluice_config::load_str_with(yaml, &*plugins) {
            Ok(c) => c,
            Err(e) => panic!("test configuration is invalid:\n{e}"),
        };
        if !yaml.lines().any(|l| l.starts_with("listen:")) {
            config.listen = vec![ListenConfig::plain("127.0.0.1:0".parse().unwrap())];
        }
        if config.workers == Workers::Auto {
            config.workers = Workers::Count(1);
        }
        let server = Server::start(&config, plugins)
            .unwrap_or_else(|e| panic!("gateway did not start: {e}"));
        Gateway {
            server: Some(server),
            config,
        }
    }

    /// The first listen address.
    pub fn addr(&self) -> SocketAddr {
        self.server().local_addrs()[0]
    }

    /// `http://addr{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr())
    }

    /// A client for this gateway.
    pub fn client(&self) -> Client {
        Client::new(self.addr())
    }

    pub fn server(&self) -> &Server {
        self.server.as_ref().expect("gateway is running")
    }

    /// Applies a new configuration (same rules as [`Gateway::start`] for listen/workers).
    pub fn reload(&self, yaml: &str) -> Result<u64, sluice_config::ConfigErrors> {
        let cfg = sluice_config::load_str_with(yaml, &sluice_plugins::builtin())?;
        self.server().apply(&cfg)
    }

    /// Graceful shutdown; returns when every worker has exited.
    pub fn shutdown(mut self) {
        if let Some(s) = self.server.take() {
            s.shutdown();
        }
    }

    /// Starts a graceful shutdown on another thread; join the handle to wait for it.
    pub fn shutdown_in_background(mut self) -> std::thread::JoinHandle<()> {
        let s = self.server.take().expect("gateway is running");
        std::thread::spawn(move || s.shutdown())
    }
}

impl Drop for Gateway {
    /// Shuts down on another thread: a test's origins often run on the test's own runtime,
    /// which a blocking shutdown here would stall while connections to them drain.
    fn drop(&mut self) {
        if let Some(s) = self.server.take() {
            std::thread::spawn(move || s.shutdown());
        }
    }
}
