//! Wiring: a Sluice node is the data plane ([`sluice_proxy::Server`]), the control plane that
//! owns its configuration ([`sluice_admin::Control`]), the admin API on its own listener, and,
//! when the configuration is a file, a watcher that applies its edits. The binary and the
//! end-to-end tests both start nodes through [`Node::start`].

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;

use serde_json::Value;
use sluice_admin::{Api, Control, FileStore, Kind, MemoryStore, Prepared, Store, Target};
use sluice_config::{Config, ConfigError, ConfigErrors, RouteChange};
use sluice_proxy::{Pending, Reloader, Server};
use tokio::sync::watch;
use tracing::{info, warn};

mod civil;
pub mod import;
mod preflight;
pub mod secrets;
pub mod upgrade;
pub use preflight::{Preflight, preflight};

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
    /// The status listener: its address, its stop signal and thread (stopped last, so that
    /// `/readyz` answers "draining" while requests finish).
    status: Option<(SocketAddr, watch::Sender<bool>, JoinHandle<()>)>,
    readiness: Arc<sluice_admin::status::Readiness>,
    /// The node settings the node started with (its resources are in the control plane and
    /// the data plane's snapshot; see [`Node::control`]).
    pub config: Config,
    source_name: String,
}

struct DataPlane(Reloader);

/// A compiled change, and the log settings of a whole configuration (applied with it).
struct Compiled(Pending, Option<sluice_config::LogConfig>);

/// What applies `log` settings to the running process (the binary's logger sets it).
type LogHook = Box<dyn Fn(&sluice_config::LogConfig) + Send + Sync>;
static LOG_HOOK: std::sync::OnceLock<LogHook> = std::sync::OnceLock::new();

/// Sets what applies the `log` settings of each configuration put in service (its level, and
/// a warning for what needs a restart). The access log is the data plane's own.
pub fn on_log_settings(hook: impl Fn(&sluice_config::LogConfig) + Send + Sync + 'static) {
    let _ = LOG_HOOK.set(Box::new(hook));
}

impl Target for DataPlane {
    fn prepare(&self, cfg: &Config) -> Result<Box<dyn Prepared>, ConfigErrors> {
        Ok(Box::new(Compiled(
            self.0.prepare(cfg)?,
            Some(cfg.log.clone()),
        )))
    }

    fn prepare_routes(&self, changes: Vec<RouteChange>) -> Result<Box<dyn Prepared>, ConfigErrors> {
        Ok(Box::new(Compiled(self.0.prepare_routes(changes)?, None)))
    }

    fn render_metrics(&self, w: &mut sluice_core::exposition::Writer<'_>) {
        w.family(
            "sluice_build_info",
            "info",
            "Sluice's version, the commit it was built from and the build's date (the value is always 1).",
        );
        w.sample(
            "sluice_build_info",
            &[
                ("version", env!("CARGO_PKG_VERSION")),
                ("commit", env!("SLUICE_COMMIT")),
                ("built", env!("SLUICE_BUILD_DATE")),
            ],
            1,
        );
        self.0.render_metrics(w);
        sluice_plugins::logger::render_metrics(w);
        use sluice_plugins::opentelemetry::{DROPPED, EXPORTED, FAILED};
        use std::sync::atomic::Ordering::Relaxed;
        w.family(
            "sluice_otel_spans_total",
            "counter",
            "Spans of the opentelemetry plugin, by result (dropped: the queue was full; failed: the export did not succeed).",
        );
        for (result, n) in [
            ("exported", &EXPORTED),
            ("dropped", &DROPPED),
            ("failed", &FAILED),
        ] {
            w.sample(
                "sluice_otel_spans_total",
                &[("result", result)],
                n.load(Relaxed),
            );
        }
    }

    fn changed_files(&self) -> Vec<(String, sluice_config::FileSig)> {
        self.0.current().changed_files()
    }

