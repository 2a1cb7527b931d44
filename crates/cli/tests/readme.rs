//! The README's "Using it" block, run line by line, in order, on a fresh server.
//!
//! Each line runs as written in one bash script (`set -e`: the first failing line fails the
//! test, named by its number). `cove` there is this build's binary; for `cove server` it adds
//! what a test server needs (a temporary data dir, free loopback ports, the test guest agent and
//! the shared template cache), and every other verb waits until the server answers, as a person
//! typing the lines would. The working directory holds the `data.csv` the block uploads.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

/// The lines of the sh block under `## Using it`.
fn using_it_block(readme: &str) -> Vec<String> {
    let section = readme
        .split("\n## Using it")
        .nth(1)
        .expect("README has a `## Using it` section");
    let block = section
        .split("```sh\n")
        .nth(1)
        .and_then(|rest| rest.split("\n```").next())
        .expect("the section has a ```sh block");
    block.lines().map(str::to_owned).collect()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// Removes what a server under `data_dir` may have left: containers, mounts, the dir.
fn cleanup(data_dir: &Path) {
    let root = data_dir.join("runc");
    if let Ok(out) = std::process::Command::new("runc")
        .arg("--root")
        .arg(&root)
        .args(["list", "-q"])
        .output()
    {
        for id in String::from_utf8_lossy(&out.stdout).lines() {
            let _ = std::process::Command::new("runc")
                .arg("--root")
                .arg(&root)
                .args(["delete", "-f", id])
                .output();
        }
    }
    if let Ok(entries) = std::fs::read_dir(data_dir.join("sandboxes")) {
        for e in entries.flatten() {
            for mount in ["rootfs", "disk"] {
                let _ = std::process::Command::new("umount")
                    .arg("-l")
                    .arg(e.path().join(mount))
                    .output();
            }
        }
    }
    cove_e2e::remove_network_namespaces(data_dir);
    let _ = std::fs::remove_dir_all(data_dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_using_it_block_runs_in_order_on_a_fresh_server() {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md"))
            .expect("README.md");
    let lines = using_it_block(&readme);
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("cove template build tiny")),
        "the block builds `tiny` before using it"
    );
    let build_tiny = lines.iter().position(|l| l.contains("build tiny"));
    let use_tiny = lines.iter().position(|l| l.contains("--template tiny"));
    assert!(build_tiny < use_tiny, "tiny is built before it is used");

    let data_dir = tempfile::Builder::new()
        .prefix("cove-readme-")
        .tempdir()
        .expect("data dir")
        .keep();
    let work = tempfile::tempdir().expect("work dir");
    std::fs::write(work.path().join("data.csv"), "a,b\n1,2\n").expect("data.csv");
    let (api, dp) = (free_port(), free_port());
    let agent = cove_e2e::guest_agent();
    let cache = std::env::var("COVE_TEST_CACHE_DIR")
        .unwrap_or_else(|_| "/var/cache/cove/templates".to_string());
    let header = format!(
        r#"set -eE
COVE_BIN='{bin}'
export COVE_URL=http://127.0.0.1:{api} COVE_DATA_DIR='{data}'
up() {{ for _ in $(seq 1 300); do curl -fsS "$COVE_URL/healthz" >/dev/null 2>&1 && return 0; sleep 0.1; done; return 1; }}
cove() {{
  if [ "$1" = server ]; then
    shift
    exec "$COVE_BIN" server --listen 127.0.0.1:{api} --data-plane-listen 127.0.0.1:{dp} \
      --proxy-listen 127.0.0.1:0 --guest-agent '{agent}' --cache-dir '{cache}' "$@" >"$COVE_DATA_DIR/server.log" 2>&1
  fi
  up && "$COVE_BIN" "$@"
}}
trap 'echo "README line $((LINENO - HEADER)) failed: $BASH_COMMAND" >&2' ERR
trap 'kill $(jobs -p) 2>/dev/null; wait' EXIT
"#,
        bin = env!("CARGO_BIN_EXE_cove"),
        data = data_dir.display(),
        agent = agent.display(),
    );
    let header_lines = header.lines().count() + 1;
    let script = format!("{}HEADER={header_lines}\n{}\n", header, lines.join("\n"));
    let out = tokio::time::timeout(
        Duration::from_secs(1200),
        tokio::process::Command::new("bash")
            .arg("-c")
            .arg(&script)
            .current_dir(work.path())
            .env_remove("COVE_TOKEN")
            .env_remove("COVE_URL")
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the block finished within 20 min")
    .expect("bash runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let log = std::fs::read_to_string(data_dir.join("server.log")).unwrap_or_default();
    cleanup(&data_dir);
    assert!(
        out.status.success(),
        "the block failed ({:?})\n--- stdout\n{stdout}\n--- stderr\n{stderr}\n--- server log (tail)\n{}",
        out.status,
        &log[log.len().saturating_sub(4000)..]
    );
    for expected in ["hi\n", "working\ndone\n", "one-shot\n", "\"exit_code\":0"] {
        assert!(stdout.contains(expected), "{expected:?} missing:\n{stdout}");
    }
    assert!(
        work.path().join("home-copy/data.csv").is_file(),
        "cp -r copied the home dir"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}
