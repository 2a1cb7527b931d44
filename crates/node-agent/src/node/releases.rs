//! Release builds on the node.

use async_trait::async_trait;

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

    async fn remove_release(&self, template: &str, number: u32) -> Result<(), NodeError> {
        Self::remove_tree(&self.release_dir(template, number)).await
    }
}
