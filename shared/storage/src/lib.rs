//! Durable storage for the mesh: one `sqlx` pool chosen by URL, so the same code and the same
//! migrations run on an embedded SQLite file (the default) and on PostgreSQL (for replicas).
//!
//! SQL written against [`Database`] must stay portable between the two: `$1` placeholders (SQLite
//! accepts them too), `TEXT`/`BIGINT` columns, UUIDs and timestamps stored as `TEXT`.

use std::collections::HashMap;
use std::path::Path;
use std::str::FromStr;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use sqlx::any::{AnyPoolOptions, install_default_drivers};
use sqlx::migrate::Migrator;
use sqlx::sqlite::SqliteConnectOptions;
pub use sqlx::{AnyPool, Row};

/// Connections kept per process; the mesh's writes are rare and short.
const POOL_CONNECTIONS_MAX: u32 = 8;
/// Wait before retrying migrations that raced another opener of the same SQLite file.
const MIGRATION_RETRY_DELAY_MS: u64 = 200;
/// Idle connections close after this long (sqlx's default).
const POOL_IDLE_TIMEOUT_S: u64 = 600;
/// Connections are replaced after this long (sqlx's default).
const POOL_CONNECTION_LIFETIME_S: u64 = 1_800;
/// Time a caller waits for a free connection before the store reports itself unavailable.
const POOL_ACQUIRE_TIMEOUT_MS: u64 = 5_000;
/// SQLite's page cache per connection (SQLite's default is 2 MiB). A task write touches the
/// last pages of four indexes and the pages of the rows it replaces; with the default, a busy
/// table's pages are read back from the file at almost every commit. Bounded: at most
/// `POOL_CONNECTIONS_MAX` times this, 128 MiB, per database file and process.
const SQLITE_PAGE_CACHE_KIB: u32 = 16 * 1024;
/// Pages a SQLite file's write-ahead log holds before the commit that passes them checkpoints it
/// (copies them into the database file and syncs it), on every connection of every store.
///
/// SQLite's default is 1,000 pages (4 MiB). A commit of a task, a bus record or a docmem node
/// writes a few pages, so under load that was a checkpoint every few dozen milliseconds, each
/// stalling the commit that ran it and everything queued behind it. At 10,000 (about 40 MiB of
/// log) the stalls are ten times rarer: the durable task store's p99 at concurrency 16 fell from
/// over 5 ms to about 1.5 ms (`send_message` bench, A), and an LLM agent's round's from 5.3-6.0 ms
/// to 2.0-2.3 ms (`llm_rounds` bench, its topic and docmem in one SQLite file). The
/// price: with `synchronous = NORMAL` the log is synced at checkpoints, so a power loss may take
/// back up to this much. A passive checkpoint run beside the writers instead, on a connection of
/// its own, never completed while they kept appending, and the log grew without end.
pub const SQLITE_WAL_CHECKPOINT_PAGES: u32 = 10_000;

#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("unsupported database URL {0:?}: expected sqlite://PATH or postgres://...")]
    UnsupportedUrl(String),
    #[error("cannot create the directory of the SQLite file {path}: {source}")]
    CreateDir { path: String, source: std::io::Error },
    #[error("cannot open the database: {0}")]
    Connect(#[source] sqlx::Error),
    #[error("cannot apply migrations: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("database error: {0}")]
    Query(#[from] sqlx::Error),
}

/// Which engine a [`Database`] runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    pub fn from_url(url: &str) -> Result<Self, StorageError> {
        if url.starts_with("sqlite:") {
            Ok(Self::Sqlite)
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Ok(Self::Postgres)
        } else {
            Err(StorageError::UnsupportedUrl(url.to_owned()))
        }
    }
}

/// An in-memory SQLite database, gone when the process ends: for tests and throwaway agents.
pub const SQLITE_MEMORY_URL: &str = "sqlite::memory:";

/// An open, migrated database.
#[derive(Debug, Clone)]
pub struct Database {
    pool: AnyPool,
    backend: Backend,
    /// Shared by every `Database` of this process on the same SQLite file (see [`Self::write_turn`]).
    write_gate: Option<Arc<tokio::sync::Mutex<()>>>,
}

