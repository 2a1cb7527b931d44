//! `cove checkpoint`, `cove rollback`, `cove fork` and `cove create --checkpoint` against a
//! real server (the e2e harness: runc, `tiny` sandboxes).

use cove_e2e::{client, delete, sandbox, sh};

mod support;
use support::{cove, ok};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoint_rollback_fork_export_import() {
    let c = client();
    let id = sandbox(&c, "tiny").await;
    sh(&c, &id, "echo v1 > /home/user/f").await;
    let made = ok(&["checkpoint", "create", &id, "--name", "v1"]).await;
    assert!(made.contains("paused"), "{made}");
    let ck = made.split_whitespace().next().expect("id").to_string();
    assert!(ck.starts_with("ck-"), "{made}");
    let listed = ok(&["checkpoint", "ls", &id]).await;
    assert!(listed.contains(&ck) && listed.contains("ready"), "{listed}");

    sh(&c, &id, "echo v2 > /home/user/f").await;
    let rolled = ok(&["rollback", &id, &ck]).await;
    assert!(rolled.starts_with(&format!("{id} running")), "{rolled}");
    assert_eq!(sh(&c, &id, "cat /home/user/f").await.stdout_text(), "v1\n");

    let forks = ok(&["fork", &id, "-n", "2", "-m", "role=try"]).await;
    let forks: Vec<&str> = forks.lines().collect();
    assert_eq!(forks.len(), 2, "{forks:?}");
    for f in &forks {
        assert_eq!(sh(&c, f, "cat /home/user/f").await.stdout_text(), "v1\n");
    }

    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("ck.tar");
    let file = file.to_str().expect("utf-8 path");
    ok(&["checkpoint", "export", &ck, "-o", file]).await;
    let imported = ok(&["checkpoint", "import", file, "--name", "copy"]).await;
    let imported = imported.trim();
    assert!(imported.starts_with("ck-") && imported != ck, "{imported}");
    let new = ok(&["create", "--checkpoint", imported]).await;
    let new = new.trim();
    assert_eq!(sh(&c, new, "cat /home/user/f").await.stdout_text(), "v1\n");

    ok(&["checkpoint", "rm", &ck, imported]).await;
    let (code, _, stderr) = cove(&["checkpoint", "get", &ck]).await;
    assert_ne!(code, 0);
    assert!(stderr.contains("checkpoint_not_found"), "{stderr}");
    for s in forks.iter().copied().chain([new, id.as_str()]) {
        delete(&c, s).await;
    }
}
