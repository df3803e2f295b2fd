//! Durable links between agents and their message history (seed 004's `LinkStore`), in the
//! registry's database beside the registrations.

use std::sync::atomic::{AtomicU64, Ordering};

use mesh_graph::LinkReceipt;
use mesh_protocol::graph::{
    Link, LinkDirection, LinkMessage, LinkRelationship, LinkSource, LinkUpdate, NewLink, NewLinkMessage, OutcomeStatus,
    link_context_id,
};
use mesh_storage::{Database, Row, StorageError, settle};
use serde::de::DeserializeOwned;

use crate::error::RegistryError;

/// Links the registry keeps at most: every policy check of every agent scans its cached copy,
/// and the topology is drawn whole.
pub const LINKS_MAX: usize = 10_000;
/// Messages kept per link and tenant; older ones are deleted as new ones arrive.
pub const LINK_MESSAGES_KEPT_MAX: i64 = 1_000;
/// Messages one history request returns at most.
pub const LINK_MESSAGES_PAGE_MAX: usize = 500;
/// Longest message text or reply kept, in bytes.
pub const LINK_MESSAGE_TEXT_BYTES_MAX: usize = 64 * 1024;
/// Longest agent id accepted in a link, in characters (the registry's agent name limit).
pub const AGENT_ID_CHARS_MAX: usize = crate::intake::AGENT_NAME_CHARS_MAX;

// Column lists as macros, so queries stay `&'static str` (sqlx refuses strings built at run time).
macro_rules! link_columns {
    () => {
        "id, from_agent_id, to_agent_id, direction, relationship, enabled, source, created_at, updated_at"
    };
}
macro_rules! message_columns {
    () => {
        "id, link_id, from_agent_id, to_agent_id, relationship, context_id, task_id, text, reply, status, sent_at, tenant"
    };
}

/// A link as the configuration defines it (`[[links]]` in the registry's TOML).
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkDef {
    pub from: String,
    pub to: String,
    #[serde(default)]
    pub direction: LinkDirection,
    #[serde(default)]
    pub relationship: LinkRelationship,
    #[serde(default = "mesh_protocol::graph::link_enabled_default")]
    pub enabled: bool,
}

/// What a sync of the configured links changed, for events and the log.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct SyncOutcome {
    pub created: Vec<Link>,
    pub updated: Vec<Link>,
    pub deleted: Vec<Link>,
}

#[derive(Debug, Clone)]
pub struct LinkStore {
    db: Database,
    /// Orders messages within a link even when two arrive in the same microsecond.
    last_seq: std::sync::Arc<AtomicU64>,
}

impl LinkStore {
    /// Shares the registry's database (its migrations create the tables).
    pub fn new(db: Database) -> Self {
        Self { db, last_seq: Default::default() }
    }

    pub async fn list(&self) -> Result<Vec<Link>, RegistryError> {
        let rows =
            sqlx::query(concat!("SELECT ", link_columns!(), " FROM agent_links ORDER BY from_agent_id, to_agent_id"))
                .fetch_all(self.db.pool())
                .await
                .map_err(StorageError::from)?;
        rows.iter().map(link_from_row).collect()
    }

    /// Links with `agent_id` at either end.
    pub async fn for_agent(&self, agent_id: &str) -> Result<Vec<Link>, RegistryError> {
        let rows = sqlx::query(concat!(
            "SELECT ",
            link_columns!(),
            " FROM agent_links WHERE from_agent_id = $1 OR to_agent_id = $1 ORDER BY from_agent_id, to_agent_id"
        ))
        .bind(agent_id)
        .fetch_all(self.db.pool())
        .await
        .map_err(StorageError::from)?;
        rows.iter().map(link_from_row).collect()
    }

    pub async fn get(&self, id: &str) -> Result<Link, RegistryError> {
        let row = sqlx::query(concat!("SELECT ", link_columns!(), " FROM agent_links WHERE id = $1"))
            .bind(id)
            .fetch_optional(self.db.pool())
            .await
            .map_err(StorageError::from)?;
        row.as_ref().map(link_from_row).transpose()?.ok_or_else(|| RegistryError::LinkNotFound(id.to_owned()))
    }

