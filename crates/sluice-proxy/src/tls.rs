//! TLS termination with rustls: the certificates of `ssls`, compiled with each configuration
//! and chosen per connection by the name the client asks for (SNI). A listener never holds a
//! certificate itself: it reads the ClientHello, then looks the name up in the snapshot in
//! service, so adding or replacing a certificate is a reload like any other, with no listener
//! restarted and no connection dropped.

use std::collections::HashMap;
use std::sync::Arc;

use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::Acceptor;
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::ClientCertVerifier;
use sluice_config::{SslConfig, Validator};
use tokio::net::TcpStream;
use tokio_rustls::LazyConfigAcceptor;
use tokio_rustls::server::TlsStream;
use tracing::debug;

use crate::client_io::Rewind;

/// ALPN protocols offered on HTTP listeners, without and with HTTP/2.
const HTTP_ALPN: &[&[u8]] = &[b"http/1.1"];
const H2_ALPN: &[&[u8]] = &[b"h2", b"http/1.1"];

/// Which protocols a TLS handshake offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Alpn {
    /// None: a stream route's bytes are not ours to name.
    None,
    Http1,
    H2,
}

/// The certificates of one configuration version, by server name.
#[derive(Debug, Default)]
pub(crate) struct TlsTable {
    exact: HashMap<Box<str>, usize>,
    /// `*.example.com` stored as `example.com`: one label matches the star.
    wildcard: HashMap<Box<str>, usize>,
    default: Option<usize>,
    certs: Vec<Cert>,
    /// Some certificate verifies clients: connections without one are checked per request.
    pub(crate) any_client: bool,
}

/// The 400's message when a path needs a client certificate the connection has not (NGINX's,
/// which APISIX answers with).
pub(crate) const NO_CLIENT_CERT: &str = "No required SSL certificate was sent";

/// `client.skip_mtls_uri_regex`, compiled: the paths a connection without a client
/// certificate may ask for.
pub(crate) type MtlsSkip = Arc<regex::bytes::RegexSet>;

/// A certificate, ready to serve: one rustls configuration for HTTP listeners (ALPN) and one
/// for stream routes (no ALPN: the bytes inside are not ours to name).
#[derive(Debug)]
pub(crate) struct Cert {
    pub(crate) id: Box<str>,
    pub(crate) http: Arc<ServerConfig>,
    pub(crate) h2: Arc<ServerConfig>,
    pub(crate) stream: Arc<ServerConfig>,
    /// What a connection without a client certificate may ask for: None, any path; otherwise
    /// the paths `client.skip_mtls_uri_regex` matches (none when it is not given: a
    /// connection accepted before client verification was required). Others get 400.
    pub(crate) no_cert_paths: Option<MtlsSkip>,
}

impl TlsTable {
    /// What a connection without a client certificate that asked for `sni` may ask for (the
    /// current configuration's: one changed since the handshake applies). None: any path.
    #[inline]
    pub(crate) fn no_cert_paths(&self, sni: Option<&str>) -> Option<&MtlsSkip> {
        if !self.any_client {
            return None;
        }
        self.lookup(sni)?.no_cert_paths.as_ref()
    }

    /// The certificate for `sni`: an exact name, else a wildcard one label up, else the
    /// default.
    pub(crate) fn lookup(&self, sni: Option<&str>) -> Option<&Cert> {
        let found = sni.and_then(|name| {
            let name = name.trim_end_matches('.');
            let lower;
            let name = if name.bytes().any(|b| b.is_ascii_uppercase()) {
                lower = name.to_ascii_lowercase();
                lower.as_str()
            } else {
                name
            };
            self.exact.get(name).copied().or_else(|| {
                let (_, parent) = name.split_once('.')?;
                self.wildcard.get(parent).copied()
            })
        });
        found.or(self.default).map(|i| &self.certs[i])
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.certs.is_empty()
    }
}

