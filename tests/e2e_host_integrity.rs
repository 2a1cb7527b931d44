//! The host's integrity against a hostile tenant (runc, user namespaces as the server runs
//! them): root in a sandbox plants, at every name the node writes in the sandbox's tree, a
//! symlink to a host canary file, a symlink to a host canary directory, or a FIFO; then each
//! lifecycle path that writes there runs (wake after suspend, rollback, fork, create from an
//! imported checkpoint archive crafted with the same plants). Each must end within a bound,
//! succeed with Cove's own files in place (`/etc/hostname`, `/etc/hosts`, `/.cove`), and leave
//! the canary tree exactly as it was: content, owner, mode, no new entries.

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use cove_api_types::{
    CreateCheckpointRequest, CreateSandboxRequest, ErrorCode, ForkRequest, Operation,
    OperationState, Quotas,
};
use cove_client::Client;
use cove_e2e::archives::{archive, entries, export, fs_tar};
use cove_e2e::{client, delete, ensure_template, root_sh, sandbox, server, sh};

/// One entry of a crafted `fs.tar`: name, type, link target.
type Plant<'a> = (&'a str, tar::EntryType, &'a str);

/// Longest any one lifecycle step may take here (a blocked node thread shows up as this).
const BOUND: Duration = Duration::from_secs(90);

/// A host directory the sandbox must never change: `secret` (0600) and an empty `dir/`.
struct Canary {
    root: PathBuf,
}

/// Everything observable of the canary tree: per path, (kind, content, uid, gid, mode).
type CanaryState = BTreeMap<String, (String, Vec<u8>, u32, u32, u32)>;

impl Canary {
    fn new() -> Canary {
        let root = std::env::temp_dir().join(format!("cove-canary-{}", rand::random::<u64>()));
        std::fs::create_dir_all(root.join("dir")).expect("canary dir");
        std::fs::write(root.join("secret"), b"host canary\n").expect("canary file");
        std::fs::set_permissions(root.join("secret"), std::fs::Permissions::from_mode(0o600))
            .expect("chmod");
        Canary { root }
    }

    fn file(&self) -> String {
        self.root.join("secret").display().to_string()
    }

    fn dir(&self) -> String {
        self.root.join("dir").display().to_string()
    }

    fn state(&self) -> CanaryState {
        fn walk(at: &Path, rel: &str, out: &mut CanaryState) {
            let meta = std::fs::symlink_metadata(at).expect("stat canary");
            let (kind, content) = if meta.is_dir() {
                let mut names: Vec<_> = std::fs::read_dir(at)
                    .expect("ls canary")
                    .map(|e| e.expect("entry").file_name())
                    .collect();
                names.sort();
                for name in names {
                    let name = name.to_string_lossy().into_owned();
                    walk(&at.join(&name), &format!("{rel}/{name}"), out);
                }
                ("dir", Vec::new())
            } else if meta.is_file() {
                ("file", std::fs::read(at).expect("read canary"))
            } else {
                ("other", Vec::new())
            };
            out.insert(
                rel.to_string(),
                (
                    kind.to_string(),
                    content,
                    meta.uid(),
                    meta.gid(),
                    meta.mode(),
                ),
            );
        }
        let mut out = BTreeMap::new();
        walk(&self.root, "", &mut out);
        out
    }
}

