//! Importing an OCI image archive (blocking): a `docker save` tarball (`manifest.json`) or an
//! OCI image layout tarball (`index.json`, `blobs/<alg>/<hex>`), read with `oci-spec`'s image
//! types.
//!
//! Archives come only from the operator's import directory (`--oci-import-dir`), opened by
//! [`open_archive`] through `cove_confine` (a plain relative name, no link followed, a regular
//! file under a size bound): a template file never names a host path. The archive and its
//! layers are data: every read goes through a [`Guard`] (the build's cancellation, a deadline,
//! byte bounds), layers unpack through `layer.rs`'s confined unpacker, and error messages are
//! fixed texts naming entries (never what `tar` or `serde_json` quote of the bytes). The first image's layers are applied in order onto an empty tree with their
//! whiteouts honoured (`layer.rs`; plain or gzip layers), and its config's `Env`,
//! `WorkingDir` and `User` become the template's defaults. The archive is read once for its
//! JSON documents and once per layer.
//!
//! Every layer is checked while it is applied: an OCI layout layer against its descriptor's
//! digest (SHA-256 of the blob as stored), a `docker save` layer against its `diff_id` in the
//! image config (SHA-256 of the uncompressed tar). A mismatch, or a digest of another
//! algorithm, fails the import with [`BuildError::InvalidLayer`] naming the layer (the tree
//! being built is discarded by the caller).

#![deny(clippy::disallowed_methods)]

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cove_confine::Tree;
use oci_spec::image::{ImageConfiguration, ImageIndex, ImageManifest};
use serde::Deserialize;

use sha2::{Digest as _, Sha256};

use super::files::shown;
use super::guard::Guard;
use super::{files, layer, recipe, BuildError, TemplateDefaults};

/// Default bound of an image archive's size (`--oci-import-max-mib`), in bytes: 8 GiB.
pub const DEFAULT_MAX_ARCHIVE_BYTES: u64 = 8 << 30;
/// Most bytes the layers of one image may unpack to (a gzip bomb stops here).
const MAX_UNPACKED_BYTES: u64 = 64 << 30;
/// Most entries of an image archive itself (its JSON documents and layer blobs).
const MAX_ARCHIVE_ENTRIES: u64 = 100_000;
/// Most bytes of all the JSON documents of an archive, together.
const MAX_JSON_TOTAL: u64 = 64 << 20;

/// An image archive opened in the operator's import directory: a regular file reached
/// without following any link, at most the configured size.
#[derive(Debug, Clone)]
pub struct OciArchive {
    file: Arc<File>,
    size: u64,
}

/// Why [`open_archive`] refused a name. One answer for a missing file, a link, a FIFO or a
/// device, a directory or a name that leaves the directory, so it tells nothing about what
/// is on the host.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveRefused {
    /// Nothing usable of that name.
    #[error(
        "oci-archive:{0} names no regular file in the server's OCI import directory (names are \
         plain relative paths there; links, directories and special files are refused)"
    )]
    NotThere(String),
    /// The file is over the size bound.
    #[error("oci-archive:{name} is larger than the server's bound of {max} bytes")]
    TooLarge {
        /// The name.
        name: String,
        /// The bound.
        max: u64,
    },
}

/// Opens the image archive `name` in the operator's import directory `dir` through the
/// confined tree (`openat2` beneath `dir`, no link followed, regular files only, opened
/// non-blocking so a FIFO never blocks), at most `max_bytes` large.
///
/// # Errors
/// [`ArchiveRefused`].
pub fn open_archive(dir: &Path, name: &str, max_bytes: u64) -> Result<OciArchive, ArchiveRefused> {
    let refused = || ArchiveRefused::NotThere(name.to_string());
    let rel = Path::new(name);
    if name.is_empty() || rel.is_absolute() {
        return Err(refused());
    }
    let tree = Tree::open(dir).map_err(|e| {
        tracing::warn!(error = %e, "cannot open the OCI import directory");
        refused()
    })?;
    let file = tree.open_file(rel).map_err(|_| refused())?;
    let size = file.metadata().map_err(|_| refused())?.len();
    if size > max_bytes {
        return Err(ArchiveRefused::TooLarge {
            name: name.to_string(),
            max: max_bytes,
        });
    }
    Ok(OciArchive {
        file: Arc::new(file),
        size,
    })
}

impl OciArchive {
    /// The archive from its start, read through a child of `guard` bound to its size (also
    /// returned: it tells why a read failed).
    fn reader(&self, guard: &Guard) -> Result<(Guard, impl Read + '_), BuildError> {
        let mut f: &File = &self.file;
        f.seek(SeekFrom::Start(0))
            .map_err(|source| BuildError::Io {
                context: "seek the image archive".into(),
                source,
            })?;
        let pass = guard.child("the image archive", self.size);
        let reader = pass.reader(BufReader::new(f.take(self.size)));
        Ok((pass, reader))
    }

