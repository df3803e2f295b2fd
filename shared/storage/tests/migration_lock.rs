//! Replicas starting together on one PostgreSQL database each migrate at start, with no
//! migration Job: sqlx's migrator holds a PostgreSQL advisory lock (`pg_advisory_lock`, one per
//! database) while it runs, so one replica applies each migration while the others wait, then
//! find it applied.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use mesh_storage::{Database, Row};
use sqlx::AssertSqlSafe;
use sqlx::migrate::Migrator;

/// Replicas starting at once, as a Deployment's pods do.
const REPLICAS: usize = 8;

#[tokio::test]
async fn replicas_migrating_one_postgresql_database_at_once_all_start_and_apply_each_migration_once() {
    let Some(url) = mesh_test_support::postgres_url() else { return };
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos();
    let table = format!("mesh_lock_test_{}_{nanos}", std::process::id());
    let migrations_table = format!("_{table}_migrations");
    let dir = tempfile::tempdir().unwrap();
    // The second migration inserts a row under a primary key: applied twice, it would fail.
    std::fs::write(dir.path().join("0001_create.sql"), format!("CREATE TABLE {table} (id INTEGER PRIMARY KEY);"))
        .unwrap();
    std::fs::write(dir.path().join("0002_insert.sql"), format!("INSERT INTO {table} (id) VALUES (1);")).unwrap();
    let mut migrator = Migrator::new(dir.path()).await.unwrap();
    migrator.dangerous_set_table_name(migrations_table.clone());
    let migrator = Arc::new(migrator);

    let mut replicas = tokio::task::JoinSet::new();
    for _ in 0..REPLICAS {
        let (url, migrator) = (url.clone(), migrator.clone());
        replicas.spawn(async move { Database::connect(&url, &migrator).await });
    }
    let mut opened = Vec::new();
    while let Some(started) = replicas.join_next().await {
        opened.push(started.unwrap().unwrap_or_else(|e| panic!("a replica failed to start: {e}")));
    }
    assert_eq!(opened.len(), REPLICAS);

    let database = &opened[0];
    // Every name in these statements is this test's own, made above.
    let count = |sql: String| async move {
        let row = sqlx::query(AssertSqlSafe(sql)).fetch_one(database.pool()).await.unwrap();
        row.try_get::<i64, _>(0).unwrap()
    };
    assert_eq!(count(format!("SELECT COUNT(*) FROM {migrations_table} WHERE success")).await, 2);
    assert_eq!(count(format!("SELECT COUNT(*) FROM {table}")).await, 1);
    for dropped in [&table, &migrations_table] {
        sqlx::query(AssertSqlSafe(format!("DROP TABLE {dropped}"))).execute(database.pool()).await.unwrap();
    }
}
