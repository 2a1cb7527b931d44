//! Importing an OCI image archive (blocking): a `docker save` tarball (`manifest.json`) or an
//! OCI image layout tarball (`index.json`, `blobs/<alg>/<hex>`), read with `oci-spec`'s image
//! types. The first image's layers are applied in order onto an empty tree with their
//! whiteouts honoured (`layer.rs`; plain or gzip layers), and its config's `Env`,
//! `WorkingDir` and `User` become the template's defaults. The archive is read once for its
//! JSON documents and once per layer; layer digests are not verified.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use oci_spec::image::{ImageConfiguration, ImageIndex, ImageManifest};
use serde::Deserialize;

use super::files::io;
use super::{files, layer, recipe, BuildError, TemplateDefaults};

/// Largest JSON document read from an archive, in bytes.
const MAX_JSON_BYTES: u64 = 4 << 20;

fn bad(detail: impl Into<String>) -> BuildError {
    BuildError::Failed {
        step: "oci import".into(),
        detail: detail.into(),
    }
}

/// One image of a `docker save` `manifest.json`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct DockerImage {
    config: String,
    layers: Vec<String>,
}

/// Imports the image archive at `archive` into the empty directory `root` (created); returns
/// the image's defaults (user `root`, workdir `/` where the image sets none). The files every
/// recipe writes (`/etc/hostname`, `/etc/hosts`, an empty `/etc/resolv.conf`) are written last.
///
/// # Errors
/// [`BuildError::Failed`] for an archive that is not an image or a layer that leaves the tree;
/// `Io` for the node's files.
pub(crate) fn import(archive: &Path, root: &Path) -> Result<TemplateDefaults, BuildError> {
    let docs = json_documents(archive)?;
    let (config, layers) = if let Some(m) = docs.get("manifest.json") {
        let images: Vec<DockerImage> =
            serde_json::from_slice(m).map_err(|e| bad(format!("manifest.json: {e}")))?;
        let image = images
            .into_iter()
            .next()
            .ok_or_else(|| bad("manifest.json lists no image"))?;
        (image.config, image.layers)
    } else if let Some(i) = docs.get("index.json") {
        let index =
            ImageIndex::from_reader(i.as_slice()).map_err(|e| bad(format!("index.json: {e}")))?;
        let first = index
            .manifests()
            .first()
            .ok_or_else(|| bad("index.json lists no manifest"))?;
        let path = blob_path(first.digest().algorithm().as_ref(), first.digest().digest());
        let m = docs
            .get(&path)
            .ok_or_else(|| bad(format!("{path} (the manifest) is not in the archive")))?;
        let manifest =
            ImageManifest::from_reader(m.as_slice()).map_err(|e| bad(format!("manifest: {e}")))?;
        let d = manifest.config().digest();
        let config = blob_path(d.algorithm().as_ref(), d.digest());
        let layers = manifest
            .layers()
            .iter()
            .map(|l| blob_path(l.digest().algorithm().as_ref(), l.digest().digest()))
            .collect();
        (config, layers)
    } else {
        return Err(bad(
            "neither manifest.json nor index.json: not an image archive",
        ));
    };
    let config = docs
        .get(clean(&config).as_str())
        .ok_or_else(|| bad(format!("{config} (the image config) is not in the archive")))?;
    let config = image_config(config)?;

    std::fs::create_dir_all(root).map_err(io(root, "create"))?;
    for l in &layers {
        apply_from_archive(archive, &clean(l), root)?;
    }
    files::write_files(root, recipe::COMMON_FILES)?;

    let c = config.config().clone().unwrap_or_default();
    let mut env = BTreeMap::new();
    for kv in c.env().clone().unwrap_or_default() {
        if let Some((k, v)) = kv.split_once('=') {
            env.insert(k.to_string(), v.to_string());
        }
    }
    let user = c
        .user()
        .clone()
        .filter(|u| !u.is_empty())
        .map(|u| u.split(':').next().unwrap_or("root").to_string())
        .unwrap_or_else(|| "root".into());
    let workdir = c
        .working_dir()
        .clone()
        .filter(|w| w.starts_with('/'))
        .unwrap_or_else(|| "/".into());
    Ok(TemplateDefaults { user, workdir, env })
}

/// The image config; `history`, optional in the OCI spec but required by `oci-spec`'s type,
/// defaults to empty.
fn image_config(bytes: &[u8]) -> Result<ImageConfiguration, BuildError> {
    let mut v: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| bad(format!("image config: {e}")))?;
    if let Some(obj) = v.as_object_mut() {
        obj.entry("history")
            .or_insert_with(|| serde_json::Value::Array(Vec::new()));
    }
    serde_json::from_value(v).map_err(|e| bad(format!("image config: {e}")))
}

