//! C11: paths are resolved inside the sandbox's own root. `..` (plain or percent-encoded) and
//! symlinks pointing anywhere never reach a host file; listing reports symlinks (broken ones
//! too) by their own metadata; removing a symlink removes the link only. (C11 step 4 does not
//! apply: there is no workspace-scoped mode.)

use cove_api_types::{ErrorCode, FileType};
use cove_client::UploadOptions;
use cove_e2e::{client, delete, random_bytes, root_sh, sandbox, sh};

fn unique() -> String {
    random_bytes(8).iter().map(|b| format!("{b:02x}")).collect()
}

/// Host paths named `name` under the host's temporary dirs and the server's data dir.
fn host_find(name: &str) -> Vec<String> {
    let data_dir = cove_e2e::server().data_dir.clone();
    let out = std::process::Command::new("find")
        .args(["/tmp", "/var/tmp"])
        .arg(&data_dir)
        .args(["/var/lib/cove", "-xdev", "-name", name])
        .output()
        .expect("find");
    let mut hits: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    hits.sort();
    hits.dedup();
    hits
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c11_step1_dotdot_writes_stay_inside_the_sandbox() {
    let c = client();
    let id = sandbox(&c, "base").await;
    let name = format!("trav-{}", unique());
    let info = c
        .upload(
            &id,
            &format!("/tmp/../../../../tmp/{name}"),
            "x",
            &UploadOptions::default(),
        )
        .await
        .expect("upload");
    assert_eq!(info.path, format!("/tmp/{name}"));
    assert_eq!(
        sh(&c, &id, &format!("cat /tmp/{name}")).await.stdout_text(),
        "x"
    );
    // The only copy on the host is the sandbox's own file storage.
    let own = cove_e2e::server()
        .data_dir
        .join("sandboxes")
        .join(&id)
        .join("upper/tmp")
        .join(&name);
    for hit in host_find(&name) {
        assert_eq!(std::path::Path::new(&hit), own, "found on the host: {hit}");
    }
    // Relative paths with `..` resolve from the user's home, inside the sandbox.
    c.upload(
        &id,
        &format!("../../../../tmp/rel-{name}"),
        "y",
        &UploadOptions::default(),
    )
    .await
    .expect("upload");
    assert_eq!(
        sh(&c, &id, &format!("cat /tmp/rel-{name}"))
            .await
            .stdout_text(),
        "y"
    );
    assert!(host_find(&format!("rel-{name}"))
        .iter()
        .all(|h| h.contains(&format!("/sandboxes/{id}/upper/"))));
    delete(&c, &id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c11_step2_encoded_dotdot_reads_the_guests_file_or_400() {
    let c = client();
    let id = sandbox(&c, "base").await;
    let guest = sh(&c, &id, "cat /etc/hostname").await.stdout_text();
    assert_eq!(guest, format!("{id}\n"));
    let host = std::fs::read_to_string("/etc/hostname").unwrap_or_default();
    let s = cove_e2e::server();
    let http = reqwest::Client::new();
    let paths = [
        "..%2f..%2f..%2fetc%2fhostname",
        "%2e%2e/%2e%2e/etc/hostname",
        "%2e%2e%2f%2e%2e%2f%2e%2e%2f%2e%2e%2fetc%2fhostname",
        "/etc/./../etc/hostname",
        "%2Fetc%2F.%2F..%2F..%2F..%2Fetc%2Fhostname",
        "....%2f%2f..%2f%2fetc%2fhostname",
    ];
    for p in paths {
        let resp = http
            .get(format!("{}/v1/sandboxes/{id}/files?path={p}", s.api_url))
            .bearer_auth(&s.token)
            .send()
            .await
            .expect("get");
        let status = resp.status().as_u16();
        let body = resp.text().await.expect("body");
        assert!(
            (status == 200 && body == guest)
                || status == 400
                || (status == 404 && p.starts_with("....")),
            "{p}: {status} {body:?}"
        );
        if !host.is_empty() && host != guest {
            assert_ne!(body, host, "{p} returned the host's hostname");
        }
    }
    // `..` in the URL path itself names no route.
    let resp = http
        .get(format!(
            "{}/v1/sandboxes/{id}/files/..%2f..%2fetc%2fhostname",
            s.api_url
        ))
        .bearer_auth(&s.token)
        .send()
        .await
        .expect("get");
    assert_eq!(resp.status().as_u16(), 404);
    delete(&c, &id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c11_step3_symlinks_resolve_inside_the_sandbox() {
    let c = client();
    let id = sandbox(&c, "base").await;
    let data_dir = cove_e2e::server().data_dir.clone();
    let o = sh(
        &c,
        &id,
        &format!(
            "ln -s / /tmp/rootlink && ln -s /nonexistent /tmp/broken && \
             ln -s /etc/hostname /tmp/flink && ln -s {d}/admin.token /tmp/hosttoken && \
             ln -s {d} /tmp/hostdir && echo ok",
            d = data_dir.display()
        ),
    )
    .await;
    assert_eq!(o.stdout_text(), "ok\n");
    let guest = sh(&c, &id, "cat /etc/hostname").await.stdout_text();
    let read = c
        .read_file(&id, "/tmp/rootlink/etc/hostname")
        .await
        .expect("read");
    assert_eq!(String::from_utf8_lossy(&read), guest);
    assert_eq!(
        String::from_utf8_lossy(&c.read_file(&id, "/tmp/flink").await.expect("read")),
        guest
    );

    let entries = c.list_files(&id, "/tmp", 1).await.expect("list").entries;
    for (name, target) in [
        ("rootlink", "/"),
        ("broken", "/nonexistent"),
        ("flink", "/etc/hostname"),
    ] {
        let e = entries
            .iter()
            .find(|e| e.name == name)
            .unwrap_or_else(|| panic!("{name} not listed"));
        assert_eq!(e.file_type, FileType::Symlink, "{name}");
        assert_eq!(e.symlink_target.as_deref(), Some(target), "{name}");
        assert_eq!(e.size, target.len() as u64, "{name}: the link's own size");
    }

    // A link to a host path names the sandbox's path of that name, which does not exist.
    let err = c
        .read_file(&id, "/tmp/hosttoken")
        .await
        .expect_err("no host file");
    assert_eq!(
        err.api_body().map(|b| b.code),
        Some(ErrorCode::FileNotFound)
    );
    // Writing through a link to a host directory: the sandbox has no such directory, so the
    // link dangles (like `mkdir -p` through it, that is `409 already_exists`)...
    let name = format!("pwned-{}", unique());
    let err = c
        .upload(
            &id,
            &format!("/tmp/hostdir/{name}"),
            "z",
            &UploadOptions::default(),
        )
        .await
        .expect_err("a dangling link is in the way");
    assert_eq!(
        err.api_body().map(|b| b.code),
        Some(ErrorCode::AlreadyExists)
    );
    assert!(
        !data_dir.join(&name).exists(),
        "the upload reached the host's data dir"
    );
    // ...and once the sandbox has a directory of that name, the file lands there.
    sh(&c, &id, &format!("mkdir -p {}", data_dir.display())).await;
    c.upload(
        &id,
        &format!("/tmp/hostdir/{name}"),
        "z",
        &UploadOptions::default(),
    )
    .await
    .expect("upload");
    assert!(
        !data_dir.join(&name).exists(),
        "the upload reached the host's data dir"
    );
    assert_eq!(
        sh(&c, &id, &format!("cat {}/{name}", data_dir.display()))
            .await
            .stdout_text(),
        "z"
    );

    c.remove_file(&id, "/tmp/rootlink")
        .await
        .expect("remove the link");
    let o = root_sh(
        &c,
        &id,
        "test -e /etc/hostname && echo intact; test -L /tmp/rootlink || echo link-gone",
    )
    .await;
    assert_eq!(o.stdout_text(), "intact\nlink-gone\n");
    delete(&c, &id).await;
}
