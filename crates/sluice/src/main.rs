//! The `sluice` binary: command line, logging, startup and signals. The only crate that wires
//! the others together.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use tracing::{info, warn};

mod logging;

/// The configuration `sluice run` uses without `-c`.
const DEFAULT_CONFIG: &str = include_str!("default.yaml");

/// `sluice --version`: the version, the commit it was built from and when (build.rs).
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("SLUICE_COMMIT"),
    " of ",
    env!("SLUICE_COMMIT_DATE"),
    ", built ",
    env!("SLUICE_BUILD_DATE"),
    ")"
);

#[derive(Debug, Parser)]
#[command(
    name = "sluice",
    version = VERSION,
    about = "Sluice: a fast API gateway in one binary"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

const RUN_HELP: &str = "\
Signals:
  SIGHUP           re-read the configuration file and the certificate files it names now
                   (both are also picked up by themselves)
  SIGUSR1          reopen the access log file (after logrotate moved it)
  SIGUSR2          binary upgrade: start the binary now at this one's path with the same
                   arguments, hand it the listening sockets, the nodes' health, the local
                   limit counters, breakers and metrics, and once it is ready stop
                   accepting, finish the requests in flight and exit (docs/upgrade.md)
  SIGTERM, SIGINT  stop accepting connections, finish the requests in flight, exit 0

Environment:
  RUST_LOG         log filter, overriding log.level (e.g. RUST_LOG=debug, RUST_LOG=warn)
  NO_COLOR         no colours in the error log, even on a terminal
  SLUICE_CONFIG    the configuration file when -c is not given

Without -c, the file named by SLUICE_CONFIG is used, else /etc/sluice/sluice.yaml when it
exists; with none of them, a demo configuration runs: the gateway on 127.0.0.1:9080, the admin API on
127.0.0.1:9180 (a key is generated and printed), the status listener (metrics, health, the
dashboard at /dashboard/) on 127.0.0.1:9091, and a demo origin on 127.0.0.1:1980.";

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the gateway.
    #[command(after_help = RUN_HELP)]
    Run {
        /// Configuration file (YAML). Without it: $SLUICE_CONFIG, else /etc/sluice/sluice.yaml
        /// when it exists, else a built-in demo configuration.
        #[arg(short, long)]
        config: Option<PathBuf>,
        /// Listen on this address instead of the file's `listen` (repeat for several), e.g.
        /// 127.0.0.1:8080 or a port alone.
        #[arg(long, value_name = "ADDR")]
        listen: Vec<String>,
        /// Serve the admin API on this address instead of the file's `admin.listen`.
        #[arg(long, value_name = "ADDR", conflicts_with = "no_admin")]
        admin_listen: Option<String>,
        /// Do not serve the admin API (`admin.enabled: false`).
        #[arg(long)]
        no_admin: bool,
        /// Serve the status listener (metrics, health, dashboard) on this address instead of
        /// the file's `status.listen`.
        #[arg(long, value_name = "ADDR")]
        status_listen: Option<String>,
        /// Run the built-in demo origin on this address instead of the file's `origin.listen`
        /// (without -c, the demo's routes follow it).
        #[arg(long, value_name = "ADDR")]
        origin_listen: Option<std::net::SocketAddr>,
    },
    /// Check a configuration file: parse, validate and compile it, and check what `run` needs
    /// from this machine; print every error.
    Validate {
        /// Configuration file (YAML). Without it: $SLUICE_CONFIG, else /etc/sluice/sluice.yaml.
        #[arg(short, long)]
        config: Option<PathBuf>,
        /// Check the configuration only, not this machine (its addresses, ports and log
        /// files) nor its secret managers (`$secret://` references are checked, not read): for
        /// a file that will run elsewhere.
        #[arg(long)]
        config_only: bool,
    },
    /// List the plugins this binary has, as JSON, in the order they run: each one's name,
    /// priority (higher runs first) and whether it also runs on stream routes.
    Plugins,
    /// Translate another gateway's configuration into Sluice's: the YAML is printed (or
    /// written to -o) and checked as `validate --config-only` checks a file; what has no
    /// equivalent is listed on stderr, one line each with its path in the source.
    Import {
        #[command(subcommand)]
        from: ImportFrom,
    },
    /// Ask a running gateway's status listener whether it is live (`/healthz`) or ready
    /// (`/readyz`): exit 0 on a 200, 1 otherwise (a container's health check, without curl).
    Health {
        /// The status listener's address.
        #[arg(default_value = "127.0.0.1:9091")]
        addr: String,
        /// Ask `/readyz` (configuration loaded, not draining, and in cluster mode not stale past
        /// `etcd.stale_unready_after`) instead of `/healthz`.
        #[arg(long)]
        ready: bool,
        /// Give up after this many seconds.
        #[arg(long, default_value_t = 3)]
        timeout: u64,
    },
    /// Print a shell's completion script for these commands, e.g.
    /// `sluice completions bash > /usr/share/bash-completion/completions/sluice`.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff), e.g. `sluice man | man -l -`; with --dir, write it and a
    /// page per command (sluice.1, sluice-run.1, ...) there.
    Man {
        /// Directory to write the pages to.
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Run the built-in HTTP origin (for demos, tests and benchmarks).
    Origin {
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1:1980")]
        listen: SocketAddr,
        /// Worker threads.
        #[arg(long, default_value_t = 1)]
        workers: usize,
    },
}

