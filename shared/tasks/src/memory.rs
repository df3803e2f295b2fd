//! Tasks kept in the process's memory alone (durability `memory`), as the official Python SDK's
//! `InMemoryTaskStore` keeps them: no database, nothing on the request path but a map, and
//! nothing left after the process ends. Bounded twice: finished tasks leave after the retention's
//! time to live (the purge job), and at most `tasks_max` tasks are kept, the oldest finished
//! leaving first to make room; when every kept task is unfinished, a new one is refused.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Mutex, MutexGuard, PoisonError};

use foldhash::fast::RandomState;
use mesh_protocol::a2a::v1::{ListTasksResponse, Task};

use crate::error::TaskError;
use crate::list::ListQuery;

/// Tasks kept in memory by default, at most.
pub const MEMORY_TASKS_MAX_DEFAULT: usize = 100_000;

/// A tenant's task id.
type Key = (String, String);

#[derive(Debug)]
pub(crate) struct MemoryTasks {
    tasks_max: usize,
    kept: Mutex<Kept>,
    /// The tasks' push notification configs and pending notifications.
    pub(crate) push: crate::push::MemoryPush,
}

#[derive(Debug, Default)]
struct Kept {
    /// Boxed: a task with its status message takes hundreds of bytes, which every growth of the
    /// table would otherwise move (up to `tasks_max` of them) and which would size its buckets.
    /// Hashed with foldhash, seeded per map (a client chooses the ids it asks for): std's SipHash
    /// cost several times as much on each of a task's saves.
    tasks: HashMap<Key, Box<Entry>, RandomState>,
    /// The finished tasks by last change, oldest first, `(updated_at, tenant, id)`: the order
    /// they are purged and evicted in.
    finished: BTreeSet<(String, String, String)>,
}

#[derive(Debug)]
struct Entry {
    updated_at: String,
    task: Task,
}

impl Kept {
    /// Makes room for one more task: evicts the oldest finished one when full.
    fn make_room(&mut self, tasks_max: usize) -> Result<(), TaskError> {
        if self.tasks.len() < tasks_max {
            return Ok(());
        }
        let Some((_, tenant, id)) = self.finished.pop_first() else {
            return Err(full(tasks_max));
        };
        self.tasks.remove(&(tenant, id));
        Ok(())
    }

    fn insert(&mut self, key: Key, updated_at: String, task: Task) {
        if task.status.state.is_terminal() {
            self.finished.insert((updated_at.clone(), key.0.clone(), key.1.clone()));
        }
        self.tasks.insert(key, Box::new(Entry { updated_at, task }));
    }
}

fn full(tasks_max: usize) -> TaskError {
    TaskError::Busy(format!(
        "the agent keeps {tasks_max} tasks in memory (memory_tasks_max), none of them finished; try again later"
    ))
}

impl MemoryTasks {
    pub(crate) fn new(tasks_max: usize) -> Self {
        Self { tasks_max, kept: Mutex::new(Kept::default()), push: crate::push::MemoryPush::default() }
    }

