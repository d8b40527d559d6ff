//! TLS for the RESP listener (`--tls`): the certificate, its key and,
//! for mutual TLS, the CA that signs clients' certificates, read from PEM
//! files into a rustls `ServerConfig`; and the acceptor made from it,
//! which a reload (SIGHUP) swaps for one made from the files as they are
//! then. A connection takes the acceptor current when it starts its
//! handshake; a reload that fails keeps the one before.

use parking_lot::RwLock;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{self, RootCertStore, ServerConfig};
use tokio_rustls::TlsAcceptor;

/// A client that has not finished its handshake this long after connecting
/// is let go.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Where the PEM files are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Files {
    /// The server's certificate chain, its own certificate first.
    pub cert: PathBuf,
    /// The private key of `cert` (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// When given, clients must present a certificate this CA (or any of
    /// the certificates in the file) signed: Redis's `tls-auth-clients yes`.
    pub ca: Option<PathBuf>,
}

/// The files and the acceptor made from them.
pub struct Tls {
    files: Files,
    acceptor: RwLock<TlsAcceptor>,
}

impl fmt::Debug for Tls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tls").field("files", &self.files).finish()
    }
}

impl Tls {
    /// Reads the files; the error names the file at fault and why.
    pub fn load(files: Files) -> Result<Tls, String> {
        let config = server_config(&files)?;
        Ok(Tls {
            files,
            acceptor: RwLock::new(TlsAcceptor::from(config)),
        })
    }

    pub fn files(&self) -> &Files {
        &self.files
    }

    /// Whether clients must present a certificate.
    pub fn auth_clients(&self) -> bool {
        self.files.ca.is_some()
    }

    /// The acceptor for a new connection.
    pub fn acceptor(&self) -> TlsAcceptor {
        self.acceptor.read().clone()
    }

    /// Reads the files again: new connections get what they hold now. On
    /// an error the acceptor stays as it was.
    pub fn reload(&self) -> Result<(), String> {
        let config = server_config(&self.files)?;
        *self.acceptor.write() = TlsAcceptor::from(config);
        Ok(())
    }
}

fn server_config(files: &Files) -> Result<Arc<ServerConfig>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certs = read_certs(&files.cert, "certificate")?;
    let key = PrivateKeyDer::from_pem_file(&files.key)
        .map_err(|e| pem_error(&files.key, e, "private key"))?;
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?;
    let builder = match &files.ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for cert in read_certs(ca, "CA certificate")? {
                roots
                    .add(cert)
                    .map_err(|e| format!("{}: not a usable CA certificate: {e}", ca.display()))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| format!("{}: {e}", ca.display()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let config = builder.with_single_cert(certs, key).map_err(|e| match e {
        rustls::Error::InconsistentKeys(_) => format!(
            "the private key in {} does not match the certificate in {}",
            files.key.display(),
            files.cert.display()
        ),
        rustls::Error::InvalidCertificate(e) => {
            format!("{}: not a usable certificate: {e}", files.cert.display())
        }
        e => format!("{}: not a usable private key: {e}", files.key.display()),
    })?;
    Ok(Arc::new(config))
}

/// Every certificate in a PEM file; none is an error.
fn read_certs(path: &Path, what: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| pem_error(path, e, what))?;
    if certs.is_empty() {
        return Err(pem_error(
            path,
            rustls_pki_types::pem::Error::NoItemsFound,
            what,
        ));
    }
    Ok(certs)
}

