//! `ListTasks` as both stores answer it: the request checked once into a [`ListQuery`], whose
//! filters, cursor and page assembly the SQL store turns into a statement and the memory store
//! applies to its map, so the two page and filter alike.

use mesh_protocol::a2a::v1::{ListTasksRequest, ListTasksResponse, Task, TaskState};

use crate::error::TaskError;
use crate::model::{normalize_timestamp, trim_history};

/// `ListTasks` page size when the request names none, and the largest it may name (spec §3.1.4).
pub const LIST_PAGE_SIZE_DEFAULT: usize = 50;
pub const LIST_PAGE_SIZE_MAX: usize = 100;

/// A `ListTasks` request, checked. Tasks are listed most recently updated first, ties broken by
/// id (descending): `(updated_at, id)` orders them, and a page token names the last one shown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ListQuery {
    pub(crate) page_size: usize,
    history_length: Option<usize>,
    include_artifacts: bool,
    pub(crate) context_id: Option<String>,
    pub(crate) state: Option<TaskState>,
    /// Only tasks updated at or after this instant (in the stored timestamps' form).
    pub(crate) updated_since: Option<String>,
    /// Only tasks after this `(updated_at, id)` in listing order: the previous page's last.
    pub(crate) after: Option<(String, String)>,
}

impl ListQuery {
    pub(crate) fn parse(request: &ListTasksRequest) -> Result<Self, TaskError> {
        let updated_since = match &request.status_timestamp_after {
            Some(after) => Some(normalize_timestamp(after).ok_or_else(|| {
                TaskError::InvalidParams(format!("statusTimestampAfter {after:?} is not an RFC 3339 timestamp"))
            })?),
            None => None,
        };
        let after = match request.page_token.as_deref().filter(|t| !t.is_empty()) {
            Some(token) => Some(PageCursor::decode(token)?),
            None => None,
        };
        Ok(Self {
            page_size: page_size(request.page_size)?,
            history_length: history_length(request.history_length)?,
            include_artifacts: request.include_artifacts.unwrap_or(false),
            context_id: request.context_id.clone(),
            state: request.status,
            updated_since,
            after,
        })
    }

    /// Whether a task passes the filters (the page cursor aside): what `totalSize` counts.
    pub(crate) fn matches(&self, task: &Task, updated_at: &str) -> bool {
        self.context_id.as_ref().is_none_or(|context_id| *context_id == task.context_id)
            && self.state.is_none_or(|state| state == task.status.state)
            && self.updated_since.as_deref().is_none_or(|since| updated_at >= since)
    }

    /// Whether a task comes after the page cursor in listing order.
    pub(crate) fn past_cursor(&self, updated_at: &str, id: &str) -> bool {
        self.after.as_ref().is_none_or(|(after_at, after_id)| (updated_at, id) < (after_at.as_str(), after_id.as_str()))
    }

    /// The answer, from `total` matching tasks and `rows`: the tasks past the cursor in listing
    /// order, `(updated_at, task)`, at most one more than a page (which tells there is a next).
    pub(crate) fn page(&self, total: usize, rows: Vec<(String, Task)>) -> ListTasksResponse {
        let next_page_token = match rows.get(self.page_size) {
            Some(_) => {
                let (updated_at, last) = &rows[self.page_size - 1];
                PageCursor::encode(updated_at, &last.id)
            }
            None => String::new(),
        };
        let tasks = rows
            .into_iter()
            .take(self.page_size)
            .map(|(_, mut task)| {
                trim_history(&mut task, self.history_length);
                if !self.include_artifacts {
                    task.artifacts.clear();
                }
                task
            })
            .collect();
        ListTasksResponse {
            page_size: i32::try_from(self.page_size).unwrap_or(i32::MAX),
            tasks,
            next_page_token,
            total_size: i32::try_from(total).unwrap_or(i32::MAX),
        }
    }
}

/// The page size a `ListTasks` request asks for, checked.
fn page_size(requested: Option<i32>) -> Result<usize, TaskError> {
    match requested {
        None => Ok(LIST_PAGE_SIZE_DEFAULT),
        Some(size) => usize::try_from(size).ok().filter(|s| (1..=LIST_PAGE_SIZE_MAX).contains(s)).ok_or_else(|| {
            TaskError::InvalidParams(format!("pageSize must be between 1 and {LIST_PAGE_SIZE_MAX}, not {size}"))
        }),
    }
}