    fn kept(&self) -> MutexGuard<'_, Kept> {
        // Every change leaves the maps consistent before anything can panic.
        self.kept.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keeps the task's newest state, as the SQL store's upsert does: an older state (by its
    /// `updated_at`) never replaces a newer one, and a finished task stays finished. A new task
    /// past the cap evicts the oldest finished one, or is refused when none is finished.
    pub(crate) fn save(&self, tenant: &str, task: Task, updated_at: String) -> Result<(), TaskError> {
        let key = (tenant.to_owned(), task.id.clone());
        let mut kept = self.kept();
        let Kept { tasks, finished } = &mut *kept;
        match tasks.get_mut(&key) {
            Some(entry) if entry.task.status.state.is_terminal() || entry.updated_at > updated_at => Ok(()),
            // A task's next state, in place: no new entry, no second lookup.
            Some(entry) => {
                if task.status.state.is_terminal() {
                    finished.insert((updated_at.clone(), key.0, key.1));
                }
                **entry = Entry { updated_at, task };
                Ok(())
            }
            None => {
                kept.make_room(self.tasks_max)?;
                kept.insert(key, updated_at, task);
                Ok(())
            }
        }
    }

    /// Keeps `task` unless its tenant has a task of that id; says whether it did.
    pub(crate) fn create(&self, tenant: &str, task: &Task, updated_at: String) -> Result<bool, TaskError> {
        let key = (tenant.to_owned(), task.id.clone());
        let mut kept = self.kept();
        if kept.tasks.contains_key(&key) {
            return Ok(false);
        }
        kept.make_room(self.tasks_max)?;
        kept.insert(key, updated_at, task.clone());
        Ok(true)
    }

    /// Refuses a new task when it could not be kept (full, and nothing finished to evict).
    pub(crate) fn check_room(&self) -> Result<(), TaskError> {
        let kept = self.kept();
        if kept.tasks.len() >= self.tasks_max && kept.finished.is_empty() {
            return Err(full(self.tasks_max));
        }
        Ok(())
    }

    pub(crate) fn get(&self, tenant: &str, id: &str) -> Option<Task> {
        self.kept().tasks.get(&(tenant.to_owned(), id.to_owned())).map(|entry| entry.task.clone())
    }

    /// A page of the tenant's tasks. It scans the tenant's tasks (at most `tasks_max`), which
    /// `ListTasks` alone pays, never a message.
    pub(crate) fn list(&self, tenant: &str, query: &ListQuery) -> ListTasksResponse {
        let kept = self.kept();
        let mut total = 0;
        let mut rows: Vec<(&str, &Task)> = Vec::new();
        for ((task_tenant, id), entry) in &kept.tasks {
            if task_tenant != tenant || !query.matches(&entry.task, &entry.updated_at) {
                continue;
            }
            total += 1;
            if query.past_cursor(&entry.updated_at, id) {
                rows.push((&entry.updated_at, &entry.task));
            }
        }
        let page_end = (query.page_size + 1).min(rows.len());
        let order = |a: &(&str, &Task), b: &(&str, &Task)| (b.0, &b.1.id).cmp(&(a.0, &a.1.id));
        if page_end < rows.len() {
            rows.select_nth_unstable_by(page_end, order);
            rows.truncate(page_end);
        }
        rows.sort_unstable_by(order);
        let rows = rows.into_iter().map(|(updated_at, task)| (updated_at.to_owned(), task.clone())).collect();
        query.page(total, rows)
    }

    /// Forgets the finished tasks last changed before `cutoff`; returns how many.
    pub(crate) fn purge_finished(&self, cutoff: &str) -> u64 {
        let mut kept = self.kept();
        let mut purged = 0;
        while kept.finished.first().is_some_and(|(updated_at, ..)| updated_at.as_str() < cutoff) {
            if let Some((_, tenant, id)) = kept.finished.pop_first() {
                kept.tasks.remove(&(tenant, id));
                purged += 1;
            }
        }
        purged
    }

    /// How many tasks are kept, and the most that may be.
    pub(crate) fn occupancy(&self) -> (usize, usize) {
        (self.kept().tasks.len(), self.tasks_max)
    }
}

#[cfg(test)]
mod tests {
    use mesh_protocol::a2a::v1::{ListTasksRequest, TaskState, TaskStatus};

    use super::*;

    fn task(id: &str, state: TaskState) -> Task {
        Task {
            id: id.into(),
            context_id: "c".into(),
            status: TaskStatus { state, message: None, timestamp: None },
            artifacts: Vec::new(),
            history: Vec::new(),
            metadata: None,
        }
    }

    fn at(second: u32) -> String {
        format!("2026-01-01T00:00:{second:02}.000000Z")
    }

