//! A real S3 server for tests of the snapshot store: `s3s-fs` (crates.io, an S3 API over a
//! directory; `scripts/install-deps.sh` installs it into `/var/cache/cove-tools/bin`) serving
//! one bucket from a temporary directory, and the `AWS_*` settings a server or node process
//! reads to reach it.

use std::net::{IpAddr, Ipv4Addr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command as Process, Stdio};
use std::time::{Duration, Instant};

/// The bucket every [`S3Server`] serves.
pub const BUCKET: &str = "cove-snapshots";

/// `s3s-fs` serving a temporary directory; killed when dropped.
pub struct S3Server {
    root: tempfile::TempDir,
    addr: String,
    child: Child,
}

/// The `s3s-fs` binary: `COVE_S3S_FS`, else the one install-deps.sh installs, else `PATH`.
fn s3s_fs() -> PathBuf {
    if let Ok(p) = std::env::var("COVE_S3S_FS") {
        return p.into();
    }
    let installed = Path::new("/var/cache/cove-tools/bin/s3s-fs");
    if installed.exists() {
        return installed.into();
    }
    let on_path = std::env::var("PATH")
        .unwrap_or_default()
        .split(':')
        .map(|d| Path::new(d).join("s3s-fs"))
        .find(|p| p.exists());
    on_path.unwrap_or_else(|| {
        panic!("s3s-fs not found: run scripts/install-deps.sh (it installs it from crates.io)")
    })
}

impl S3Server {
    /// Serves on a free loopback port.
    pub fn start() -> S3Server {
        Self::start_on(IpAddr::V4(Ipv4Addr::LOCALHOST))
    }

    /// Serves on a free port of `host` (loopback, or an address of a network the test made).
    pub fn start_on(host: IpAddr) -> S3Server {
        let root = tempfile::tempdir().expect("s3 root");
        // s3s-fs maps a bucket to a directory under its root.
        std::fs::create_dir(root.path().join(BUCKET)).expect("bucket");
        let port = std::net::TcpListener::bind((host, 0))
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let addr = std::net::SocketAddr::new(host, port).to_string();
        let child = Process::new(s3s_fs())
            .args(["--host", &host.to_string(), "--port", &port.to_string()])
            .args([
                "--access-key",
                "cove-e2e",
                "--secret-key",
                "cove-e2e-secret",
            ])
            .arg(root.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn s3s-fs");
        let until = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(&addr).is_err() {
            assert!(Instant::now() < until, "s3s-fs did not listen on {addr}");
            std::thread::sleep(Duration::from_millis(50));
        }
        S3Server { root, addr, child }
    }

    /// The environment `cove server --snapshot-store s3://...` (and `cove node`) reads its S3
    /// settings from.
    pub fn env(&self, store_url: &str) -> Vec<(String, String)> {
        [
            ("COVE_E2E_SNAPSHOT_STORE", store_url.to_string()),
            ("AWS_ENDPOINT_URL", format!("http://{}", self.addr)),
            ("AWS_ALLOW_HTTP", "true".into()),
            ("AWS_REGION", "us-east-1".into()),
            ("AWS_ACCESS_KEY_ID", "cove-e2e".into()),
            ("AWS_SECRET_ACCESS_KEY", "cove-e2e-secret".into()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }

    /// Every object in the bucket: (key, bytes).
    pub fn objects(&self) -> Vec<(String, u64)> {
        fn walk(dir: &Path, base: &Path, out: &mut Vec<(String, u64)>) {
            for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                let path = entry.path();
                let meta = entry.metadata().expect("meta");
                if meta.is_dir() {
                    walk(&path, base, out);
                } else {
                    let key = path.strip_prefix(base).expect("under base");
                    out.push((key.display().to_string(), meta.len()));
                }
            }
        }
        let mut out = Vec::new();
        let base = self.root.path().join(BUCKET);
        walk(&base, &base, &mut out);
        out
    }

    /// Bytes of the objects whose key contains `needle`.
    pub fn bytes_named(&self, needle: &str) -> u64 {
        self.objects()
            .iter()
            .filter(|(k, _)| k.contains(needle))
            .map(|(_, n)| n)
            .sum()
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
