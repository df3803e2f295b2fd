//! Durable registrations: one row per agent, written before the registry acknowledges, with the
//! agent's health and when it is next due for a check, which replicas sharing the database share.

use mesh_protocol::registry::HealthStatus;
use mesh_storage::{Backend, Database, Row, StorageError, settle};
use sqlx::any::AnyRow;
use sqlx::migrate::Migrator;

use crate::card::{AgentInterfaceRecord, CardProfile, path_form};
use crate::directory::PollTarget;
use crate::health::HealthProbe;

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
    /// The name in URL paths (`/agents/{path}/`): URL-safe, unique.
    pub path: String,
    /// What the poller fetches at `health_endpoint`.
    pub health_probe: HealthProbe,
    /// The interfaces the agent's card declares (empty when its card was not read).
    pub interfaces: Vec<AgentInterfaceRecord>,
    /// What the agent is searched by: its card's description and skills (empty when its card was
    /// not read).
    pub profile: CardProfile,
    /// The tenant whose callers alone find the agent; `""`: every tenant's.
    pub tenant: String,
}

impl StoredAgent {
    /// An agent at `http://127.0.0.1/{name}` with the usual endpoints, for tests.
    #[cfg(test)]
    pub(crate) fn for_test(name: &str, capabilities: &[&str]) -> Self {
        let url = format!("http://127.0.0.1/{name}");
        Self {
            name: name.into(),
            url: url.clone(),
            capabilities: capabilities.iter().map(|c| (*c).to_owned()).collect(),
            health_endpoint: format!("{url}/health"),
            process_endpoint: format!("{url}/tasks/send"),
            agent_card_url: format!("{url}/.well-known/agent-card.json"),
            registered_at: "2026-01-01T00:00:00Z".into(),
            updated_at: "2026-01-01T00:00:00Z".into(),
            owner: None,
            path: path_form(name),
            health_probe: HealthProbe::Health,
            interfaces: Vec::new(),
            profile: CardProfile::default(),
            tenant: String::new(),
        }
    }

    /// Whether `other` describes the same instance offering the same things: a re-registration
    /// that only refreshes the registration is not a change replicas need to hear of.
    pub(crate) fn same_instance(&self, other: &Self) -> bool {
        (
            &self.url,
            &self.capabilities,
            &self.health_endpoint,
            &self.process_endpoint,
            &self.agent_card_url,
            &self.owner,
            (&self.path, self.health_probe, &self.interfaces, &self.profile, &self.tenant),
        ) == (
            &other.url,
            &other.capabilities,
            &other.health_endpoint,
            &other.process_endpoint,
            &other.agent_card_url,
            &other.owner,
            (&other.path, other.health_probe, &other.interfaces, &other.profile, &other.tenant),
        )
    }
}

/// A registration with the health the last check (by any replica) found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredState {
    pub agent: StoredAgent,
    pub health: HealthStatus,
    pub last_health_check: Option<String>,
}