/// Compiles every ssl (`v` points at the configuration root). Certificates and keys are read
/// and checked here, so a bad one is an error at its path (`ssls[2].key: ...`).
pub(crate) fn compile(ssls: &[SslConfig], v: &mut Validator) -> TlsTable {
    let mut table = TlsTable::default();
    v.field("ssls", |v| {
        for (i, s) in ssls.iter().enumerate() {
            v.index(i, |v| {
                // `status: 0`: kept, not served (validation checked it).
                if !s.served() {
                    return;
                }
                let Some(cert) = build(s, v) else { return };
                let idx = table.certs.len();
                table.any_client |= cert.no_cert_paths.is_some();
                table.certs.push(cert);
                for name in &s.snis.0 {
                    let name = name.to_ascii_lowercase();
                    let name = name.trim_end_matches('.');
                    match name.strip_prefix("*.") {
                        Some(parent) => table.wildcard.insert(parent.into(), idx),
                        None => table.exact.insert(name.into(), idx),
                    };
                }
                if s.default {
                    table.default = Some(idx);
                }
            });
        }
    });
    table
}

fn build(s: &SslConfig, v: &mut Validator) -> Option<Cert> {
    let certs: Vec<CertificateDer<'static>> = v.field("cert", |v| {
        let pem = read_pem(&s.cert, v).map_err(|e| v.error(e)).ok()?;
        match CertificateDer::pem_slice_iter(&pem).collect::<Result<Vec<_>, _>>() {
            Ok(c) if c.is_empty() => {
                v.error("no certificate found (expected PEM: -----BEGIN CERTIFICATE-----)");
                None
            }
            Ok(c) => Some(c),
            Err(e) => {
                v.error(format!("invalid PEM: {e}"));
                None
            }
        }
    })?;
    let key: PrivateKeyDer<'static> = v.field("key", |v| {
        let pem = read_pem(&s.key, v).map_err(|e| v.error(e)).ok()?;
        PrivateKeyDer::from_pem_slice(&pem)
            .map_err(|e| {
                v.error(format!(
                    "no private key found (PKCS#8, PKCS#1 or SEC1 PEM): {e}"
                ))
            })
            .ok()
    })?;
    let skip_mtls = match s
        .client
        .as_ref()
        .and_then(|c| c.skip_mtls_uri_regex.as_ref())
    {
        None => None,
        Some(list) => Some(Arc::new(v.field("client", |v| {
            v.field("skip_mtls_uri_regex", |v| {
                regex::bytes::RegexSet::new(list)
                    .map_err(|e| v.error(format!("invalid regex: {e}")))
                    .ok()
            })
        })?)),
    };
    // `optional`: clients without a certificate are let in. With `skip_mtls_uri_regex` the
    // HTTP listeners let them in too (paths are checked per request); stream routes, which
    // have no paths, still require one.
    let verifier = |optional: bool, v: &mut Validator| -> Option<Arc<dyn ClientCertVerifier>> {
        let c = s.client.as_ref()?;
        v.field("client", |v| {
            v.field("ca", |v| {
                let roots = Arc::new(roots(&c.ca, v)?);
                let builder =
                    WebPkiClientVerifier::builder_with_provider(roots.clone(), provider());
                let builder = if optional {
                    builder.allow_unauthenticated()
                } else {
                    builder
                };
                let verifier = builder
                    .build()
                    .map_err(|e| v.error(format!("cannot verify clients with it: {e}")))
                    .ok()?;
                Some(match c.depth {
                    None => verifier,
                    Some(depth) => Arc::new(DepthLimited {
                        inner: verifier,
                        roots,
                        algorithms: provider().signature_verification_algorithms,
                        max_intermediates: depth.saturating_sub(1) as usize,
                    }) as Arc<dyn ClientCertVerifier>,
                })
            })
        })
    };
    let optional = s.client.as_ref().is_some_and(|c| c.optional);
    let (http_verifier, stream_verifier) = match &s.client {
        None => (None, None),
        Some(_) => {
            let http = verifier(optional || skip_mtls.is_some(), v)?;
            let stream = if skip_mtls.is_some() && !optional {
                verifier(false, v)?
            } else {
                http.clone()
            };
            (Some(http), Some(stream))
        }
    };
    // Without a certificate, a connection may ask for: any path (no client verification, or
    // `optional`), the skipped paths, or none (verification required: only a connection
    // accepted under an earlier configuration can be here).
    let no_cert_paths = match (&s.client, optional) {
        (None, _) | (Some(_), true) => None,
        (Some(_), false) => Some(
            skip_mtls
                .clone()
                .unwrap_or_else(|| Arc::new(regex::bytes::RegexSet::empty())),
        ),
    };
    // `ssl_protocols` (validation allowed only these two names).
    let versions: Vec<&'static rustls::SupportedProtocolVersion> = match &s.ssl_protocols {
        None => vec![&rustls::version::TLS13, &rustls::version::TLS12],
        Some(list) => [
            ("TLSv1.3", &rustls::version::TLS13),
            ("TLSv1.2", &rustls::version::TLS12),
        ]
        .into_iter()
        .filter(|(name, _)| list.iter().any(|p| p == name))
        .map(|(_, version)| version)
        .collect(),
    };
    let config = |verifier: Option<Arc<dyn ClientCertVerifier>>, v: &mut Validator| {
        let builder = ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&versions)
            .map_err(|e| v.error(format!("TLS setup failed: {e}")))
            .ok()?;
        let builder = match verifier {
            Some(verifier) => builder.with_client_cert_verifier(verifier),
            None => builder.with_no_client_auth(),
        };
        let mut c = builder
            .with_single_cert(certs.clone(), key.clone_key())
            .map_err(|e| v.error_at("key", format!("does not go with the certificate: {e}")))
            .ok()?;
        c.ignore_client_order = true;
        // Stateless session tickets (as NGINX's default `ssl_session_tickets on`): a
        // returning client resumes without a full handshake, on any worker, across reloads.
        if let Some(t) = ticketer() {
            c.ticketer = t;
            // One ticket per handshake (rustls sends two by default): a returning client
            // needs one, and each ticket costs both sides an encryption and a message.
            c.send_tls13_tickets = 1;
        }
        Some(c)
    };
    let base = config(http_verifier, v)?;
    let stream = if skip_mtls.is_some() && !optional {
        config(stream_verifier, v)?
    } else {
        base.clone()
    };
    let mut http = base.clone();
    http.alpn_protocols = HTTP_ALPN.iter().map(|p| p.to_vec()).collect();
    let mut h2 = base;
    h2.alpn_protocols = H2_ALPN.iter().map(|p| p.to_vec()).collect();
    Some(Cert {
        id: s.id().into(),
        http: Arc::new(http),
        h2: Arc::new(h2),
        stream: Arc::new(stream),
        no_cert_paths,
    })
}

