//! A2A tasks apart from any transport: how events change a task ([`model`]) and where tasks live
//! ([`TaskStore`]: SQLite by default, PostgreSQL by URL, through the same storage code as the
//! registry, committed before a save returns or buffered; or in the process's memory alone). The agent kit runs handlers and speaks the protocol bindings on top of this. On
//! PostgreSQL, replicas of one agent share the store: leases tell whose running tasks are
//! orphaned ([`Lease`]), and task events travel between them ([`Remote`]). Push notification
//! configs and the outbox of their deliveries live beside the tasks, in the same durability.

mod error;
mod fanout;
mod lease;
mod list;
mod memory;
pub mod model;
mod push;
mod retention;
mod store;

pub use error::TaskError;
pub use fanout::Remote;
pub use lease::{Lease, TASK_LEASE_RENEW_MS_DEFAULT, TASK_LEASE_TTL_MS_DEFAULT};
pub use list::{LIST_PAGE_SIZE_DEFAULT, LIST_PAGE_SIZE_MAX, history_length};
pub use memory::MEMORY_TASKS_MAX_DEFAULT;
pub use push::{
    PUSH_CONFIGS_PER_TASK_MAX, PUSH_OUTBOX_ROWS_MAX_DEFAULT, PUSH_OUTBOX_TENANT_ROWS_MAX_DEFAULT, PendingPush,
    PushLimits, PushOutcome, Undelivered, UndeliveredPush,
};
pub use retention::{FINISHED_TASK_TTL_MS_DEFAULT, Retention, TASK_PURGE_INTERVAL_MS_DEFAULT};
pub use store::{TASK_FLUSH_INTERVAL_MS_DEFAULT, TaskStore};
