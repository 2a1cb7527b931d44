//! Persistent volumes: `/v1/volumes`, and their files without a sandbox.

use bytes::Bytes;
use cove_api_types::{
    CreateVolumeRequest, FileInfo, FileList, MakeVolumeDirRequest, Volume, VolumeFileAttrs,
    VolumeList,
};
use futures::{Stream, StreamExt, TryStreamExt};
use reqwest::header::{HeaderValue, CONTENT_TYPE};
use reqwest::{Body, Method};

use crate::{Client, ClientError, Result};

impl Client {
    /// `POST /v1/volumes`: makes an empty volume of `size_mib` MiB (`409 volume_exists` for a
    /// taken name; `400 unsupported` where volumes are not offered).
    pub async fn create_volume(&self, name: &str, size_mib: u64) -> Result<Volume> {
        self.create_volume_with(&CreateVolumeRequest {
            name: name.to_string(),
            size_mib,
            storage: Default::default(),
        })
        .await
    }

    /// `POST /v1/volumes` with every field of the request (`storage: "object"` for a volume
    /// kept in the snapshot store that follows its sandboxes between nodes). Errors as
    /// [`Client::create_volume`].
    pub async fn create_volume_with(&self, request: &CreateVolumeRequest) -> Result<Volume> {
        let url = self.url(&["v1", "volumes"]);
        self.json(self.request(Method::POST, url).json(request))
            .await
    }

    /// `GET /v1/volumes`: the org's volumes, by name.
    pub async fn volumes(&self) -> Result<VolumeList> {
        self.json(self.request(Method::GET, self.url(&["v1", "volumes"])))
            .await
    }

    /// `GET /v1/volumes/{name}`: the volume, its use and who mounts it.
    pub async fn volume(&self, name: &str) -> Result<Volume> {
        self.json(self.request(Method::GET, self.url(&["v1", "volumes", name])))
            .await
    }

    /// `DELETE /v1/volumes/{name}`: removes it and its data (`409 volume_in_use` while a
    /// sandbox mounts it).
    pub async fn delete_volume(&self, name: &str) -> Result<()> {
        let url = self.url(&["v1", "volumes", name]);
        self.send(self.request(Method::DELETE, url)).await.map(drop)
    }

    /// `PUT /v1/volumes/{name}/files?path=`: writes `body` to `path` of the volume atomically
    /// (`507 insufficient_storage` when it does not fit).
    pub async fn upload_to_volume(
        &self,
        name: &str,
        path: &str,
        body: impl Into<Body>,
    ) -> Result<FileInfo> {
        let request = self
            .request(Method::PUT, self.url(&["v1", "volumes", name, "files"]))
            .query(&[("path", path)])
            .header(
                CONTENT_TYPE,
                HeaderValue::from_static("application/octet-stream"),
            )
            .body(body);
        self.json(request).await
    }

    /// `GET /v1/volumes/{name}/files?path=`: a file's bytes as a stream. Errors found before
    /// the first byte are returned here.
    pub async fn download_from_volume(
        &self,
        name: &str,
        path: &str,
    ) -> Result<impl Stream<Item = Result<Bytes>> + Send + 'static> {
        let request = self
            .request(Method::GET, self.url(&["v1", "volumes", name, "files"]))
            .query(&[("path", path)]);
        let response = self.send(request).await?;
        Ok(response
            .bytes_stream()
            .map_err(ClientError::Transport)
            .boxed())
    }

    /// [`Client::download_from_volume`] collected into memory.
    pub async fn read_volume_file(&self, name: &str, path: &str) -> Result<Vec<u8>> {
        self.download_from_volume(name, path)
            .await?
            .try_fold(Vec::new(), |mut acc, b| async move {
                acc.extend_from_slice(&b);
                Ok(acc)
            })
            .await
    }

    /// `GET /v1/volumes/{name}/files:list?path=`: one directory's entries, by name.
    pub async fn list_volume_files(&self, name: &str, path: &str) -> Result<FileList> {
        let request = self
            .request(
                Method::GET,
                self.url(&["v1", "volumes", name, "files:list"]),
            )
            .query(&[("path", path)]);
        self.json(request).await
    }

    /// `GET /v1/volumes/{name}/files:list?path=&depth=`: a directory's entries down to `depth`
    /// levels (1 = its own), each directory's entries right after it.
    pub async fn list_volume_tree(&self, name: &str, path: &str, depth: u32) -> Result<FileList> {
        let request = self
            .request(
                Method::GET,
                self.url(&["v1", "volumes", name, "files:list"]),
            )
            .query(&[("path", path.to_string()), ("depth", depth.to_string())]);
        self.json(request).await
    }

    /// `GET /v1/volumes/{name}/files:stat?path=`: describes a path (`lstat`), with its `uid`,
    /// `gid`, `atime` and `ctime`.
    pub async fn stat_volume_file(&self, name: &str, path: &str) -> Result<FileInfo> {
        let request = self
            .request(
                Method::GET,
                self.url(&["v1", "volumes", name, "files:stat"]),
            )
            .query(&[("path", path)]);
        self.json(request).await
    }

    /// `DELETE /v1/volumes/{name}/files?path=`: removes a file, a symlink (the link only) or
    /// a directory with everything below it.
    pub async fn remove_volume_file(&self, name: &str, path: &str) -> Result<()> {
        let request = self
            .request(Method::DELETE, self.url(&["v1", "volumes", name, "files"]))
            .query(&[("path", path)]);
        self.send(request).await.map(drop)
    }

    /// `POST /v1/volumes/{name}/files:mkdir`: makes a directory (with its parents unless
    /// `parents: Some(false)`).
    pub async fn make_volume_dir(
        &self,
        name: &str,
        request: &MakeVolumeDirRequest,
    ) -> Result<FileInfo> {
        let request = self
            .request(
                Method::POST,
                self.url(&["v1", "volumes", name, "files:mkdir"]),
            )
            .json(request);
        self.json(request).await
    }

    /// `PATCH /v1/volumes/{name}/files?path=`: sets owner and permission bits (absent ones
    /// are kept).
    pub async fn set_volume_file_attrs(
        &self,
        name: &str,
        path: &str,
        attrs: &VolumeFileAttrs,
    ) -> Result<FileInfo> {
        let request = self
            .request(Method::PATCH, self.url(&["v1", "volumes", name, "files"]))
            .query(&[("path", path)])
            .json(attrs);
        self.json(request).await
    }
}