    fn upstream_health(&self, id: &str) -> Option<serde_json::Value> {
        let snap = self.0.current();
        let nodes = snap.upstream_health(id)?;
        let mut v = serde_json::json!({ "id": id, "nodes": nodes });
        if let Some((inflight, max, shed)) = snap.upstream_load(id) {
            v["inflight"] = inflight.into();
            v["max_inflight"] = max.into();
            v["shed"] = shed.into();
        }
        Some(v)
    }
}

impl Prepared for Compiled {
    fn install(self: Box<Self>) -> u64 {
        let version = self.0.install();
        if let (Some(log), Some(hook)) = (&self.1, LOG_HOOK.get()) {
            hook(log);
        }
        version
    }
}

impl Node {
    /// Loads the configuration, starts the data plane, then the admin API and the watcher.
    /// `adjust` may change the loaded configuration before anything starts (tests use it to
    /// pick free ports).
    pub fn start(source: Source, adjust: impl FnOnce(&mut Config)) -> anyhow::Result<Node> {
        Node::start_with(source, serde_json::Map::new(), adjust)
    }

    /// Like [`Node::start`], with settings that replace the file's (the command line's
    /// `--listen`, `--admin-listen`, `--no-admin`): they are checked with the rest of the file,
    /// used by this run, and never written into the file. A mapping (`admin`) is merged key by
    /// key.
    pub fn start_with(
        source: Source,
        overrides: serde_json::Map<String, Value>,
        adjust: impl FnOnce(&mut Config),
    ) -> anyhow::Result<Node> {
        secrets::install();
        let plugins = sluice_plugins::shared();
        let (store, name): (Arc<dyn Store>, String) = match &source {
            Source::File(p) => (Arc::new(FileStore::new(p)), p.display().to_string()),
            Source::Text { text, name } => (Arc::new(MemoryStore::new(text)), name.clone()),
        };
        // Before the read: an edit made while the node starts is then seen as one.
        let loaded_sig = store.watch_path().and_then(sluice_admin::watch::signature);
        let text = store.load().map_err(anyhow::Error::msg)?;
        let rejected = |origin: &str, errors: ConfigErrors| ConfigRejected {
            origin: origin.to_owned(),
            errors,
        };
        // Refused: every error of every stage, in the file's order (each step stops at its
        // first failing stage).
        let every = |e: ConfigErrors| {
            from_command_line(every_error(&text, &overrides, &plugins, e), &overrides)
        };
        let mut file_doc = sluice_admin::parse_doc(&text).map_err(|e| rejected(&name, every(e)))?;
        if file_doc.contains_key("etcd")
            && let Some(kind) = file_doc.iter().find_map(|(k, v)| {
                (Kind::from_name(k).is_some() && v.as_array().is_some_and(|a| !a.is_empty()))
                    .then_some(k)
            })
        {
            let e = ConfigError::new(kind, sluice_admin::RESOURCES_IN_ETCD);
            return Err(rejected(&name, e.into()).into());
        }
        // Without etcd the document is needed only here: moved, not copied (a copy of 100,000
        // routes' values is 160 MB at the peak of the start).
        let mut checked_doc = if file_doc.contains_key("etcd") {
            file_doc.clone()
        } else {
            std::mem::take(&mut file_doc)
        };
        sluice_admin::apply_overrides(&mut checked_doc, &overrides);
        let file_cfg = sluice_config::load_value_with(Value::Object(checked_doc), &*plugins)
            .map_err(|e| rejected(&name, every(e)))?;
        let mut cluster = None;
        let (doc_text, mut config) = match file_cfg.etcd.clone() {
            None => (text.clone(), file_cfg),
            Some(ec) => {
                let cache = ec.cache.as_ref().map(PathBuf::from).or(match &source {
                    Source::File(p) => Some(PathBuf::from(format!("{}.etcd-cache", p.display()))),
                    Source::Text { .. } => None,
                });
                let (text, cfg, rt, guard) =
                    start_from_etcd(&ec, file_doc, &overrides, cache.as_deref(), &*plugins)
                        .map_err(|e| match e.downcast::<ConfigErrors>() {
                            Ok(errors) => rejected(&name, errors).into(),
                            Err(e) => e,
                        })?;
                let client = etcd_client(&ec)?;
                cluster = Some((
                    sluice_admin::cluster::Cluster {
                        client,
                        prefix: ec.prefix.clone(),
                        cache,
                    },
                    rt,
                    ec.timeout.0,
                    guard,
                ));
                (text, cfg)
            }
        };
        adjust(&mut config);
        for w in sluice_config::warnings(&config, &*plugins) {
            warn!("{name}: {w}");
        }
        // The status listener first: `/readyz` says "starting" until the node is up. Not in
        // a process started by a binary upgrade: the old process answers on the same socket
        // until this one is up (this one's "starting" would be a failed probe or scrape).
        let readiness = Arc::new(sluice_admin::status::Readiness::default());
        let taking_over = upgrade::taking_over();
        let mut status = match &config.status {
            Some(st) if !taking_over => Some(start_status(st, readiness.clone(), None)?),
            _ => None,
        };
        let server = match Server::start(&config, plugins.clone()) {
            Ok(s) => s,
            // A file that loads but does not compile: refused as any other.
            Err(sluice_proxy::StartError::Config(e)) if cluster.is_none() => {
                return Err(rejected(&name, every(e)).into());
            }
            Err(e) => {
                return Err(anyhow::Error::new(e).context(format!("cannot start with {name}")));
            }
        };
        let version = server.snapshot().version;
        let target = Arc::new(DataPlane(server.reloader()));
        let link = cluster
            .as_ref()
            .map(|(c, rt, timeout, _)| sluice_admin::EtcdLink {
                client: c.client.clone(),
                prefix: c.prefix.clone(),
                handle: rt.handle().clone(),
                timeout: *timeout,
            });
        let control = Arc::new(
            Control::new(
                store.clone(),
                plugins,
                target,
                &doc_text,
                &config,
                version,
                link,
            )
            .map_err(|errors| rejected(&name, errors))?
            .with_overrides(overrides),
        );
        control.set_loaded_signature(loaded_sig);
        if let Some((_, _, _, guard)) = &cluster {
            control.seed_guard_revision(*guard);
        }
        let (stop, stop_rx) = watch::channel(false);
        let mut threads = Vec::new();
        let clustered = cluster.is_some();
        if let Some((c, rt, _, _)) = cluster {
            threads.push(sluice_admin::cluster::spawn(
                c,
                control.clone(),
                rt,
                stop_rx.clone(),
            )?);
        }
        let mut admin = None;
        let mut admin_api = None;
        if config.admin.enabled {
            let (key, generated) = match &config.admin.key {
                Some(k) => (k.clone(), false),
                None => (sluice_admin::generate_key()?, true),
            };
            let listener = sluice_proxy::handover::bind_plain(config.admin.listen).map_err(|e| {
                let hint = if e.kind() == std::io::ErrorKind::AddrInUse {
                    " (another Sluice, or another server, is running there: stop it, or change admin.listen, or start with --admin-listen ADDR or --no-admin)"
                } else {
                    ""
                };
                anyhow::anyhow!(
                    "cannot listen on {} for the admin API (admin.listen): {}{hint}",
                    config.admin.listen,
                    bind_error(&e)
                )
            })?;
            listener.set_nonblocking(true)?;
            let addr = listener.local_addr()?;
            if generated {
                warn!("admin API key (generated for this run; set admin.key to keep one): {key}");
            }
            let api = Arc::new(Api::new(control.clone(), key.clone()));
            let rx = stop_rx.clone();
            let api_for_status = api.clone();
            threads.push(serve_thread("sluice-admin", listener, |l| {
                api.serve(l, rx)
            })?);
            info!("admin API on http://{addr}/admin/");
            admin = Some((addr, key));
            admin_api = Some(api_for_status);
        }
        readiness.ready();
        if let (Some(st), true) = (&config.status, taking_over) {
            let plane = (control.clone(), admin_api.clone());
            status = Some(start_status(st, readiness.clone(), Some(plane))?);
        }
        if let Some((addr, _, _, st)) = &status {
            st.attach(control.clone(), admin_api);
            info!("status on http://{addr}/ (/metrics, /healthz, /readyz, /dashboard/)");
        }
        // Certificates, keys and CA bundles the configuration names, in every mode.
        threads.push(sluice_admin::watch::spawn_files(
            control.clone(),
            stop_rx.clone(),
        )?);
        // In cluster mode the file holds node settings only: they are read again on SIGHUP.
        if let Some(path) = store.watch_path().filter(|_| !clustered) {
            threads.push(sluice_admin::watch::spawn(
                path.to_owned(),
                control.clone(),
                stop_rx,
            )?);
        }
        config.drop_resources();
        Ok(Node {
            server: Some(server),
            control,
            admin,
            stop,
            threads,
            status: status.map(|(addr, stop, thread, _)| (addr, stop, thread)),
            readiness,
            config,
            source_name: name,
        })
    }

