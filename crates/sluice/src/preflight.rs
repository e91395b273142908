//! What `sluice validate` checks beyond the configuration itself: what `sluice run` will need
//! from this machine (`validate` compiles too, which reads every certificate and key file).
//! Run on the machine that will serve, it finds before a start or a deploy what would stop it.

use std::io::ErrorKind;
use std::net::SocketAddr;
use std::path::Path;

use sluice_config::{Config, ConfigError, StreamProtocol};

/// What was found: errors (`run` would fail) and warnings (it may, depending on when).
#[derive(Debug, Default)]
pub struct Preflight {
    /// What would make `sluice run` fail.
    pub errors: Vec<ConfigError>,
    /// What might: an address in use now (by a running gateway, perhaps this one).
    pub warnings: Vec<ConfigError>,
}

/// Checks the access log's file and every address the node would listen on.
pub fn preflight(cfg: &Config) -> Preflight {
    let mut p = Preflight::default();
    if let Some(a) = &cfg.log.access
        && a.path != "stdout"
        && let Err(e) = writable(Path::new(&a.path))
    {
        p.errors.push(ConfigError::new("log.access.path", e));
    }
    for (i, l) in cfg.listen.iter().enumerate() {
        p.address(&format!("listen[{i}]"), l.addr, false);
    }
    if cfg.admin.enabled {
        p.address("admin.listen", cfg.admin.listen, false);
    }
    if let Some(st) = &cfg.status {
        p.address("status.listen", st.listen, false);
    }
    if let Some(o) = &cfg.origin {
        p.address("origin.listen", o.listen, false);
    }
    let mut seen = std::collections::HashSet::new();
    for (proto, list) in [
        (StreamProtocol::Tcp, &cfg.stream_proxy.tcp),
        (StreamProtocol::Udp, &cfg.stream_proxy.udp),
    ] {
        for (j, l) in list.iter().enumerate() {
            if seen.insert((l.addr, proto)) {
                let name = if proto == StreamProtocol::Udp {
                    "udp"
                } else {
                    "tcp"
                };
                p.address(
                    &format!("stream_proxy.{name}[{j}]"),
                    l.addr,
                    proto == StreamProtocol::Udp,
                );
            }
        }
    }
    for (i, r) in cfg.stream_routes.iter().enumerate() {
        for &addr in r.addrs.iter() {
            if !seen.insert((addr, r.protocol)) {
                continue;
            }
            p.address(
                &format!("stream_routes[{i}].listen"),
                addr,
                r.protocol == StreamProtocol::Udp,
            );
        }
    }
    p
}

impl Preflight {
    /// The probe `run` makes before it binds ([`sluice_proxy::ensure_unserved`]: a bind for
    /// a moment, without listening): the IP must be this machine's, the port allowed to this
    /// user. A port in use is only a warning: `validate` is often run beside the gateway it is
    /// about to reload.
    fn address(&mut self, path: &str, addr: SocketAddr, udp: bool) {
        match sluice_proxy::ensure_unserved(addr, udp) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::AddrInUse => self.warnings.push(ConfigError::new(
                path,
                format!("{addr} is in use now: `sluice run` refuses to start while another process serves it"),
            )),
            Err(e) if e.kind() == ErrorKind::AddrNotAvailable => self.errors.push(ConfigError::new(
                path,
                format!("{} is not an address of this machine", addr.ip()),
            )),
            Err(e) if e.kind() == ErrorKind::PermissionDenied => self.errors.push(ConfigError::new(
                path,
                format!(
                    "port {} needs root or the CAP_NET_BIND_SERVICE capability",
                    addr.port()
                ),
            )),
            Err(e) => self
                .errors
                .push(ConfigError::new(path, format!("cannot listen on {addr}: {e}"))),
        }
    }
}

/// Whether the access log can be opened for appending, without creating it.
fn writable(path: &Path) -> Result<(), String> {
    if path.exists() {
        return std::fs::OpenOptions::new()
            .append(true)
            .open(path)
            .map(drop)
            .map_err(|e| format!("cannot write {}: {e}", path.display()));
    }
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if !dir.is_dir() {
        return Err(format!(
            "cannot create {}: the directory {} does not exist",
            path.display(),
            dir.display()
        ));
    }
    // Creating a file is the one sure test of a directory's permissions.
    let probe = dir.join(format!(".sluice-validate-{}", std::process::id()));
    match std::fs::File::create(&probe) {
        Ok(_) => {
            let _ = std::fs::remove_file(&probe);
            Ok(())
        }
        Err(e) => Err(format!("cannot create {}: {e}", path.display())),
    }
}