#[derive(Debug, Subcommand)]
enum ImportFrom {
    /// A Kong decK file (`_format_version: "3.0"`): services, routes, upstreams and targets,
    /// consumers and credentials, and the plugins with an equivalent (docs/migrating.md).
    Kong {
        /// The decK file (YAML or JSON).
        file: PathBuf,
        /// Write the configuration here instead of stdout.
        #[arg(short, long)]
        output: Option<PathBuf>,
    },
    /// Kubernetes Gateway API resources (Gateway, HTTPRoute, GRPCRoute, TLSRoute,
    /// ReferenceGrant, Namespace, Secret: every .yaml file of DIR) for one Gateway
    /// (docs/kubernetes.md).
    GatewayApi {
        /// The directory of manifests.
        dir: PathBuf,
        /// A YAML map from `namespace/name:port` (a Service's) to the addresses that serve
        /// it (what a controller reads from EndpointSlices).
        #[arg(long)]
        backends: PathBuf,
        /// The Gateway to translate, `namespace/name` (needed when there are several).
        #[arg(long)]
        gateway: Option<String>,
        /// Write the configuration here instead of stdout.
        #[arg(short, long)]
        output: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    allocator_settings(std::env::var("_RJEM_MALLOC_CONF").ok().as_deref());
    let cli = Cli::parse();
    match cli.command {
        Command::Validate {
            config,
            config_only,
        } => match config_file(config) {
            Some((path, _)) => validate(&path, config_only),
            None => {
                eprintln!(
                    "sluice: no configuration to check: give -c FILE, or set SLUICE_CONFIG, or write {DEFAULT_PATH}"
                );
                ExitCode::FAILURE
            }
        },
        Command::Run {
            config,
            listen,
            admin_listen,
            no_admin,
            status_listen,
            origin_listen,
        } => {
            let mut overrides = overrides(listen, admin_listen, no_admin, origin_listen);
            if let Some(a) = status_listen {
                overrides.insert("status".into(), serde_json::json!({"listen": a}));
            }
            report(run(config, overrides, origin_listen))
        }
        Command::Origin { listen, workers } => report(origin(listen, workers)),
        Command::Import {
            from: ImportFrom::Kong { file, output },
        } => import_kong(&file, output.as_deref()),
        Command::Import {
            from:
                ImportFrom::GatewayApi {
                    dir,
                    backends,
                    gateway,
                    output,
                },
        } => {
            let translated = sluice::import::gateway_api::read_dir(&dir).and_then(|docs| {
                let map = sluice::import::gateway_api::read_backends(&backends)?;
                sluice::import::gateway_api::translate(&docs, gateway.as_deref(), &map)
            });
            match translated {
                Ok(t) => write_import(
                    &format!("Gateway API resources in {}", dir.display()),
                    t.config,
                    &t.notes,
                    output.as_deref(),
                ),
                Err(e) => {
                    eprintln!("sluice: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Health {
            addr,
            ready,
            timeout,
        } => {
            let path = if ready { "/readyz" } else { "/healthz" };
            match health(&addr, path, std::time::Duration::from_secs(timeout.max(1))) {
                Ok(200) => ExitCode::SUCCESS,
                Ok(status) => {
                    eprintln!("sluice: {addr}{path} answered {status}");
                    ExitCode::FAILURE
                }
                Err(e) => {
                    eprintln!("sluice: {addr}{path}: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Completions { shell } => {
            use clap::CommandFactory as _;
            clap_complete::generate(shell, &mut Cli::command(), "sluice", &mut std::io::stdout());
            ExitCode::SUCCESS
        }
        Command::Man { dir } => match man(dir.as_deref()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("sluice: the manual pages cannot be written: {e}");
                ExitCode::FAILURE
            }
        },
        Command::Plugins => {
            use sluice_core::plugin::Plugins as _;
            let registry = sluice_plugins::builtin();
            let mut all = registry.all();
            // In the order they run: the highest priority first.
            all.sort_by_key(|f| std::cmp::Reverse(f.priority()));
            let list: Vec<serde_json::Value> = all
                .iter()
                .map(|f| {
                    serde_json::json!({
                        "name": f.name(),
                        "priority": f.priority(),
                        "stream": f.on_stream(),
                    })
                })
                .collect();
            println!("{}", serde_json::Value::Array(list));
            ExitCode::SUCCESS
        }
    }
}

/// `sluice import kong`: the translation, checked, written; the notes on stderr.
fn import_kong(file: &std::path::Path, output: Option<&std::path::Path>) -> ExitCode {
    let text = match std::fs::read_to_string(file) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("sluice: {}: {e}", file.display());
            return ExitCode::FAILURE;
        }
    };
    let t = match sluice::import::kong::translate(&text) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("sluice: {}: {e}", file.display());
            return ExitCode::FAILURE;
        }
    };
    write_import(
        &format!("Kong's decK file {}", file.display()),
        t.config,
        &t.notes,
        output,
    )
}

/// An import's configuration, checked as `validate --config-only` checks a file, written; its
/// notes on stderr.
fn write_import(
    source: &str,
    config: serde_json::Value,
    notes: &[String],
    output: Option<&std::path::Path>,
) -> ExitCode {
    let yaml = match yaml_serde::to_string(&config) {
        Ok(y) => y,
        Err(e) => {
            eprintln!("sluice: the translation cannot be written as YAML: {e}");
            return ExitCode::FAILURE;
        }
    };
    let out = format!(
        "# Translated from {source} by `sluice import`.\n# Not translated: {}.\n{yaml}",
        match notes.len() {
            0 => "nothing".to_owned(),
            n => format!("{n} item(s), listed when it ran"),
        }
    );
    // What Sluice would refuse is refused here, before anyone deploys it.
    let plugins = sluice_plugins::builtin();
    let state = sluice_core::state::StateRegistry::default();
    if let Err(errors) = sluice_config::load_str_with(&out, &plugins)
        .and_then(|cfg| sluice_proxy::compile(&cfg, &plugins, &state).map(|_| ()))
    {
        eprintln!("sluice: the translation is not a valid configuration:");
        for e in errors.iter() {
            eprintln!("  {e}");
        }
        return ExitCode::FAILURE;
    }
    for n in notes {
        eprintln!("not translated: {n}");
    }
    let written = match output {
        Some(path) => std::fs::write(path, &out),
        None => std::io::Write::write_all(&mut std::io::stdout(), out.as_bytes()),
    };
    if let Err(e) = written {
        eprintln!("sluice: {e}");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

/// `sluice health`: one GET of `path` on the status listener at `addr`, its status code.
fn health(addr: &str, path: &str, timeout: std::time::Duration) -> std::io::Result<u16> {
    use std::io::{Read as _, Write as _};
    use std::net::ToSocketAddrs as _;
    let to = addr
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| std::io::Error::other("the address resolves to nothing"))?;
    let mut s = std::net::TcpStream::connect_timeout(&to, timeout)?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut head = [0u8; 64];
    let mut n = 0;
    while n < 12 {
        match s.read(&mut head[n..])? {
            0 => break,
            m => n += m,
        }
    }
    // "HTTP/1.1 200 ..."
    std::str::from_utf8(&head[..n])
        .ok()
        .and_then(|h| h.strip_prefix("HTTP/1."))
        .and_then(|h| h.get(2..5))
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| std::io::Error::other("not an HTTP answer"))
}

/// `sluice man`: sluice(1) to stdout, or into `dir` with a page per command (sluice-run(1),
/// ...), as git and cargo have theirs.
fn man(dir: Option<&std::path::Path>) -> std::io::Result<()> {
    use clap::CommandFactory as _;
    let cmd = Cli::command();
    let page = |c: clap::Command| -> std::io::Result<Vec<u8>> {
        let mut out = Vec::new();
        clap_mangen::Man::new(c)
            .source(concat!("sluice ", env!("CARGO_PKG_VERSION")))
            .manual("Sluice Manual")
            .render(&mut out)?;
        Ok(out)
    };
    let Some(dir) = dir else {
        return std::io::Write::write_all(&mut std::io::stdout(), &page(cmd)?);
    };
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("sluice.1"), page(cmd.clone())?)?;
    for sub in cmd.get_subcommands().filter(|c| !c.is_hide_set()) {
        let name = format!("sluice-{}", sub.get_name());
        let c = sub
            .clone()
            .name(name.clone())
            .bin_name(format!("sluice {}", sub.get_name()))
            .version(VERSION);
        std::fs::write(dir.join(format!("{name}.1")), page(c)?)?;
    }
    Ok(())
}

/// The settings given on the command line, as configuration keys: they replace the file's
/// and are checked with it (a non-loopback `--admin-listen` needs `admin.key`, as in a file).
fn overrides(
    listen: Vec<String>,
    admin_listen: Option<String>,
    no_admin: bool,
    origin_listen: Option<SocketAddr>,
) -> serde_json::Map<String, serde_json::Value> {
    use serde_json::Value;
    let mut o = serde_json::Map::new();
    if !listen.is_empty() {
        o.insert(
            "listen".into(),
            Value::Array(listen.into_iter().map(Value::String).collect()),
        );
    }
    let mut admin = serde_json::Map::new();
    if let Some(a) = admin_listen {
        admin.insert("listen".into(), Value::String(a));
        admin.insert("enabled".into(), Value::Bool(true));
    }
    if no_admin {
        admin.insert("enabled".into(), Value::Bool(false));
    }
    if !admin.is_empty() {
        o.insert("admin".into(), Value::Object(admin));
    }
    if let Some(a) = origin_listen {
        o.insert(
            "origin".into(),
            serde_json::json!({"listen": a.to_string()}),
        );
    }
    o
}

/// Every error of a command ends here: printed once, on stderr; exit code 1.
fn report(r: anyhow::Result<()>) -> ExitCode {
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            match e.downcast_ref::<sluice::ConfigRejected>() {
                Some(rejected) => {
                    for err in rejected.errors.iter() {
                        eprintln!("{err}");
                    }
                    eprintln!("sluice: {rejected}");
                }
                None => eprintln!("sluice: {e:#}"),
            }
            ExitCode::FAILURE
        }
    }
}

