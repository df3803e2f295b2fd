//! Docmem: documents as trees of plain-text nodes, durable in SQLite (the default) or PostgreSQL
//! (by URL) through `mesh-storage`.
//!
//! A conversation is one tree: a root (blank context and content for now, as seed 001 says) and
//! one child per message, in order, each with the context `text:agent:{agent_id}`. Nodes carry a
//! `version`; an edit names the version it read, and a stale one is refused with
//! [`DocmemError::Conflict`] (optimistic locking).
//!
//! Tenants: a document belongs to the tenant its root was created for, and every node appended
//! under it carries that tenant, so whoever reads a node knows whose conversation it is in
//! (the UI agent shows a caller only its tenant's conversations; an agent answering one carries
//! the tenant on to the calls it makes).
//!
//! Retention: every node belongs to a root, and [`Docmem::delete`] of a root removes its whole
//! tree; [`Docmem::prune_roots_older_than`] removes trees untouched since a cutoff, which a
//! deployment runs on a schedule (the UI agent does, by its `retention_days` setting).

use std::time::Duration;

use mesh_storage::{AnyPool, Database, Row, StorageError, settle};
use serde::{Deserialize, Serialize};
use sqlx::AnyConnection;
use sqlx::migrate::Migrator;

/// Docmem's own migration history, apart from the other components sharing a database.
const MIGRATIONS_TABLE: &str = "_mesh_docmem_migrations";
/// Largest page of roots one list returns.
pub const LIST_PAGE_SIZE_MAX: usize = 200;
/// Tries of an append that lost its sibling position to a concurrent append (PostgreSQL).
const APPEND_ATTEMPTS_MAX: usize = 8;
/// Longest any one docmem operation may take before it is reported as a timeout.
pub const OPERATION_TIMEOUT_MS: u64 = 10_000;
/// Most nodes one `get_many` reads per statement (well under both engines' parameter limits).
const GET_MANY_CHUNK: usize = 500;

/// The context type of conversation messages.
pub const CONTEXT_TYPE_TEXT: &str = "text";
/// The context name of conversation messages: the value is the sender's agent id.
pub const CONTEXT_NAME_AGENT: &str = "agent";

fn migrator() -> Migrator {
    let mut migrator = sqlx::migrate!("./migrations");
    migrator.dangerous_set_table_name(MIGRATIONS_TABLE);
    migrator
}

/// What a docmem operation fails with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DocmemError {
    #[error("docmem node {0} not found")]
    NotFound(String),
    /// Optimistic locking: the node changed since the caller read it.
    #[error("docmem node {id} is at version {actual}, not the expected {expected}: read it again and retry")]
    Conflict { id: String, expected: i64, actual: i64 },
    #[error("invalid docmem request: {0}")]
    Invalid(String),
    #[error("docmem operation timed out after {0} ms")]
    Timeout(u64),
    #[error("docmem storage failed: {0}")]
    Storage(String),
}

impl From<StorageError> for DocmemError {
    fn from(error: StorageError) -> Self {
        Self::Storage(error.to_string())
    }
}

impl From<sqlx::Error> for DocmemError {
    fn from(error: sqlx::Error) -> Self {
        Self::Storage(error.to_string())
    }
}

/// A node's context, `type:name:value` (e.g. `text:agent:ui-123`); all three empty on a root.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Context {
    #[serde(rename = "type")]
    pub kind: String,
    pub name: String,
    pub value: String,
}

impl Context {
    /// The context of a conversation message sent by `agent_id`.
    pub fn agent_text(agent_id: &str) -> Self {
        Self { kind: CONTEXT_TYPE_TEXT.into(), name: CONTEXT_NAME_AGENT.into(), value: agent_id.into() }
    }

    /// The sender, when this is a conversation message.
    pub fn agent_id(&self) -> Option<&str> {
        (self.kind == CONTEXT_TYPE_TEXT && self.name == CONTEXT_NAME_AGENT).then_some(self.value.as_str())
    }
}

impl std::fmt::Display for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.kind.is_empty() && self.name.is_empty() && self.value.is_empty() {
            return Ok(());
        }
        write!(f, "{}:{}:{}", self.kind, self.name, self.value)
    }
}

