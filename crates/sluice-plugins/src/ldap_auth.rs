//! `ldap-auth`: identifies a consumer by HTTP Basic credentials that an LDAP directory accepts,
//! as APISIX's `ldap-auth`.
//!
//! Route: `{base_dn, ldap_uri, use_tls: false, tls_verify: false, uid: cn,
//! hide_credentials: false, realm: ldap, timeout: 10000}`. Consumer: `{user_dn}`.
//!
//! The `Authorization: Basic` username and password (whitespace removed, as APISIX) make a
//! simple bind as `<uid>=<username>,<base_dn>` (the username escaped as RFC 4514 says); when
//! the directory accepts it, the consumer whose `user_dn` is that DN is the request's. The bind
//! waits on the worker's runtime (other requests go on) over a keep-alive connection per
//! worker and directory, taken by one request at a time (a bind changes the connection's
//! identity), bounded by `timeout`.

use std::any::Any;
use std::cell::RefCell;
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use ldap3::{Ldap, LdapConnAsync, LdapConnSettings};
use rustc_hash::FxHashMap;
use serde::Deserialize;
use serde_json::Value;
use sluice_config::Validator;
use sluice_core::http::RequestHead;
use sluice_core::plugin::{
    BuildCx, Credential, LocalFuture, Phases, PluginFactory, index_as, parse_config,
};
use sluice_core::{Ctx, Flow, Plugin, Response};

use crate::util::{Num, credential_index};

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Config {
    base_dn: String,
    ldap_uri: String,
    #[serde(default)]
    use_tls: bool,
    #[serde(default)]
    tls_verify: bool,
    #[serde(default = "cn")]
    uid: String,
    #[serde(default)]
    hide_credentials: bool,
    /// APISIX's `realm`, in the `WWW-Authenticate` of a 401.
    #[serde(default)]
    realm: Option<String>,
    /// Sluice's: milliseconds for connecting and binding (APISIX's is a fixed 10 s).
    #[serde(default)]
    timeout: Option<Num>,
}

