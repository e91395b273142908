//! What a TLS client trusts, shared by the engine (upstreams, etcd) and by plugins that call
//! a service (forward-auth): the crypto provider, the system's CA certificates (read once),
//! and the verifier of `verify: false`.

use std::sync::Arc;

use rustls::pki_types::CertificateDer;

/// rustls with aws-lc-rs, named explicitly so that no process-wide default is needed. Modern
/// suites only: rustls offers no CBC, RC4, 3DES or static-RSA suites at all.
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// Makes aws-lc-rs the process's default rustls provider, for the libraries that build their
/// TLS configurations with rustls's defaults (the Redis client): with more than one provider
/// compiled in (rskafka brings `ring`), rustls cannot choose one itself and those builders
/// panic. Idempotent; called where a process starts serving or builds plugins.
pub fn install_default_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    });
}

/// The system's CA certificates, read once.
pub fn system_roots() -> Arc<rustls::RootCertStore> {
    static ROOTS: std::sync::OnceLock<Arc<rustls::RootCertStore>> = std::sync::OnceLock::new();
    ROOTS
        .get_or_init(|| {
            let mut roots = rustls::RootCertStore::empty();
            for cert in rustls_native_certs::load_native_certs().certs {
                let _ = roots.add(cert);
            }
            Arc::new(roots)
        })
        .clone()
}

/// A client configuration for HTTP/1.1 towards a service: its certificate checked against the
/// system's CAs (`verify`), or not. None: `verify` and no system CA certificates.
pub fn http1_config(verify: bool) -> Option<Arc<rustls::ClientConfig>> {
    let mut cfg = config(verify)?;
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Some(Arc::new(cfg))
}

/// A client configuration towards a service of another protocol (LDAP over TLS): no ALPN,
/// otherwise as [`http1_config`].
pub fn config(verify: bool) -> Option<rustls::ClientConfig> {
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .ok()?;
    let builder = if verify {
        let roots = system_roots();
        if roots.is_empty() {
            return None;
        }
        builder.with_root_certificates(roots)
    } else {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoVerify::new()))
    };
    Some(builder.with_no_client_auth())
}

/// `tls.verify: false`: accepts any certificate and name (the handshake's signatures are
/// still checked, so the connection is encrypted to whoever holds the key).
#[derive(Debug)]
pub struct NoVerify(Arc<rustls::crypto::CryptoProvider>);

impl NoVerify {
    /// With the default provider's signature algorithms.
    pub fn new() -> NoVerify {
        NoVerify(provider())
    }
}

impl Default for NoVerify {
    fn default() -> NoVerify {
        NoVerify::new()
    }
}

impl rustls::client::danger::ServerCertVerifier for NoVerify {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
