//! The `base` template's Python as a new user meets it (issue 9, item 7): `pip install` as
//! `user` works (no PEP 668 refusal), the package imports, and its console script is on `PATH`.
//! The wheel is made inside the sandbox and installed with `--no-index`, so nothing leaves it.

use cove_e2e::{client, create_running, delete, root_sh, sandbox, sh};

/// Python that writes a minimal wheel (`cove_probe` 1.0 with a console script) to /tmp/wheels.
const MAKE_WHEEL: &str = r#"
import os, zipfile
os.makedirs('/tmp/wheels', exist_ok=True)
info = 'cove_probe-1.0.dist-info'
files = {
    'cove_probe/__init__.py': 'def hello():\n    return "probe says hi"\n',
    info + '/METADATA': 'Metadata-Version: 2.1\nName: cove-probe\nVersion: 1.0\n',
    info + '/WHEEL': 'Wheel-Version: 1.0\nGenerator: cove-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n',
    info + '/entry_points.txt': '[console_scripts]\ncove-probe = cove_probe:hello\n',
}
with zipfile.ZipFile('/tmp/wheels/cove_probe-1.0-py3-none-any.whl', 'w') as z:
    for name, text in files.items():
        z.writestr(name, text)
    z.writestr(info + '/RECORD', ''.join(n + ',,\n' for n in files) + info + '/RECORD,,\n')
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pip_install_works_for_user_in_base() {
    let c = client();
    let id = sandbox(&c, "base").await;
    let made = sh(&c, &id, &format!("python3 - <<'EOF'\n{MAKE_WHEEL}\nEOF")).await;
    assert_eq!(made.command.exit_code, Some(0), "{}", made.stderr_text());

    let pip = sh(
        &c,
        &id,
        "pip install --no-index --disable-pip-version-check /tmp/wheels/cove_probe-1.0-py3-none-any.whl",
    )
    .await;
    assert_eq!(pip.command.exit_code, Some(0), "{}", pip.stderr_text());
    assert!(
        !pip.stderr_text().contains("externally-managed-environment"),
        "{}",
        pip.stderr_text()
    );
    // A user installation: the package lands in ~/.local, its script in ~/.local/bin.
    let o = sh(
        &c,
        &id,
        "python3 -c 'import cove_probe; print(cove_probe.__file__)'; command -v cove-probe",
    )
    .await;
    assert_eq!(
        o.stdout_text(),
        "/home/user/.local/lib/python3.11/site-packages/cove_probe/__init__.py\n\
         /home/user/.local/bin/cove-probe\n",
        "{}",
        o.stderr_text()
    );
    // Root's pip works too and installs system-wide.
    let o = root_sh(
        &c,
        &id,
        "pip install -q --no-index --disable-pip-version-check --root-user-action=ignore \
         /tmp/wheels/cove_probe-1.0-py3-none-any.whl && ls /usr/local/lib/python3.11/dist-packages",
    )
    .await;
    assert_eq!(o.command.exit_code, Some(0), "{}", o.stderr_text());
    assert!(
        o.stdout_text().contains("cove_probe\n"),
        "{}",
        o.stdout_text()
    );
    delete(&c, &id).await;
}

/// Issue 31, item 2: login shells (`bash -l -c`, what `cove exec --shell`, MCP `run_command`
/// and E2B's `commands.run` run) keep the sandbox's `PATH` although Debian's `/etc/profile`
/// resets it: a template's `ENV PATH` stays, and `~/.local/bin` is on it before it exists, so
/// `pip install --user x && x` works in one call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_shells_keep_the_template_path_and_local_bin() {
    use cove_api_types::{
        CreateCommandRequest, CreateSandboxRequest, CreateTemplateQuery, OperationState,
    };
    use std::time::Duration;

    let c = client();
    cove_e2e::ensure_template(&c, "base").await;
    let file = "FROM base\nENV PATH=/opt/tool/bin:$PATH\n\
        RUN mkdir -p /opt/tool/bin && printf '#!/bin/sh\\necho tool ran\\n' > /opt/tool/bin/mytool \
        && chmod 755 /opt/tool/bin/mytool && ls / > /dev/null\n";
    let mut tar = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_size(file.len() as u64);
    h.set_mode(0o644);
    h.set_cksum();
    tar.append_data(&mut h, "Dockerfile", file.as_bytes())
        .expect("tar");
    let resp = c
        .create_template(
            &CreateTemplateQuery {
                name: "login-path".into(),
                ..Default::default()
            },
            tar.into_inner().expect("tar"),
        )
        .await
        .expect("create template");
    let op = c
        .wait_operation(&resp.operation.id, Duration::from_secs(600))
        .await
        .expect("build ends");
    assert_eq!(op.state, OperationState::Succeeded, "{:?}", op.error);
    let id = create_running(
        &c,
        &CreateSandboxRequest {
            template: Some("login-path".into()),
            ..Default::default()
        },
    )
    .await;

    // A shell command (`bash -l -c`), and E2B's argv form of it.
    let o = sh(&c, &id, "mytool; echo $PATH").await;
    let text = o.stdout_text();
    assert!(text.starts_with("tool ran\n"), "{text} {}", o.stderr_text());
    let path: Vec<&str> = text.lines().nth(1).unwrap_or("").split(':').collect();
    let pos = |d: &str| path.iter().position(|p| *p == d);
    assert!(pos("/opt/tool/bin") < pos("/usr/bin"), "{path:?}");
    assert!(pos("/opt/tool/bin").is_some(), "{path:?}");
    assert!(pos("/home/user/.local/bin").is_some(), "{path:?}");
    let o = cove_e2e::run(
        &c,
        &id,
        CreateCommandRequest {
            argv: Some(vec![
                "/bin/bash".into(),
                "-l".into(),
                "-c".into(),
                "mytool && env | grep -c '^COVE_\\|^BASH_ENV=' || true".into(),
            ]),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(o.stdout_text(), "tool ran\n0\n", "{}", o.stderr_text());

    // One call: a user installation's console script runs right after the install.
    let o = sh(
        &c,
        &id,
        &format!(
            "rm -rf ~/.local; python3 - <<'EOF'\n{MAKE_WHEEL}\nEOF\n\
             pip install -q --user --no-index --disable-pip-version-check \
             /tmp/wheels/cove_probe-1.0-py3-none-any.whl && command -v cove-probe"
        ),
    )
    .await;
    assert_eq!(
        o.stdout_text(),
        "/home/user/.local/bin/cove-probe\n",
        "{}",
        o.stderr_text()
    );
    delete(&c, &id).await;
    c.delete_template("login-path").await.expect("delete");
}