fn cn() -> String {
    "cn".into()
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Cred {
    user_dn: String,
}

/// User DN → consumer index.
#[derive(Debug, Default)]
struct Dns(FxHashMap<String, u32>);

/// How long an idle directory connection is kept (APISIX's `keepalive = 60000`).
const IDLE: Duration = Duration::from_secs(60);
/// Idle connections kept per worker and directory.
const POOL: usize = 5;

pub(crate) struct Factory;

impl PluginFactory for Factory {
    crate::util::describe!("ldap-auth", 2540, Config, credentials: Cred);

    fn check_credential(&self, config: &Value, v: &mut Validator) {
        if let Some(c) = parse_config::<Cred>(config, v)
            && c.user_dn.trim().is_empty()
        {
            v.error_at("user_dn", "must not be empty");
        }
    }

    fn consumer_index(
        &self,
        creds: &[Credential<'_>],
        v: &mut Validator,
    ) -> Option<Arc<dyn Any + Send + Sync>> {
        let dns = credential_index(creds, "ldap-auth", "user_dn", v, |c: Cred, consumer| {
            Some((c.user_dn, consumer))
        });
        Some(Arc::new(Dns(dns)))
    }

    fn build(
        &self,
        config: &Value,
        cx: &mut BuildCx<'_>,
        v: &mut Validator,
    ) -> Option<Arc<dyn Plugin>> {
        let c: Config = parse_config(config, v)?;
        let mut ok = true;
        if c.base_dn.trim().is_empty() {
            v.error_at("base_dn", "must not be empty");
            ok = false;
        }
        let attr_ok = !c.uid.is_empty()
            && c.uid.bytes().next().is_some_and(|b| b.is_ascii_alphabetic())
            && c.uid.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
        if !attr_ok {
            v.error_at(
                "uid",
                "must be an attribute name (a letter, then letters, digits and -), such as cn or uid",
            );
            ok = false;
        }
        let url = v.field("ldap_uri", |v| match directory_url(&c.ldap_uri, c.use_tls) {
            Ok(u) => Some(u),
            Err(e) => {
                v.error(e);
                None
            }
        });
        let timeout = match c.timeout {
            None => Some(10_000),
            Some(n) => v.field("timeout", |v| crate::util::whole(n, 1, 60_000, " ms", v)),
        };
        let tls = if c.use_tls {
            match sluice_core::tls_client::config(c.tls_verify) {
                Some(cfg) => Some(Arc::new(cfg)),
                None => {
                    v.error_at(
                        "tls_verify",
                        "no system CA certificates to verify the directory with (install ca-certificates, or set tls_verify: false)",
                    );
                    return None;
                }
            }
        } else {
            None
        };
        let dns = index_as::<Dns>((cx.indexes)("ldap-auth"));
        let challenge = crate::util::realm_challenge("Basic", c.realm.as_deref(), "ldap", v)?;
        let (url, timeout) = (url?, timeout?);
        ok.then(|| {
            Arc::new(LdapAuth {
                key: format!("{url}#{}", c.tls_verify),
                url,
                tls,
                verify: c.tls_verify,
                base_dn: c.base_dn,
                uid: c.uid,
                hide: c.hide_credentials,
                timeout: Duration::from_millis(timeout),
                dns,
                challenge,
            }) as Arc<dyn Plugin>
        })
    }
}

/// `ldap_uri` (`host[:port]`, APISIX's: no scheme) as a URL: `ldaps://` with `use_tls`, the
/// port 389 when not given (APISIX's default, even with TLS).
fn directory_url(uri: &str, tls: bool) -> Result<String, String> {
    if uri.contains("://") {
        return Err(
            "must be host[:port] without a scheme (APISIX's form); set use_tls: true for ldaps"
                .into(),
        );
    }
    let scheme = if tls { "ldaps" } else { "ldap" };
    let with_port = match uri.parse::<std::net::SocketAddr>() {
        Ok(a) => a.to_string(),
        Err(_) if uri.starts_with('[') || uri.matches(':').count() > 1 => {
            // An IPv6 address without a port.
            let bare = uri.trim_start_matches('[').trim_end_matches(']');
            let ip: std::net::Ipv6Addr = bare.parse().map_err(|_| format!("invalid address \"{uri}\""))?;
            format!("[{ip}]:389")
        }
        Err(_) => match uri.rsplit_once(':') {
            Some((host, port)) => {
                let port: u16 = port
                    .parse()
                    .ok()
                    .filter(|p| *p > 0)
                    .ok_or_else(|| format!("invalid port in \"{uri}\""))?;
                format!("{host}:{port}")
            }
            None => format!("{uri}:389"),
        },
    };
    if tls && with_port.starts_with('[') {
        // ldap3 gives rustls the bracketed address as the server's name: the handshake
        // could never succeed.
        return Err("LDAPS to an IPv6 address is not supported: give the directory's host name".into());
    }
    let url = format!("{scheme}://{with_port}");
    match url.parse::<http::Uri>() {
        Ok(u) if u.host().is_some_and(|h| !h.is_empty()) && u.path().trim_matches('/').is_empty() => {
            Ok(url)
        }
        _ => Err(format!("invalid host \"{uri}\"")),
    }
}

/// A DN attribute value escaped as RFC 4514 (2.4) says: `,+"\<>;` and NUL everywhere, `#` and a
/// space first, a space last.
fn escape_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 4);
    let last = value.chars().count().saturating_sub(1);
    for (i, c) in value.chars().enumerate() {
        match c {
            ',' | '+' | '"' | '\\' | '<' | '>' | ';' => {
                out.push('\\');
                out.push(c);
            }
            '\0' => out.push_str("\\00"),
            '#' | ' ' if i == 0 => {
                out.push('\\');
                out.push(c);
            }
            ' ' if i == last => out.push_str("\\ "),
            _ => out.push(c),
        }
    }
    out
}

struct LdapAuth {
    url: String,
    /// The pool's key: the URL and how its certificate is checked.
    key: String,
    tls: Option<Arc<rustls::ClientConfig>>,
    verify: bool,
    base_dn: String,
    uid: String,
    hide: bool,
    timeout: Duration,
    /// None: no consumer has ldap-auth credentials.
    dns: Option<Arc<Dns>>,
    /// The `WWW-Authenticate` value of its 401s.
    challenge: Box<[u8]>,
}

