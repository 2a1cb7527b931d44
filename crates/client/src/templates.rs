//! Templates and releases: `/v1/templates`.

use cove_api_types::{
    BuildReleaseRequest, BuildReleaseResponse, CreateTemplateQuery, Template, TemplateList,
};
use reqwest::Method;

use crate::{Client, Result};

impl Client {
    /// `GET /v1/templates`.
    pub async fn templates(&self) -> Result<TemplateList> {
        self.json(self.request(Method::GET, self.url(&["v1", "templates"])))
            .await
    }

    /// `GET /v1/templates/{name}`.
    pub async fn template(&self, name: &str) -> Result<Template> {
        self.json(self.request(Method::GET, self.url(&["v1", "templates", name])))
            .await
    }

    /// `POST /v1/templates/{name}/releases`: starts building a new release; follow it with
    /// [`Client::operation_logs`] or [`Client::wait_operation`].
    pub async fn build_release(
        &self,
        name: &str,
        request: &BuildReleaseRequest,
    ) -> Result<BuildReleaseResponse> {
        let url = self.url(&["v1", "templates", name, "releases"]);
        self.json(self.request(Method::POST, url).json(request))
            .await
    }

    /// `POST /v1/templates`: creates (or gives a new release to) the file template
    /// `query.name` from `context`, a tar archive holding the template file, and starts its
    /// build; follow it with [`Client::operation_logs`] or [`Client::wait_operation`].
    pub async fn create_template(
        &self,
        query: &CreateTemplateQuery,
        context: Vec<u8>,
    ) -> Result<BuildReleaseResponse> {
        let mut url = self.url(&["v1", "templates"]);
        {
            let mut q = url.query_pairs_mut();
            q.append_pair("name", &query.name);
            if let Some(file) = &query.file {
                q.append_pair("file", file);
            }
            if query.no_cache {
                q.append_pair("no_cache", "true");
            }
            // A policy is strings and a bool: its JSON cannot fail to serialise.
            if let Some(json) = query
                .network
                .as_ref()
                .and_then(|n| serde_json::to_string(n).ok())
            {
                q.append_pair("network", &json);
            }
            // A map of strings: its JSON cannot fail to serialise.
            if !query.build_args.is_empty() {
                if let Ok(json) = serde_json::to_string(&query.build_args) {
                    q.append_pair("build_args", &json);
                }
            }
        }
        let request = self
            .request(Method::POST, url)
            .header(reqwest::header::CONTENT_TYPE, "application/x-tar")
            .body(context);
        self.json(request).await
    }

    /// `DELETE /v1/templates/{name}`: deletes a file template and all its releases.
    pub async fn delete_template(&self, name: &str) -> Result<()> {
        let url = self.url(&["v1", "templates", name]);
        self.send(self.request(Method::DELETE, url)).await.map(drop)
    }

    /// `DELETE /v1/templates/{name}/releases/{number}`.
    pub async fn delete_release(&self, name: &str, number: u32) -> Result<()> {
        let url = self.url(&["v1", "templates", name, "releases", &number.to_string()]);
        self.send(self.request(Method::DELETE, url)).await.map(drop)
    }
}
