//! Crafted checkpoint archives for tests of hostile imports: raw tar entries (no checks, so
//! `..`, absolute names, links and devices can be written) and the checkpoint envelope around
//! an inner `fs.tar`.

/// A tar entry with a raw name (no checks, so `..` and `/` can be written).
pub fn raw(out: &mut Vec<u8>, name: &str, kind: tar::EntryType, link: &str, data: &[u8]) {
    let mut h = tar::Header::new_ustar();
    {
        let old = h.as_old_mut();
        old.name[..name.len()].copy_from_slice(name.as_bytes());
        old.linkname[..link.len()].copy_from_slice(link.as_bytes());
    }
    h.set_entry_type(kind);
    h.set_size(data.len() as u64);
    h.set_mode(if kind == tar::EntryType::Directory {
        0o755
    } else {
        0o644
    });
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(0);
    if kind == tar::EntryType::Block || kind == tar::EntryType::Char {
        h.set_device_major(8).expect("major");
        h.set_device_minor(0).expect("minor");
    } else {
        h.set_device_major(0).expect("major");
        h.set_device_minor(0).expect("minor");
    }
    h.set_cksum();
    out.extend_from_slice(h.as_bytes());
    out.extend_from_slice(data);
    out.resize(out.len().div_ceil(512) * 512, 0);
}

/// The end-of-archive marker (two zero blocks).
pub fn end(out: &mut Vec<u8>) {
    out.extend_from_slice(&[0u8; 1024]);
}

/// A checkpoint archive around `fs_tar`, with `header` and a runc manifest (runtime
/// `runtime`).
pub fn archive(header: &[u8], runtime: &str, fs_tar: &[u8]) -> Vec<u8> {
    let manifest = serde_json::json!({
        "version": 1, "runtime": runtime, "memory": false,
        "artifacts": [{"name": "fs.tar", "content_bytes": 0}],
    })
    .to_string();
    let mut out = Vec::new();
    raw(
        &mut out,
        "cove-checkpoint.json",
        tar::EntryType::Regular,
        "",
        header,
    );
    raw(
        &mut out,
        "snapshot.json",
        tar::EntryType::Regular,
        "",
        manifest.as_bytes(),
    );
    raw(
        &mut out,
        "artifacts/fs.tar",
        tar::EntryType::Regular,
        "",
        fs_tar,
    );
    end(&mut out);
    out
}

/// An inner `fs.tar` of the given entries.
pub fn fs_tar(items: &[(&str, tar::EntryType, &str)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, kind, link) in items {
        let data: &[u8] = if *kind == tar::EntryType::Regular {
            b"evil"
        } else {
            b""
        };
        raw(&mut out, name, *kind, link, data);
    }
    end(&mut out);
    out
}

/// The whole archive of checkpoint `id`, as `GET /v1/checkpoints/{id}/archive` streams it.
pub async fn export(c: &cove_client::Client, id: &str) -> Vec<u8> {
    use futures::TryStreamExt;
    c.checkpoint_archive(id)
        .await
        .expect("export")
        .try_fold(Vec::new(), |mut all, chunk| async move {
            all.extend_from_slice(&chunk);
            Ok(all)
        })
        .await
        .expect("archive bytes")
}

/// The entries of a tar: (name, bytes).
pub fn entries(archive: &[u8]) -> Vec<(String, Vec<u8>)> {
    let mut a = tar::Archive::new(archive);
    a.entries()
        .expect("tar")
        .map(|e| {
            let mut e = e.expect("entry");
            let name = e.path().expect("path").display().to_string();
            let mut data = Vec::new();
            std::io::Read::read_to_end(&mut e, &mut data).expect("read");
            (name, data)
        })
        .collect()
}
