//! Durable registrations: one row per agent, written before the registry acknowledges.

use mesh_storage::{Database, Row, StorageError};
use sqlx::migrate::Migrator;

static MIGRATIONS: Migrator = sqlx::migrate!("./migrations");

/// A registration as stored, with every endpoint resolved to an absolute URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredAgent {
    pub name: String,
    pub url: String,
    pub capabilities: Vec<String>,
    pub health_endpoint: String,
    pub process_endpoint: String,
    pub agent_card_url: String,
    pub registered_at: String,
    pub updated_at: String,
    /// The identity that owns the name; `None` when it was registered with authentication off.
    pub owner: Option<String>,
}

#[derive(Debug, Clone)]
pub struct AgentStore {
    db: Database,
}

impl AgentStore {
    pub async fn open(url: &str) -> Result<Self, StorageError> {
        Ok(Self { db: Database::connect(url, &MIGRATIONS).await? })
    }

    /// The registry's database, which the link store shares.
    pub fn database(&self) -> Database {
        self.db.clone()
    }

    /// Inserts or updates; a re-registration keeps the original `registered_at`.
    pub async fn upsert(&self, agent: &StoredAgent) -> Result<(), StorageError> {
        let capabilities = serde_json::to_string(&agent.capabilities)
            .map_err(|e| StorageError::Query(sqlx::Error::Encode(Box::new(e))))?;
        sqlx::query(
            "INSERT INTO agents (name, url, capabilities, health_endpoint, process_endpoint, agent_card_url, registered_at, updated_at, owner) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
             ON CONFLICT (name) DO UPDATE SET url = excluded.url, capabilities = excluded.capabilities, \
             health_endpoint = excluded.health_endpoint, process_endpoint = excluded.process_endpoint, \
             agent_card_url = excluded.agent_card_url, updated_at = excluded.updated_at, \
             owner = COALESCE(agents.owner, excluded.owner)",
        )
        .bind(&agent.name)
        .bind(&agent.url)
        .bind(capabilities)
        .bind(&agent.health_endpoint)
        .bind(&agent.process_endpoint)
        .bind(&agent.agent_card_url)
        .bind(&agent.registered_at)
        .bind(&agent.updated_at)
        .bind(&agent.owner)
        .execute(self.db.pool())
        .await?;
        Ok(())
    }

    /// Removes `name`, or only while it is registered at `url` when one is given; returns
    /// whether a row was removed.
    pub async fn delete(&self, name: &str, url: Option<&str>) -> Result<bool, StorageError> {
        let result = match url {
            None => sqlx::query("DELETE FROM agents WHERE name = $1").bind(name).execute(self.db.pool()).await?,
            Some(url) => {
                sqlx::query("DELETE FROM agents WHERE name = $1 AND url = $2")
                    .bind(name)
                    .bind(url)
                    .execute(self.db.pool())
                    .await?
            }
        };
        Ok(result.rows_affected() > 0)
    }

    pub async fn load_all(&self) -> Result<Vec<StoredAgent>, StorageError> {
        let rows = sqlx::query(
            "SELECT name, url, capabilities, health_endpoint, process_endpoint, agent_card_url, registered_at, updated_at, owner \
             FROM agents ORDER BY name",
        )
        .fetch_all(self.db.pool())
        .await?;
        rows.iter()
            .map(|row| {
                let capabilities: String = row.try_get("capabilities")?;
                Ok(StoredAgent {
                    name: row.try_get("name")?,
                    url: row.try_get("url")?,
                    capabilities: serde_json::from_str(&capabilities).map_err(|e| sqlx::Error::Decode(Box::new(e)))?,
                    health_endpoint: row.try_get("health_endpoint")?,
                    process_endpoint: row.try_get("process_endpoint")?,
                    agent_card_url: row.try_get("agent_card_url")?,
                    registered_at: row.try_get("registered_at")?,
                    updated_at: row.try_get("updated_at")?,
                    owner: row.try_get("owner")?,
                })
            })
            .collect::<Result<_, sqlx::Error>>()
            .map_err(StorageError::Query)
    }

    /// Whether the database answers a trivial query, for `/health`.
    pub async fn ping(&self) -> Result<(), StorageError> {
        sqlx::query("SELECT 1").execute(self.db.pool()).await.map_err(StorageError::Query)?;
        Ok(())
    }

    pub async fn close(&self) {
        self.db.close().await;
    }
}
