//! Warm pools: `/v1/pools`.

use cove_api_types::{Pool, PoolList, PutPoolRequest};
use reqwest::Method;

use crate::{Client, Result};

impl Client {
    /// `PUT /v1/pools/{name}`: creates the pool or replaces its settings; the server then
    /// boots members in the background until `min_ready` are ready.
    pub async fn put_pool(&self, name: &str, request: &PutPoolRequest) -> Result<Pool> {
        let url = self.url(&["v1", "pools", name]);
        self.json(self.request(Method::PUT, url).json(request))
            .await
    }

    /// `GET /v1/pools/{name}`: the pool with its sizes and counters.
    pub async fn pool(&self, name: &str) -> Result<Pool> {
        self.json(self.request(Method::GET, self.url(&["v1", "pools", name])))
            .await
    }

    /// `GET /v1/pools`: every pool, by name.
    pub async fn pools(&self) -> Result<PoolList> {
        self.json(self.request(Method::GET, self.url(&["v1", "pools"])))
            .await
    }

    /// `DELETE /v1/pools/{name}`: removes the pool and deletes its members (`204`).
    pub async fn delete_pool(&self, name: &str) -> Result<()> {
        let url = self.url(&["v1", "pools", name]);
        self.send(self.request(Method::DELETE, url)).await.map(drop)
    }
}