    /// Hex SHA-256 of the archive's bytes, read through `guard`.
    pub(crate) fn sha256(&self, guard: &Guard) -> Result<String, BuildError> {
        let (guard, mut r) = self.reader(guard)?;
        guard.sha256_hex(&mut r, "read the image archive")
    }
}

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
            detail: "its digest is not a sha256 digest".into(),
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

/// The fixed error for an archive `tar` cannot read (its own messages quote header bytes).
fn unreadable() -> BuildError {
    bad("the image archive is not a readable tar archive")
}

/// One image of a `docker save` `manifest.json`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct DockerImage {
    config: String,
    layers: Vec<String>,
}

/// Imports the image archive `archive` into the empty directory `root` (created); returns
/// the image's defaults (user `root`, workdir `/` where the image sets none). The files every
/// recipe writes (`/etc/hostname`, `/etc/hosts`, an empty `/etc/resolv.conf`) are written last.
/// Everything is read through `guard` (cancellation, deadline); each pass over the archive is
/// bound to its size, the layers together to [`MAX_UNPACKED_BYTES`].
///
/// # Errors
/// [`BuildError::Failed`] for an archive that is not an image or a layer that leaves the tree
/// (fixed messages that name entries, never quote the archive's bytes); `Cancelled`; `Io` for
/// the node's files.
pub(crate) fn import(
    archive: &OciArchive,
    root: &Path,
    guard: &Guard,
) -> Result<TemplateDefaults, BuildError> {
    let docs = json_documents(archive, guard)?;
    let (config, layers) = if let Some(m) = docs.get("manifest.json") {
        let images: Vec<DockerImage> = serde_json::from_slice(m)
            .map_err(|_| bad("manifest.json is not a docker image manifest"))?;
        let image = images
            .into_iter()
            .next()
            .ok_or_else(|| bad("manifest.json lists no image"))?;
        let config = docs.get(clean(&image.config).as_str()).ok_or_else(|| {
            bad(format!(
                "{} (the image config) is not in the archive",
                shown(Path::new(&image.config))
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
        let index = ImageIndex::from_reader(i.as_slice())
            .map_err(|_| bad("index.json is not an OCI image index"))?;
        let first = index
            .manifests()
            .first()
            .ok_or_else(|| bad("index.json lists no manifest"))?;
        let path = blob_path(first.digest().algorithm().as_ref(), first.digest().digest());
        let m = docs.get(&path).ok_or_else(|| {
            bad(format!(
                "{} (the manifest) is not in the archive",
                shown(Path::new(&path))
            ))
        })?;
        let manifest = ImageManifest::from_reader(m.as_slice()).map_err(|_| {
            bad(format!(
                "{} is not an OCI image manifest",
                shown(Path::new(&path))
            ))
        })?;
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
    let config = docs.get(clean(&config).as_str()).ok_or_else(|| {
        bad(format!(
            "{} (the image config) is not in the archive",
            shown(Path::new(&config))
        ))
    })?;
    let config = image_config(config)?;

    // The node's own staging directory (empty until the layers land).
    #[allow(clippy::disallowed_methods)]
    std::fs::create_dir_all(root).map_err(files::io(root, "create"))?;
    let unpacked = guard.child("the image's layers, unpacked,", MAX_UNPACKED_BYTES);
    for (l, expected) in &layers {
        apply_from_archive(archive, &clean(l), expected, root, guard, &unpacked)?;
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
    let refused = || bad("the image config is not an OCI image configuration");
    let mut v: serde_json::Value = serde_json::from_slice(bytes).map_err(|_| refused())?;
    if let Some(obj) = v.as_object_mut() {
        obj.entry("history")
            .or_insert_with(|| serde_json::Value::Array(Vec::new()));
    }
    serde_json::from_value(v).map_err(|_| refused())
}

fn blob_path(algorithm: &str, hex: &str) -> String {
    format!("blobs/{algorithm}/{hex}")
}

fn clean(p: &str) -> String {
    p.trim_start_matches("./").to_string()
}

/// The archive's small regular files by path (`./` stripped): its JSON documents.
fn json_documents(
    archive: &OciArchive,
    guard: &Guard,
) -> Result<HashMap<String, Vec<u8>>, BuildError> {
    let (guard, reader) = archive.reader(guard)?;
    let guard = &guard;
    let mut ar = tar::Archive::new(reader);
    let mut docs = HashMap::new();
    let (mut seen, mut kept) = (0u64, 0u64);
    for entry in ar.entries().map_err(|_| guard.or(unreadable()))? {
        let mut entry = entry.map_err(|_| guard.or(unreadable()))?;
        seen += 1;
        if seen > MAX_ARCHIVE_ENTRIES {
            return Err(bad(format!(
                "the image archive has more than {MAX_ARCHIVE_ENTRIES} entries"
            )));
        }
        if entry.header().entry_type() != tar::EntryType::Regular || entry.size() > MAX_JSON_BYTES {
            continue;
        }
        let path = entry
            .path()
            .map(|p| clean(&p.to_string_lossy()))
            .map_err(|_| unreadable())?;
        let mut head = [0u8; 1];
        let n = entry.read(&mut head).map_err(|_| guard.or(unreadable()))?;
        if n == 0 || !(head[0] == b'{' || head[0] == b'[') {
            continue;
        }
        kept += entry.size();
        if kept > MAX_JSON_TOTAL {
            return Err(bad(format!(
                "the image archive's JSON documents are over {MAX_JSON_TOTAL} bytes"
            )));
        }
        let mut buf = head[..n].to_vec();
        entry
            .read_to_end(&mut buf)
            .map_err(|_| guard.or(unreadable()))?;
        docs.insert(path, buf);
    }
    Ok(docs)
}

/// Finds the layer `path` in the archive, applies it onto `root` (gunzipping it when it
/// starts with the gzip magic) and checks it against `expected`. The uncompressed bytes are
/// charged to `unpacked`.
fn apply_from_archive(
    archive: &OciArchive,
    path: &str,
    expected: &Expected,
    root: &Path,
    guard: &Guard,
    unpacked: &Guard,
) -> Result<(), BuildError> {
    let (guard, reader) = archive.reader(guard)?;
    let guard = &guard;
    let mut ar = tar::Archive::new(reader);
    let read_err = |_| {
        unpacked.or(guard.or(bad(format!(
            "layer {} cannot be read",
            shown(Path::new(path))
        ))))
    };
    for entry in ar.entries().map_err(|_| guard.or(unreadable()))? {
        let entry = entry.map_err(|_| guard.or(unreadable()))?;
        let name = entry
            .path()
            .map(|p| clean(&p.to_string_lossy()))
            .unwrap_or_default();
        if name != path {
            continue;
        }
        let (mut stored, mut plain) = (Sha256::new(), Sha256::new());
        let drain = |r: &mut dyn Read| {
            std::io::copy(&mut unpacked.reader(r), &mut std::io::sink()).map_err(read_err)
        };
        {
            let mut reader = BufReader::new(Hashing {
                inner: entry,
                hasher: &mut stored,
            });
            let gzip = reader
                .fill_buf()
                .map(|b| b.starts_with(&[0x1f, 0x8b]))
                .map_err(read_err)?;
            if gzip {
                let mut decoder = flate2::read::GzDecoder::new(reader);
                let mut tar = Hashing {
                    inner: &mut decoder,
                    hasher: &mut plain,
                };
                layer::apply_layer(root, &mut tar, unpacked)?;
                // The tar's end and padding, then the gzip trailer, count too.
                drain(&mut tar)?;
                drain(&mut decoder.into_inner())?;
            } else {
                let mut tar = Hashing {
                    inner: &mut reader,
                    hasher: &mut plain,
                };
                layer::apply_layer(root, &mut tar, unpacked)?;
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
    Err(bad(format!(
        "layer {} is not in the archive",
        shown(Path::new(path))
    )))
}

/// Where an imported tree's defaults are kept beside it in the step cache.
pub(crate) fn defaults_path(entry: &Path) -> PathBuf {
    entry.join("image-defaults.json")
}

#[cfg(test)]
// Tests plant, with plain path calls, what a tenant would.
#[allow(clippy::disallowed_methods)]
mod tests {
    use super::*;
    use tokio_util::sync::CancellationToken;

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
        std::fs::write(tmp.path().join("img.tar"), archive).expect("write");
        let root = tmp.path().join("root");
        let d = import(&open(tmp.path(), "img.tar"), &root, &guard()).expect("import");
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
        let err = import(
            &open(tmp.path(), "img.tar"),
            &tmp.path().join("root"),
            &guard(),
        )
        .expect_err("refused");
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
        assert!(import(
            &open(tmp.path(), "img.tar"),
            &tmp.path().join("root2"),
            &guard()
        )
        .is_err());
    }

    fn guard() -> Guard {
        Guard::new(
            CancellationToken::new(),
            "the import",
            u64::MAX,
            std::time::Duration::from_secs(60),
        )
    }

    fn open(dir: &Path, name: &str) -> OciArchive {
        open_archive(dir, name, DEFAULT_MAX_ARCHIVE_BYTES).expect("open the archive")
    }

    #[test]
    fn only_regular_files_inside_the_import_dir_open_and_refusals_all_look_alike() {
        let tmp = tempfile::tempdir().expect("tmp");
        let dir = tmp.path().join("import");
        std::fs::create_dir_all(dir.join("sub")).expect("mkdir");
        std::fs::write(tmp.path().join("secret.tar"), b"host secret").expect("canary");
        std::fs::write(dir.join("img.tar"), b"x").expect("file");
        std::fs::write(dir.join("sub/img.tar"), b"x").expect("file");
        std::os::unix::fs::symlink(tmp.path().join("secret.tar"), dir.join("link.tar"))
            .expect("symlink");
        std::os::unix::fs::symlink("/etc", dir.join("etc")).expect("symlink");
        std::os::unix::fs::symlink("/dev/zero", dir.join("zero")).expect("symlink");
        nix::unistd::mkfifo(&dir.join("fifo"), nix::sys::stat::Mode::S_IRWXU).expect("fifo");

        assert!(open_archive(&dir, "img.tar", 10).is_ok());
        assert!(open_archive(&dir, "sub/img.tar", 10).is_ok());
        let began = std::time::Instant::now();
        let mut messages = Vec::new();
        for name in [
            "missing.tar",
            "link.tar",
            "etc/shadow",
            "zero",
            "fifo",
            "sub",
            "../secret.tar",
            "/etc/shadow",
        ] {
            let err = open_archive(&dir, name, 10).expect_err(name);
            assert!(matches!(err, ArchiveRefused::NotThere(_)), "{name}: {err}");
            messages.push(err.to_string().replace(name, "NAME"));
        }
        assert!(matches!(
            open_archive(&dir, "", 10),
            Err(ArchiveRefused::NotThere(_))
        ));
        assert!(
            began.elapsed() < std::time::Duration::from_secs(1),
            "a FIFO never blocks"
        );
        messages.dedup();
        assert_eq!(
            messages.len(),
            1,
            "one answer for every refusal: {messages:?}"
        );
        assert!(matches!(
            open_archive(&dir, "img.tar", 0),
            Err(ArchiveRefused::TooLarge { .. })
        ));
    }

    #[test]
    fn import_errors_never_quote_the_archive() {
        let tmp = tempfile::tempdir().expect("tmp");
        let secret = b"root:$6$SECRETHASH:19000:0:99999:7:::\n".repeat(40);
        let cases: Vec<Vec<u8>> = vec![
            secret.clone(),
            tar_of(&[("manifest.json", br#"[{"Config":"SECRETHASH","Layers":7}]"#)]),
            tar_of(&[("index.json", br#"{"manifests":"SECRETHASH"}"#)]),
            tar_of(&[
                ("manifest.json", br#"[{"Config":"cfg.json","Layers":[]}]"#),
                ("cfg.json", br#"{"rootfs":"SECRETHASH"}"#),
            ]),
        ];
        for (i, bytes) in cases.into_iter().enumerate() {
            std::fs::write(tmp.path().join("img.tar"), bytes).expect("write");
            let err = import(
                &open(tmp.path(), "img.tar"),
                &tmp.path().join(format!("root{i}")),
                &guard(),
            )
            .expect_err("refused");
            assert!(!err.to_string().contains("SECRETHASH"), "case {i}: {err}");
        }
    }

    #[test]
    fn a_cancelled_import_stops_hashing_within_a_second() {
        let tmp = tempfile::tempdir().expect("tmp");
        // A sparse 64 GiB archive: hashing it would take minutes.
        let f = std::fs::File::create(tmp.path().join("big.tar")).expect("create");
        f.set_len(64 << 30).expect("sparse");
        let archive = open_archive(tmp.path(), "big.tar", u64::MAX).expect("open");
        let cancel = CancellationToken::new();
        let g = Guard::new(
            cancel.clone(),
            "the import",
            u64::MAX,
            std::time::Duration::from_secs(600),
        );
        let worker = std::thread::spawn(move || archive.sha256(&g));
        std::thread::sleep(std::time::Duration::from_millis(300));
        let began = std::time::Instant::now();
        cancel.cancel();
        let result = worker.join().expect("join");
        assert!(matches!(result, Err(BuildError::Cancelled)), "{result:?}");
        assert!(began.elapsed() < std::time::Duration::from_secs(1));
    }
}