/// One stored node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Node {
    pub id: String,
    pub root_id: String,
    pub parent_id: Option<String>,
    /// Place among its siblings, from 0.
    pub position: i64,
    pub context: Context,
    /// Plain text, never structured data (seed 001).
    pub content: String,
    /// 1 when created, one more at every edit.
    pub version: i64,
    pub created_at: String,
    pub updated_at: String,
    /// The tenant the document belongs to, the same on every node of it ('' for the default
    /// tenant): a conversation is read only within its tenant.
    pub tenant: String,
}

/// A node to append with [`Docmem::append_many`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewChild {
    pub id: String,
    pub parent_id: String,
    pub context: Context,
    pub content: String,
}

/// A page of roots, newest first, and where the next page starts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RootPage {
    pub roots: Vec<Node>,
    /// Pass as `before` for the next page; absent on the last one.
    pub next_before: Option<String>,
}

/// A time as stored: RFC 3339 UTC with microseconds, fixed width.
pub fn timestamp(at: std::time::SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(at).format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

/// Now as stored.
pub fn now_timestamp() -> String {
    timestamp(std::time::SystemTime::now())
}

const NODE_COLUMNS: &str = "id, root_id, parent_id, position, context_type, context_name, context_value, content, \
                            version, created_at, updated_at, tenant";

/// The docmem store; clones share one pool.
#[derive(Debug, Clone)]
pub struct Docmem {
    pool: AnyPool,
    database: Database,
}

impl Docmem {
    /// Opens (and migrates) the docmem at `database_url` (`sqlite://PATH`, `sqlite::memory:`,
    /// `postgres://...`).
    pub async fn open(database_url: &str) -> Result<Self, DocmemError> {
        let database = Database::connect(database_url, &migrator()).await?;
        Ok(Self { pool: database.pool().clone(), database })
    }

    /// Whether the database answers a trivial query, for `/health`.
    pub async fn ping(&self) -> Result<(), DocmemError> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    /// Creates a root (a new document) of `tenant`; its id is a fresh UUID. Every node appended
    /// under it belongs to the same tenant.
    pub async fn create_root(&self, tenant: &str, context: &Context, content: &str) -> Result<Node, DocmemError> {
        self.create_root_with_id(&uuid::Uuid::new_v4().to_string(), tenant, context, content).await
    }

    /// [`Self::create_root`] with a caller-chosen id: a document whose id is handed out before it
    /// is written (a WebSocket conversation is named at the handshake and written at its first
    /// message). An id taken already fails, as a storage error.
    pub async fn create_root_with_id(
        &self,
        id: &str,
        tenant: &str,
        context: &Context,
        content: &str,
    ) -> Result<Node, DocmemError> {
        let now = now_timestamp();
        let node = Node {
            id: id.to_owned(),
            root_id: id.to_owned(),
            parent_id: None,
            position: 0,
            context: context.clone(),
            content: content.to_owned(),
            version: 1,
            created_at: now.clone(),
            updated_at: now,
            tenant: tenant.to_owned(),
        };
        bounded(async {
            let _turn = self.database.write_turn().await;
            Ok(self.insert(&node).await?)
        })
        .await?;
        Ok(node)
    }

    /// Appends a child under `parent_id`, after its last sibling; the new node's id is a fresh UUID.
    pub async fn append_child(&self, parent_id: &str, context: &Context, content: &str) -> Result<Node, DocmemError> {
        self.append_child_with_id(&uuid::Uuid::new_v4().to_string(), parent_id, context, content).await
    }

    /// Appends a child with a caller-chosen id, idempotently: when a node with that id exists
    /// already (a retried append), it is returned unchanged. Agents derive answer ids from the
    /// message they answer, so answering one message twice writes one node.
    pub async fn append_child_with_id(
        &self,
        id: &str,
        parent_id: &str,
        context: &Context,
        content: &str,
    ) -> Result<Node, DocmemError> {
        bounded(async {
            let mut last_error = None;
            for _ in 0..APPEND_ATTEMPTS_MAX {
                let child = NewChild {
                    id: id.to_owned(),
                    parent_id: parent_id.to_owned(),
                    context: context.clone(),
                    content: content.to_owned(),
                };
                match self.try_append(std::slice::from_ref(&child)).await {
                    Ok(Some(mut nodes)) => return Ok(nodes.remove(0)),
                    Ok(None) => return Err(DocmemError::NotFound(parent_id.into())),
                    // The id exists (a retried append), or another append took this position
                    // meanwhile: return the node, or look for the next place again.
                    Err(sqlx::Error::Database(error)) if error.is_unique_violation() => {
                        if let Some(existing) = self.get_unbounded(id).await? {
                            return Ok(existing);
                        }
                        last_error = Some(error.to_string());
                    }
                    Err(error) => return Err(error.into()),
                }
            }
            Err(DocmemError::Storage(last_error.unwrap_or_default()))
        })
        .await
    }

    /// Appends children with caller-chosen ids (under their own parents) in one transaction, in
    /// order: one commit for many answers. Idempotent like [`Self::append_child_with_id`]: when an
    /// id exists already, or a concurrent append took a place, the children are appended one by
    /// one instead, each returning the existing node if there is one.
    pub async fn append_many(&self, children: &[NewChild]) -> Result<Vec<Node>, DocmemError> {
        if children.is_empty() {
            return Ok(Vec::new());
        }
        let attempt = bounded(async {
            match self.try_append(children).await {
                Ok(Some(nodes)) => Ok(Some(nodes)),
                Ok(None) => Err(DocmemError::NotFound("a parent of the appended nodes".into())),
                Err(sqlx::Error::Database(error)) if error.is_unique_violation() => Ok(None),
                Err(error) => Err(error.into()),
            }
        })
        .await?;
        if let Some(nodes) = attempt {
            return Ok(nodes);
        }
        let mut nodes = Vec::with_capacity(children.len());
        for child in children {
            nodes.push(self.append_child_with_id(&child.id, &child.parent_id, &child.context, &child.content).await?);
        }
        Ok(nodes)
    }

    /// One transaction: each node after its last sibling (its place and root read from the parent
    /// in the same statement), and the documents marked changed. `None` when a parent is missing.
    async fn try_append(&self, children: &[NewChild]) -> Result<Option<Vec<Node>>, sqlx::Error> {
        let _turn = self.database.write_turn().await;
        let mut transaction = self.pool.begin().await?;
        let appended = append_in(&mut transaction, children).await;
        settle(transaction, appended, Option::is_some).await
    }

    /// Appends several children under `parent_id` at once, in order, in one transaction (e.g. to
    /// import a conversation); their ids are fresh UUIDs.
    pub async fn append_children(
        &self,
        parent_id: &str,
        children: &[(Context, String)],
    ) -> Result<Vec<Node>, DocmemError> {
        bounded(async {
            let parent = self.get_unbounded(parent_id).await?.ok_or_else(|| DocmemError::NotFound(parent_id.into()))?;
            let _turn = self.database.write_turn().await;
            let now = now_timestamp();
            let mut transaction = self.pool.begin().await?;
            let appended = append_children_in(&mut transaction, &parent, children, &now).await;
            let nodes = settle(transaction, appended, |_| true).await?;
            self.touch(&parent.root_id, &now).await?;
            Ok(nodes)
        })
        .await
    }

    /// One node.
    pub async fn get(&self, id: &str) -> Result<Node, DocmemError> {
        bounded(async { self.get_unbounded(id).await?.ok_or_else(|| DocmemError::NotFound(id.into())) }).await
    }

    /// The nodes with these ids that exist, in no particular order.
    pub async fn get_many(&self, ids: &[String]) -> Result<Vec<Node>, DocmemError> {
        bounded(async {
            let mut nodes = Vec::with_capacity(ids.len());
            for chunk in ids.chunks(GET_MANY_CHUNK) {
                let placeholders: Vec<String> = (1..=chunk.len()).map(|i| format!("${i}")).collect();
                let sql = format!("SELECT {NODE_COLUMNS} FROM docmem_nodes WHERE id IN ({})", placeholders.join(", "));
                // Only placeholders are formatted into the statement, never values.
                let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
                for id in chunk {
                    query = query.bind(id);
                }
                for row in query.fetch_all(&self.pool).await? {
                    nodes.push(node_from_row(&row)?);
                }
            }
            Ok(nodes)
        })
        .await
    }

    /// A whole document: the root, then every other node in tree order (children in position
    /// order, each followed by its own subtree). For a conversation: root, then its messages.
    pub async fn read_tree(&self, root_id: &str) -> Result<Vec<Node>, DocmemError> {
        bounded(async {
            let sql = format!("SELECT {NODE_COLUMNS} FROM docmem_nodes WHERE root_id = $1 ORDER BY position, id");
            let rows = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(root_id).fetch_all(&self.pool).await?;
            let nodes = rows.iter().map(node_from_row).collect::<Result<Vec<_>, _>>()?;
            let Some(root) = nodes.iter().find(|n| n.id == root_id && n.parent_id.is_none()).cloned() else {
                return Err(DocmemError::NotFound(root_id.into()));
            };
            let mut ordered = Vec::with_capacity(nodes.len());
            let mut stack = vec![root];
            while let Some(node) = stack.pop() {
                // Rows come in position order: push children in reverse so the first pops first.
                stack.extend(nodes.iter().filter(|n| n.parent_id.as_deref() == Some(node.id.as_str())).rev().cloned());
                ordered.push(node);
            }
            Ok(ordered)
        })
        .await
    }

    /// The messages of a conversation: the root's direct children, in order.
    pub async fn read_conversation(&self, root_id: &str) -> Result<Vec<Node>, DocmemError> {
        let tree = self.read_tree(root_id).await?;
        Ok(tree.into_iter().filter(|n| n.parent_id.as_deref() == Some(root_id)).collect())
    }

    /// Replaces a node's content (and context) if it is still at `expected_version`.
    pub async fn edit(
        &self,
        id: &str,
        expected_version: i64,
        context: &Context,
        content: &str,
    ) -> Result<Node, DocmemError> {
        bounded(async {
            let now = now_timestamp();
            let _turn = self.database.write_turn().await;
            let updated = sqlx::query(
                "UPDATE docmem_nodes SET content = $1, context_type = $2, context_name = $3, context_value = $4, \
                 version = version + 1, updated_at = $5 WHERE id = $6 AND version = $7",
            )
            .bind(content)
            .bind(&context.kind)
            .bind(&context.name)
            .bind(&context.value)
            .bind(&now)
            .bind(id)
            .bind(expected_version)
            .execute(&self.pool)
            .await?
            .rows_affected();
            let node = self.get_unbounded(id).await?.ok_or_else(|| DocmemError::NotFound(id.into()))?;
            if updated == 0 {
                return Err(DocmemError::Conflict { id: id.into(), expected: expected_version, actual: node.version });
            }
            self.touch(&node.root_id, &now).await?;
            Ok(node)
        })
        .await
    }

    /// Deletes a node and its subtree; deleting a root deletes the whole document.
    pub async fn delete(&self, id: &str) -> Result<(), DocmemError> {
        bounded(async {
            let node = self.get_unbounded(id).await?.ok_or_else(|| DocmemError::NotFound(id.into()))?;
            let _turn = self.database.write_turn().await;
            if node.parent_id.is_none() {
                sqlx::query("DELETE FROM docmem_nodes WHERE root_id = $1").bind(id).execute(&self.pool).await?;
                return Ok(());
            }
            let tree = self.read_tree(&node.root_id).await?;
            let mut doomed = vec![node.id.clone()];
            let mut index = 0;
            while index < doomed.len() {
                let parent = doomed[index].clone();
                doomed.extend(
                    tree.iter().filter(|n| n.parent_id.as_deref() == Some(parent.as_str())).map(|n| n.id.clone()),
                );
                index += 1;
            }
            let mut transaction = self.pool.begin().await?;
            let deleted = delete_in(&mut transaction, &doomed).await;
            settle(transaction, deleted, |_| true).await?;
            self.touch(&node.root_id, &now_timestamp()).await
        })
        .await
    }

    /// Roots, most recently changed first, `limit` (at most [`LIST_PAGE_SIZE_MAX`]) per page,
    /// changed before `before` (a previous page's `next_before`) when given; only those of
    /// `tenant` and those with a message from `agent_id`, when given.
    pub async fn list_roots(
        &self,
        tenant: Option<&str>,
        agent_id: Option<&str>,
        before: Option<&str>,
        limit: usize,
    ) -> Result<RootPage, DocmemError> {
        if limit == 0 || limit > LIST_PAGE_SIZE_MAX {
            return Err(DocmemError::Invalid(format!("page size must be 1..={LIST_PAGE_SIZE_MAX}, not {limit}")));
        }
        bounded(async {
            let mut sql = format!("SELECT {NODE_COLUMNS} FROM docmem_nodes WHERE parent_id IS NULL");
            let mut next = 1;
            if tenant.is_some() {
                sql.push_str(&format!(" AND tenant = ${next}"));
                next += 1;
            }
            if agent_id.is_some() {
                sql.push_str(&format!(" AND id IN (SELECT root_id FROM docmem_nodes WHERE context_value = ${next})"));
                next += 1;
            }
            if before.is_some() {
                sql.push_str(&format!(" AND updated_at < ${next}"));
                next += 1;
            }
            sql.push_str(&format!(" ORDER BY updated_at DESC LIMIT ${next}"));
            // Only placeholders are formatted into the statement, never values.
            let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
            if let Some(tenant) = tenant {
                query = query.bind(tenant);
            }
            if let Some(agent_id) = agent_id {
                query = query.bind(agent_id);
            }
            if let Some(before) = before {
                query = query.bind(before);
            }
            let rows = query.bind(limit as i64 + 1).fetch_all(&self.pool).await?;
            let mut roots = rows.iter().map(node_from_row).collect::<Result<Vec<_>, _>>()?;
            let next_before = (roots.len() > limit).then(|| {
                roots.truncate(limit);
                roots.last().map(|r| r.updated_at.clone()).unwrap_or_default()
            });
            Ok(RootPage { roots, next_before })
        })
        .await
    }

    /// Deletes every document whose root was last changed before `cutoff` (a stored timestamp);
    /// returns how many nodes went.
    pub async fn prune_roots_older_than(&self, cutoff: &str) -> Result<u64, DocmemError> {
        bounded(async {
            let _turn = self.database.write_turn().await;
            Ok(sqlx::query(
                "DELETE FROM docmem_nodes WHERE root_id IN \
                 (SELECT id FROM docmem_nodes WHERE parent_id IS NULL AND updated_at < $1)",
            )
            .bind(cutoff)
            .execute(&self.pool)
            .await?
            .rows_affected())
        })
        .await
    }

    async fn get_unbounded(&self, id: &str) -> Result<Option<Node>, DocmemError> {
        let sql = format!("SELECT {NODE_COLUMNS} FROM docmem_nodes WHERE id = $1");
        let row = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(id).fetch_optional(&self.pool).await?;
        row.as_ref().map(node_from_row).transpose()
    }

    async fn insert(&self, node: &Node) -> Result<(), sqlx::Error> {
        insert_node(&self.pool, node).await
    }

    /// Marks a document changed (lists sort and retention cuts by it).
    async fn touch(&self, root_id: &str, now: &str) -> Result<(), DocmemError> {
        sqlx::query("UPDATE docmem_nodes SET updated_at = $1 WHERE id = $2 AND updated_at < $1")
            .bind(now)
            .bind(root_id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }
}

/// [`Docmem::try_append`]'s statements, on its transaction.
async fn append_in(connection: &mut AnyConnection, children: &[NewChild]) -> Result<Option<Vec<Node>>, sqlx::Error> {
    let now = now_timestamp();
    let mut nodes = Vec::with_capacity(children.len());
    for child in children {
        let row = sqlx::query(
            "INSERT INTO docmem_nodes (id, root_id, parent_id, position, context_type, context_name, \
             context_value, content, version, created_at, updated_at, tenant) \
             SELECT $1, p.root_id, p.id, (SELECT COALESCE(MAX(c.position) + 1, 0) FROM docmem_nodes c \
             WHERE c.root_id = p.root_id AND c.parent_id = p.id), $2, $3, $4, $5, 1, $6, $6, p.tenant \
             FROM docmem_nodes p WHERE p.id = $7 RETURNING root_id, position, tenant",
        )
        .bind(&child.id)
        .bind(&child.context.kind)
        .bind(&child.context.name)
        .bind(&child.context.value)
        .bind(&child.content)
        .bind(&now)
        .bind(&child.parent_id)
        .fetch_optional(&mut *connection)
        .await?;
        let Some(row) = row else { return Ok(None) };
        nodes.push(Node {
            id: child.id.clone(),
            root_id: row.try_get("root_id")?,
            parent_id: Some(child.parent_id.clone()),
            position: row.try_get("position")?,
            context: child.context.clone(),
            content: child.content.clone(),
            version: 1,
            created_at: now.clone(),
            updated_at: now.clone(),
            tenant: row.try_get("tenant")?,
        });
    }
    let mut roots: Vec<&str> = nodes.iter().map(|n| n.root_id.as_str()).collect();
    roots.sort_unstable();
    roots.dedup();
    for root_id in roots {
        sqlx::query("UPDATE docmem_nodes SET updated_at = $1 WHERE id = $2 AND updated_at < $1")
            .bind(&now)
            .bind(root_id)
            .execute(&mut *connection)
            .await?;
    }
    Ok(Some(nodes))
}

/// [`Docmem::append_children`]'s statements, on its transaction: the children after the last of
/// `parent`'s, stamped `now`.
async fn append_children_in(
    connection: &mut AnyConnection,
    parent: &Node,
    children: &[(Context, String)],
    now: &str,
) -> Result<Vec<Node>, sqlx::Error> {
    let first: i64 =
        sqlx::query("SELECT COALESCE(MAX(position) + 1, 0) FROM docmem_nodes WHERE root_id = $1 AND parent_id = $2")
            .bind(&parent.root_id)
            .bind(&parent.id)
            .fetch_one(&mut *connection)
            .await?
            .try_get(0)?;
    let mut nodes = Vec::with_capacity(children.len());
    for (offset, (context, content)) in children.iter().enumerate() {
        let node = Node {
            id: uuid::Uuid::new_v4().to_string(),
            root_id: parent.root_id.clone(),
            parent_id: Some(parent.id.clone()),
            position: first + offset as i64,
            context: context.clone(),
            content: content.clone(),
            version: 1,
            created_at: now.to_owned(),
            updated_at: now.to_owned(),
            tenant: parent.tenant.clone(),
        };
        insert_node(&mut *connection, &node).await?;
        nodes.push(node);
    }
    Ok(nodes)
}

/// [`Docmem::delete`]'s statements, on its transaction.
async fn delete_in(connection: &mut AnyConnection, doomed: &[String]) -> Result<(), sqlx::Error> {
    for id in doomed {
        sqlx::query("DELETE FROM docmem_nodes WHERE id = $1").bind(id).execute(&mut *connection).await?;
    }
    Ok(())
}

async fn insert_node<'e>(
    executor: impl sqlx::Executor<'e, Database = sqlx::Any>,
    node: &Node,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO docmem_nodes (id, root_id, parent_id, position, context_type, context_name, context_value, \
         content, version, created_at, updated_at, tenant) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
    )
    .bind(&node.id)
    .bind(&node.root_id)
    .bind(node.parent_id.as_deref())
    .bind(node.position)
    .bind(&node.context.kind)
    .bind(&node.context.name)
    .bind(&node.context.value)
    .bind(&node.content)
    .bind(node.version)
    .bind(&node.created_at)
    .bind(&node.updated_at)
    .bind(&node.tenant)
    .execute(executor)
    .await?;
    Ok(())
}

/// Runs a docmem operation under [`OPERATION_TIMEOUT_MS`].
async fn bounded<T>(operation: impl Future<Output = Result<T, DocmemError>>) -> Result<T, DocmemError> {
    tokio::time::timeout(Duration::from_millis(OPERATION_TIMEOUT_MS), operation)
        .await
        .map_err(|_| DocmemError::Timeout(OPERATION_TIMEOUT_MS))?
}

fn node_from_row(row: &sqlx::any::AnyRow) -> Result<Node, DocmemError> {
    Ok(Node {
        id: row.try_get("id")?,
        root_id: row.try_get("root_id")?,
        parent_id: row.try_get("parent_id")?,
        position: row.try_get("position")?,
        context: Context {
            kind: row.try_get("context_type")?,
            name: row.try_get("context_name")?,
            value: row.try_get("context_value")?,
        },
        content: row.try_get("content")?,
        version: row.try_get("version")?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
        tenant: row.try_get("tenant")?,
    })
}
