//! TLS on a client-facing listener from an operator's certificate (`--e2b-tls-cert`,
//! `--e2b-tls-key`): a wildcard certificate for `*.DOMAIN` and `DOMAIN` lets E2B's SDKs use
//! their default `https://` URLs for the API, `envd` and `get_host()` alike.
//!
//! The files are the operator's (never a tenant's): read once at start, PEM, at most
//! [`MAX_PEM_BYTES`] each; a missing, unreadable or malformed file fails the start with a message
//! naming the flag and the file (never its bytes).

use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// Largest certificate chain or key file read (a chain of a few certificates is ~10 KiB).
pub const MAX_PEM_BYTES: u64 = 1024 * 1024;

/// A certificate chain and its private key, as PEM files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate chain, leaf first (PEM `CERTIFICATE` blocks).
    pub cert: std::path::PathBuf,
    /// The leaf's private key (PEM PKCS#8, PKCS#1 or SEC1).
    pub key: std::path::PathBuf,
}

/// The acceptor of a listener serving `files`: HTTP/2 and HTTP/1.1 offered through ALPN.
///
/// Errors: a file missing, larger than [`MAX_PEM_BYTES`], without a certificate or key, or a
/// key that does not fit the certificate.
pub fn acceptor(flag: &str, files: &TlsFiles) -> anyhow::Result<tokio_rustls::TlsAcceptor> {
    let cert_pem = read_pem(&format!("{flag}-cert"), &files.cert)?;
    let key_pem = read_pem(&format!("{flag}-key"), &files.key)?;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| anyhow::anyhow!("--{flag}-cert {}: {e}", files.cert.display()))?;
    if chain.is_empty() {
        bail!(
            "--{flag}-cert {}: no PEM CERTIFICATE block",
            files.cert.display()
        );
    }
    let key = PrivateKeyDer::from_pem_slice(&key_pem)
        .map_err(|e| anyhow::anyhow!("--{flag}-key {}: {e}", files.key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .with_context(|| {
            format!(
                "--{flag}-cert {} with --{flag}-key {}",
                files.cert.display(),
                files.key.display()
            )
        })?;
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(cfg)))
}

fn read_pem(flag: &str, path: &Path) -> anyhow::Result<Vec<u8>> {
    let meta = std::fs::metadata(path).with_context(|| format!("--{flag} {}", path.display()))?;
    if !meta.is_file() || meta.len() > MAX_PEM_BYTES {
        bail!(
            "--{flag} {}: not a regular file of at most {} KiB",
            path.display(),
            MAX_PEM_BYTES / 1024
        );
    }
    std::fs::read(path).with_context(|| format!("--{flag} {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, body: &str) -> std::path::PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, body).expect("write");
        p
    }

    #[test]
    fn a_certificate_and_its_key_make_an_acceptor_and_bad_files_are_named() {
        let dir = tempfile::tempdir().expect("temp dir");
        let ck = rcgen::generate_simple_self_signed(vec!["localhost".into()]).expect("ok");
        let files = TlsFiles {
            cert: write(dir.path(), "c.pem", &ck.cert.pem()),
            key: write(dir.path(), "k.pem", &ck.signing_key.serialize_pem()),
        };
        acceptor("e2b-tls", &files).expect("ok");

        let missing = TlsFiles {
            cert: dir.path().join("nope.pem"),
            key: files.key.clone(),
        };
        let err = format!(
            "{:#}",
            acceptor("e2b-tls", &missing).err().expect("an error")
        );
        assert!(
            err.contains("--e2b-tls-cert") && err.contains("nope.pem"),
            "{err}"
        );

        let secret = "-----BEGIN NOT A CERT-----\nc2VjcmV0\n-----END NOT A CERT-----\n";
        let not_pem = TlsFiles {
            cert: write(dir.path(), "x.pem", secret),
            key: files.key.clone(),
        };
        let err = format!(
            "{:#}",
            acceptor("e2b-tls", &not_pem).err().expect("an error")
        );
        assert!(err.contains("no PEM CERTIFICATE"), "{err}");
        assert!(!err.contains("c2VjcmV0"), "file bytes echoed: {err}");

        let other = rcgen::generate_simple_self_signed(vec!["other".into()]).expect("ok");
        let mismatched = TlsFiles {
            cert: files.cert.clone(),
            key: write(dir.path(), "k2.pem", &other.signing_key.serialize_pem()),
        };
        assert!(acceptor("e2b-tls", &mismatched).is_err());
    }
}
