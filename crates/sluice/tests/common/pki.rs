//! A test certificate authority (rcgen), and TLS clients: curl and rustls.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::net::TcpStream;

use super::free_port;

/// A test certificate authority and the files of the certificates it issues.
pub struct Pki {
    ca: CertifiedIssuer<'static, KeyPair>,
    pub dir: PathBuf,
}

impl Pki {
    pub fn new(name: &str) -> Pki {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, format!("Sluice test CA {name}"));
        let ca = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        let dir = std::env::temp_dir().join(format!(
            "sluice-pki-{name}-{}-{}",
            std::process::id(),
            free_port()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
        Pki { ca, dir }
    }

    pub fn ca_der(&self) -> CertificateDer<'static> {
        self.ca.der().clone()
    }

    pub fn ca_file(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }

    /// Issues a certificate for `names`; returns (cert PEM, key PEM).
    pub fn issue(&self, names: &[&str]) -> (String, String) {
        let key = KeyPair::generate().unwrap();
        let params =
            CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                .unwrap();
        let cert = params.signed_by(&key, &self.ca).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    /// Issues a certificate and writes it to files; returns their paths.
    pub fn issue_files(&self, label: &str, names: &[&str]) -> (PathBuf, PathBuf) {
        let (cert, key) = self.issue(names);
        let (c, k) = (
            self.dir.join(format!("{label}.pem")),
            self.dir.join(format!("{label}.key")),
        );
        std::fs::write(&c, cert).unwrap();
        std::fs::write(&k, key).unwrap();
        (c, k)
    }

    /// Issues a client certificate with common name `cn`, written to files.
    pub fn issue_client(&self, label: &str, cn: &str) -> (PathBuf, PathBuf) {
        self.client_files(label, cn, &self.ca, "")
    }

    /// A client certificate with common name `cn` signed by `issuer`, written to files (the
    /// certificate followed by `chain`).
    fn client_files(
        &self,
        label: &str,
        cn: &str,
        issuer: &rcgen::Issuer<'_, KeyPair>,
        chain: &str,
    ) -> (PathBuf, PathBuf) {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn.to_owned());
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        let cert = params.signed_by(&key, issuer).unwrap();
        let (c, k) = (
            self.dir.join(format!("{label}.pem")),
            self.dir.join(format!("{label}.key")),
        );
        std::fs::write(&c, cert.pem() + chain).unwrap();
        std::fs::write(&k, key.serialize_pem()).unwrap();
        (c, k)
    }

    /// Issues a client certificate with common name `cn` from an intermediate CA this CA signs;
    /// the certificate file holds the client's certificate, then the intermediate's.
    pub fn issue_client_via_intermediate(&self, label: &str, cn: &str) -> (PathBuf, PathBuf) {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, format!("{label} intermediate"));
        let intermediate =
            CertifiedIssuer::signed_by(params, KeyPair::generate().unwrap(), &self.ca).unwrap();
        self.client_files(label, cn, &intermediate, &intermediate.pem())
    }

    pub fn client_config(&self) -> Arc<rustls::ClientConfig> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.ca.der().clone()).unwrap();
        Arc::new(
            rustls::ClientConfig::builder_with_provider(Arc::new(
                rustls::crypto::aws_lc_rs::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth(),
        )
    }

    pub fn server_config(&self, names: &[&str]) -> Arc<rustls::ServerConfig> {
        self.server_config_verifying(names, None)
    }

    /// A server configuration for `names`; with `clients`, client certificates issued by that
    /// CA are required.
    pub fn server_config_verifying(
        &self,
        names: &[&str],
        clients: Option<&Pki>,
    ) -> Arc<rustls::ServerConfig> {
        let (cert, key) = self.issue(names);
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert.as_bytes())
            .collect::<Result<_, _>>()
            .unwrap();
        let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap();
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .unwrap();
        let builder = match clients {
            None => builder.with_no_client_auth(),
            Some(ca) => {
                let mut roots = rustls::RootCertStore::empty();
                roots.add(ca.ca_der()).unwrap();
                builder.with_client_cert_verifier(
                    rustls::server::WebPkiClientVerifier::builder_with_provider(
                        Arc::new(roots),
                        provider,
                    )
                    .build()
                    .unwrap(),
                )
            }
        };
        Arc::new(builder.with_single_cert(certs, key).unwrap())
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Runs curl against `https://{name}:{port}{path}` (resolved to 127.0.0.1); returns its exit
/// code and output (body, then the HTTP version and status on the last line).
pub async fn curl(name: &str, port: u16, path: &str, ca: &Path, extra: &[&str]) -> (i32, String) {
    let mut args: Vec<String> = vec![
        "-sS".into(),
        "--max-time".into(),
        "5".into(),
        "--cacert".into(),
        ca.display().to_string(),
        "--resolve".into(),
        format!("{name}:{port}:127.0.0.1"),
        "-w".into(),
        "\n%{http_version} %{http_code}".into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    args.push(format!("https://{name}:{port}{path}"));
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("curl")
            .args(&args)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap_or(-1), text)
}

pub async fn tls_connect(
    pki: &Pki,
    addr: SocketAddr,
    name: &str,
) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    tokio_rustls::TlsConnector::from(pki.client_config())
        .connect(ServerName::try_from(name.to_owned()).unwrap(), tcp)
        .await
}