/// A request's `historyLength`, checked: absent means all, negative is an error.
pub fn history_length(requested: Option<i32>) -> Result<Option<usize>, TaskError> {
    requested
        .map(|n| {
            usize::try_from(n)
                .map_err(|_| TaskError::InvalidParams(format!("historyLength must not be negative, not {n}")))
        })
        .transpose()
}

/// Where the next page starts: after the last task of this one in (updated_at, id) order. Sent
/// hex-encoded so clients treat it as opaque.
struct PageCursor;

impl PageCursor {
    fn encode(updated_at: &str, id: &str) -> String {
        format!("{updated_at}\n{id}").bytes().map(|b| format!("{b:02x}")).collect()
    }

    fn decode(token: &str) -> Result<(String, String), TaskError> {
        let invalid = || TaskError::InvalidParams(format!("pageToken {token:?} is not one this server issued"));
        let bytes = (0..token.len())
            .step_by(2)
            .map(|i| token.get(i..i + 2).and_then(|pair| u8::from_str_radix(pair, 16).ok()))
            .collect::<Option<Vec<u8>>>()
            .ok_or_else(invalid)?;
        let text = String::from_utf8(bytes).map_err(|_| invalid())?;
        let (updated_at, id) = text.split_once('\n').ok_or_else(invalid)?;
        Ok((updated_at.to_owned(), id.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use mesh_protocol::a2a::v1::TaskStatus;

    use super::*;

    fn task(id: &str, context_id: &str, state: TaskState) -> Task {
        Task {
            id: id.into(),
            context_id: context_id.into(),
            status: TaskStatus { state, message: None, timestamp: None },
            artifacts: Vec::new(),
            history: Vec::new(),
            metadata: None,
        }
    }

    #[test]
    fn a_page_token_names_the_last_task_shown_and_the_next_page_starts_after_it() {
        let query = ListQuery::parse(&ListTasksRequest { page_size: Some(1), ..Default::default() }).unwrap();
        let rows = vec![
            ("2026-01-02T00:00:00.000000Z".to_owned(), task("b", "c", TaskState::Completed)),
            ("2026-01-01T00:00:00.000000Z".to_owned(), task("a", "c", TaskState::Completed)),
        ];
        let page = query.page(2, rows);
        assert_eq!(page.tasks.len(), 1);
        let next = ListQuery::parse(&ListTasksRequest {
            page_size: Some(1),
            page_token: Some(page.next_page_token),
            ..Default::default()
        })
        .unwrap();
        assert!(!next.past_cursor("2026-01-02T00:00:00.000000Z", "b"), "the shown task is not listed again");
        assert!(next.past_cursor("2026-01-02T00:00:00.000000Z", "a"), "a tie comes after it by id");
        assert!(next.past_cursor("2026-01-01T00:00:00.000000Z", "z"));
    }

    #[test]
    fn artifacts_are_listed_only_when_asked_for() {
        let mut with_artifact = task("t", "c", TaskState::Completed);
        with_artifact.artifacts.push(mesh_protocol::a2a::v1::Artifact {
            artifact_id: "a1".into(),
            name: None,
            description: None,
            parts: vec![mesh_protocol::a2a::v1::Part::text("result")],
            metadata: None,
            extensions: None,
        });
        let row = || vec![("2026-01-01T00:00:00.000000Z".to_owned(), with_artifact.clone())];
        for (asked, listed) in [(None, 0), (Some(false), 0), (Some(true), 1)] {
            let query = ListQuery::parse(&ListTasksRequest { include_artifacts: asked, ..Default::default() }).unwrap();
            assert_eq!(query.page(1, row()).tasks[0].artifacts.len(), listed, "includeArtifacts {asked:?}");
        }
    }

    #[test]
    fn filters_match_context_state_and_time() {
        let query = ListQuery::parse(&ListTasksRequest {
            context_id: Some("c1".into()),
            status: Some(TaskState::Working),
            status_timestamp_after: Some("2026-01-01T01:00:00+01:00".into()),
            ..Default::default()
        })
        .unwrap();
        let at = "2026-01-01T00:00:00.000000Z";
        assert!(query.matches(&task("t", "c1", TaskState::Working), at), "the bound is inclusive");
        assert!(!query.matches(&task("t", "c2", TaskState::Working), at));
        assert!(!query.matches(&task("t", "c1", TaskState::Completed), at));
        assert!(!query.matches(&task("t", "c1", TaskState::Working), "2025-12-31T23:59:59.999999Z"));
    }
}