    /// What a binary upgrade takes from this node, or gives it.
    pub fn carrier(&self) -> Carrier {
        Carrier {
            reloader: self.server().reloader(),
            control: self.control.clone(),
        }
    }

    /// After a binary upgrade (the new process serves): stops the status listener at once
    /// (the new process answers its probes; this one would say "draining"), then drains as
    /// [`Node::shutdown`].
    pub fn shutdown_after_upgrade(mut self) {
        if let Some((_, stop, thread)) = self.status.take() {
            let _ = stop.send(true);
            let _ = thread.join();
        }
        self.stop_all();
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

    /// Re-reads the configuration (SIGHUP); the outcome is logged, whatever it is.
    pub fn reload(&self) {
        // Errors are logged by the control plane; the previous configuration keeps serving.
        let _ = self.control.reload_now("SIGHUP");
    }

    /// Stops the admin API and the watcher, then the data plane (draining requests in flight).
    pub fn shutdown(mut self) {
        self.stop_all();
    }

    /// The status listener's address, when it runs.
    pub fn status_addr(&self) -> Option<SocketAddr> {
        self.status.as_ref().map(|(a, _, _)| *a)
    }

    fn stop_all(&mut self) {
        self.readiness.draining();
        let _ = self.stop.send(true);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        if let Some(s) = self.server.take() {
            s.shutdown();
        }
        if let Some((_, stop, thread)) = self.status.take() {
            let _ = stop.send(true);
            let _ = thread.join();
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.stop_all();
    }
}

/// The old process's plugin state was keyed by another hashing of keys: none of it is used.
static FOREIGN_KEYS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// What a binary upgrade ([`upgrade`]) carries from a node to the next process: its plugin
/// state (local limit counters, circuit breakers: [`sluice_core::state::Carry`]) and its
/// Prometheus counters ([`sluice_core::exposition::carried`]). Cheap to clone.
#[derive(Clone)]
pub struct Carrier {
    reloader: Reloader,
    control: Arc<Control>,
}

impl std::fmt::Debug for Carrier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Carrier").finish_non_exhaustive()
    }
}

