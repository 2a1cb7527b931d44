//! Nodes: `/v1/nodes`.

use cove_api_types::{Node, NodeList};
use reqwest::Method;

use crate::{Client, Result};

impl Client {
    /// `GET /v1/nodes`: every node, by name.
    pub async fn nodes(&self) -> Result<NodeList> {
        self.json(self.request(Method::GET, self.url(&["v1", "nodes"])))
            .await
    }

    /// `POST /v1/nodes/{name}/drain`: stops placement on the node; returns it.
    pub async fn drain_node(&self, name: &str) -> Result<Node> {
        let url = self.url(&["v1", "nodes", name, "drain"]);
        self.json(self.request(Method::POST, url)).await
    }

    /// `POST /v1/nodes/{name}/ready`: lets a drained or quarantined node take sandboxes
    /// again; returns it.
    pub async fn ready_node(&self, name: &str) -> Result<Node> {
        let url = self.url(&["v1", "nodes", name, "ready"]);
        self.json(self.request(Method::POST, url)).await
    }
}
