//! A2A tasks apart from any transport: how events change a task ([`model`]) and where tasks live
//! ([`TaskStore`]: SQLite by default, PostgreSQL by URL, through the same storage code as the
//! registry). The agent kit runs handlers and speaks the protocol bindings on top of this.

mod error;
pub mod model;
mod retention;
mod store;

pub use error::TaskError;
pub use retention::{FINISHED_TASK_TTL_MS_DEFAULT, Retention, TASK_PURGE_INTERVAL_MS_DEFAULT};
pub use store::{LIST_PAGE_SIZE_DEFAULT, LIST_PAGE_SIZE_MAX, TaskStore, history_length};