/// Client certificates verified as rustls does, and then only if a path to a CA in `ca`
/// exists with at most `max_intermediates` certificates between (APISIX's `client.depth`,
/// OpenSSL's verify depth minus one). The path is searched by webpki, which tries every
/// chain the client's certificates allow: extra certificates a client sends do not count.
#[derive(Debug)]
struct DepthLimited {
    inner: Arc<dyn ClientCertVerifier>,
    roots: Arc<rustls::RootCertStore>,
    algorithms: rustls::crypto::WebPkiSupportedAlgorithms,
    max_intermediates: usize,
}

impl ClientCertVerifier for DepthLimited {
    fn offer_client_auth(&self) -> bool {
        self.inner.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.inner.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[rustls::DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::server::danger::ClientCertVerified, rustls::Error> {
        let verified = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)?;
        let too_deep = |e: webpki::Error| {
            rustls::Error::InvalidCertificate(rustls::CertificateError::Other(rustls::OtherError(
                Arc::new(e),
            )))
        };
        let cert = webpki::EndEntityCert::try_from(end_entity).map_err(too_deep)?;
        let max = self.max_intermediates;
        let within = |path: &webpki::VerifiedPath<'_>| {
            if path.intermediate_certificates().count() <= max {
                Ok(())
            } else {
                Err(webpki::Error::MaximumPathDepthExceeded)
            }
        };
        cert.verify_for_usage(
            self.algorithms.all,
            &self.roots.roots,
            intermediates,
            now,
            webpki::KeyUsage::client_auth(),
            None,
            Some(&within),
        )
        .map_err(too_deep)?;
        Ok(verified)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// Completes the TLS handshake of a client connection: reads the ClientHello, picks the
/// certificate for its server name in `table`, and answers, offering `alpn`. None (and
/// the connection closed) when the handshake fails, no certificate serves the name, or it takes
/// longer than `timeout` (the client header timeout).
pub(crate) async fn accept(
    io: Rewind<TcpStream>,
    table: &TlsTable,
    timeout: std::time::Duration,
    alpn: Alpn,
) -> Option<TlsStream<Rewind<TcpStream>>> {
    let handshake = async {
        let start = LazyConfigAcceptor::new(Acceptor::default(), io)
            .await
            .map_err(|e| debug!(cause = %e, "TLS: bad ClientHello"))
            .ok()?;
        let name = start.client_hello().server_name().map(str::to_owned);
        let Some(cert) = table.lookup(name.as_deref()) else {
            debug!(sni = ?name, "TLS: no certificate for this server name");
            return None;
        };
        let config = match alpn {
            Alpn::None => cert.stream.clone(),
            Alpn::Http1 => cert.http.clone(),
            Alpn::H2 => cert.h2.clone(),
        };
        start
            .into_stream(config)
            .await
            .map_err(|e| debug!(sni = ?name, ssl = %cert.id, cause = %e, "TLS handshake failed"))
            .ok()
    };
    tokio::time::timeout(timeout, handshake)
        .await
        .ok()
        .flatten()
}

/// The CA certificates in `pem` (inline or a path), for verifying peers (`v` points at the
/// field).
fn roots(pem: &str, v: &mut Validator) -> Option<rustls::RootCertStore> {
    let pem = read_pem(pem, v).map_err(|e| v.error(e)).ok()?;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        match cert {
            Ok(cert) => {
                if let Err(e) = roots.add(cert) {
                    v.error(format!("invalid CA certificate: {e}"));
                    return None;
                }
            }
            Err(e) => {
                v.error(format!("invalid PEM: {e}"));
                return None;
            }
        }
    }
    if roots.is_empty() {
        v.error("no CA certificate found");
        return None;
    }
    Some(roots)
}

/// The TLS client configuration towards an upstream's nodes (`v` points at the upstream).
/// `h2`: offer ALPN `h2` (gRPC), else `http/1.1`.
pub(crate) fn client_config(
    t: &sluice_config::UpstreamTlsConfig,
    h2: bool,
    v: &mut Validator,
) -> Option<Arc<rustls::ClientConfig>> {
    v.field("tls", |v| {
        let builder = rustls::ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .map_err(|e| v.error(format!("TLS setup failed: {e}")))
            .ok()?;
        let builder = if t.verify {
            let store = match &t.ca {
                Some(ca) => Arc::new(v.field("ca", |v| roots(ca, v))?),
                None => {
                    let system = sluice_core::tls_client::system_roots();
                    if system.is_empty() {
                        v.error_at(
                            "ca",
                            "no CA given and no system CA certificates found (install ca-certificates, set tls.ca, or tls.verify: false)",
                        );
                        return None;
                    }
                    system
                }
            };
            builder.with_root_certificates(store)
        } else {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(sluice_core::tls_client::NoVerify::new()))
        };
        let mut cfg = match (&t.cert, &t.key) {
            (Some(c), Some(k)) => {
                let certs: Vec<CertificateDer<'static>> = v.field("cert", |v| {
                    let pem = read_pem(c, v).map_err(|e| v.error(e)).ok()?;
                    CertificateDer::pem_slice_iter(&pem)
                        .collect::<Result<Vec<_>, _>>()
                        .map_err(|e| v.error(format!("invalid PEM: {e}")))
                        .ok()
                        .filter(|c| !c.is_empty())
                })?;
                let key = v.field("key", |v| {
                    let pem = read_pem(k, v).map_err(|e| v.error(e)).ok()?;
                    PrivateKeyDer::from_pem_slice(&pem)
                        .map_err(|e| v.error(format!("no private key found: {e}")))
                        .ok()
                })?;
                builder
                    .with_client_auth_cert(certs, key)
                    .map_err(|e| v.error_at("key", format!("does not go with the certificate: {e}")))
                    .ok()?
            }
            _ => builder.with_no_client_auth(),
        };
        cfg.alpn_protocols = vec![if h2 { b"h2".to_vec() } else { b"http/1.1".to_vec() }];
        Some(Arc::new(cfg))
    })
}

