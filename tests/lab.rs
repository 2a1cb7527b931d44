//! The fake internet of a test binary (`cove_network::lab::FakeInternet`: namespaces the test
//! makes, with HTTP and HTTPS servers, DNS, a metadata server and a "host" service), alive for
//! the whole process and removed at exit, and the server setting that makes it the gateway's
//! upstream. Test traffic goes only to addresses inside these namespaces or to loopback.

use std::sync::{Arc, OnceLock};

use cove_network::lab::{self, DNS_ADDR};

/// The fake internet of this test binary.
pub struct Lab {
    /// Name prefix of its namespaces.
    pub prefix: String,
    /// The namespace the gateway connects out from.
    pub upstream_ns: String,
    /// The CA of its HTTPS servers.
    pub ca_pem: String,
    /// What its servers received (DNS names, `Authorization` headers).
    pub seen: Arc<lab::Seen>,
}

static LAB: OnceLock<Lab> = OnceLock::new();

extern "C" fn destroy_lab() {
    if let Some(l) = LAB.get() {
        let _ = lab::destroy_namespaces(&l.prefix);
    }
}

/// Starts the fake internet (once) on a runtime thread of its own (its servers are tasks there).
pub fn fake_internet() -> &'static Lab {
    LAB.get_or_init(|| {
        let prefix = format!("l{:x}", std::process::id() % 0xff_ffff);
        let (tx, rx) = std::sync::mpsc::channel();
        let p = prefix.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                let lab = lab::FakeInternet::create(&p).await.expect("fake internet");
                tx.send((
                    lab.upstream_ns.clone(),
                    lab.ca_pem.clone(),
                    lab.seen.clone(),
                ))
                .expect("send");
                std::future::pending::<()>().await;
                drop(lab);
            });
        });
        let (upstream_ns, ca_pem, seen) = rx.recv().expect("lab up");
        // SAFETY: registers a plain `extern "C"` function; it only reads a OnceLock and runs
        // `ip`, which is sound at exit.
        unsafe {
            libc::atexit(destroy_lab);
        }
        Lab {
            prefix,
            upstream_ns,
            ca_pem,
            seen,
        }
    })
}

/// Sandbox networks on, with the fake internet as the gateway's upstream (and its pool).
pub fn use_fake_internet(cfg: &mut cove_server::Config) {
    let l = fake_internet();
    cfg.network = cove_server::NetworkSettings {
        mode: cove_server::NetworkMode::On,
        prefix: None,
        pool: Some(lab::lab_pool()),
        upstream: Some(cove_network::Upstream {
            netns: Some(l.upstream_ns.clone()),
            resolver: std::net::SocketAddrV4::new(DNS_ADDR.ip(), 53),
            tls_roots_pem: Some(l.ca_pem.clone()),
        }),
        ..Default::default()
    };
}

/// A fake internet of one test (beside the binary's shared one, for a server process of the
/// test's own), removed when dropped, even when the test fails.
pub struct OwnLab {
    lab: Option<lab::FakeInternet>,
    prefix: String,
    ca_file: std::path::PathBuf,
}

impl OwnLab {
    /// Creates it under a prefix made of `tag` (one of `[a-z]`, distinct per test of a binary)
    /// and this process's id, and writes its CA to a file (see [`OwnLab::ca_file`]).
    pub async fn create(tag: char) -> OwnLab {
        let prefix = format!("{tag}{:x}", std::process::id() % 0xff_ffff);
        let ca_file = std::env::temp_dir().join(format!("cove-{prefix}-ca.pem"));
        let mut own = OwnLab {
            lab: None,
            prefix: prefix.clone(),
            ca_file,
        };
        let l = lab::FakeInternet::create(&prefix)
            .await
            .expect("fake internet");
        std::fs::write(&own.ca_file, &l.ca_pem).expect("write the lab CA");
        own.lab = Some(l);
        own
    }

    /// The fake internet.
    pub fn lab(&self) -> &lab::FakeInternet {
        self.lab.as_ref().expect("lab")
    }

    /// A file holding the PEM of the CA that signed its HTTPS servers.
    pub fn ca_file(&self) -> &std::path::Path {
        &self.ca_file
    }

    /// The environment of a `cove-e2e-server` whose gateway goes out to this fake internet
    /// (and trusts its CA where the gateway verifies servers itself).
    pub fn server_env(&self) -> Vec<(String, String)> {
        vec![
            (
                "COVE_E2E_UPSTREAM_NS".into(),
                self.lab().upstream_ns.clone(),
            ),
            (
                "COVE_E2E_TLS_ROOTS".into(),
                self.ca_file.display().to_string(),
            ),
        ]
    }
}

impl Drop for OwnLab {
    fn drop(&mut self) {
        if let Some(l) = self.lab.take() {
            let _ = l.destroy();
        }
        let _ = lab::destroy_namespaces(&self.prefix);
        let _ = std::fs::remove_file(&self.ca_file);
    }
}