/// The columns a [`StoredState`] is read from; a macro so the queries stay static strings.
macro_rules! agent_columns {
    () => {
        "name, url, capabilities, health_endpoint, process_endpoint, agent_card_url, \
         registered_at, updated_at, owner, health, last_health_check, path, health_probe, interfaces, profile, \
         tenant"
    };
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

    /// Inserts or updates; a re-registration keeps the original `registered_at`, and its health
    /// unless the URL changed (a new instance is unknown and due for a check at once). Returns
    /// whether the change is one other replicas must see, which it then announces.
    pub async fn upsert(&self, agent: &StoredAgent) -> Result<bool, StorageError> {
        let encode = |e: serde_json::Error| StorageError::Query(sqlx::Error::Encode(Box::new(e)));
        let capabilities = serde_json::to_string(&agent.capabilities).map_err(encode)?;
        let interfaces = serde_json::to_string(&agent.interfaces).map_err(encode)?;
        let profile = serde_json::to_string(&agent.profile).map_err(encode)?;
        let _turn = self.db.write_turn().await;
        let mut tx = self.db.pool().begin().await?;
        let written = async {
            // Locks the row on PostgreSQL, so two replicas registering one name at once both see what
            // the other did before deciding whether it changed anything.
            let select = match self.db.backend() {
                Backend::Postgres => concat!("SELECT ", agent_columns!(), " FROM agents WHERE name = $1 FOR UPDATE"),
                Backend::Sqlite => concat!("SELECT ", agent_columns!(), " FROM agents WHERE name = $1"),
            };
            let before = sqlx::query(select)
                .bind(&agent.name)
                .fetch_optional(&mut *tx)
                .await?
                .map(|row| stored_state(&row))
                .transpose()?;
            sqlx::query(
                "INSERT INTO agents (name, url, capabilities, health_endpoint, process_endpoint, agent_card_url, registered_at, updated_at, owner, \
                 path, health_probe, interfaces, profile, tenant) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14) \
                 ON CONFLICT (name) DO UPDATE SET url = excluded.url, capabilities = excluded.capabilities, \
                 health_endpoint = excluded.health_endpoint, process_endpoint = excluded.process_endpoint, \
                 agent_card_url = excluded.agent_card_url, updated_at = excluded.updated_at, \
                 path = excluded.path, health_probe = excluded.health_probe, interfaces = excluded.interfaces, \
                 profile = excluded.profile, tenant = excluded.tenant, \
                 owner = COALESCE(agents.owner, excluded.owner), \
                 health = CASE WHEN agents.url = excluded.url THEN agents.health ELSE 'unknown' END, \
                 last_health_check = CASE WHEN agents.url = excluded.url THEN agents.last_health_check ELSE NULL END, \
                 next_check_at_ms = CASE WHEN agents.url = excluded.url THEN agents.next_check_at_ms ELSE 0 END",
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
            .bind(&agent.path)
            .bind(agent.health_probe.as_str())
            .bind(interfaces)
            .bind(profile)
            .bind(&agent.tenant)
            .execute(&mut *tx)
            .await?;
            let changed = before.is_none_or(|before| !before.agent.same_instance(agent));
            if changed {
                bump_version(&mut tx).await?;
            }
            Ok::<_, StorageError>(changed)
        }
        .await;
        settle(tx, written, |_| true).await
    }

    /// Removes `name`, or only while it is registered at `url` when one is given; returns
    /// whether a row was removed.
    pub async fn delete(&self, name: &str, url: Option<&str>) -> Result<bool, StorageError> {
        let _turn = self.db.write_turn().await;
        let mut tx = self.db.pool().begin().await?;
        let written = async {
            let result = match url {
                None => sqlx::query("DELETE FROM agents WHERE name = $1").bind(name).execute(&mut *tx).await?,
                Some(url) => {
                    sqlx::query("DELETE FROM agents WHERE name = $1 AND url = $2")
                        .bind(name)
                        .bind(url)
                        .execute(&mut *tx)
                        .await?
                }
            };
            let removed = result.rows_affected() > 0;
            if removed {
                bump_version(&mut tx).await?;
            }
            Ok::<_, StorageError>(removed)
        }
        .await;
        settle(tx, written, |_| true).await
    }

    /// Takes the checks of up to `limit` agents that are due at `now_ms`, moving each on to
    /// `next_ms`. The condition is checked again on the locked row, so of replicas claiming at
    /// once each agent goes to one.
    pub async fn claim_due(&self, now_ms: i64, next_ms: i64, limit: usize) -> Result<Vec<PollTarget>, StorageError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let _turn = self.db.write_turn().await;
        let rows = sqlx::query(
            "UPDATE agents SET next_check_at_ms = $1 \
             WHERE next_check_at_ms <= $2 AND name IN \
             (SELECT name FROM agents WHERE next_check_at_ms <= $2 ORDER BY next_check_at_ms LIMIT $3) \
             RETURNING name, url, health_endpoint, health_probe",
        )
        .bind(next_ms)
        .bind(now_ms)
        .bind(limit)
        .fetch_all(self.db.pool())
        .await?;
        rows.iter()
            .map(|row| {
                Ok(PollTarget {
                    name: row.try_get("name")?,
                    url: row.try_get("url")?,
                    health_url: row.try_get("health_endpoint")?,
                    probe: HealthProbe::parse(&row.try_get::<String, _>("health_probe")?),
                })
            })
            .collect::<Result<_, sqlx::Error>>()
            .map_err(StorageError::Query)
    }

    /// Takes the check of `target` now, whenever it was due (a new registration, a reported
    /// failure), moving its next one to `next_ms`; false when it is gone or registered elsewhere.
    pub async fn claim_now(&self, target: &PollTarget, next_ms: i64) -> Result<bool, StorageError> {
        let _turn = self.db.write_turn().await;
        let result = sqlx::query("UPDATE agents SET next_check_at_ms = $1 WHERE name = $2 AND url = $3")
            .bind(next_ms)
            .bind(&target.name)
            .bind(&target.url)
            .execute(self.db.pool())
            .await?;
        Ok(result.rows_affected() > 0)
    }

    /// Records a check's result, unless the agent was removed or re-registered elsewhere since,
    /// or a newer check's result is stored already (checks are stored after they are applied,
    /// in the background, so two may land out of order); a new health is announced to the other
    /// replicas.
    pub async fn record_health(
        &self,
        target: &PollTarget,
        health: HealthStatus,
        checked_at: &str,
    ) -> Result<(), StorageError> {
        let _turn = self.db.write_turn().await;
        let mut tx = self.db.pool().begin().await?;
        let written = async {
            let changed = sqlx::query(
                "UPDATE agents SET health = $1, last_health_check = $2 WHERE name = $3 AND url = $4 AND health <> $1 \
                 AND (last_health_check IS NULL OR last_health_check < $2)",
            )
            .bind(health.as_str())
            .bind(checked_at)
            .bind(&target.name)
            .bind(&target.url)
            .execute(&mut *tx)
            .await?
            .rows_affected()
                > 0;
            if changed {
                bump_version(&mut tx).await?;
            } else {
                sqlx::query(
                    "UPDATE agents SET last_health_check = $1 WHERE name = $2 AND url = $3 \
                     AND (last_health_check IS NULL OR last_health_check < $1)",
                )
                .bind(checked_at)
                .bind(&target.name)
                .bind(&target.url)
                .execute(&mut *tx)
                .await?;
            }
            Ok::<_, StorageError>(())
        }
        .await;
        settle(tx, written, |_| true).await
    }

    /// The number every change other replicas must see moves on.
    pub async fn version(&self) -> Result<i64, StorageError> {
        let row = sqlx::query("SELECT version FROM registry_version WHERE id = 1").fetch_one(self.db.pool()).await?;
        Ok(row.try_get("version")?)
    }

    pub async fn load_all(&self) -> Result<Vec<StoredState>, StorageError> {
        let rows = sqlx::query(concat!("SELECT ", agent_columns!(), " FROM agents ORDER BY name"))
            .fetch_all(self.db.pool())
            .await?;
        rows.iter().map(stored_state).collect::<Result<_, sqlx::Error>>().map_err(StorageError::Query)
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

async fn bump_version(tx: &mut sqlx::Transaction<'_, sqlx::Any>) -> Result<(), sqlx::Error> {
    sqlx::query("UPDATE registry_version SET version = version + 1 WHERE id = 1").execute(&mut **tx).await?;
    Ok(())
}

fn stored_state(row: &AnyRow) -> Result<StoredState, sqlx::Error> {
    let capabilities: String = row.try_get("capabilities")?;
    let health: String = row.try_get("health")?;
    let name: String = row.try_get("name")?;
    let path: Option<String> = row.try_get("path")?;
    let interfaces: String = row.try_get("interfaces")?;
    let profile: String = row.try_get("profile")?;
    let decode = |e: serde_json::Error| sqlx::Error::Decode(Box::new(e));
    Ok(StoredState {
        agent: StoredAgent {
            path: path.unwrap_or_else(|| path_form(&name)),
            name,
            url: row.try_get("url")?,
            capabilities: serde_json::from_str(&capabilities).map_err(decode)?,
            health_endpoint: row.try_get("health_endpoint")?,
            process_endpoint: row.try_get("process_endpoint")?,
            agent_card_url: row.try_get("agent_card_url")?,
            registered_at: row.try_get("registered_at")?,
            updated_at: row.try_get("updated_at")?,
            owner: row.try_get("owner")?,
            health_probe: HealthProbe::parse(&row.try_get::<String, _>("health_probe")?),
            interfaces: serde_json::from_str(&interfaces).map_err(decode)?,
            profile: serde_json::from_str(&profile).map_err(decode)?,
            tenant: row.try_get("tenant")?,
        },
        health: parse_health(&health),
        last_health_check: row.try_get("last_health_check")?,
    })
}

/// The health a stored word names; a word this version does not know reads as not checked yet.
fn parse_health(word: &str) -> HealthStatus {
    [HealthStatus::Healthy, HealthStatus::Unhealthy, HealthStatus::Unreachable]
        .into_iter()
        .find(|health| health.as_str() == word)
        .unwrap_or(HealthStatus::Unknown)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Checks are stored in the background after they are applied, so an older one can land
    /// after a newer: it must not overwrite it.
    #[tokio::test]
    async fn an_older_check_stored_late_does_not_overwrite_a_newer_one() {
        let dir = tempfile::tempdir().unwrap();
        let store = AgentStore::open(&format!("sqlite://{}", dir.path().join("registry.db").display())).await.unwrap();
        let agent = StoredAgent::for_test("a", &["search"]);
        store.upsert(&agent).await.unwrap();
        let target = PollTarget {
            name: agent.name.clone(),
            url: agent.url.clone(),
            health_url: agent.health_endpoint,
            probe: HealthProbe::Health,
        };
        let stored = || async { store.load_all().await.unwrap().remove(0) };

        store.record_health(&target, HealthStatus::Healthy, "2026-01-01T00:00:02.000Z").await.unwrap();
        let version = store.version().await.unwrap();
        store.record_health(&target, HealthStatus::Unreachable, "2026-01-01T00:00:01.000Z").await.unwrap();
        let state = stored().await;
        assert_eq!(
            (state.health, state.last_health_check.as_deref()),
            (HealthStatus::Healthy, Some("2026-01-01T00:00:02.000Z"))
        );
        assert_eq!(store.version().await.unwrap(), version, "nothing changed for the other replicas");

        store.record_health(&target, HealthStatus::Unreachable, "2026-01-01T00:00:03.000Z").await.unwrap();
        assert_eq!(stored().await.health, HealthStatus::Unreachable, "a newer check is stored");
        assert!(store.version().await.unwrap() > version);
        store.record_health(&target, HealthStatus::Unreachable, "2026-01-01T00:00:04.000Z").await.unwrap();
        assert_eq!(
            stored().await.last_health_check.as_deref(),
            Some("2026-01-01T00:00:04.000Z"),
            "the same health, checked later"
        );
    }
}