fn pem_error(path: &Path, e: rustls_pki_types::pem::Error, what: &str) -> String {
    use rustls_pki_types::pem::Error;
    let path = path.display();
    match e {
        Error::Io(e) => format!("cannot read {path}: {e}"),
        Error::NoItemsFound => format!("{path}: no PEM {what} in it"),
        e => format!("{path}: not a valid PEM {what}: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio_rustls::rustls::pki_types::ServerName;
    use tokio_rustls::rustls::ClientConfig;
    use tokio_rustls::TlsConnector;

    /// A file of testdata/tls (made by its make.sh).
    fn data(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("testdata/tls")
            .join(name)
    }

    fn files(cert: &str, key: &str, ca: Option<&str>) -> Files {
        Files {
            cert: data(cert),
            key: data(key),
            ca: ca.map(data),
        }
    }

    fn load_err(f: Files) -> String {
        Tls::load(f).unwrap_err()
    }

    #[test]
    fn errors_name_the_file_at_fault() {
        let e = load_err(files("server.pem", "unrelated.key", None));
        assert!(
            e.contains("unrelated.key does not match the certificate in")
                && e.contains("server.pem"),
            "{e}"
        );
        let e = load_err(files("server.pem", "absent.key", None));
        assert!(
            e.starts_with("cannot read ") && e.contains("absent.key"),
            "{e}"
        );
        // A certificate where the key should be: PEM, but no key in it.
        let e = load_err(files("server.pem", "server.pem", None));
        assert!(e.ends_with("server.pem: no PEM private key in it"), "{e}");
        let e = load_err(files("make.sh", "server.key", None));
        assert!(e.ends_with("make.sh: no PEM certificate in it"), "{e}");
        let e = load_err(files("server.pem", "server.key", Some("server.key")));
        assert!(
            e.ends_with("server.key: no PEM CA certificate in it"),
            "{e}"
        );
        let dir = tempfile::tempdir().unwrap();
        let broken = dir.path().join("broken.pem");
        std::fs::write(&broken, "-----BEGIN CERTIFICATE-----\nnot base64!\n").unwrap();
        let e = load_err(Files {
            cert: broken,
            key: data("server.key"),
            ca: None,
        });
        assert!(e.contains("broken.pem: not a valid PEM certificate"), "{e}");
        assert!(Tls::load(files("server.pem", "server.key", Some("ca.pem"))).is_ok());
    }

    fn client(with_cert: Option<&str>) -> TlsConnector {
        let mut roots = RootCertStore::empty();
        for c in read_certs(&data("ca.pem"), "CA").unwrap() {
            roots.add(c).unwrap();
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let b = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots);
        let config = match with_cert {
            None => b.with_no_client_auth(),
            Some(name) => b
                .with_client_auth_cert(
                    read_certs(&data(&format!("{name}.pem")), "c").unwrap(),
                    PrivateKeyDer::from_pem_file(data(&format!("{name}.key"))).unwrap(),
                )
                .unwrap(),
        };
        TlsConnector::from(Arc::new(config))
    }

    /// One handshake between `tls` and a client, then a byte each way:
    /// the certificate the server showed, or why it failed.
    async fn handshake(tls: &Tls, client: TlsConnector) -> Result<CertificateDer<'static>, String> {
        let (c, s) = tokio::io::duplex(1 << 16);
        let acceptor = tls.acceptor();
        let server = tokio::spawn(async move {
            let mut s = acceptor.accept(s).await.map_err(|e| e.to_string())?;
            let mut b = [0u8];
            s.read_exact(&mut b).await.map_err(|e| e.to_string())?;
            s.write_all(&b).await.map_err(|e| e.to_string())?;
            s.flush().await.map_err(|e| e.to_string())
        });
        let name = ServerName::try_from("localhost").unwrap();
        let client = async {
            let mut c = client.connect(name, c).await.map_err(|e| e.to_string())?;
            c.write_all(b"x").await.map_err(|e| e.to_string())?;
            let mut b = [0u8];
            c.read_exact(&mut b).await.map_err(|e| e.to_string())?;
            Ok::<_, String>(c.get_ref().1.peer_certificates().unwrap()[0].clone())
        };
        let cert = client.await;
        let served = server.await.unwrap();
        let cert = cert?;
        served?;
        Ok(cert)
    }

    #[tokio::test]
    async fn client_certificates_are_required_with_a_ca() {
        let tls = Tls::load(files("server.pem", "server.key", Some("ca.pem"))).unwrap();
        assert!(tls.auth_clients());
        assert!(handshake(&tls, client(Some("client"))).await.is_ok());
        assert!(handshake(&tls, client(None)).await.is_err());
        assert!(handshake(&tls, client(Some("stranger"))).await.is_err());
        // Without a CA, any client (none presents a certificate unasked).
        let tls = Tls::load(files("server.pem", "server.key", None)).unwrap();
        assert!(!tls.auth_clients());
        assert!(handshake(&tls, client(None)).await.is_ok());
    }

    #[tokio::test]
    async fn a_reload_serves_the_new_files_and_a_failed_one_keeps_the_old() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
        let put = |name: &str| {
            std::fs::copy(data(&format!("{name}.pem")), &cert).unwrap();
            std::fs::copy(data(&format!("{name}.key")), &key).unwrap();
        };
        let der = |name: &str| read_certs(&data(&format!("{name}.pem")), "c").unwrap()[0].clone();
        put("server");
        let tls = Tls::load(Files {
            cert: cert.clone(),
            key: key.clone(),
            ca: None,
        })
        .unwrap();
        assert_eq!(handshake(&tls, client(None)).await.unwrap(), der("server"));
        put("server2");
        // Not until a reload.
        assert_eq!(handshake(&tls, client(None)).await.unwrap(), der("server"));
        tls.reload().unwrap();
        assert_eq!(handshake(&tls, client(None)).await.unwrap(), der("server2"));
        std::fs::copy(data("unrelated.key"), &key).unwrap();
        let e = tls.reload().unwrap_err();
        assert!(e.contains("does not match"), "{e}");
        assert_eq!(handshake(&tls, client(None)).await.unwrap(), der("server2"));
    }
}
