//! Wiring: a Sluice node is the data plane ([`sluice_proxy::Server`]), the control plane that
//! owns its configuration ([`sluice_admin::Control`]), the admin API on its own listener, and,
//! when the configuration is a file, a watcher that applies its edits. The binary and the
//! end-to-end tests both start nodes through [`Node::start`].

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;

use anyhow::Context;
use sluice_admin::{Api, Control, FileStore, MemoryStore, Prepared, Store, Target};
use sluice_config::{Config, ConfigErrors, RouteChange};
use sluice_proxy::{Pending, Reloader, Server};
use tokio::sync::watch;
use tracing::{info, warn};

/// Where a node's configuration comes from.
#[derive(Debug, Clone)]
pub enum Source {
    /// A YAML file: the source of truth. Admin writes are saved into it; edits to it apply.
    File(PathBuf),
    /// A configuration held in memory (the built-in default); admin writes are not saved.
    Text {
        /// The YAML.
        text: String,
        /// For logs.
        name: String,
    },
}

/// A running node.
#[derive(Debug)]
pub struct Node {
    server: Option<Server>,
    control: Arc<Control>,
    admin: Option<(SocketAddr, String)>,
    stop: watch::Sender<bool>,
    threads: Vec<JoinHandle<()>>,
    /// The configuration the node started with.
    pub config: Config,
    source_name: String,
}

struct DataPlane(Reloader);

struct Compiled(Pending);

impl Target for DataPlane {
    fn prepare(&self, cfg: &Config) -> Result<Box<dyn Prepared>, ConfigErrors> {
        Ok(Box::new(Compiled(self.0.prepare(cfg)?)))
    }

    fn prepare_routes(&self, changes: Vec<RouteChange>) -> Result<Box<dyn Prepared>, ConfigErrors> {
        Ok(Box::new(Compiled(self.0.prepare_routes(changes)?)))
    }
}

impl Prepared for Compiled {
    fn install(self: Box<Self>) -> u64 {
        self.0.install()
    }
}

impl Node {
    /// Loads the configuration, starts the data plane, then the admin API and the watcher.
    /// `adjust` may change the loaded configuration before anything starts (tests use it to
    /// pick free ports).
    pub fn start(source: Source, adjust: impl FnOnce(&mut Config)) -> anyhow::Result<Node> {
        let plugins = sluice_plugins::shared();
        let (store, name): (Arc<dyn Store>, String) = match &source {
            Source::File(p) => (Arc::new(FileStore::new(p)), p.display().to_string()),
            Source::Text { text, name } => (Arc::new(MemoryStore::new(text)), name.clone()),
        };
        let text = store.load().map_err(anyhow::Error::msg)?;
        let loaded = sluice_admin::parse_doc(&text).and_then(|doc| {
            sluice_config::load_value_with(serde_json::Value::Object(doc), &*plugins)
        });
        let mut config = match loaded {
            Ok(c) => c,
            Err(errors) => {
                return Err(ConfigRejected {
                    origin: name,
                    errors,
                }
                .into());
            }
        };
        adjust(&mut config);
        let server = Server::start(&config, plugins.clone())
            .with_context(|| format!("cannot start with {name}"))?;
        let version = server.snapshot().version;
        let target = Arc::new(DataPlane(server.reloader()));
        let control = Arc::new(
            Control::new(store.clone(), plugins, target, &text, &config, version).map_err(
                |errors| ConfigRejected {
                    origin: name.clone(),
                    errors,
                },
            )?,
        );
        let (stop, stop_rx) = watch::channel(false);
        let mut threads = Vec::new();
        let mut admin = None;
        if config.admin.enabled {
            let (key, generated) = match &config.admin.key {
                Some(k) => (k.clone(), false),
                None => (sluice_admin::generate_key()?, true),
            };
            let listener = std::net::TcpListener::bind(config.admin.listen).with_context(|| {
                format!("cannot listen on {} for the admin API", config.admin.listen)
            })?;
            listener.set_nonblocking(true)?;
            let addr = listener.local_addr()?;
            if generated {
                warn!("admin API key (generated for this run; set admin.key to keep one): {key}");
            }
            let api = Arc::new(Api::new(control.clone(), key.clone()));
            let rx = stop_rx.clone();
            threads.push(
                std::thread::Builder::new()
                    .name("sluice-admin".into())
                    .spawn(move || {
                        let rt = match tokio::runtime::Builder::new_current_thread()
                            .enable_all()
                            .build()
                        {
                            Ok(rt) => rt,
                            Err(e) => return tracing::error!(error = %e, "admin API cannot start"),
                        };
                        rt.block_on(async move {
                            match tokio::net::TcpListener::from_std(listener) {
                                Ok(l) => api.serve(l, rx).await,
                                Err(e) => tracing::error!(error = %e, "admin API cannot start"),
                            }
                        });
                    })?,
            );
            info!("admin API on http://{addr}/admin/");
            admin = Some((addr, key));
        }
        if let Some(path) = store.watch_path() {
            threads.push(sluice_admin::watch::spawn(
                path.to_owned(),
                control.clone(),
                stop_rx,
            )?);
        }
        Ok(Node {
            server: Some(server),
            control,
            admin,
            stop,
            threads,
            config,
            source_name: name,
        })
    }

    /// The data plane.
    pub fn server(&self) -> &Server {
        self.server.as_ref().expect("the node is running")
    }

    /// The control plane.
    pub fn control(&self) -> &Arc<Control> {
        &self.control
    }

    /// The admin API's address and key, when it runs.
    pub fn admin(&self) -> Option<(SocketAddr, &str)> {
        self.admin.as_ref().map(|(a, k)| (*a, k.as_str()))
    }

    /// Where the configuration comes from, for logs.
    pub fn source_name(&self) -> &str {
        &self.source_name
    }

    /// Re-reads the configuration (SIGHUP).
    pub fn reload(&self) {
        // Errors are logged by the control plane; the previous configuration keeps serving.
        let _ = self.control.reload();
    }

    /// Stops the admin API and the watcher, then the data plane (draining requests in flight).
    pub fn shutdown(mut self) {
        self.stop_all();
    }

    fn stop_all(&mut self) {
        let _ = self.stop.send(true);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        if let Some(s) = self.server.take() {
            s.shutdown();
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.stop_all();
    }
}

/// A configuration that did not load, with every error.
#[derive(Debug, thiserror::Error)]
#[error("{origin}: {} configuration error(s)", errors.len())]
pub struct ConfigRejected {
    /// Where the configuration came from.
    pub origin: String,
    /// What is wrong.
    pub errors: ConfigErrors,
}
