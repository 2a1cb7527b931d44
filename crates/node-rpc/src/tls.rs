//! TLS on the node link, keyed by the join token.
//!
//! Both sides have a self-signed certificate (rcgen, ECDSA P-256): the control plane keeps its
//! own in its data dir (so nodes that knew it keep trusting it across restarts), a node makes a
//! new one each start. Neither needs a CA: each side **pins** the other's exact certificate.
//!
//! - A node learns the control plane's certificate with `Discover`: it connects accepting any
//!   certificate but recording the one presented, sends a random nonce, and the control plane
//!   answers `HMAC-SHA256(join token, "cove-node-discover-v1" ‖ nonce ‖ SHA-256(its certificate))`.
//!   Only a holder of the join token can make that proof for the certificate the node saw, so a
//!   machine in the middle is caught before the node sends anything secret. From then on the
//!   node's calls (join, heartbeats) verify the pinned certificate and carry the token.
//! - A node sends its own certificate in its join (inside that verified channel); the control
//!   plane pins it for every call back to the node.
//!
//! Handshake signatures are still verified against the pinned certificate's key (rustls with
//! ring), so pinning replaces only the chain and name checks.

use std::sync::{Arc, Mutex};

use hmac::{Hmac, Mac};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use sha2::{Digest, Sha256};

/// The name in every node-link certificate; pinning, not the name, is what is checked.
pub const LINK_NAME: &str = "cove-node-link";

/// Domain separation of the discover proof (a new proof format gets a new string).
const DISCOVER_CONTEXT: &[u8] = b"cove-node-discover-v1";

/// Bytes of the nonce a node sends with `Discover`.
pub const NONCE_BYTES: usize = 32;

/// Why TLS material could not be made, read or checked.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// rcgen could not make a certificate.
    #[error("make a certificate: {0}")]
    Generate(String),
    /// A stored certificate or key is unreadable.
    #[error("read {path}: {reason}")]
    Read {
        /// The file.
        path: String,
        /// What was wrong.
        reason: String,
    },
    /// rustls refused the configuration.
    #[error("TLS configuration: {0}")]
    Config(String),
    /// The control plane's discover proof does not match the certificate it presented: a
    /// wrong join token, or a machine in the middle.
    #[error(
        "the control plane did not prove it holds the join token for the certificate it \
         presented (a wrong join token, or something between this node and the control plane)"
    )]
    BadProof,
}

/// A certificate and its private key (DER).
#[derive(Clone)]
pub struct TlsIdentity {
    /// The certificate.
    pub cert: CertificateDer<'static>,
    key: Arc<PrivatePkcs8KeyDer<'static>>,
}

impl std::fmt::Debug for TlsIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsIdentity")
            .field("cert_sha256", &hex(&Sha256::digest(&self.cert)))
            .finish_non_exhaustive()
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl TlsIdentity {
    /// A new self-signed certificate for [`LINK_NAME`] (valid for rcgen's default span).
    ///
    /// # Errors
    /// `Generate` when rcgen fails.
    pub fn generate() -> Result<TlsIdentity, TlsError> {
        let made = rcgen::generate_simple_self_signed(vec![LINK_NAME.to_string()])
            .map_err(|e| TlsError::Generate(e.to_string()))?;
        Ok(TlsIdentity {
            cert: made.cert.der().clone(),
            key: Arc::new(PrivatePkcs8KeyDer::from(made.signing_key.serialize_der())),
        })
    }

    /// An identity from its DER certificate and PKCS#8 key (as [`TlsIdentity::key_der`]
    /// returns it): how replicas share the one identity kept in their store.
    pub fn from_der(cert: Vec<u8>, key: Vec<u8>) -> TlsIdentity {
        TlsIdentity {
            cert: CertificateDer::from(cert),
            key: Arc::new(PrivatePkcs8KeyDer::from(key)),
        }
    }

    /// The private key (PKCS#8 DER), for keeping the identity where every replica reads it.
    pub fn key_der(&self) -> &[u8] {
        self.key.secret_pkcs8_der()
    }

    /// The identity kept in `dir` (`node-link.crt`, `node-link.key`, DER, the key mode 0600),
    /// made there on first use.
    ///
    /// # Errors
    /// `Read` when the files exist but cannot be read or written; `Generate` as above.
    pub fn load_or_create(dir: &std::path::Path) -> Result<TlsIdentity, TlsError> {
        use std::os::unix::fs::OpenOptionsExt;
        let (crt, key) = (dir.join("node-link.crt"), dir.join("node-link.key"));
        let read = |p: &std::path::Path| {
            std::fs::read(p).map_err(|e| TlsError::Read {
                path: p.display().to_string(),
                reason: e.to_string(),
            })
        };
        if crt.exists() && key.exists() {
            return Ok(TlsIdentity {
                cert: CertificateDer::from(read(&crt)?),
                key: Arc::new(PrivatePkcs8KeyDer::from(read(&key)?)),
            });
        }
        let made = TlsIdentity::generate()?;
        let write = |p: &std::path::Path, bytes: &[u8]| {
            use std::io::Write;
            let tmp = p.with_extension("tmp");
            std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&tmp)
                .and_then(|mut f| f.write_all(bytes).and_then(|()| f.sync_all()))
                .and_then(|()| std::fs::rename(&tmp, p))
                .map_err(|e| TlsError::Read {
                    path: p.display().to_string(),
                    reason: e.to_string(),
                })
        };
        // The key first: a crash between the two leaves no certificate without its key.
        write(&key, made.key.secret_pkcs8_der())?;
        write(&crt, &made.cert)?;
        Ok(made)
    }

    /// A rustls server configuration presenting this identity (HTTP/2 only; no client
    /// certificates: callers prove themselves with the join token).
    ///
    /// # Errors
    /// `Config` when rustls refuses the key.
    pub fn server_config(&self) -> Result<Arc<rustls::ServerConfig>, TlsError> {
        let mut cfg = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Config(e.to_string()))?
            .with_no_client_auth()
            .with_single_cert(
                vec![self.cert.clone()],
                PrivateKeyDer::Pkcs8(self.key.clone_key()),
            )
            .map_err(|e| TlsError::Config(e.to_string()))?;
        cfg.alpn_protocols = vec![b"h2".to_vec()];
        Ok(Arc::new(cfg))
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The MAC of a discover proof, fed with everything it binds.
fn discover_mac(token: &str, nonce: &[u8], cert: &[u8]) -> Hmac<Sha256> {
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(token.as_bytes()) else {
        unreachable!("HMAC takes keys of any length")
    };
    mac.update(DISCOVER_CONTEXT);
    mac.update(nonce);
    mac.update(&Sha256::digest(cert));
    mac
}

