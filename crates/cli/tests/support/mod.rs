//! What the `cove` binary's tests against the e2e harness's server share: running `cove` with
//! the server's URL and token.

use std::process::Stdio;
use std::time::Duration;

use cove_e2e::server;

/// `cove ARGS` to its end (at most 120 s): exit code, stdout, stderr.
pub async fn cove(args: &[&str]) -> (i32, String, String) {
    let s = server();
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_cove"));
    cmd.args(args)
        .env("COVE_URL", &s.api_url)
        .env("COVE_TOKEN", &s.token)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(120), cmd.output())
        .await
        .expect("cove finished within 120 s")
        .expect("cove runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `cove ARGS`, which must succeed; its stdout.
pub async fn ok(args: &[&str]) -> String {
    let (code, stdout, stderr) = cove(args).await;
    assert_eq!(code, 0, "cove {args:?}: {stderr}");
    stdout
}
