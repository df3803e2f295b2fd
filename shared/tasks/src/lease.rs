//! Which replica runs which task. Replicas of one agent share one task table on PostgreSQL; each
//! writes its own id as the owner of the rows it writes, and renews a lease in
//! `a2a_task_replicas` while it lives. A task stored as running whose owner's lease has expired
//! has nothing running it any more (its process crashed or was killed), so it is failed, at
//! start and then every renewal; the running tasks of live replicas are left alone. On SQLite,
//! one process's own file, nothing is renewed: at start every running task is failed, as a
//! previous run of the process left it. In memory there are neither leases nor earlier tasks.

use std::time::Duration;

use tokio::task::JoinHandle;

use crate::error::TaskError;
use crate::retention::timestamp_before;
use crate::store::TaskStore;
use mesh_storage::Backend;

/// A replica whose lease was not renewed for this long is taken for dead, by default. It bounds
/// how long a killed replica's running tasks stay `working` and must exceed the clock skew
/// between replicas and the longest stall of a live replica's renewal.
pub const TASK_LEASE_TTL_MS_DEFAULT: u64 = 30_000;
/// Time between two renewals of a replica's lease (and sweeps of dead ones' tasks), by default.
pub const TASK_LEASE_RENEW_MS_DEFAULT: u64 = 5_000;

/// How long a replica's lease lasts, and how often it is renewed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    pub ttl: Duration,
    pub renew_interval: Duration,
}

impl Default for Lease {
    fn default() -> Self {
        Self {
            ttl: Duration::from_millis(TASK_LEASE_TTL_MS_DEFAULT),
            renew_interval: Duration::from_millis(TASK_LEASE_RENEW_MS_DEFAULT),
        }
    }
}

impl TaskStore {
    /// Renews this replica's lease, and forgets the leases expired `ttl` ago (their replicas'
    /// tasks count as orphaned either way, so the table stays as small as the live replicas).
    pub async fn renew_lease(&self, ttl: Duration) -> Result<(), TaskError> {
        let Some(sql) = self.sql() else { return Ok(()) };
        sqlx::query(
            "INSERT INTO a2a_task_replicas (agent, replica, renewed_at) VALUES ($1, $2, $3) \
             ON CONFLICT (agent, replica) DO UPDATE SET renewed_at = excluded.renewed_at",
        )
        .bind(&*self.agent)
        .bind(&self.replica)
        .bind(timestamp_before(Duration::ZERO))
        .execute(&sql.pool)
        .await?;
        sqlx::query("DELETE FROM a2a_task_replicas WHERE agent = $1 AND renewed_at < $2")
            .bind(&*self.agent)
            .bind(timestamp_before(ttl))
            .execute(&sql.pool)
            .await?;
        Ok(())
    }

    /// Takes this replica's lease and, with `interrupted_reason`, fails the running tasks of
    /// replicas without one (see the module). On PostgreSQL the returned job renews the lease
    /// (and sweeps) every interval until aborted; on SQLite there is no job.
    pub async fn start_lease(
        &self,
        lease: Lease,
        interrupted_reason: Option<&str>,
    ) -> Result<Option<JoinHandle<()>>, TaskError> {
        let shared = self.sql().is_some_and(|sql| sql.backend == Backend::Postgres);
        if shared {
            self.renew_lease(lease.ttl).await?;
        }
        if let Some(reason) = interrupted_reason {
            let failed = self.fail_interrupted(reason, lease.ttl).await?;
            if failed > 0 {
                tracing::warn!(agent = %self.agent, failed, "failed the running tasks no live process runs");
            }
        }
        if !shared {
            return Ok(None);
        }
        let store = self.clone();
        let reason = interrupted_reason.map(str::to_owned);
        Ok(Some(tokio::spawn(async move {
            let mut ticks = tokio::time::interval(lease.renew_interval.max(Duration::from_millis(1)));
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            ticks.tick().await;
            loop {
                ticks.tick().await;
                if let Err(error) = store.renew_lease(lease.ttl).await {
                    tracing::warn!(agent = %store.agent, %error, "could not renew the task lease");
                    continue;
                }
                let Some(reason) = &reason else { continue };
                match store.fail_interrupted(reason, lease.ttl).await {
                    Ok(0) => {}
                    Ok(failed) => {
                        tracing::warn!(agent = %store.agent, failed, "failed the tasks of a replica that died")
                    }
                    Err(error) => tracing::warn!(agent = %store.agent, %error, "could not sweep dead replicas' tasks"),
                }
            }
        })))
    }
}
