//! What the task store's tests share: a store on SQLite (always), on PostgreSQL (when
//! `MESH_TEST_POSTGRES_URL` is set; under CI its absence fails) and in memory, for an agent of
//! its own.

use mesh_tasks::{MEMORY_TASKS_MAX_DEFAULT, TaskStore};

/// `(backend, store, its temporary folder)` for each SQL backend, the stores' agent named
/// `{agent_prefix}-{uuid}`.
pub async fn sql_stores(agent_prefix: &str) -> Vec<(String, TaskStore, Option<tempfile::TempDir>)> {
    let agent = format!("{agent_prefix}-{}", uuid::Uuid::new_v4());
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("tasks.db").display());
    let mut stores = vec![("sqlite".to_owned(), TaskStore::open(&url, &agent).await.unwrap(), Some(dir))];
    if let Some(url) = mesh_test_support::postgres_url() {
        stores.push(("postgres".to_owned(), TaskStore::open(&url, &agent).await.unwrap(), None));
    }
    stores
}

/// [`sql_stores`] and a store in memory: what every store must do alike.
pub async fn stores(agent_prefix: &str) -> Vec<(String, TaskStore, Option<tempfile::TempDir>)> {
    let mut stores = sql_stores(agent_prefix).await;
    stores.push(("memory".to_owned(), TaskStore::in_memory(agent_prefix, MEMORY_TASKS_MAX_DEFAULT), None));
    stores
}