impl Carrier {
    /// In the old process: stops accepting, freezes what scrapes answer, and returns the
    /// state for the new process, with the export later changes are counted from.
    pub fn pause(&self) -> (Value, sluice_core::state::Exported) {
        sluice_proxy::handover::close_gate();
        let metrics = sluice_admin::status::freeze_metrics(&self.control);
        let state = self.reloader.export_state();
        let doc = serde_json::json!({
            "keys": sluice_plugins::key_fingerprint(),
            "state": state,
            "metrics": metrics,
        });
        (doc, state)
    }

    /// In the old process, when the new one failed after [`Carrier::pause`]: serves on.
    pub fn resume(&self) {
        sluice_proxy::handover::open_gate();
        sluice_admin::status::thaw_metrics();
    }

    /// In the old process, while it drains: what it counted since `before`, and its counters
    /// as they stand; with the export they were counted to (the next `before`, once the new
    /// process has them).
    pub fn changes(
        &self,
        before: &sluice_core::state::Exported,
    ) -> (Value, sluice_core::state::Exported) {
        let now = self.reloader.export_state();
        let changes = self.reloader.state_changes(&now, before);
        let metrics = sluice_admin::status::render_metrics(
            &self.control,
            sluice_core::exposition::Format::Prometheus,
        );
        (
            serde_json::json!({"state": changes, "metrics": metrics}),
            now,
        )
    }

