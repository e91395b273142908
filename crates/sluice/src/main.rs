//! The `sluice` binary: command line, logging, startup and signals. The only crate that wires
//! the others together.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use tracing::{error, info};

/// The configuration `sluice run` uses without `-c`.
const DEFAULT_CONFIG: &str = include_str!("default.yaml");

#[derive(Debug, Parser)]
#[command(
    name = "sluice",
    version,
    about = "Sluice: a fast API gateway in one binary"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the gateway.
    Run {
        /// Configuration file (YAML). Without it, a built-in demo configuration runs.
        #[arg(short, long)]
        config: Option<PathBuf>,
    },
    /// Check a configuration file: parse, validate and compile it; print every error.
    Validate {
        /// Configuration file (YAML).
        #[arg(short, long)]
        config: PathBuf,
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

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Validate { config } => validate(&config),
        Command::Run { config } => report(run(config)),
        Command::Origin { listen, workers } => report(origin(listen, workers)),
    }
}

fn report(r: anyhow::Result<()>) -> ExitCode {
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            error!("{e:#}");
            eprintln!("sluice: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn validate(path: &std::path::Path) -> ExitCode {
    let plugins = sluice_plugins::builtin();
    let state = sluice_core::state::StateRegistry::default();
    let result = sluice_config::load_file_with(path, &plugins)
        .and_then(|cfg| sluice_proxy::compile(&cfg, &plugins, &state).map(|snap| (cfg, snap)));
    match result {
        Ok((_, snap)) => {
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
        Err(errors) => {
            for e in errors.iter() {
                println!("{e}");
            }
            ExitCode::FAILURE
        }
    }
}

fn init_logging(level: &str) {
    // rustls reports a client's protocol oddities (an IP address sent as SNI, as wrk and
    // many scripts do) as warnings: one line per connection, which costs more than the
    // handshake. They are the client's business; only rustls's errors reach the log.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(format!("{level},rustls=error")));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_writer(std::io::stderr)
        // A closed stderr (a log pipe that went away) must not take the gateway down:
        // reporting a failed write would itself write to stderr, and panic.
        .log_internal_errors(false)
        .try_init();
}

fn run(path: Option<PathBuf>) -> anyhow::Result<()> {
    let source = match path {
        Some(p) => sluice::Source::File(p),
        None => sluice::Source::Text {
            text: DEFAULT_CONFIG.to_owned(),
            name: "built-in default configuration".to_owned(),
        },
    };
    // Logging is configured by the file; until it is loaded, errors go to stderr as they are.
    let node = match sluice::Node::start(source, |cfg| init_logging(&cfg.log.level)) {
        Ok(n) => n,
        Err(e) => {
            init_logging("info");
            if let Some(rejected) = e.downcast_ref::<sluice::ConfigRejected>() {
                for err in rejected.errors.iter() {
                    eprintln!("{err}");
                }
            }
            return Err(e);
        }
    };
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
    if let Some(o) = server.origin_addr() {
        info!(
            "built-in origin on {o}; try: curl http://{}/hello",
            addrs[0]
        );
    }
    let drain = node.config.timeouts.drain;
    wait_for_signals(|| {
        info!("SIGHUP: re-reading {source}");
        node.reload();
    })?;
    info!(%drain, "shutting down: no new connections, finishing requests in flight");
    node.shutdown();
    info!("stopped");
    Ok(())
}

fn origin(listen: SocketAddr, workers: usize) -> anyhow::Result<()> {
    init_logging("info");
    let o = sluice_proxy::origin::Origin::start(listen, workers)
        .with_context(|| format!("cannot listen on {listen}"))?;
    info!("origin listening on {}", o.addr());
    wait_for_signals(|| info!("SIGHUP ignored: the origin has no configuration"))?;
    o.stop();
    Ok(())
}

/// Blocks until SIGTERM or SIGINT, calling `on_reload` for each SIGHUP meanwhile.
fn wait_for_signals(mut on_reload: impl FnMut()) -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let mut term = signal(SignalKind::terminate())?;
        let mut hup = signal(SignalKind::hangup())?;
        loop {
            tokio::select! {
                _ = term.recv() => return Ok(()),
                _ = hup.recv() => on_reload(),
                r = tokio::signal::ctrl_c() => return r,
            }
        }
    })?;
    Ok(())
}