    #[test]
    fn the_oldest_finished_task_makes_room_and_unfinished_ones_are_never_evicted() {
        let memory = MemoryTasks::new(3);
        memory.save("", task("old-done", TaskState::Completed), at(1)).unwrap();
        memory.save("", task("waiting", TaskState::InputRequired), at(2)).unwrap();
        memory.save("", task("new-done", TaskState::Failed), at(3)).unwrap();
        memory.save("", task("fourth", TaskState::Working), at(4)).unwrap();
        assert_eq!(memory.get("", "old-done"), None, "the oldest finished task left first");
        assert!(memory.get("", "waiting").is_some());
        memory.save("", task("fifth", TaskState::Working), at(5)).unwrap();
        assert_eq!(memory.get("", "new-done"), None);
        assert_eq!(memory.occupancy(), (3, 3));
        // Full of unfinished tasks: a new one is refused, saying why; updates still land.
        let refused = memory.save("", task("sixth", TaskState::Working), at(6)).unwrap_err();
        assert!(matches!(&refused, TaskError::Busy(reason) if reason.contains("memory_tasks_max")), "{refused:?}");
        assert_eq!(memory.check_room(), Err(refused));
        assert_eq!(memory.create("", &task("sixth", TaskState::Working), at(6)).map_err(|_| ()), Err(()));
        memory.save("", task("fifth", TaskState::Completed), at(7)).unwrap();
        assert_eq!(memory.check_room(), Ok(()), "a finished task can now make room");
        assert!(memory.create("", &task("sixth", TaskState::Working), at(8)).unwrap());
        assert_eq!(memory.get("", "fifth"), None);
    }

    #[test]
    fn a_purge_forgets_finished_tasks_older_than_the_cutoff_only() {
        let memory = MemoryTasks::new(10);
        memory.save("a", task("done-early", TaskState::Completed), at(1)).unwrap();
        memory.save("b", task("running-early", TaskState::Working), at(1)).unwrap();
        memory.save("a", task("done-late", TaskState::Canceled), at(5)).unwrap();
        assert_eq!(memory.purge_finished(&at(3)), 1);
        assert_eq!(memory.get("a", "done-early"), None);
        assert!(memory.get("b", "running-early").is_some(), "unfinished tasks are never purged");
        assert!(memory.get("a", "done-late").is_some());
        assert_eq!(memory.purge_finished(&at(3)), 0);
        assert_eq!(memory.purge_finished(&at(5)), 0, "last changed at the cutoff is not before it");
        assert_eq!(memory.purge_finished(&at(6)), 1);
    }

    #[test]
    fn an_older_state_never_replaces_a_newer_one_and_one_as_new_does() {
        let memory = MemoryTasks::new(10);
        let with_context = |context: &str| Task { context_id: context.into(), ..task("t", TaskState::Working) };
        memory.save("", with_context("newer"), at(5)).unwrap();
        memory.save("", with_context("older"), at(3)).unwrap();
        assert_eq!(memory.get("", "t").unwrap().context_id, "newer");
        memory.save("", with_context("as new"), at(5)).unwrap();
        assert_eq!(memory.get("", "t").unwrap().context_id, "as new", "the later write of one instant wins");
    }

    #[test]
    fn lists_only_the_tenants_own_tasks_newest_first() {
        let memory = MemoryTasks::new(10);
        for second in 1..=4 {
            memory.save("a", task(&format!("t{second}"), TaskState::Completed), at(second)).unwrap();
        }
        memory.save("b", task("other", TaskState::Completed), at(9)).unwrap();
        let query = ListQuery::parse(&ListTasksRequest { page_size: Some(3), ..Default::default() }).unwrap();
        let page = memory.list("a", &query);
        assert_eq!(page.total_size, 4);
        let ids: Vec<&str> = page.tasks.iter().map(|t| t.id.as_str()).collect();
        assert_eq!(ids, ["t4", "t3", "t2"]);
        assert!(!page.next_page_token.is_empty());
    }
}