    async fn between(&self, from: &str, to: &str) -> Result<Option<Link>, RegistryError> {
        let row = sqlx::query(concat!(
            "SELECT ",
            link_columns!(),
            " FROM agent_links WHERE from_agent_id = $1 AND to_agent_id = $2"
        ))
        .bind(from)
        .bind(to)
        .fetch_optional(self.db.pool())
        .await
        .map_err(StorageError::from)?;
        row.as_ref().map(link_from_row).transpose()
    }

    /// Creates a link; a second link from the same agent to the same agent is a conflict.
    pub async fn create(&self, new: &NewLink, source: LinkSource, now: &str) -> Result<Link, RegistryError> {
        validate_ends(&new.from_agent_id, &new.to_agent_id)?;
        if self.count().await? >= LINKS_MAX {
            return Err(RegistryError::LinksFull(LINKS_MAX));
        }
        if self.between(&new.from_agent_id, &new.to_agent_id).await?.is_some() {
            return Err(RegistryError::LinkExists { from: new.from_agent_id.clone(), to: new.to_agent_id.clone() });
        }
        let link = Link {
            id: uuid::Uuid::new_v4().to_string(),
            from_agent_id: new.from_agent_id.clone(),
            to_agent_id: new.to_agent_id.clone(),
            direction: new.direction,
            relationship: new.relationship,
            enabled: new.enabled,
            source,
            created_at: now.to_owned(),
            updated_at: now.to_owned(),
        };
        let inserted = sqlx::query(concat!(
            "INSERT INTO agent_links (",
            link_columns!(),
            ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)"
        ))
        .bind(&link.id)
        .bind(&link.from_agent_id)
        .bind(&link.to_agent_id)
        .bind(link.direction.as_str())
        .bind(link.relationship.as_str())
        .bind(i64::from(link.enabled))
        .bind(link.source.as_str())
        .bind(&link.created_at)
        .bind(&link.updated_at)
        .execute(self.db.pool())
        .await;
        match inserted {
            Ok(_) => Ok(link),
            // Another request (or replica) created the same pair between the check and the insert.
            Err(sqlx::Error::Database(e)) if e.is_unique_violation() => {
                Err(RegistryError::LinkExists { from: link.from_agent_id, to: link.to_agent_id })
            }
            Err(e) => Err(StorageError::from(e).into()),
        }
    }

    /// Changes a link's properties; `None` when nothing changed.
    pub async fn update(&self, id: &str, change: &LinkUpdate, now: &str) -> Result<(Link, bool), RegistryError> {
        let mut link = self.get(id).await?;
        let before = link.clone();
        link.direction = change.direction.unwrap_or(link.direction);
        link.relationship = change.relationship.unwrap_or(link.relationship);
        link.enabled = change.enabled.unwrap_or(link.enabled);
        if link == before {
            return Ok((link, false));
        }
        link.updated_at = now.to_owned();
        self.write_properties(&link).await?;
        Ok((link, true))
    }

    async fn write_properties(&self, link: &Link) -> Result<(), RegistryError> {
        sqlx::query(
            "UPDATE agent_links SET direction = $1, relationship = $2, enabled = $3, source = $4, updated_at = $5 WHERE id = $6",
        )
        .bind(link.direction.as_str())
        .bind(link.relationship.as_str())
        .bind(i64::from(link.enabled))
        .bind(link.source.as_str())
        .bind(&link.updated_at)
        .bind(&link.id)
        .execute(self.db.pool())
        .await
        .map_err(StorageError::from)?;
        Ok(())
    }

    /// Deletes a link and its message history (seed 004: the internal channel goes with it).
    pub async fn delete(&self, id: &str) -> Result<Link, RegistryError> {
        let link = self.get(id).await?;
        let mut tx = self.db.pool().begin().await.map_err(StorageError::from)?;
        let written = async {
            sqlx::query("DELETE FROM link_messages WHERE link_id = $1").bind(id).execute(&mut *tx).await?;
            sqlx::query("DELETE FROM agent_links WHERE id = $1").bind(id).execute(&mut *tx).await?;
            Ok::<_, StorageError>(())
        }
        .await;
        settle(tx, written, |_| true).await?;
        Ok(link)
    }

    /// Makes the configured links true in the database: a configured pair missing is created, one
    /// with other properties takes the configured ones (config wins, as seed 004 says), and a
    /// link that came from the configuration but is no longer in it is deleted. Links created
    /// through the API for other pairs are left alone.
    pub async fn sync_config(&self, defs: &[LinkDef], now: &str) -> Result<SyncOutcome, RegistryError> {
        let mut outcome = SyncOutcome::default();
        for def in defs {
            validate_ends(&def.from, &def.to)?;
        }
        for def in defs {
            match self.between(&def.from, &def.to).await? {
                None => {
                    let new = NewLink {
                        from_agent_id: def.from.clone(),
                        to_agent_id: def.to.clone(),
                        direction: def.direction,
                        relationship: def.relationship,
                        enabled: def.enabled,
                    };
                    outcome.created.push(self.create(&new, LinkSource::Config, now).await?);
                }
                Some(mut link) => {
                    let wanted = (def.direction, def.relationship, def.enabled, LinkSource::Config);
                    if (link.direction, link.relationship, link.enabled, link.source) != wanted {
                        (link.direction, link.relationship, link.enabled, link.source) = wanted;
                        link.updated_at = now.to_owned();
                        self.write_properties(&link).await?;
                        outcome.updated.push(link);
                    }
                }
            }
        }
        for link in self.list().await? {
            let configured = defs.iter().any(|d| d.from == link.from_agent_id && d.to == link.to_agent_id);
            if link.source == LinkSource::Config && !configured {
                outcome.deleted.push(self.delete(&link.id).await?);
            }
        }
        Ok(outcome)
    }

    async fn count(&self) -> Result<usize, RegistryError> {
        let row = sqlx::query("SELECT COUNT(*) AS n FROM agent_links")
            .fetch_one(self.db.pool())
            .await
            .map_err(StorageError::from)?;
        let n: i64 = row.try_get("n").map_err(StorageError::from)?;
        Ok(usize::try_from(n).unwrap_or(usize::MAX))
    }

    /// Records a message sent over `link` for `tenant`, keeping at most
    /// [`LINK_MESSAGES_KEPT_MAX`] per link and tenant (so one tenant's traffic never pushes
    /// another's history out). The link must be enabled and the sender one of its ends.
    pub async fn record_message(
        &self,
        link: &Link,
        message: &NewLinkMessage,
        tenant: &str,
        now: &str,
    ) -> Result<LinkMessage, RegistryError> {
        if !link.enabled {
            return Err(RegistryError::LinkDisabled(link.id.clone()));
        }
        let relationship = link.relationship_of(&message.from_agent_id).ok_or_else(|| {
            RegistryError::SenderForbidden(format!(
                "{:?} is not an end of link {} ({} -> {})",
                message.from_agent_id, link.id, link.from_agent_id, link.to_agent_id
            ))
        })?;
        if !link.joins(&message.from_agent_id, &message.to_agent_id) {
            return Err(RegistryError::InvalidLink(format!(
                "link {} joins {} and {}, not {} and {}",
                link.id, link.from_agent_id, link.to_agent_id, message.from_agent_id, message.to_agent_id
            )));
        }
        for (field, value) in [("text", Some(&message.text)), ("reply", message.reply.as_ref())] {
            if value.is_some_and(|v| v.len() > LINK_MESSAGE_TEXT_BYTES_MAX) {
                return Err(RegistryError::InvalidLink(format!(
                    "{field} is longer than {LINK_MESSAGE_TEXT_BYTES_MAX} bytes"
                )));
            }
        }
        let stored = LinkMessage {
            id: uuid::Uuid::new_v4().to_string(),
            link_id: link.id.clone(),
            from_agent_id: message.from_agent_id.clone(),
            to_agent_id: message.to_agent_id.clone(),
            relationship,
            context_id: message.context_id.clone(),
            task_id: message.task_id.clone(),
            text: message.text.clone(),
            reply: message.reply.clone(),
            status: message.status,
            sent_at: now.to_owned(),
            tenant: tenant.to_owned(),
        };
        let seq = self.next_seq();
        let mut tx = self.db.pool().begin().await.map_err(StorageError::from)?;
        let written = async {
            sqlx::query(concat!(
                "INSERT INTO link_messages (seq, ",
                message_columns!(),
                ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)"
            ))
            .bind(seq)
            .bind(&stored.id)
            .bind(&stored.link_id)
            .bind(&stored.from_agent_id)
            .bind(&stored.to_agent_id)
            .bind(stored.relationship.as_str())
            .bind(&stored.context_id)
            .bind(stored.task_id.as_deref())
            .bind(&stored.text)
            .bind(stored.reply.as_deref())
            .bind(stored.status.as_str())
            .bind(&stored.sent_at)
            .bind(&stored.tenant)
            .execute(&mut *tx)
            .await?;
            // Retention: drop what falls outside the newest LINK_MESSAGES_KEPT_MAX of this link
            // and tenant.
            sqlx::query(
                "DELETE FROM link_messages WHERE link_id = $1 AND tenant = $2 AND seq < (SELECT MIN(seq) FROM \
                 (SELECT seq FROM link_messages WHERE link_id = $1 AND tenant = $2 ORDER BY seq DESC LIMIT $3) AS newest)",
            )
            .bind(&stored.link_id)
            .bind(&stored.tenant)
            .bind(LINK_MESSAGES_KEPT_MAX)
            .execute(&mut *tx)
            .await?;
            Ok::<_, StorageError>(())
        }
        .await;
        settle(tx, written, |_| true).await?;
        Ok(stored)
    }

    /// The newest `limit` messages of a link, oldest first: of one tenant, or of every tenant
    /// when `tenant` is `None`.
    pub async fn messages(
        &self,
        link_id: &str,
        tenant: Option<&str>,
        limit: usize,
    ) -> Result<Vec<LinkMessage>, RegistryError> {
        let limit = i64::try_from(limit.min(LINK_MESSAGES_PAGE_MAX)).unwrap_or(0);
        let query = match tenant {
            Some(tenant) => sqlx::query(concat!(
                "SELECT ",
                message_columns!(),
                " FROM (SELECT seq, ",
                message_columns!(),
                " FROM link_messages WHERE link_id = $1 AND tenant = $2 \
                 ORDER BY seq DESC LIMIT $3) AS newest ORDER BY seq"
            ))
            .bind(link_id)
            .bind(tenant)
            .bind(limit),
            None => sqlx::query(concat!(
                "SELECT ",
                message_columns!(),
                " FROM (SELECT seq, ",
                message_columns!(),
                " FROM link_messages WHERE link_id = $1 \
                 ORDER BY seq DESC LIMIT $2) AS newest ORDER BY seq"
            ))
            .bind(link_id)
            .bind(limit),
        };
        let rows = query.fetch_all(self.db.pool()).await.map_err(StorageError::from)?;
        rows.iter().map(message_from_row).collect()
    }

    /// Microseconds since the epoch, strictly increasing within this process.
    fn next_seq(&self) -> i64 {
        let now = u64::try_from(chrono::Utc::now().timestamp_micros()).unwrap_or(0);
        let mut last = self.last_seq.load(Ordering::Relaxed);
        loop {
            let next = now.max(last + 1);
            match self.last_seq.compare_exchange_weak(last, next, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return i64::try_from(next).unwrap_or(i64::MAX),
                Err(seen) => last = seen,
            }
        }
    }
}

