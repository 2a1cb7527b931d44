//! Templates and releases: `/v1/templates`.

use cove_api_types::{BuildReleaseRequest, BuildReleaseResponse, Template, TemplateList};
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
}
