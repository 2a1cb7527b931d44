//! Importing an OCI image archive (blocking): a `docker save` tarball (`manifest.json`) or an
//! OCI image layout tarball (`index.json`, `blobs/<alg>/<hex>`), read with `oci-spec`'s image
//! types. The first image's layers are applied in order onto an empty tree with their
//! whiteouts honoured (`layer.rs`; plain or gzip layers), and its config's `Env`,
//! `WorkingDir` and `User` become the template's defaults. The archive is read once for its
//! JSON documents and once per layer.
//!
//! Every layer is checked while it is applied: an OCI layout layer against its descriptor's
//! digest (SHA-256 of the blob as stored), a `docker save` layer against its `diff_id` in the
//! image config (SHA-256 of the uncompressed tar). A mismatch, or a digest of another
//! algorithm, fails the import with [`BuildError::InvalidLayer`] naming the layer (the tree
//! being built is discarded by the caller).

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use oci_spec::image::{ImageConfiguration, ImageIndex, ImageManifest};
use serde::Deserialize;

use sha2::{Digest as _, Sha256};

use super::files::io;
use super::{files, layer, recipe, BuildError, TemplateDefaults};

/// What a layer's SHA-256 (hex) is taken over.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Expected {
    /// The bytes as stored in the archive (an OCI descriptor's digest).
    Stored(String),
    /// The uncompressed tar (a `docker save` config's `diff_id`).
    Uncompressed(String),
}

/// The hex of a `sha256:` digest, or [`BuildError::InvalidLayer`].
fn sha256_hex(layer: &str, digest: &str) -> Result<String, BuildError> {
    digest
        .strip_prefix("sha256:")
        .filter(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
        .map(str::to_ascii_lowercase)
        .ok_or_else(|| BuildError::InvalidLayer {
            layer: layer.to_string(),
            detail: format!("its digest {digest:?} is not a sha256 digest"),
        })
}

/// A reader that feeds what it reads into a hasher.
struct Hashing<'h, R> {
    inner: R,
    hasher: &'h mut Sha256,
}

impl<R: Read> Read for Hashing<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        Ok(n)
    }
}

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
        let config = docs.get(clean(&image.config).as_str()).ok_or_else(|| {
            bad(format!(
                "{} (the image config) is not in the archive",
                image.config
            ))
        })?;
        let diff_ids = image_config(config)?.rootfs().diff_ids().clone();
        if diff_ids.len() != image.layers.len() {
            return Err(bad(format!(
                "the image config lists {} diff_ids for {} layers",
                diff_ids.len(),
                image.layers.len()
            )));
        }
        let layers = image
            .layers
            .into_iter()
            .zip(diff_ids)
            .map(|(l, d)| Ok((l.clone(), Expected::Uncompressed(sha256_hex(&l, &d)?))))
            .collect::<Result<Vec<_>, BuildError>>()?;
        (image.config, layers)
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
            .map(|l| {
                let path = blob_path(l.digest().algorithm().as_ref(), l.digest().digest());
                let hex = sha256_hex(&path, l.digest().as_ref())?;
                Ok((path, Expected::Stored(hex)))
            })
            .collect::<Result<Vec<_>, BuildError>>()?;
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
    for (l, expected) in &layers {
        apply_from_archive(archive, &clean(l), expected, root)?;
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

/// Finds the layer `path` in the archive, applies it onto `root` (gunzipping it when it
/// starts with the gzip magic) and checks it against `expected`.
fn apply_from_archive(
    archive: &Path,
    path: &str,
    expected: &Expected,
    root: &Path,
) -> Result<(), BuildError> {
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
        let (mut stored, mut plain) = (Sha256::new(), Sha256::new());
        let drain = |r: &mut dyn Read| {
            std::io::copy(r, &mut std::io::sink())
                .map_err(|e| bad(format!("read layer {path}: {e}")))
        };
        {
            let mut reader = BufReader::new(Hashing {
                inner: entry,
                hasher: &mut stored,
            });
            let gzip = reader
                .fill_buf()
                .map(|b| b.starts_with(&[0x1f, 0x8b]))
                .map_err(|e| bad(format!("read layer {path}: {e}")))?;
            if gzip {
                let mut decoder = flate2::read::GzDecoder::new(reader);
                let mut tar = Hashing {
                    inner: &mut decoder,
                    hasher: &mut plain,
                };
                layer::apply_layer(root, &mut tar)?;
                // The tar's end and padding, then the gzip trailer, count too.
                drain(&mut tar)?;
                drain(&mut decoder.into_inner())?;
            } else {
                let mut tar = Hashing {
                    inner: &mut reader,
                    hasher: &mut plain,
                };
                layer::apply_layer(root, &mut tar)?;
                drain(&mut tar)?;
            }
        }
        let (want, got) = match expected {
            Expected::Stored(want) => (want, format!("{:x}", stored.finalize())),
            Expected::Uncompressed(want) => (want, format!("{:x}", plain.finalize())),
        };
        if *want != got {
            return Err(BuildError::InvalidLayer {
                layer: path.to_string(),
                detail: format!("its content has sha256:{got}, the manifest says sha256:{want}"),
            });
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
        let config = docker_config(&[&l1, &l2]);
        let manifest = br#"[{"Config":"cfg.json","RepoTags":["t:1"],"Layers":["l1/layer.tar","l2/layer.tar"]}]"#;
        let archive = tar_of(&[
            ("manifest.json", manifest),
            ("cfg.json", config.as_bytes()),
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

    /// A docker image config whose `diff_ids` are the layers' SHA-256.
    fn docker_config(layers: &[&[u8]]) -> String {
        let ids: Vec<String> = layers
            .iter()
            .map(|l| format!("\"sha256:{:x}\"", Sha256::digest(l)))
            .collect();
        format!(
            r#"{{"architecture":"amd64","os":"linux","config":{{"Env":["PATH=/bin","MODE=x"],"WorkingDir":"/srv","User":"app:app"}},"rootfs":{{"type":"layers","diff_ids":[{}]}}}}"#,
            ids.join(",")
        )
    }

    #[test]
    fn a_layer_that_does_not_match_its_digest_is_refused_by_name() {
        let l1 = tar_of(&[("etc/a", b"a")]);
        let config = docker_config(&[&l1]);
        let corrupted = tar_of(&[("etc/a", b"A")]);
        let manifest = br#"[{"Config":"cfg.json","Layers":["l1/layer.tar"]}]"#;
        let archive = tar_of(&[
            ("manifest.json", manifest),
            ("cfg.json", config.as_bytes()),
            ("l1/layer.tar", &corrupted),
        ]);
        let tmp = tempfile::tempdir().expect("tmp");
        let path = tmp.path().join("img.tar");
        std::fs::write(&path, archive).expect("write");
        let err = import(&path, &tmp.path().join("root")).expect_err("refused");
        assert!(
            matches!(&err, BuildError::InvalidLayer { layer, .. } if layer == "l1/layer.tar"),
            "{err}"
        );
        assert!(err.to_string().contains("l1/layer.tar"), "{err}");

        let short = br#"[{"Config":"cfg.json","Layers":["l1/layer.tar","l1/layer.tar"]}]"#;
        let archive = tar_of(&[
            ("manifest.json", short),
            ("cfg.json", config.as_bytes()),
            ("l1/layer.tar", &l1),
        ]);
        std::fs::write(&path, archive).expect("write");
        assert!(import(&path, &tmp.path().join("root2")).is_err());
    }
}