    /// In the new process, before it accepts anything: takes the old process's state
    /// ([`Carrier::pause`]'s document). Returns how many plugin states this configuration
    /// shares with it.
    pub fn take(&self, doc: &Value) -> usize {
        let empty = serde_json::Map::new();
        let keys = doc["keys"].as_u64();
        let n = if keys == Some(sluice_plugins::key_fingerprint()) {
            let state = doc["state"].as_object().unwrap_or(&empty);
            self.reloader.import_state(state)
        } else {
            FOREIGN_KEYS.store(true, std::sync::atomic::Ordering::Relaxed);
            tracing::warn!(
                "upgrade: the old binary hashes limit keys differently from this one: local limit \
                 counters, limit-conn counts and breakers start afresh (metrics and health go on)"
            );
            0
        };
        sluice_core::exposition::carried::set(doc["metrics"].as_str().unwrap_or_default());
        n
    }

    /// In the new process: adds what the old one counted while it drained
    /// ([`Carrier::changes`]'s documents).
    pub fn add(&self, doc: &Value) {
        if let Some(state) = doc["state"].as_object()
            && !FOREIGN_KEYS.load(std::sync::atomic::Ordering::Relaxed)
        {
            self.reloader.merge_state(state);
        }
        if let Some(metrics) = doc["metrics"].as_str() {
            sluice_core::exposition::carried::set(metrics);
        }
    }

    /// In the new process: the old one is gone (the link closed); its requests in flight no
    /// longer count, whether or not it said they ended.
    pub fn gone(&self) {
        self.reloader.state_gone();
    }
}

/// Serves `listener` with `serve` on a thread of its own, with its own runtime.
fn serve_thread<F>(
    name: &str,
    listener: std::net::TcpListener,
    serve: impl FnOnce(tokio::net::TcpListener) -> F + Send + 'static,
) -> std::io::Result<JoinHandle<()>>
where
    F: std::future::Future<Output = ()>,
{
    let label = name.to_owned();
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => return tracing::error!(error = %e, "{label} cannot start"),
            };
            rt.block_on(async move {
                match tokio::net::TcpListener::from_std(listener) {
                    Ok(l) => serve(l).await,
                    Err(e) => tracing::error!(error = %e, "{label} cannot start"),
                }
            });
        })
}

/// Binds the status listener and serves it on a thread of its own.
#[allow(clippy::type_complexity)]
fn start_status(
    cfg: &sluice_config::StatusConfig,
    readiness: Arc<sluice_admin::status::Readiness>,
    plane: Option<(Arc<Control>, Option<Arc<Api>>)>,
) -> anyhow::Result<(
    SocketAddr,
    watch::Sender<bool>,
    JoinHandle<()>,
    Arc<sluice_admin::status::Status>,
)> {
    let listener = sluice_proxy::handover::bind_plain(cfg.listen).map_err(|e| {
        let hint = if e.kind() == std::io::ErrorKind::AddrInUse {
            " (another Sluice, or another server, is running there: stop it, or change status.listen)"
        } else {
            ""
        };
        anyhow::anyhow!(
            "cannot listen on {} for the status listener (status.listen): {}{hint}",
            cfg.listen,
            bind_error(&e)
        )
    })?;
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    let status = Arc::new(sluice_admin::status::Status::new(cfg, readiness));
    // Attached before it serves, when the node is up already.
    if let Some((control, api)) = plane {
        status.attach(control, api);
    }
    let (stop, rx) = watch::channel(false);
    let st = status.clone();
    let thread = serve_thread("sluice-status", listener, |l| {
        // Below the workers (nice 10, inherited by the thread that renders a scrape): a
        // scrape of thousands of series takes tens of milliseconds of CPU, which must not be
        // taken from a worker sharing its core.
        if let Err(e) = rustix::process::setpriority_process(Some(rustix::thread::gettid()), 10) {
            tracing::debug!(error = %e, "cannot lower the status listener's priority");
        }
        st.serve(l, rx)
    })?;
    Ok((addr, stop, thread, status))
}