fn blob_path(algorithm: &str, hex: &str) -> String {
    format!("blobs/{algorithm}/{hex}")
}

fn clean(p: &str) -> String {
    p.trim_start_matches("./").to_string()
}

/// The archive's small regular files by path (`./` stripped): its JSON documents.
fn json_documents(archive: &Path) -> Result<HashMap<String, Vec<u8>>, BuildError> {
    let f = std::fs::File::open(archive).map_err(io(archive, "open"))?;
    let mut ar = tar::Archive::new(BufReader::new(f));
    let mut docs = HashMap::new();
    for entry in ar
        .entries()
        .map_err(|e| bad(format!("read archive: {e}")))?
    {
        let mut entry = entry.map_err(|e| bad(format!("read archive: {e}")))?;
        if entry.header().entry_type() != tar::EntryType::Regular || entry.size() > MAX_JSON_BYTES {
            continue;
        }
        let path = entry
            .path()
            .map(|p| clean(&p.to_string_lossy()))
            .map_err(|e| bad(format!("archive entry: {e}")))?;
        let mut buf = Vec::new();
        entry
            .read_to_end(&mut buf)
            .map_err(|e| bad(format!("read {path}: {e}")))?;
        if buf.first() == Some(&b'{') || buf.first() == Some(&b'[') {
            docs.insert(path, buf);
        }
    }
    Ok(docs)
}

/// Finds the layer `path` in the archive and applies it onto `root` (gunzipping it when it
/// starts with the gzip magic).
fn apply_from_archive(archive: &Path, path: &str, root: &Path) -> Result<(), BuildError> {
    let f = std::fs::File::open(archive).map_err(io(archive, "open"))?;
    let mut ar = tar::Archive::new(BufReader::new(f));
    for entry in ar
        .entries()
        .map_err(|e| bad(format!("read archive: {e}")))?
    {
        let entry = entry.map_err(|e| bad(format!("read archive: {e}")))?;
        let name = entry
            .path()
            .map(|p| clean(&p.to_string_lossy()))
            .unwrap_or_default();
        if name != path {
            continue;
        }
        let mut reader = BufReader::new(entry);
        let gzip = reader
            .fill_buf()
            .map(|b| b.starts_with(&[0x1f, 0x8b]))
            .map_err(|e| bad(format!("read layer {path}: {e}")))?;
        if gzip {
            layer::apply_layer(root, flate2::read::GzDecoder::new(reader))?;
        } else {
            layer::apply_layer(root, reader)?;
        }
        return Ok(());
    }
    Err(bad(format!("layer {path} is not in the archive")))
}

/// Where an imported tree's defaults are kept beside it in the step cache.
pub(crate) fn defaults_path(entry: &Path) -> PathBuf {
    entry.join("image-defaults.json")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tar_of(files: &[(&str, &[u8])]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (p, data) in files {
            let mut h = tar::Header::new_gnu();
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            h.set_cksum();
            b.append_data(&mut h, p, *data).expect("append");
        }
        b.into_inner().expect("tar")
    }

    #[test]
    fn docker_save_archives_import_with_whiteouts_and_config() {
        let l1 = tar_of(&[("etc/a", b"a"), ("etc/b", b"b")]);
        let l2 = tar_of(&[("etc/.wh.b", b""), ("etc/c", b"c")]);
        let config = br#"{"architecture":"amd64","os":"linux","config":{"Env":["PATH=/bin","MODE=x"],"WorkingDir":"/srv","User":"app:app"},"rootfs":{"type":"layers","diff_ids":[]}}"#;
        let manifest = br#"[{"Config":"cfg.json","RepoTags":["t:1"],"Layers":["l1/layer.tar","l2/layer.tar"]}]"#;
        let archive = tar_of(&[
            ("manifest.json", manifest),
            ("cfg.json", config),
            ("l1/layer.tar", &l1),
            ("l2/layer.tar", &l2),
        ]);
        let tmp = tempfile::tempdir().expect("tmp");
        let path = tmp.path().join("img.tar");
        std::fs::write(&path, archive).expect("write");
        let root = tmp.path().join("root");
        let d = import(&path, &root).expect("import");
        assert_eq!((d.user.as_str(), d.workdir.as_str()), ("app", "/srv"));
        assert_eq!(d.env.get("MODE").map(String::as_str), Some("x"));
        assert!(root.join("etc/a").exists() && root.join("etc/c").exists());
        assert!(!root.join("etc/b").exists());
        assert!(root.join("etc/hostname").exists());
    }
}