fn validate(path: &std::path::Path, config_only: bool) -> ExitCode {
    // `$secret://` references are read (as `run` reads them) unless only the file is checked.
    if !config_only {
        sluice::secrets::install();
    }
    let plugins = sluice_plugins::builtin();
    let state = sluice_core::state::StateRegistry::default();
    let result = sluice_config::load_file_with(path, &plugins)
        .and_then(|cfg| sluice_proxy::compile(&cfg, &plugins, &state).map(|snap| (cfg, snap)));
    let (cfg, snap) = match result {
        Ok(ok) => ok,
        Err(errors) => {
            // Every error of every stage, in the file's order (the load stops at the first
            // stage that fails).
            let errors = match std::fs::read_to_string(path) {
                Ok(text) => sluice::every_error(&text, &serde_json::Map::new(), &plugins, errors),
                Err(_) => errors,
            };
            for e in errors.iter() {
                eprintln!("{e}");
            }
            return ExitCode::FAILURE;
        }
    };
    // What `run` needs from this machine: writable log files, addresses it may listen on.
    let machine = if config_only {
        sluice::Preflight::default()
    } else {
        sluice::preflight(&cfg)
    };
    for w in sluice_config::warnings(&cfg, &plugins)
        .iter()
        .chain(&machine.warnings)
    {
        eprintln!("warning: {w}");
    }
    if !machine.errors.is_empty() {
        for e in &machine.errors {
            eprintln!("{e}");
        }
        return ExitCode::FAILURE;
    }
    let plural = |n: usize, one: &str, many: &str| {
        if n == 1 {
            format!("{n} {one}")
        } else {
            format!("{n} {many}")
        }
    };
    println!(
        "ok: {}, {}",
        plural(snap.route_count(), "route", "routes"),
        plural(snap.upstream_count(), "upstream", "upstreams")
    );
    ExitCode::SUCCESS
}