impl Database {
    /// Opens `url` (creating a missing SQLite file and its directory) and applies `migrations`.
    pub async fn connect(url: &str, migrations: &Migrator) -> Result<Self, StorageError> {
        install_default_drivers();
        let backend = Backend::from_url(url)?;
        let memory = url == SQLITE_MEMORY_URL;
        let url = match backend {
            Backend::Sqlite if memory => url.to_owned(),
            Backend::Sqlite => prepare_sqlite(url)?,
            Backend::Postgres => url.to_owned(),
        };
        // Every connection to `:memory:` opens a database of its own, so a memory database is
        // one connection, kept open for the life of the pool.
        let (connections_max, idle_timeout) =
            if memory { (1, None) } else { (POOL_CONNECTIONS_MAX, Some(Duration::from_secs(POOL_IDLE_TIMEOUT_S))) };
        let pool = AnyPoolOptions::new()
            .after_connect(move |conn, _meta| {
                Box::pin(async move {
                    if backend == Backend::Sqlite {
                        // Readers never block the writer, and a committed write survives a killed process.
                        sqlx::query("PRAGMA journal_mode = WAL").execute(&mut *conn).await?;
                        // With WAL, NORMAL syncs at checkpoints rather than at every commit: still
                        // never corrupt, and a killed process loses nothing; only a power loss or
                        // OS crash may take back the last commits. Every commit's fsync otherwise
                        // bounds how fast tasks are answered.
                        sqlx::query("PRAGMA synchronous = NORMAL").execute(&mut *conn).await?;
                        sqlx::query("PRAGMA busy_timeout = 5000").execute(&mut *conn).await?;
                        let pages = format!("PRAGMA wal_autocheckpoint = {SQLITE_WAL_CHECKPOINT_PAGES}");
                        // Audited: built from a constant.
                        sqlx::query(sqlx::AssertSqlSafe(pages)).execute(&mut *conn).await?;
                        // An upsert of several rows keeps a statement journal (to undo that
                        // statement alone); in a temporary file by default, in memory here: it
                        // lives only as long as the statement.
                        sqlx::query("PRAGMA temp_store = MEMORY").execute(&mut *conn).await?;
                        // A negative size is in KiB. Audited: built from a constant.
                        let cache = format!("PRAGMA cache_size = -{SQLITE_PAGE_CACHE_KIB}");
                        sqlx::query(sqlx::AssertSqlSafe(cache)).execute(&mut *conn).await?;
                    }
                    Ok(())
                })
            })
            .max_connections(connections_max)
            // A pooled SQLite connection is a file handle in this process: checking it with a
            // round trip to its worker thread before every use finds nothing (a broken one fails
            // its query all the same). A PostgreSQL connection may have been cut by the server.
            .test_before_acquire(backend == Backend::Postgres)
            .min_connections(u32::from(memory))
            .idle_timeout(idle_timeout)
            .max_lifetime(idle_timeout.map(|_| Duration::from_secs(POOL_CONNECTION_LIFETIME_S)))
            .acquire_timeout(Duration::from_millis(POOL_ACQUIRE_TIMEOUT_MS))
            .connect(&url)
            .await
            .map_err(StorageError::Connect)?;
        if let Err(error) = migrations.run(&pool).await {
            // SQLite has no migration lock: processes (or agents of one process) opening one file
            // at once race to record the same migration, and the loser fails. Once the winner
            // has committed, running again finds the migration applied.
            if backend != Backend::Sqlite {
                return Err(error.into());
            }
            tracing::debug!(%error, "migration raced another opener; retrying");
            tokio::time::sleep(Duration::from_millis(MIGRATION_RETRY_DELAY_MS)).await;
            migrations.run(&pool).await?;
        }
        tracing::info!(backend = ?backend, "database ready");
        let write_gate = (backend == Backend::Sqlite && !memory).then(|| sqlite_write_gate(&url));
        Ok(Self { pool, backend, write_gate })
    }

    /// Waits for this process's turn to write, on SQLite (`None` on PostgreSQL, whose row locks
    /// need no help). SQLite lets one writer in at a time and makes the others sleep and retry
    /// (its busy handler, in growing steps of milliseconds); writers of one process queueing here
    /// instead take turns at once, which multiplies the write rate under contention.
    pub async fn write_turn(&self) -> Option<tokio::sync::OwnedMutexGuard<()>> {
        match &self.write_gate {
            Some(gate) => Some(gate.clone().lock_owned().await),
            None => None,
        }
    }

