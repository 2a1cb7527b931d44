//! Release builds on the node.

use async_trait::async_trait;

use cove_node_api::ReleaseRef;

use super::*;

#[async_trait]
impl NodeReleases for NodeAgent {
    fn recipes(&self) -> Vec<RecipeInfo> {
        [Recipe::Base, Recipe::Tiny, Recipe::Full]
            .into_iter()
            .map(recipe_info)
            .collect()
    }

    async fn build_release(
        &self,
        template: &str,
        number: u32,
        no_cache: bool,
        events: tokio::sync::mpsc::Sender<BuildEvent>,
        cancel: CancellationToken,
    ) -> Result<BuiltRelease, NodeError> {
        let recipe = Recipe::for_template(template)
            .ok_or_else(|| NodeError::ReleaseNotFound(format!("no recipe for {template}")))?;
        let dir = self.release_dir(template, number);
        Self::remove_tree(&dir).await?;
        tokio::fs::create_dir_all(&dir)
            .await
            .map_err(|e| NodeError::Internal(format!("create {}: {e}", dir.display())))?;
        let opts = BuildOptions {
            cache_dir: if no_cache {
                None
            } else {
                self.cfg.cache_dir.clone()
            },
            mirror: self.cfg.mirror.clone(),
        };
        let (tx, mut rx) = tokio::sync::mpsc::channel(256);
        let forward = tokio::spawn(async move {
            while let Some(ev) = rx.recv().await {
                let ev = match ev {
                    template::BuildEvent::Log(l) => BuildEvent::Log(l),
                    template::BuildEvent::Progress { percent, phase } => {
                        BuildEvent::Progress { percent, phase }
                    }
                };
                if events.send(ev).await.is_err() {
                    break;
                }
            }
        });
        let result = template::build_rootfs(recipe, &dir.join("rootfs"), &opts, tx, cancel).await;
        let _ = forward.await;
        match result {
            Ok(built) => {
                info!(
                    template,
                    number,
                    size = built.size_bytes,
                    cached = built.from_cache,
                    "release built"
                );
                Ok(BuiltRelease {
                    size_bytes: built.size_bytes,
                    from_cache: built.from_cache,
                    digest: built.digest,
                })
            }
            Err(e) => {
                let _ = Self::remove_tree(&dir).await;
                Err(match e {
                    template::BuildError::Cancelled => NodeError::Cancelled,
                    other => NodeError::Build(other.to_string()),
                })
            }
        }
    }

    async fn build_file_release(
        &self,
        template: &str,
        number: u32,
        build: cove_node_api::FileBuild,
        events: tokio::sync::mpsc::Sender<BuildEvent>,
        cancel: CancellationToken,
    ) -> Result<cove_node_api::BuiltFileRelease, NodeError> {
        self.file_build(template, number, build, events, cancel)
            .await
    }

    async fn cached_releases(&self) -> Result<Vec<ReleaseRef>, NodeError> {
        let root = self.cfg.data_dir.join("releases");
        tokio::task::spawn_blocking(move || {
            let mut found = Vec::new();
            let templates = match std::fs::read_dir(&root) {
                Ok(t) => t,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(found),
                Err(e) => return Err(NodeError::Internal(format!("read {}: {e}", root.display()))),
            };
            for t in templates.flatten() {
                let Ok(template) = t.file_name().into_string() else {
                    continue;
                };
                for n in std::fs::read_dir(t.path()).into_iter().flatten().flatten() {
                    let number = n.file_name().to_str().and_then(|s| s.parse::<u32>().ok());
                    if let Some(number) = number.filter(|_| n.path().join("rootfs").is_dir()) {
                        found.push(ReleaseRef {
                            template: template.clone(),
                            number,
                        });
                    }
                }
            }
            found.sort();
            Ok(found)
        })
        .await
        .map_err(|e| NodeError::Internal(format!("list releases: {e}")))?
    }

    async fn remove_release(&self, template: &str, number: u32) -> Result<(), NodeError> {
        Self::remove_tree(&self.release_dir(template, number)).await
    }

    async fn remove_stored_release(&self, digest: &str) -> Result<(), NodeError> {
        self.unstore_release(digest).await
    }
}