type Idle = Vec<(Ldap, Instant)>;

thread_local! {
    /// Each worker's idle directory connections, by directory.
    static CONNS: RefCell<FxHashMap<String, Idle>> = RefCell::new(FxHashMap::default());
    /// When this worker last closed every directory's expired connections.
    static SWEPT: std::cell::Cell<Option<Instant>> = const { std::cell::Cell::new(None) };
}

/// The Basic credentials of `Authorization`, whitespace removed from both (APISIX's `gsub`).
/// None: missing scheme, bad base64, no `:`, or an empty username or password (an empty
/// password would be an unauthenticated bind, which directories accept without checking).
fn credentials(value: &[u8]) -> Option<(String, String)> {
    let rest = match value.split_at_checked(6) {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case(b"basic ") => rest.trim_ascii(),
        _ => return None,
    };
    let decoded = base64::engine::general_purpose::STANDARD.decode(rest).ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (user, password) = text.split_once(':')?;
    // PCRE's `\s`.
    let strip = |s: &str| {
        s.chars()
            .filter(|c| !matches!(c, ' ' | '\t' | '\n' | '\r' | '\x0b' | '\x0c'))
            .collect::<String>()
    };
    let (user, password) = (strip(user), strip(password));
    (!user.is_empty() && !password.is_empty()).then_some((user, password))
}

impl LdapAuth {
    /// An idle connection of this worker's to the directory. Every directory's expired ones
    /// are closed on the way (at most once per [`IDLE`]), so a directory no route names any
    /// more keeps none open.
    fn pooled(&self) -> Option<Ldap> {
        CONNS.with_borrow_mut(|conns| {
            let now = Instant::now();
            if SWEPT.get().is_none_or(|t| now.duration_since(t) >= IDLE) {
                SWEPT.set(Some(now));
                conns.retain(|_, list| {
                    list.retain_mut(|(l, since)| since.elapsed() < IDLE && !l.is_closed());
                    !list.is_empty()
                });
            }
            let list = conns.get_mut(&self.key)?;
            while let Some((mut l, since)) = list.pop() {
                if since.elapsed() < IDLE && !l.is_closed() {
                    return Some(l);
                }
            }
            None
        })
    }

    /// A new connection to the directory.
    async fn connect(&self) -> Result<Ldap, String> {
        let mut settings = LdapConnSettings::new().set_conn_timeout(self.timeout);
        if let Some(cfg) = &self.tls {
            settings = settings
                .set_config(cfg.clone())
                .set_no_tls_verify(!self.verify);
        }
        let (conn, ldap) = LdapConnAsync::with_settings(settings, &self.url)
            .await
            .map_err(|e| format!("connect {}: {e}", self.url))?;
        // On the worker's runtime: the connection lives while a handle is kept.
        tokio::spawn(async move {
            let _ = conn.drive().await;
        });
        Ok(ldap)
    }

    /// A simple bind as `dn`. Ok(false): the directory refused the credentials. A kept
    /// connection the directory closed meanwhile is replaced by a new one, once.
    async fn bind(&self, dn: &str, password: &str) -> Result<bool, String> {
        let mut kept = None;
        if let Some(mut l) = self.pooled()
            && let Ok(r) = l.with_timeout(self.timeout).simple_bind(dn, password).await
        {
            kept = Some((l, r));
        }
        let (mut ldap, result) = match kept {
            Some(done) => done,
            None => {
                let mut l = self.connect().await?;
                let r = l.with_timeout(self.timeout).simple_bind(dn, password).await;
                (l, r.map_err(|e| format!("bind: {e}"))?)
            }
        };
        // Kept for the next request (which binds again as its own user).
        if !ldap.is_closed() {
            CONNS.with_borrow_mut(|conns| {
                let list = conns.entry(self.key.clone()).or_default();
                if list.len() < POOL {
                    list.push((ldap, Instant::now()));
                }
            });
        }
        Ok(result.rc == 0)
    }

