//! R, the `send_message` bench's peer: an echo agent on the official Rust A2A SDK
//! (`a2a-server-lf` 0.5.3 with `a2a-lf` 0.4.2), built as the SDK's users build one: its
//! `DefaultRequestHandler` over its `InMemoryTaskStore`, its JSON-RPC router, and an executor
//! answering each message with a completed task holding one artifact, "echo: <text>" (the kit's
//! echo agent A answers the same).
//!
//! Prints the address it listens on (127.0.0.1, a free port) as its first stdout line, then
//! serves until killed. The SDK's store keeps every task for the life of the process, so the
//! bench starts it afresh for each round.

use std::sync::Arc;

use a2a::{A2AError, Artifact, Part, StreamResponse, Task, TaskState, TaskStatus};
use a2a_server::{AgentExecutor, DefaultRequestHandler, ExecutorContext, InMemoryTaskStore};
use futures::StreamExt;
use futures::stream::BoxStream;

/// The allocator the mesh's services and the bench's other servers run with, so allocation is
/// not what tells R from A.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

struct Echo;

impl AgentExecutor for Echo {
    fn execute(&self, context: ExecutorContext) -> BoxStream<'static, Result<StreamResponse, A2AError>> {
        let text = context.message.as_ref().and_then(|message| message.text()).unwrap_or_default();
        let artifact = Artifact {
            artifact_id: uuid::Uuid::new_v4().to_string(),
            name: None,
            description: None,
            parts: vec![Part::text(format!("echo: {text}"))],
            metadata: None,
            extensions: None,
        };
        let task = Task {
            id: context.task_id,
            context_id: context.context_id,
            status: TaskStatus { state: TaskState::Completed, message: None, timestamp: Some(chrono::Utc::now()) },
            artifacts: Some(vec![artifact]),
            history: None,
            metadata: None,
        };
        futures::stream::once(async move { Ok(StreamResponse::Task(task)) }).boxed()
    }

    fn cancel(&self, context: ExecutorContext) -> BoxStream<'static, Result<StreamResponse, A2AError>> {
        let refused = A2AError::task_not_cancelable(&context.task_id);
        futures::stream::once(async move { Err(refused) }).boxed()
    }
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let handler = Arc::new(DefaultRequestHandler::new(Echo, InMemoryTaskStore::new()));
    let router = a2a_server::jsonrpc::jsonrpc_router(handler);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    println!("{}", listener.local_addr()?);
    axum::serve(listener, router).await
}
