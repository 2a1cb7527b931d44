//! Templates built from a file (both backends).

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::{query, Backend, SqlRow};
use crate::{FileTemplate, StoreError, TemplateStore};

fn row_to_template(r: &impl SqlRow) -> Result<FileTemplate, StoreError> {
    Ok(FileTemplate {
        name: r.try_get("name")?,
        org: r.try_get("org")?,
        file: r.try_get("file")?,
        created_at: r.try_get::<DateTime<Utc>, _>("created_at")?,
        updated_at: r.try_get::<DateTime<Utc>, _>("updated_at")?,
    })
}

#[async_trait]
impl<S: Backend> TemplateStore for S {
    async fn put_file_template(&self, name: &str, org: &str, file: &str) -> Result<(), StoreError> {
        let now = Utc::now();
        let done = query(
            "INSERT INTO file_templates (name, file, created_at, updated_at, org) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (name) DO UPDATE SET file = excluded.file, \
             updated_at = excluded.updated_at WHERE file_templates.org = excluded.org",
        )
        .bind(name)
        .bind(file)
        .bind(now)
        .bind(now)
        .bind(org)
        .execute(&mut self.db())
        .await?;
        if done == 0 {
            return Err(StoreError::Conflict(
                "template name taken by another org".into(),
            ));
        }
        Ok(())
    }

    async fn file_template(&self, name: &str) -> Result<Option<FileTemplate>, StoreError> {
        let row = query("SELECT * FROM file_templates WHERE name = $1")
            .bind(name)
            .fetch_optional(&mut self.db())
            .await?;
        row.as_ref().map(row_to_template).transpose()
    }

    async fn file_templates(&self) -> Result<Vec<FileTemplate>, StoreError> {
        let rows = query("SELECT * FROM file_templates ORDER BY name")
            .fetch_all(&mut self.db())
            .await?;
        rows.iter().map(row_to_template).collect()
    }

    async fn delete_file_template(&self, name: &str) -> Result<bool, StoreError> {
        let done = query("DELETE FROM file_templates WHERE name = $1")
            .bind(name)
            .execute(&mut self.db())
            .await?;
        Ok(done > 0)
    }

    async fn delete_file_template_if_unbuilt(&self, name: &str) -> Result<bool, StoreError> {
        let done = query(
            "DELETE FROM file_templates WHERE name = $1 AND NOT EXISTS \
             (SELECT 1 FROM releases WHERE releases.template = file_templates.name \
             AND releases.state IN ('ready', 'building'))",
        )
        .bind(name)
        .execute(&mut self.db())
        .await?;
        Ok(done > 0)
    }
}