fn init_logging(log: &sluice_config::LogConfig) {
    use tracing_subscriber::prelude::*;
    use tracing_subscriber::{EnvFilter, fmt, reload};
    // rustls reports a client's protocol oddities (an IP address sent as SNI, as wrk and
    // many scripts do) as warnings: one line per connection, which costs more than the
    // handshake. They are the client's business; only rustls's errors reach the log.
    let filter = |level: &str| {
        EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| EnvFilter::new(format!("{level},rustls=error")))
    };
    let (filter_layer, handle) = reload::Layer::new(filter(&log.level));
    // Colours only for a terminal, and not when NO_COLOR is set (no-color.org): a log file
    // or a collector gets plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    // One record, one line, whatever a value holds (`logging::OneLine`).
    let lines = match log.format {
        sluice_config::LogFormat::Json => fmt::layer()
            .event_format(logging::Json)
            .with_writer(logging::OneLine)
            .log_internal_errors(false)
            .boxed(),
        sluice_config::LogFormat::Text => fmt::layer()
            .with_target(false)
            .with_ansi(ansi)
            .with_writer(logging::OneLine)
            // A closed stderr (a log pipe that went away) must not take the gateway down:
            // reporting a failed write would itself write to stderr, and panic.
            .log_internal_errors(false)
            .boxed(),
    };
    if tracing_subscriber::registry()
        .with(filter_layer)
        .with(lines)
        .try_init()
        .is_err()
    {
        return;
    }
    let from_env = std::env::var_os("RUST_LOG").is_some();
    let level = parking_lot::Mutex::new(log.level.clone());
    let format = log.format;
    sluice::on_log_settings(move |l| {
        let mut current = level.lock();
        if l.level != *current {
            if from_env {
                tracing::warn!(level = %l.level, "log.level changed, but RUST_LOG is set and wins");
            } else if handle.reload(filter(&l.level)).is_ok() {
                info!(level = %l.level, "log level applied");
            }
            *current = l.level.clone();
        }
        if l.format != format {
            tracing::warn!(format = ?l.format, "log.format changed; it takes effect after a restart");
        }
    });
}

