//! Issue 31, host URLs behind TLS: the E2B listener with an operator's certificate
//! (`--e2b-tls-cert`/`--e2b-tls-key`, here a test CA's leaf for `localhost` and
//! `*.e2b.localhost`, with `--e2b-domain e2b.localhost`: a wildcard needs two labels after it).
//! A real server with sandbox networks; every request goes to its loopback listener, the host
//! names `{port}-{id}.e2b.localhost` resolved there by curl itself (`--resolve`), as a browser
//! does for `*.localhost`. Needs root and curl.
//!
//! Covered: E2B's REST API over HTTPS (HTTP/2 by ALPN, HTTP/1.1 too); the URL
//! `sandbox.get_host(port)` names, opened as `https://` with nothing but the CA; plain HTTP on
//! the TLS port gets no answer; a client that does not trust the CA is refused.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use cove_api_types::CreateCommandRequest;
use cove_e2e::{server_with, Server};

/// The test CA's certificate and the listener's chain and key, under the server's data dir
/// (written by [`tweak`], which cannot capture anything).
fn tls_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("e2b-tls-test")
}

/// A CA and a leaf for `localhost` and `*.e2b.localhost` signed by it.
fn make_certificates(dir: &Path) {
    std::fs::create_dir_all(dir).expect("tls dir");
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("ca params");
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "cove e2b tls test CA");
    let ca_key = rcgen::KeyPair::generate().expect("ca key");
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).expect("ca");
    let leaf_params =
        rcgen::CertificateParams::new(vec!["localhost".to_string(), "*.e2b.localhost".to_string()])
            .expect("leaf params");
    let leaf_key = rcgen::KeyPair::generate().expect("leaf key");
    let leaf = leaf_params.signed_by(&leaf_key, &ca).expect("leaf");
    std::fs::write(dir.join("ca.pem"), ca.pem()).expect("ca.pem");
    std::fs::write(dir.join("cert.pem"), leaf.pem()).expect("cert.pem");
    std::fs::write(dir.join("key.pem"), leaf_key.serialize_pem()).expect("key.pem");
}

/// Sandbox networks on (the E2B listener reaches ports through them), the E2B listener on a
/// free loopback port with the test's certificate.
fn tweak(cfg: &mut cove_server::Config) {
    cfg.network.mode = cove_server::NetworkMode::On;
    let dir = tls_dir(&cfg.data_dir);
    make_certificates(&dir);
    cfg.e2b = Some(cove_server::E2bSettings {
        listen: "127.0.0.1:0".parse().expect("addr"),
        domain: Some("e2b.localhost".into()),
        tls: Some(cove_server::tls::TlsFiles {
            cert: dir.join("cert.pem"),
            key: dir.join("key.pem"),
        }),
    });
}

fn srv() -> &'static Server {
    server_with(tweak)
}

/// curl's output, its `-w` line last; `args` after the common ones. Bounded by `--max-time`.
fn curl(args: &[&str]) -> (bool, String, String) {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "20"])
        .args(args)
        .output();
    let out = match out {
        Ok(o) => o,
        Err(e) => {
            assert!(std::env::var("CI").is_err(), "curl is needed under CI: {e}");
            panic!("curl: {e}");
        }
    };
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_e2b_listener_speaks_tls_and_get_host_urls_open_as_https() {
    let s = srv();
    let addr = s.e2b_addr.expect("e2b listener");
    let port = addr.port();
    let ca = tls_dir(&s.data_dir).join("ca.pem");
    let ca = ca.to_str().expect("utf-8 path");
    let base = format!("https://localhost:{port}");
    let api_key = format!("X-API-Key: {}", s.token);
    let client = cove_e2e::client_of(s);
    cove_e2e::ensure_template(&client, "base").await;

    // REST over HTTP/2 (ALPN) with nothing but the CA.
    let (ok, body, err) = curl(&[
        "--cacert",
        ca,
        "--http2",
        "-w",
        "\n%{http_version} %{http_code}",
        "-H",
        &api_key,
        "-H",
        "content-type: application/json",
        "-d",
        r#"{"templateID":"base","timeout":300}"#,
        &format!("{base}/sandboxes"),
    ]);
    assert!(ok, "create over https: {err}");
    let (json, status) = body.rsplit_once('\n').expect("status line");
    assert_eq!(status, "2 201", "{body}");
    let created: serde_json::Value = serde_json::from_str(json).expect("json");
    let e2b_id = created["sandboxID"]
        .as_str()
        .expect("sandboxID")
        .to_string();
    assert_eq!(
        created["domain"],
        format!("e2b.localhost:{port}"),
        "{created}"
    );

    // A server in the sandbox, started through Cove's own API.
    let cove_id = format!("sb-{e2b_id}");
    client
        .create_command(
            &cove_id,
            &CreateCommandRequest {
                shell: Some(
                    "mkdir -p /tmp/www && echo hello-over-tls > /tmp/www/index.html && \
                     cd /tmp/www && exec python3 -m http.server 8000"
                        .into(),
                ),
                ..Default::default()
            },
        )
        .await
        .expect("start the server");

    // `get_host(8000)` is `8000-{id}.{domain}`: opened as https, HTTP/1.1 and HTTP/2 alike.
    let host = format!("8000-{e2b_id}.e2b.localhost");
    let resolve = format!("{host}:{port}:127.0.0.1");
    let url = format!("https://{host}:{port}/index.html");
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut last = String::new();
    let mut served = false;
    while Instant::now() < deadline {
        let (ok, body, err) = curl(&[
            "--cacert",
            ca,
            "--resolve",
            &resolve,
            "--http1.1",
            "-w",
            "\n%{http_code}",
            &url,
        ]);
        if ok && body.ends_with("\n200") {
            assert_eq!(body, "hello-over-tls\n\n200");
            served = true;
            break;
        }
        last = format!("{body} {err}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(served, "the port never answered over https: {last}");
    let (ok, body, err) = curl(&[
        "--cacert",
        ca,
        "--resolve",
        &resolve,
        "--http2",
        "-w",
        "\n%{http_version}",
        &url,
    ]);
    assert!(ok, "{err}");
    assert_eq!(body, "hello-over-tls\n\n2");

    // Plain HTTP on the TLS port gets no HTTP answer; an untrusting client is refused.
    let (ok, body, _) = curl(&[
        "-w",
        "%{http_code}",
        &format!("http://localhost:{port}/health"),
    ]);
    assert!(!ok && !body.starts_with('2'), "plain http answered: {body}");
    let (ok, _, err) = curl(&["--resolve", &resolve, &url]);
    assert!(!ok, "a client without the CA was let through");
    assert!(err.contains("certificate"), "{err}");

    let (ok, _, err) = curl(&[
        "--cacert",
        ca,
        "-X",
        "DELETE",
        "-H",
        &api_key,
        &format!("{base}/sandboxes/{e2b_id}"),
    ]);
    assert!(ok, "{err}");
}