fn validate_ends(from: &str, to: &str) -> Result<(), RegistryError> {
    for (end, id) in [("from", from), ("to", to)] {
        if id.trim().is_empty() || id.chars().count() > AGENT_ID_CHARS_MAX || id.chars().any(char::is_control) {
            return Err(RegistryError::InvalidLink(format!(
                "{end} agent id must be 1 to {AGENT_ID_CHARS_MAX} printable characters"
            )));
        }
    }
    if from == to {
        return Err(RegistryError::LinkSelf(from.to_owned()));
    }
    Ok(())
}

/// Reads a stored enum word back.
fn parse_word<T: DeserializeOwned>(column: &str, value: String) -> Result<T, RegistryError> {
    serde_json::from_value(serde_json::Value::String(value.clone())).map_err(|e| {
        RegistryError::Storage(StorageError::Query(sqlx::Error::Decode(format!("{column} {value:?}: {e}").into())))
    })
}

fn link_from_row(row: &sqlx::any::AnyRow) -> Result<Link, RegistryError> {
    let get = |c: &str| row.try_get::<String, _>(c).map_err(|e| RegistryError::Storage(StorageError::from(e)));
    let enabled: i64 = row.try_get("enabled").map_err(StorageError::from)?;
    Ok(Link {
        id: get("id")?,
        from_agent_id: get("from_agent_id")?,
        to_agent_id: get("to_agent_id")?,
        direction: parse_word("direction", get("direction")?)?,
        relationship: parse_word("relationship", get("relationship")?)?,
        enabled: enabled != 0,
        source: parse_word("source", get("source")?)?,
        created_at: get("created_at")?,
        updated_at: get("updated_at")?,
    })
}