    pub fn pool(&self) -> &AnyPool {
        &self.pool
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    pub async fn close(&self) {
        self.pool.close().await;
    }
}

/// Commits `transaction` when `outcome` is one to `keep`, else rolls it back at once. A transaction
/// merely dropped is rolled back later, when its connection next reaches the pool, and holds
/// SQLite's write lock until then: the next writer in turn ([`Database::write_turn`]) would find
/// the database locked. A write transaction is settled here before its turn ends.
pub async fn settle<T, E: From<sqlx::Error>>(
    transaction: sqlx::Transaction<'_, sqlx::Any>,
    outcome: Result<T, E>,
    keep: impl FnOnce(&T) -> bool,
) -> Result<T, E> {
    match outcome {
        Ok(value) if keep(&value) => {
            transaction.commit().await?;
            Ok(value)
        }
        outcome => {
            // The caller acts on the outcome (a taken id is looked up, not an error): a failed
            // rollback, whose connection the pool then discards, does not replace it.
            if let Err(error) = transaction.rollback().await {
                tracing::warn!(%error, "rolling back a write failed");
            }
            outcome
        }
    }
}

/// The write gate of one SQLite file in this process.
fn sqlite_write_gate(url: &str) -> Arc<tokio::sync::Mutex<()>> {
    static GATES: OnceLock<Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>> = OnceLock::new();
    let mut gates = GATES.get_or_init(Default::default).lock().unwrap_or_else(PoisonError::into_inner);
    gates.entry(url.to_owned()).or_default().clone()
}

/// Makes sure the file's directory exists and the URL creates a missing file.
fn prepare_sqlite(url: &str) -> Result<String, StorageError> {
    let options = SqliteConnectOptions::from_str(url).map_err(|_| StorageError::UnsupportedUrl(url.to_owned()))?;
    let path = options.get_filename();
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty() && !d.exists()) {
        std::fs::create_dir_all(dir).map_err(|source| StorageError::CreateDir { path: display(path), source })?;
    }
    let mut url = url.to_owned();
    let has_mode = url.split_once('?').is_some_and(|(_, query)| query.split('&').any(|pair| pair.starts_with("mode=")));
    if !has_mode {
        url.push_str(if url.contains('?') { "&mode=rwc" } else { "?mode=rwc" });
    }
    Ok(url)
}

fn display(path: &Path) -> String {
    path.display().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backend_is_chosen_by_url_scheme() {
        assert_eq!(Backend::from_url("sqlite://data/x.db").unwrap(), Backend::Sqlite);
        assert_eq!(Backend::from_url("postgres://u@h/db").unwrap(), Backend::Postgres);
        assert!(matches!(Backend::from_url("mysql://h/db"), Err(StorageError::UnsupportedUrl(_))));
    }

    #[test]
    fn sqlite_url_creates_the_file_without_overriding_an_explicit_mode() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("nested/reg.db");
        let url = prepare_sqlite(&format!("sqlite://{}", db.display())).unwrap();
        assert!(url.ends_with("?mode=rwc"), "{url}");
        assert!(db.parent().unwrap().is_dir());
        let explicit = prepare_sqlite(&format!("sqlite://{}?mode=ro", db.display())).unwrap();
        assert!(explicit.contains("mode=ro") && !explicit.contains("mode=rwc"), "{explicit}");
    }

    #[tokio::test]
    async fn every_sqlite_connection_journals_in_memory_with_its_page_cache_and_checkpoints_rarely() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("pragmas.db").display());
        let database = Database::connect(&url, &Migrator::DEFAULT).await.unwrap();
        // Several connections at once, so that more than the first one is checked.
        let pragma = |name: &'static str| sqlx::query(name);
        let read = |row: sqlx::any::AnyRow| row.try_get::<i64, _>(0).unwrap();
        let mut held = Vec::new();
        for _ in 0..3 {
            let mut connection = database.pool().acquire().await.unwrap();
            let journal = pragma("PRAGMA journal_mode").fetch_one(&mut *connection).await.unwrap();
            assert_eq!(journal.try_get::<String, _>(0).unwrap(), "wal");
            // 2 is MEMORY.
            assert_eq!(read(pragma("PRAGMA temp_store").fetch_one(&mut *connection).await.unwrap()), 2);
            let cache = read(pragma("PRAGMA cache_size").fetch_one(&mut *connection).await.unwrap());
            assert_eq!(cache, -i64::from(SQLITE_PAGE_CACHE_KIB));
            let checkpoint = read(pragma("PRAGMA wal_autocheckpoint").fetch_one(&mut *connection).await.unwrap());
            assert_eq!(checkpoint, i64::from(SQLITE_WAL_CHECKPOINT_PAGES));
            held.push(connection);
        }
    }
}