/// Why a listening socket could not be opened, in words (not `Address in use (os error 98)`).
fn bind_error(e: &std::io::Error) -> String {
    use std::io::ErrorKind;
    match e.kind() {
        ErrorKind::AddrInUse => "the address is already in use".into(),
        ErrorKind::AddrNotAvailable => "the address is not one of this machine's".into(),
        ErrorKind::PermissionDenied => {
            "permission denied (a port below 1024 needs root or CAP_NET_BIND_SERVICE)".into()
        }
        _ => sluice_config::io_reason(e),
    }
}

/// The first configuration of a node in cluster mode: node settings from the file, resources
/// from etcd, or from the local cache when etcd cannot be reached (or holds a configuration
/// that does not load). Returns its text, the configuration, and the runtime the cluster
/// thread will run on.
/// The etcd client of `etcd`, its TLS built by the same code as upstreams' (`https://`
/// endpoints: the system's CAs unless `etcd.tls.ca`).
fn etcd_client(ec: &sluice_config::EtcdConfig) -> anyhow::Result<sluice_admin::etcd::Etcd> {
    let https = ec.endpoints.iter().any(|e| e.starts_with("https://"));
    let tls = if https || ec.tls.is_some() {
        let mut v = sluice_config::Validator::new();
        let t = ec.tls.clone().unwrap_or_default();
        let built = v.field("etcd", |v| sluice_proxy::tls_client_config(&t, v));
        v.finish().map_err(|e| anyhow::anyhow!("{e}"))?;
        built
    } else {
        None
    };
    sluice_admin::etcd::Etcd::from_config(ec, tls).map_err(anyhow::Error::msg)
}