fn message_from_row(row: &sqlx::any::AnyRow) -> Result<LinkMessage, RegistryError> {
    let get = |c: &str| row.try_get::<String, _>(c).map_err(|e| RegistryError::Storage(StorageError::from(e)));
    let optional =
        |c: &str| row.try_get::<Option<String>, _>(c).map_err(|e| RegistryError::Storage(StorageError::from(e)));
    Ok(LinkMessage {
        id: get("id")?,
        link_id: get("link_id")?,
        from_agent_id: get("from_agent_id")?,
        to_agent_id: get("to_agent_id")?,
        relationship: parse_word("relationship", get("relationship")?)?,
        context_id: get("context_id")?,
        task_id: optional("task_id")?,
        text: get("text")?,
        reply: optional("reply")?,
        status: parse_word::<OutcomeStatus>("status", get("status")?)?,
        sent_at: get("sent_at")?,
        tenant: get("tenant")?,
    })
}

/// Longest id a receipt carries (message, task and conversation ids), in bytes.
pub const RECEIPT_ID_BYTES_MAX: usize = 256;

/// Checks a receipt against its link: enabled, between its two ends (either may receive: over a
/// `one_way` link `to` answers inside the conversations `from` started), in the link's
/// conversation.
pub fn check_receipt(link: &Link, receipt: &LinkReceipt) -> Result<(), RegistryError> {
    if !link.enabled {
        return Err(RegistryError::LinkDisabled(link.id.clone()));
    }
    if !link.joins(&receipt.from_agent_id, &receipt.to_agent_id) {
        return Err(RegistryError::InvalidLink(format!(
            "link {} joins {} and {}, not {} and {}",
            link.id, link.from_agent_id, link.to_agent_id, receipt.from_agent_id, receipt.to_agent_id
        )));
    }
    if receipt.context_id != link_context_id(&link.id) {
        return Err(RegistryError::InvalidLink(format!(
            "a message over link {} is in the conversation {:?}",
            link.id,
            link_context_id(&link.id)
        )));
    }
    let ids = [Some(&receipt.message_id), Some(&receipt.context_id), receipt.task_id.as_ref()];
    if ids.into_iter().flatten().any(|id| id.is_empty() || id.len() > RECEIPT_ID_BYTES_MAX) {
        return Err(RegistryError::InvalidLink(format!(
            "message_id, context_id and task_id must be 1 to {RECEIPT_ID_BYTES_MAX} bytes"
        )));
    }
    Ok(())
}
