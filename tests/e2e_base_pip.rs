//! The `base` template's Python as a new user meets it (issue 9, item 7): `pip install` as
//! `user` works (no PEP 668 refusal), the package imports, and its console script is on `PATH`.
//! The wheel is made inside the sandbox and installed with `--no-index`, so nothing leaves it.

use cove_e2e::{client, delete, root_sh, sandbox, sh};

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