fn start_from_etcd(
    ec: &sluice_config::EtcdConfig,
    settings: serde_json::Map<String, Value>,
    overrides: &serde_json::Map<String, Value>,
    cache: Option<&Path>,
    plugins: &dyn sluice_config::PluginCatalog,
) -> anyhow::Result<(String, Config, tokio::runtime::Runtime, i64)> {
    let client = etcd_client(ec)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let with = |resources: serde_json::Map<String, Value>| {
        let mut doc = settings.clone();
        doc.extend(resources);
        // The command line's settings apply to this run; the text (the control plane's
        // document, the cache) keeps the file's.
        let mut checked = doc.clone();
        sluice_admin::apply_overrides(&mut checked, overrides);
        let cfg = sluice_config::load_value_with(Value::Object(checked), plugins)?;
        let text =
            sluice_admin::render(&doc).map_err(|e| ConfigErrors::from(ConfigError::new("", e)))?;
        Ok::<_, ConfigErrors>((text, cfg))
    };
    let from_cache = |why: String| -> anyhow::Result<(String, Config)> {
        let Some(path) = cache else {
            anyhow::bail!("{why}, and no cache is configured (etcd.cache)");
        };
        let cached = std::fs::read_to_string(path).map_err(|e| {
            anyhow::anyhow!(
                "{why}, and the cache {} cannot be read: {e}",
                path.display()
            )
        })?;
        let revision = cached.lines().next().unwrap_or_default().to_owned();
        let (text, cfg) = sluice_admin::parse_doc(&cached)
            .and_then(&with)
            .map_err(|e| {
                anyhow::anyhow!(
                    "{why}, and the cache {} does not load:\n{e}",
                    path.display()
                )
            })?;
        warn!(
            "{why}: starting from the cache {} ({revision}); etcd's changes apply once it answers",
            path.display()
        );
        Ok((text, cfg))
    };
    let prefix = format!("{}/", ec.prefix);
    // On a thread of its own: the caller may be inside a runtime already (tests are).
    let read = std::thread::scope(|s| {
        s.spawn(|| rt.block_on(client.range_prefix(&prefix)))
            .join()
            .unwrap_or_else(|_| {
                Err(sluice_admin::etcd::EtcdError::Server(
                    "the etcd read panicked".into(),
                ))
            })
    });
    let loaded = match read {
        Ok((revision, kvs)) => {
            info!(revision, endpoints = %ec.endpoints.join(","), prefix = %ec.prefix, keys = kvs.len(), "configuration read from etcd");
            let guard = sluice_admin::etcd_guard_revision(&ec.prefix, &kvs);
            match with(sluice_admin::etcd_resources(&ec.prefix, kvs)) {
                Ok((text, cfg)) => Ok((text, cfg, guard)),
                // From the cache: no guard read; writes wait for the first resync.
                Err(errors) => from_cache(format!(
                    "the configuration in etcd does not load ({}: {})",
                    errors.count_text(),
                    errors.one_line()
                ))
                .map(|(text, cfg)| (text, cfg, 0)),
            }
        }
        Err(e) => from_cache(e.to_string()).map(|(text, cfg)| (text, cfg, 0)),
    };
    match loaded {
        Ok((text, cfg, guard)) => Ok((text, cfg, rt, guard)),
        Err(e) => {
            // Not dropped in place: the caller may be inside a runtime.
            rt.shutdown_background();
            Err(e)
        }
    }
}

/// Every error of configuration `text` (with the command line's `overrides`), in the file's
/// order, of every stage that can run (see [`sluice_config::all_errors`]); `found`, what the
/// load that failed reported, when that finds none.
pub fn every_error(
    text: &str,
    overrides: &serde_json::Map<String, Value>,
    plugins: &sluice_plugins::Registry,
    found: ConfigErrors,
) -> ConfigErrors {
    sluice_admin::every_error(text, overrides, plugins, found, &mut |cfg| {
        let state = sluice_core::state::StateRegistry::default();
        sluice_proxy::compile(cfg, plugins, &state).map(drop)
    })
}

/// Errors in a setting the command line gave say so: `listen[0]` is then `--listen`'s value,
/// not the file's.
fn from_command_line(
    errors: ConfigErrors,
    overrides: &serde_json::Map<String, Value>,
) -> ConfigErrors {
    ConfigErrors(
        errors
            .0
            .into_iter()
            .map(|mut e| {
                let key = e.path.split(['.', '[']).next().unwrap_or_default();
                if overrides.contains_key(key) {
                    e.message.push_str(" (set on the command line)");
                }
                e
            })
            .collect(),
    )
}

/// A configuration that did not load, with every error.
#[derive(Debug, thiserror::Error)]
#[error("{origin}: refused, {}", errors.count_text())]
pub struct ConfigRejected {
    /// Where the configuration came from.
    pub origin: String,
    /// What is wrong.
    pub errors: ConfigErrors,
}

/// Raises the soft limit of open files to the hard limit, as Go's runtime and NGINX's
/// `worker_rlimit_nofile` do: a gateway holds two sockets per proxied connection, and the usual
/// soft limit (1,024) would refuse connections long before `limits.max_connections`. Returns
/// the limit in force.
pub fn raise_open_files() -> u64 {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut l = getrlimit(Resource::Nofile);
    if l.current != l.maximum {
        l.current = l.maximum;
        let _ = setrlimit(Resource::Nofile, l);
    }
    getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX)
}
