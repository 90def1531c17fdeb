//! TLS of the front door, from the same PEM files as the Python broker's flags
//! (`--broker.server-cert-file`, `--broker.server-cert-key-file`,
//! `--broker.server-ca-file`). With a CA file, clients must present a certificate
//! it signed, as `gazette.broker.protocol.dial.listen` requires.

use std::{fs, io, path::Path, sync::Arc};

use rustls::{server::WebPkiClientVerifier, RootCertStore, ServerConfig};
use rustls_pki_types::{pem::PemObject, CertificateDer, PrivateKeyDer};

/// A TLS file that can't be used, named with what is wrong with it.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("reading {path}: {source}")]
    Read { path: String, source: io::Error },
    #[error("{path} holds no PEM {what}")]
    Empty { path: String, what: &'static str },
    #[error("{path}: {why}")]
    Invalid { path: String, why: String },
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    fs::read(path).map_err(|source| TlsError::Read {
        path: path.display().to_string(),
        source,
    })
}

fn certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read(path)?;
    let certs: Vec<_> = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<_, _>>()
        .map_err(|e| TlsError::Invalid {
            path: path.display().to_string(),
            why: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(TlsError::Empty {
            path: path.display().to_string(),
            what: "certificate",
        });
    }
    Ok(certs)
}

/// The server side of the front door's TLS; ALPN offers HTTP/2, then HTTP/1.1.
pub fn server_config(
    cert_file: &Path,
    key_file: &Path,
    ca_file: Option<&Path>,
) -> Result<Arc<ServerConfig>, TlsError> {
    let chain = certs(cert_file)?;
    let key_pem = read(key_file)?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| TlsError::Invalid {
        path: key_file.display().to_string(),
        why: format!("no usable private key ({e})"),
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Invalid {
            path: cert_file.display().to_string(),
            why: e.to_string(),
        })?;
    let builder = match ca_file {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for cert in certs(ca)? {
                roots.add(cert).map_err(|e| TlsError::Invalid {
                    path: ca.display().to_string(),
                    why: e.to_string(),
                })?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| TlsError::Invalid {
                    path: ca.display().to_string(),
                    why: e.to_string(),
                })?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder
        .with_single_cert(chain, key)
        .map_err(|e| TlsError::Invalid {
            path: key_file.display().to_string(),
            why: format!("not the key of {}: {e}", cert_file.display()),
        })?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