/// One ticket key set for the process (rotated by rustls), shared by every configuration
/// version, so tickets stay valid across reloads. None if it cannot be made (then sessions
/// resume through rustls's in-memory session cache only).
fn ticketer() -> Option<Arc<dyn rustls::server::ProducesTickets>> {
    static TICKETER: std::sync::OnceLock<Option<Arc<dyn rustls::server::ProducesTickets>>> =
        std::sync::OnceLock::new();
    TICKETER
        .get_or_init(|| rustls::crypto::aws_lc_rs::Ticketer::new().ok())
        .clone()
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    sluice_core::tls_client::provider()
}

/// PEM text given inline, or the contents of the file it names (remembered by `v`, so that a
/// reload sees when it was replaced).
fn read_pem(value: &str, v: &mut Validator) -> Result<Vec<u8>, String> {
    let t = value.trim_start();
    if t.starts_with("-----BEGIN") {
        return Ok(t.as_bytes().to_vec());
    }
    v.read_file(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ssl(id: &str, snis: &[&str], default: bool) -> SslConfig {
        let key = rcgen::KeyPair::generate().unwrap();
        let names: Vec<String> = snis.iter().map(|s| s.to_string()).collect();
        let cert = rcgen::CertificateParams::new(names.clone())
            .unwrap()
            .self_signed(&key)
            .unwrap();
        SslConfig {
            id: Some(sluice_config::Id(id.into())),
            snis: sluice_config::OneOrMany(names),
            cert: cert.pem(),
            key: key.serialize_pem(),
            default,
            ..SslConfig::default()
        }
    }

    #[test]
    fn names_are_looked_up_exact_then_wildcard_then_default() {
        let mut v = Validator::new();
        let t = compile(
            &[
                ssl("a", &["api.example.com"], false),
                ssl("w", &["*.example.com"], false),
                ssl("d", &["fallback.test"], true),
            ],
            &mut v,
        );
        v.finish().unwrap();
        let id = |sni| t.lookup(sni).map(|c| &*c.id);
        assert_eq!(id(Some("api.example.com")), Some("a"));
        assert_eq!(id(Some("API.Example.COM.")), Some("a"));
        assert_eq!(id(Some("www.example.com")), Some("w"));
        // A wildcard covers one label only.
        assert_eq!(id(Some("a.b.example.com")), Some("d"));
        assert_eq!(id(Some("example.com")), Some("d"));
        assert_eq!(id(None), Some("d"));
    }

    #[test]
    fn bad_pem_and_mismatched_keys_are_errors_at_their_paths() {
        let mut bad = ssl("a", &["a.test"], false);
        bad.cert = "-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n".into();
        let mut missing = ssl("b", &["b.test"], false);
        missing.key = "/nonexistent/key.pem".into();
        let mut mismatched = ssl("c", &["c.test"], false);
        mismatched.key = ssl("x", &["x.test"], false).key;
        let mut v = Validator::new();
        let t = compile(&[bad, missing, mismatched], &mut v);
        assert!(t.is_empty());
        let errors = v.finish().unwrap_err().to_string();
        assert!(errors.contains("ssls[0].cert: "), "{errors}");
        assert!(
            errors.contains("ssls[1].key: cannot read /nonexistent/key.pem"),
            "{errors}"
        );
        assert!(
            errors.contains("ssls[2].key: does not go with the certificate"),
            "{errors}"
        );
    }
}