/// Where NGINX and APISIX operators expect the configuration when none is given.
const DEFAULT_PATH: &str = "/etc/sluice/sluice.yaml";

/// The configuration file to use, and where its name came from: `-c`, else `SLUICE_CONFIG`,
/// else [`DEFAULT_PATH`] when it exists.
fn config_file(given: Option<PathBuf>) -> Option<(PathBuf, &'static str)> {
    if let Some(p) = given {
        return Some((p, "-c"));
    }
    if let Some(p) = std::env::var_os("SLUICE_CONFIG").filter(|p| !p.is_empty()) {
        return Some((PathBuf::from(p), "SLUICE_CONFIG"));
    }
    std::path::Path::new(DEFAULT_PATH)
        .exists()
        .then(|| (PathBuf::from(DEFAULT_PATH), "the default path"))
}

fn run(
    path: Option<PathBuf>,
    overrides: serde_json::Map<String, serde_json::Value>,
    origin_listen: Option<SocketAddr>,
) -> anyhow::Result<()> {
    let found = config_file(path);
    let demo = found.is_none();
    let path = found.as_ref().map(|(p, _)| p.clone());
    let signals = listen_for_signals()?;
    let argv = command_line();
    // Started by an upgrade: the old process's sockets, taken before anything binds.
    let link = sluice::upgrade::take_over().map_err(anyhow::Error::msg)?;
    sluice_proxy::handover::keep_for_handover();
    let open_files = sluice::raise_open_files();
    let source = match path {
        Some(p) => sluice::Source::File(p),
        // The demo's upstream is its own origin, wherever that listens.
        None => sluice::Source::Text {
            text: match origin_listen {
                Some(a) => DEFAULT_CONFIG.replace("127.0.0.1:1980", &a.to_string()),
                None => DEFAULT_CONFIG.to_owned(),
            },
            name: "built-in default configuration".to_owned(),
        },
    };
    // Logging is configured by the file; until it is loaded, errors go to stderr as they are.
    let node = sluice::Node::start_with(source, overrides, |cfg| init_logging(&cfg.log))
        .map_err(|e| {
            if demo && format!("{e:#}").contains("in use") {
                anyhow::anyhow!("{e:#}\nthe demo's ports can be moved: sluice run --listen ADDR --admin-listen ADDR --status-listen ADDR --origin-listen ADDR (or --no-admin)")
            } else {
                e
            }
        })?;
    match &found {
        None => warn!(
            "no configuration file (-c FILE, SLUICE_CONFIG, or {DEFAULT_PATH}): serving the built-in demo configuration"
        ),
        Some((path, from)) if *from != "-c" => {
            info!("configuration file {} (from {from})", path.display())
        }
        Some(_) => {}
    }
    let source = node.source_name().to_owned();
    let server = node.server();
    let addrs: Vec<String> = server
        .local_addrs()
        .iter()
        .map(ToString::to_string)
        .collect();
    let snap = server.snapshot();
    info!(
        routes = snap.route_count(),
        upstreams = snap.upstream_count(),
        "listening on {} with {} worker(s), config: {source}",
        addrs.join(", "),
        server.workers()
    );
    drop(snap);
    // Each client connection may hold an upstream connection too.
    let needed = (server.workers() * node.config.limits.max_connections * 2) as u64;
    if open_files < needed {
        warn!(
            open_files,
            needed,
            "the limit of open files is below 2 x workers x limits.max_connections: connections \
             past it are refused by the kernel (raise the hard limit: ulimit -Hn, LimitNOFILE=)"
        );
    }
    if let Some(o) = server.origin_addr() {
        let first = server.local_addrs()[0];
        let reach = if first.ip().is_unspecified() {
            SocketAddr::from(([127, 0, 0, 1], first.port())).to_string()
        } else {
            first.to_string()
        };
        info!("built-in origin on {o}; try: curl http://{reach}/hello");
    }
    let drain = node.config.timeouts.drain;
    let carrier = node.carrier();
    match link {
        Some(link) => {
            // Started by an upgrade: the workers accept nothing yet. The first round of
            // active health checks first, then the old process's state, then traffic.
            if !server.wait_first_checks(std::time::Duration::from_secs(10)) {
                warn!(
                    "upgrade: the first health checks are not all done after 10 s; taking over anyway"
                );
            }
            let doc = link
                .prepared(std::time::Duration::from_secs(30))
                .map_err(anyhow::Error::msg)?;
            let shared = carrier.take(&doc);
            info!(
                states = shared,
                "upgrade: took the old process's limit counters, breakers and metrics; accepting"
            );
            // "ready" before accepting: an old process that gave up waiting stops this one,
            // which must then not have taken any connection.
            let (follow, gone) = (carrier.clone(), carrier.clone());
            link.ready(move |doc| follow.add(&doc), move || gone.gone());
            sluice_proxy::handover::open_gate();
            sluice_proxy::handover::settle_health();
            sluice::upgrade::notify_systemd(&format!("MAINPID={}\nREADY=1", std::process::id()));
        }
        None => sluice::upgrade::notify_systemd("READY=1"),
    }
    // Long enough for a new binary to load its configuration (from etcd too) and start.
    let upgrade = Some((argv, std::time::Duration::from_secs(60), carrier.clone()));
    let stop = wait_for_signals(signals, || node.reload(), upgrade)?;
    info!(%drain, "shutting down: no new connections, finishing requests in flight");
    // The copies kept for an upgrade close with the workers' sockets.
    sluice_proxy::handover::release();
    match stop {
        Stop::Asked => {
            sluice::upgrade::notify_systemd("STOPPING=1");
            node.shutdown();
        }
        Stop::Upgraded(handed) => handed.drain_with(&carrier, || node.shutdown_after_upgrade()),
    }
    info!("stopped");
    Ok(())
}