    async fn authenticate(&self, req: &mut RequestHead, cx: &mut Ctx<'_>) -> Flow {
        let refuse = |m: &str| Flow::Respond(Response::message(401, m).header("WWW-Authenticate", &self.challenge));
        let Some(value) = req.header("authorization") else {
            return refuse("Missing authorization in request");
        };
        let Some((user, password)) = credentials(value) else {
            return refuse("Invalid authorization in request");
        };
        let dn = format!("{}={},{}", self.uid, escape_value(&user), self.base_dn);
        let bound = tokio::time::timeout(self.timeout, self.bind(&dn, &password))
            .await
            .unwrap_or_else(|_| Err(format!("no answer within {:?}", self.timeout)));
        match bound {
            Ok(true) => {}
            Ok(false) => return refuse("Invalid user authorization"),
            Err(e) => {
                tracing::warn!(route = cx.route_id(), directory = %self.url, error = %e, "ldap-auth: the directory failed");
                return refuse("Invalid user authorization");
            }
        }
        let Some(dns) = &self.dns else {
            return refuse("Missing related consumer");
        };
        let Some(&consumer) = dns.0.get(&dn) else {
            return refuse("Invalid user authorization");
        };
        crate::util::attach_consumer(req, cx, consumer);
        if self.hide {
            req.remove_header("authorization");
        }
        Flow::Continue
    }
}

impl Plugin for LdapAuth {
    fn phases(&self) -> Phases {
        Phases::REWRITE_ASYNC
    }

    /// Never called by the engine (the phase is `REWRITE_ASYNC`): a caller that would run it
    /// the synchronous way gets a refusal, never a request let through unchecked.
    fn rewrite(&self, _req: &mut RequestHead, _cx: &mut Ctx<'_>) -> Flow {
        Flow::Respond(Response::error(500, "500 Internal Server Error"))
    }

    fn rewrite_async<'a>(
        &'a self,
        req: &'a mut RequestHead,
        cx: &'a mut Ctx<'_>,
    ) -> LocalFuture<'a, Flow> {
        Box::pin(self.authenticate(req, cx))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn dn_values_are_escaped_as_rfc_4514_says() {
        assert_eq!(super::escape_value("alice"), "alice");
        assert_eq!(super::escape_value("Smith,John"), "Smith\\,John");
        assert_eq!(super::escape_value("a+b=c"), "a\\+b=c");
        assert_eq!(super::escape_value("#x y "), "\\#x y\\ ");
        assert_eq!(super::escape_value("a\\b\"<>;\0"), "a\\\\b\\\"\\<\\>\\;\\00");
    }

    #[test]
    fn basic_credentials_are_read_as_apisix_reads_them() {
        let enc = |s: &str| {
            use base64::Engine as _;
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(s)
            )
        };
        let read = |s: String| super::credentials(s.as_bytes());
        assert_eq!(
            read(enc("alice:pw")),
            Some(("alice".into(), "pw".into()))
        );
        assert_eq!(
            read(enc(" al ice : p w ")),
            Some(("alice".into(), "pw".into()))
        );
        assert_eq!(
            read(enc("a:b:c")),
            Some(("a".into(), "b:c".into())),
            "the password is what follows the first colon (RFC 7617)"
        );
        assert_eq!(read(enc("alice:")), None, "no unauthenticated binds");
        assert_eq!(read(enc("alice")), None);
        assert_eq!(read("Bearer x".into()), None);
        assert_eq!(read("Basic !!!".into()), None);
    }

    #[test]
    fn directory_addresses_are_apisixs_host_and_port() {
        use super::directory_url as u;
        assert_eq!(u("127.0.0.1:1389", false).unwrap(), "ldap://127.0.0.1:1389");
        assert_eq!(u("ldap.example.org", true).unwrap(), "ldaps://ldap.example.org:389");
        assert_eq!(u("[::1]:636", false).unwrap(), "ldap://[::1]:636");
        assert!(u("[::1]:636", true).unwrap_err().contains("IPv6"));
        assert_eq!(u("::1", false).unwrap(), "ldap://[::1]:389");
        assert!(u("ldap://x:389", false).unwrap_err().contains("without a scheme"));
        assert!(u("x:0", false).unwrap_err().contains("invalid port"));
        assert!(u("x:y", false).unwrap_err().contains("invalid port"));
        assert!(u("a/b", false).is_err());
    }
}