impl Drop for Canary {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// Waits for `op` within [`BOUND`]; it must succeed.
async fn succeeds(c: &Client, op: &Operation, what: &str) {
    let op = c
        .wait_operation(&op.id, BOUND)
        .await
        .unwrap_or_else(|e| panic!("{what}: waiting: {e}"));
    assert_eq!(
        op.state,
        OperationState::Succeeded,
        "{what} did not succeed within {BOUND:?}: {:?}",
        op.error
    );
}

/// Plants, as root inside the running sandbox, a link or FIFO at every name the node writes.
async fn plant(c: &Client, id: &str, canary: &Canary) {
    let file = canary.file();
    let dir = canary.dir();
    let o = root_sh(
        c,
        id,
        &format!(
            "set -e
             ln -sfn {file} /etc/hostname.cove-tmp
             ln -sfn {file} /etc/hosts.cove-tmp
             rm -f /etc/hostname && ln -s {file} /etc/hostname
             rm -f /etc/hosts && mkfifo /etc/hosts
             ln -sfn {dir} /etc/cove-dir
             ln -sfn {file} /.cove-tmp"
        ),
    )
    .await;
    assert_eq!(o.command.exit_code, Some(0), "plant: {}", o.stderr_text());
}

/// Cove's own identity files are in place: regular files, the sandbox's own name.
async fn identity_in_place(c: &Client, id: &str, what: &str) {
    let o = sh(
        c,
        id,
        "test -f /etc/hostname && test ! -L /etc/hostname && test -f /etc/hosts \
         && test ! -p /etc/hosts && test -d /.cove/run && test \"$(cat /etc/hostname)\" = \"$(hostname)\" \
         && grep -q \"$(hostname)\" /etc/hosts && echo ok",
    )
    .await;
    assert_eq!(
        o.stdout_text(),
        "ok\n",
        "{what}: identity files not Cove's: {}",
        o.stderr_text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn planted_links_and_fifos_never_reach_the_host_on_any_lifecycle_path() {
    let c = client();
    let canary = Canary::new();
    let before = canary.state();
    let id = sandbox(&c, "tiny").await;

    // Suspend, then wake: the start of an existing tree writes the identity files.
    plant(&c, &id, &canary).await;
    succeeds(
        &c,
        &c.suspend_sandbox(&id).await.expect("suspend"),
        "suspend",
    )
    .await;
    succeeds(&c, &c.wake_sandbox(&id).await.expect("wake"), "wake").await;
    identity_in_place(&c, &id, "wake").await;
    assert_eq!(canary.state(), before, "wake changed the host canary");

    // Checkpoint with the plants, roll back to it.
    plant(&c, &id, &canary).await;
    let ck = c
        .create_checkpoint(&id, &CreateCheckpointRequest::default(), None)
        .await
        .expect("checkpoint");
    succeeds(&c, &ck.operation, "checkpoint").await;
    let op = c
        .rollback_sandbox(&id, &ck.checkpoint.id)
        .await
        .expect("rollback");
    succeeds(&c, &op, "rollback").await;
    identity_in_place(&c, &id, "rollback").await;
    assert_eq!(canary.state(), before, "rollback changed the host canary");

    // Fork with the plants.
    plant(&c, &id, &canary).await;
    let fork = c
        .fork_sandbox(
            &id,
            &ForkRequest {
                count: 1,
                metadata: BTreeMap::new(),
            },
        )
        .await
        .expect("fork");
    succeeds(&c, &fork.operation, "fork checkpoint").await;
    let forked = fork.sandboxes[0].sandbox.id.clone();
    succeeds(&c, &fork.sandboxes[0].operation, "fork create").await;
    identity_in_place(&c, &forked, "fork").await;
    assert_eq!(canary.state(), before, "fork changed the host canary");

    delete(&c, &forked).await;
    delete(&c, &id).await;
    assert_eq!(canary.state(), before, "delete changed the host canary");
}

/// A checkpoint archive crafted with no code in any sandbox: links at the names the node
/// writes (absolute ones pass as in-sandbox links), a FIFO where it reads, `/.cove` a link to a
/// host directory. The import is refused (`invalid_argument`) or a sandbox made from it starts
/// with Cove's files in place; either way the host canary is untouched and nothing blocks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crafted_checkpoint_archive_never_reaches_the_host() {
    use tar::EntryType::{Directory, Fifo, Symlink};
    // An org's key: what a tenant has, no admin token.
    let admin = client();
    ensure_template(&admin, "tiny").await;
    let org = format!("hostile-{}", rand::random::<u32>());
    admin
        .create_org(&org, Quotas::default())
        .await
        .expect("org");
    let key = admin.create_api_key(&org, "e2e").await.expect("key");
    let c = Client::new(&server().api_url, key.secret).expect("org client");
    let canary = Canary::new();
    let before = canary.state();
    let (file, dir) = (canary.file(), canary.dir());

    // A real archive's header, so only the files are crafted.
    let id = sandbox(&c, "tiny").await;
    let ck = c
        .create_checkpoint(&id, &CreateCheckpointRequest::default(), None)
        .await
        .expect("checkpoint");
    succeeds(&c, &ck.operation, "checkpoint").await;
    let exported: Vec<u8> = export(&c, &ck.checkpoint.id).await;
    let header = entries(&exported).swap_remove(0).1;
    delete(&c, &id).await;

    let crafted: Vec<(&str, Vec<Plant>)> = vec![
        (
            "links at the identity files' temp names",
            vec![
                ("etc", Directory, ""),
                ("etc/hostname.cove-tmp", Symlink, &file),
                ("etc/hosts.cove-tmp", Symlink, &file),
                ("etc/hosts", Symlink, &file),
            ],
        ),
        (
            "FIFOs at the identity files' temp names",
            vec![
                ("etc", Directory, ""),
                ("etc/hostname.cove-tmp", Fifo, ""),
                ("etc/hosts.cove-tmp", Fifo, ""),
            ],
        ),
        (
            "a FIFO where the node reads",
            vec![
                ("etc", Directory, ""),
                ("etc/hostname", Fifo, ""),
                ("etc/hosts", Fifo, ""),
            ],
        ),
        (
            "/.cove a link to a host directory",
            vec![(".cove", Symlink, &dir)],
        ),
        (
            "/etc a link to a host directory",
            vec![("etc", Symlink, &dir)],
        ),
    ];
    for (what, items) in crafted {
        let body = archive(&header, "runc", &fs_tar(&items));
        let imported = match c.import_checkpoint(body, None).await {
            Ok(ck) => ck,
            Err(e) => {
                assert_eq!(
                    e.api_body().map(|b| b.code),
                    Some(ErrorCode::InvalidArgument),
                    "{what}: {e}"
                );
                continue;
            }
        };
        let created = c
            .create_sandbox(
                &CreateSandboxRequest {
                    checkpoint: Some(imported.id.clone()),
                    ..Default::default()
                },
                None,
            )
            .await
            .expect("create from the import");
        succeeds(&c, &created.operation, what).await;
        identity_in_place(&c, &created.sandbox.id, what).await;
        assert_eq!(canary.state(), before, "{what}: the host canary changed");
        delete(&c, &created.sandbox.id).await;
        assert_eq!(canary.state(), before, "{what}: delete changed the canary");
    }
}