fn origin(listen: SocketAddr, workers: usize) -> anyhow::Result<()> {
    init_logging(&sluice_config::LogConfig::default());
    let signals = listen_for_signals()?;
    let o = sluice_proxy::origin::Origin::start(listen, workers)
        .with_context(|| format!("cannot listen on {listen}"))?;
    info!("origin listening on {}", o.addr());
    wait_for_signals(
        signals,
        || info!("SIGHUP ignored: the origin has no configuration"),
        None,
    )?;
    o.stop();
    Ok(())
}

/// Blocks until SIGTERM or SIGINT, calling `on_reload` for each SIGHUP meanwhile.
/// The signals `run` answers, listened to from its start: a signal that arrives while the node
/// starts (or just after it said "listening on") is answered once it is up, instead of killing
/// the process with the default action.
struct Signals {
    rt: tokio::runtime::Runtime,
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
    usr1: tokio::signal::unix::Signal,
    usr2: tokio::signal::unix::Signal,
}

fn listen_for_signals() -> anyhow::Result<Signals> {
    use tokio::signal::unix::{SignalKind, signal};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let _in_rt = rt.enter();
    Ok(Signals {
        term: signal(SignalKind::terminate())?,
        int: signal(SignalKind::interrupt())?,
        hup: signal(SignalKind::hangup())?,
        usr1: signal(SignalKind::user_defined1())?,
        usr2: signal(SignalKind::user_defined2())?,
        rt,
    })
}