/// The discover proof for `nonce` and a certificate (32 bytes).
pub fn discover_proof(token: &str, nonce: &[u8], cert: &[u8]) -> Vec<u8> {
    discover_mac(token, nonce, cert)
        .finalize()
        .into_bytes()
        .to_vec()
}

/// Checks a discover proof in constant time.
///
/// # Errors
/// `BadProof` when it does not match.
pub fn check_discover_proof(
    token: &str,
    nonce: &[u8],
    cert: &[u8],
    proof: &[u8],
) -> Result<(), TlsError> {
    discover_mac(token, nonce, cert)
        .verify_slice(proof)
        .map_err(|_| TlsError::BadProof)
}

/// How a client checks the server's certificate: equal to a pinned one, or (discover only)
/// anything, recording what was presented.
#[derive(Debug)]
pub struct PinnedVerifier {
    pinned: Option<CertificateDer<'static>>,
    seen: Mutex<Option<CertificateDer<'static>>>,
    provider: Arc<rustls::crypto::CryptoProvider>,
}

impl PinnedVerifier {
    /// Accepts only `cert`.
    pub fn pinned(cert: CertificateDer<'static>) -> Arc<PinnedVerifier> {
        Arc::new(PinnedVerifier {
            pinned: Some(cert),
            seen: Mutex::new(None),
            provider: provider(),
        })
    }

    /// Accepts any certificate and records it: for `Discover` only, whose answer is checked
    /// against the recorded certificate before anything is trusted.
    pub fn recording() -> Arc<PinnedVerifier> {
        Arc::new(PinnedVerifier {
            pinned: None,
            seen: Mutex::new(None),
            provider: provider(),
        })
    }

    /// The certificate the server presented, once a handshake happened.
    pub fn seen(&self) -> Option<CertificateDer<'static>> {
        self.seen.lock().ok().and_then(|s| s.clone())
    }

    /// A client configuration verifying with this (HTTP/2 only).
    ///
    /// # Errors
    /// `Config` when rustls refuses the protocol versions.
    pub fn client_config(self: &Arc<Self>) -> Result<Arc<rustls::ClientConfig>, TlsError> {
        let mut cfg = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Config(e.to_string()))?
            .dangerous()
            .with_custom_certificate_verifier(self.clone())
            .with_no_client_auth();
        cfg.alpn_protocols = vec![b"h2".to_vec()];
        Ok(Arc::new(cfg))
    }
}

impl ServerCertVerifier for PinnedVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if let Some(pinned) = &self.pinned {
            if pinned.as_ref() != end_entity.as_ref() {
                return Err(rustls::Error::General(
                    "the peer's certificate is not the one pinned at join".into(),
                ));
            }
        }
        if let Ok(mut seen) = self.seen.lock() {
            *seen = Some(end_entity.clone().into_owned());
        }
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_proof_binds_the_token_the_nonce_and_the_certificate() {
        let p = discover_proof("token", b"nonce", b"cert");
        assert!(check_discover_proof("token", b"nonce", b"cert", &p).is_ok());
        assert!(check_discover_proof("other", b"nonce", b"cert", &p).is_err());
        assert!(check_discover_proof("token", b"nonce2", b"cert", &p).is_err());
        assert!(check_discover_proof("token", b"nonce", b"cert2", &p).is_err());
    }

    #[test]
    fn an_identity_is_kept_across_loads() {
        let dir = tempfile::tempdir().unwrap();
        let a = TlsIdentity::load_or_create(dir.path()).unwrap();
        let b = TlsIdentity::load_or_create(dir.path()).unwrap();
        assert_eq!(a.cert, b.cert);
        assert!(a.server_config().is_ok());
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(dir.path().join("node-link.key"))
                .unwrap()
                .permissions(),
        );
        assert_eq!(mode & 0o777, 0o600);
    }
}