/// Why [`wait_for_signals`] returned.
#[derive(Debug)]
enum Stop {
    /// SIGTERM or SIGINT.
    Asked,
    /// A binary upgrade: the new process serves; the link to send it what this one counts
    /// while it drains.
    Upgraded(sluice::upgrade::Handed),
}

/// Blocks until SIGTERM or SIGINT, or until a new binary started on SIGUSR2 is ready (when
/// `upgrade` gives the command line to start); calls `on_reload` for each SIGHUP meanwhile.
fn wait_for_signals(
    s: Signals,
    mut on_reload: impl FnMut(),
    upgrade: Option<(
        Vec<std::ffi::OsString>,
        std::time::Duration,
        sluice::Carrier,
    )>,
) -> anyhow::Result<Stop> {
    let Signals {
        rt,
        mut term,
        mut int,
        mut hup,
        mut usr1,
        mut usr2,
    } = s;
    let (done_tx, mut done_rx) =
        tokio::sync::mpsc::unbounded_channel::<Result<sluice::upgrade::Handed, String>>();
    let mut upgrading = false;
    let stop = rt.block_on(async {
        loop {
            tokio::select! {
                _ = term.recv() => return Stop::Asked,
                _ = int.recv() => return Stop::Asked,
                _ = hup.recv() => on_reload(),
                _ = usr1.recv() => {
                    sluice_proxy::reopen_logs();
                    info!("SIGUSR1: reopening the access log");
                }
                _ = usr2.recv() => match &upgrade {
                    None => info!("SIGUSR2 ignored: nothing to upgrade"),
                    Some(_) if upgrading => info!("SIGUSR2 ignored: an upgrade is under way"),
                    Some((argv, timeout, carrier)) => {
                        upgrading = true;
                        info!("SIGUSR2: starting the binary at {} to take over", argv[0].to_string_lossy());
                        let (argv, timeout, tx) = (argv.clone(), *timeout, done_tx.clone());
                        let carrier = carrier.clone();
                        std::thread::spawn(move || {
                            let _ = tx.send(sluice::upgrade::hand_over(&argv, timeout, &carrier));
                        });
                    }
                },
                Some(result) = done_rx.recv() => match result {
                    Ok(handed) => {
                        info!(pid = handed.pid, "upgrade: the new process is ready and serves");
                        return Stop::Upgraded(handed);
                    }
                    Err(e) => {
                        upgrading = false;
                        warn!("{e}");
                    }
                },
            }
        }
    });
    Ok(stop)
}

/// This process's command line, for an upgrade: the program as it was started (its path now
/// names the new binary; `/proc/self/exe` would name this one), made absolute.
fn command_line() -> Vec<std::ffi::OsString> {
    let mut argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if let Some(first) = argv.first_mut() {
        let p = std::path::Path::new(first.as_os_str());
        if p.is_relative()
            && p.components().count() > 1
            && let Ok(cwd) = std::env::current_dir()
        {
            *first = cwd.join(p).into_os_string();
        }
    }
    argv
}

/// What the allocator does with pages it freed and has not reused for its dirty decay (10 s):
/// gives them back with `MADV_FREE` and never unmaps them (jemalloc's muzzy decay, -1). The
/// kernel takes such pages back at no cost whenever it needs memory (they move to the inactive
/// file list, out of a cgroup's working set; under a cgroup's limit they are reclaimed, not
/// OOM-killed), and until then the next burst reuses them without a page fault. jemalloc's
/// default (0) unmaps them, and a burst after an idle spell faulted every page in again: 9,583
/// faults for 1,000 streams through `ai-proxy` after 25 s idle against 1,833 (the rest is
/// memory the warm-up had never used); a fault is dear on a virtual machine, and the first
/// chunk on a new connection lost ~2 ms of its p99 (docs/benchmarks.md, "Memory after an
/// idle spell"). Five minutes (300,000) measured twice as many faults (3,709); one reason:
/// with a positive default decay jemalloc purges its arena of huge allocations at once
/// (`arena_choose_huge`).
const MUZZY_DECAY_MS: isize = -1;

/// The allocator's run-time settings, before any thread starts. `malloc_conf`: the operator's
/// `_RJEM_MALLOC_CONF`, whose `muzzy_decay_ms` wins over [`MUZZY_DECAY_MS`].
fn allocator_settings(malloc_conf: Option<&str>) {
    // Freed pages go back to the system on time even while the gateway allocates nothing (an
    // idle node right after its start); without the thread, jemalloc purges only as it is used.
    if let Err(e) = tikv_jemalloc_ctl::background_thread::write(true) {
        eprintln!(
            "sluice: the allocator's background thread is off ({e}): memory freed by the start is returned to the system only as requests are served"
        );
    }
    if malloc_conf.is_some_and(|c| c.contains("muzzy_decay_ms")) {
        return;
    }
    if let Err(e) = keep_freed_pages(MUZZY_DECAY_MS) {
        eprintln!(
            "sluice: the allocator unmaps freed pages at once ({e}): a burst after an idle spell faults its memory in again"
        );
    }
}

/// Sets jemalloc's muzzy decay of every arena, made already or to come (a thread gets its arena
/// as it first allocates).
fn keep_freed_pages(ms: isize) -> tikv_jemalloc_ctl::Result<()> {
    use tikv_jemalloc_ctl::{Access, AsName};
    b"arenas.muzzy_decay_ms\0".name().write(ms)?;
    let arenas = tikv_jemalloc_ctl::arenas::narenas::read()?;
    let mut arena = b"arena.0.muzzy_decay_ms\0".name().mib::<[usize; 3]>()?;
    for i in 0..arenas as usize {
        arena[1] = i;
        // An arena not made yet refuses (EFAULT), and takes the default above when it is.
        let _ = arena.write(ms);
    }
    Ok(())
}

/// jemalloc rather than glibc's malloc. Measured (bench/routes_memory.sh, 100,000 routes):
/// glibc kept 168 MiB resident after the start, most of it the parsed file and typed
/// configuration freed in holes between the compiled routes, which it never returns; jemalloc
/// (117 MiB, before the compaction of 0ecaa37) returns pages that stay unused for its decay
/// time (10 s), and rounds small allocations to finer size classes with no header. Same
/// instructions per request in scenario 1 (callgrind: 10,888 before, 10,889 after); memory
/// per idle connection 1.66 → 1.36 KiB over HTTP/1.1, 8.98 → 9.12 KiB over TLS; start at
/// 100,000 routes 580 → 369 ms.
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;
