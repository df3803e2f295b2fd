//! [`LlmClient`] against the scripted OpenAI-compatible server on a real socket: tool-call
//! rounds, streaming, retries, timeouts, malformed and huge answers, the API key's path.

use std::time::{Duration, Instant};

use mesh_llm::{
    ChatAnswer, ChatDelta, ChatMessage, ChatRequest, LLM_ANSWER_BYTES_MAX_DEFAULT, LlmClient, LlmConfig, LlmError,
    TokenUsage, ToolSpec,
};
use mesh_test_support::llm::{
    CHAT_COMPLETIONS_PATH, LlmStep, MALFORMED_ARGUMENTS, SCRIPTED_ERROR_MESSAGE, ScriptedLlm, refused_base_url,
};
use serde::Deserialize;
use serde_json::json;

const MODEL: &str = "test-model";
const SERVICE: &str = "llm-tests";
const API_KEY: &str = "sk-test-0123456789-secret";
const SYSTEM: &str = "You are the concierge. Superiors: none. Subordinates: orchestrator.";
const USER: &str = "find robots playing soccer";
/// Timeout of the slow-endpoint tests; far below the scripted delay, so only the timeout ends them.
const SHORT_TIMEOUT_MS: u64 = 300;
/// How long a slow scripted answer waits.
const SLOW_REPLY_DELAY: Duration = Duration::from_secs(10);
/// A call that gave up must return well before the slow answer would have come.
const GIVE_UP_MAX: Duration = Duration::from_secs(2);
/// Time the scripted server is given to receive requests a test waits for.
const WAIT: Duration = Duration::from_secs(5);

fn config(base_url: &str) -> LlmConfig {
    LlmConfig { base_url: base_url.to_owned(), model: MODEL.to_owned(), ..LlmConfig::default() }
}

fn client(llm: &ScriptedLlm) -> LlmClient {
    client_with(config(llm.base_url()))
}

fn client_with(config: LlmConfig) -> LlmClient {
    LlmClient::with_api_key(config, SERVICE, Some(API_KEY.to_owned())).expect("a valid config")
}

fn list_agents_tool() -> ToolSpec {
    ToolSpec {
        name: "list_agents".into(),
        description: "The agents the registry knows for a capability.".into(),
        parameters: json!({"type": "object", "properties": {"capability": {"type": "string"}}, "required": ["capability"]}),
    }
}

fn first_turn() -> ChatRequest {
    ChatRequest::new(vec![ChatMessage::system(SYSTEM), ChatMessage::user(USER)]).with_tools(vec![list_agents_tool()])
}

#[tokio::test]
async fn a_tool_call_round_sends_the_roles_the_tools_and_the_result() {
    let llm = ScriptedLlm::start([
        LlmStep::tool_call("list_agents", json!({"capability": "search"})).with_usage(120, 12),
        LlmStep::text("Two agents can search."),
    ])
    .await;
    let client = client(&llm);

    let asked = client.chat(&first_turn()).await.expect("a tool call");
    assert!(asked.wants_tools());
    assert_eq!(asked.finish_reason.as_deref(), Some("tool_calls"));
    assert_eq!(asked.usage, Some(TokenUsage { input_tokens: 120, output_tokens: 12 }));
    let call = &asked.tool_calls[0];
    assert_eq!(call.name, "list_agents");
    assert_eq!(call.arguments_object().unwrap()["capability"], "search");

    let mut messages = first_turn().messages;
    messages.push(ChatMessage::assistant_tool_calls(asked.tool_calls.clone()));
    messages.push(ChatMessage::tool_result(&call.id, r#"["search", "search-2"]"#));
    let answered = client.chat(&ChatRequest::new(messages).with_tools(vec![list_agents_tool()])).await.unwrap();
    assert_eq!(answered.text(), Some("Two agents can search."));
    assert!(!answered.wants_tools());
    assert_eq!(answered.finish_reason.as_deref(), Some("stop"));
    assert_eq!(answered.model.as_deref(), Some(MODEL));

    let requests = llm.requests();
    assert_eq!(requests.len(), 2);
    for request in &requests {
        assert_eq!(request.path, CHAT_COMPLETIONS_PATH);
        assert_eq!(request.body["model"], MODEL);
        assert_eq!(request.tool_names(), ["list_agents"]);
        assert_eq!(request.system_prompt().as_deref(), Some(SYSTEM));
        assert!(!request.is_streaming());
    }
    assert_eq!(requests[0].roles(), ["system", "user"]);
    assert_eq!(requests[1].roles(), ["system", "user", "assistant", "tool"]);
    let sent = requests[1].messages();
    assert_eq!(sent[2]["tool_calls"][0]["id"], sent[3]["tool_call_id"], "the result answers the call");
    assert_eq!(sent[2]["tool_calls"][0]["function"]["arguments"], call.arguments);
    assert_eq!(requests[1].last_content().as_deref(), Some(r#"["search", "search-2"]"#));
}

#[tokio::test]
async fn rate_limits_and_server_errors_are_retried_until_an_answer() {
    let llm = ScriptedLlm::start([LlmStep::rate_limited(0), LlmStep::error(503), LlmStep::text("at last")]).await;

    let answer = client(&llm).chat(&first_turn()).await.expect("the third attempt answers");

    assert_eq!(answer.text(), Some("at last"));
    assert_eq!(llm.requests().len(), 3);
}

#[tokio::test]
async fn retries_stop_after_retries_max_with_the_last_error() {
    let llm = ScriptedLlm::repeating(LlmStep::error(502)).await;
    let client = client_with(LlmConfig { retries_max: 2, ..config(llm.base_url()) });

    let error = client.chat(&first_turn()).await.unwrap_err();

    assert_eq!(error, LlmError::Http { status: 502, message: SCRIPTED_ERROR_MESSAGE.into() });
    assert_eq!(llm.requests().len(), 3, "one attempt and two retries");
}

#[tokio::test]
async fn a_bad_request_is_not_retried() {
    let llm = ScriptedLlm::start([LlmStep::error(400), LlmStep::text("never sent")]).await;

    let error = client(&llm).chat(&first_turn()).await.unwrap_err();

    assert_eq!(error, LlmError::Http { status: 400, message: SCRIPTED_ERROR_MESSAGE.into() });
    assert_eq!(llm.requests().len(), 1);
    assert_eq!(llm.steps_left(), 1);
}

#[tokio::test]
async fn a_retry_after_past_the_deadline_ends_the_call_with_the_429() {
    let llm = ScriptedLlm::start([LlmStep::rate_limited(60), LlmStep::text("too late")]).await;
    let client = client_with(LlmConfig { timeout_ms: 2_000, ..config(llm.base_url()) });

    let started = Instant::now();
    let error = client.chat(&first_turn()).await.unwrap_err();

    assert!(matches!(error, LlmError::Http { status: 429, .. }), "{error:?}");
    assert!(started.elapsed() < GIVE_UP_MAX, "took {:?}", started.elapsed());
    assert_eq!(llm.requests().len(), 1);
}

#[tokio::test]
async fn a_slow_endpoint_times_out_promptly_and_is_not_retried() {
    let llm = ScriptedLlm::repeating(LlmStep::text("late").delayed(SLOW_REPLY_DELAY)).await;
    let client = client_with(LlmConfig { timeout_ms: SHORT_TIMEOUT_MS, ..config(llm.base_url()) });

    for streaming in [false, true] {
        let started = Instant::now();
        let error = if streaming {
            client.chat_stream(&first_turn()).await.unwrap_err()
        } else {
            client.chat(&first_turn()).await.unwrap_err()
        };
        assert_eq!(error, LlmError::Timeout { timeout_ms: SHORT_TIMEOUT_MS }, "streaming: {streaming}");
        assert!(started.elapsed() < GIVE_UP_MAX, "took {:?}", started.elapsed());
    }
    assert_eq!(llm.requests().len(), 2, "one request per call");
}

#[tokio::test]
async fn malformed_tool_call_arguments_are_data_not_a_failure() {
    let llm = ScriptedLlm::repeating(LlmStep::malformed_tool_call("search")).await;
    let client = client(&llm);

    let whole = client.chat(&first_turn()).await.expect("an answer");
    let streamed = client.chat_stream(&first_turn()).await.unwrap().finish().await.expect("an answer");

    for answer in [whole, streamed] {
        let call = &answer.tool_calls[0];
        assert_eq!((call.name.as_str(), call.arguments.as_str()), ("search", MALFORMED_ARGUMENTS));
        let why = call.arguments_object().unwrap_err();
        assert!(why.contains("`search`") && why.contains("not valid JSON"), "{why}");
    }
}

#[tokio::test]
async fn a_one_megabyte_answer_is_refused_whole_or_streamed() {
    const ONE_MB: usize = 1_000_000;
    let llm = ScriptedLlm::repeating(LlmStep::huge_text(ONE_MB)).await;
    let client = client(&llm);
    let too_large = LlmError::AnswerTooLarge { bytes_max: LLM_ANSWER_BYTES_MAX_DEFAULT };

    assert_eq!(client.chat(&first_turn()).await.unwrap_err(), too_large, "refused by its declared length");
    let unannounced = ScriptedLlm::repeating(LlmStep::huge_text(ONE_MB).without_length()).await;
    assert_eq!(
        client_with(config(unannounced.base_url())).chat(&first_turn()).await.unwrap_err(),
        too_large,
        "cut while read"
    );
    let mut stream = client.chat_stream(&first_turn()).await.expect("the stream opens");
    let mut text_bytes = 0;
    let error = loop {
        match stream.next_delta().await.expect("the stream fails before it ends") {
            Ok(ChatDelta::Text(text)) => text_bytes += text.len(),
            Ok(other) => panic!("{other:?}"),
            Err(error) => break error,
        }
    };
    assert_eq!(error, too_large);
    assert!(text_bytes <= LLM_ANSWER_BYTES_MAX_DEFAULT, "{text_bytes} bytes were handed out");
    assert_eq!(stream.next_delta().await, Some(Err(too_large)), "a failed stream stays failed");

    // The cap, not the size itself, refused them: a cap above it lets the same answer through.
    let roomy = client_with(LlmConfig { answer_bytes_max: 2 * ONE_MB, ..config(llm.base_url()) });
    assert_eq!(roomy.chat(&first_turn()).await.unwrap().content.map(|text| text.len()), Some(ONE_MB));
}

#[tokio::test]
async fn a_streamed_answer_assembles_into_the_whole_answer() {
    let text = "Robots playing soccer: three agents found matching videos.";
    let calls = [
        ("list_agents", json!({"capability": "search"})),
        ("call_agent", json!({"agent_id": "search", "message": "soccer robots"})),
    ];
    let llm = ScriptedLlm::start([
        LlmStep::text(text).with_usage(40, 9),
        LlmStep::text(text).with_usage(40, 9),
        LlmStep::tool_calls(calls.clone()),
        LlmStep::tool_calls(calls),
    ])
    .await;
    let client = client(&llm);

    let mut stream = client.chat_stream(&first_turn()).await.unwrap();
    let mut deltas = Vec::new();
    while let Some(delta) = stream.next_delta().await {
        deltas.push(delta.unwrap());
    }
    assert!(deltas.len() > 2, "the text came in pieces: {deltas:?}");
    let joined: String = deltas.iter().map(|d| if let ChatDelta::Text(t) = d { t.as_str() } else { "" }).collect();
    assert_eq!(joined, text);
    let streamed = stream.finish().await.unwrap();
    let whole = client.chat(&first_turn()).await.unwrap();
    assert_eq!(streamed, whole);
    assert_eq!(streamed.usage, Some(TokenUsage { input_tokens: 40, output_tokens: 9 }));

    let streamed_calls = client.chat_stream(&first_turn()).await.unwrap().finish().await.unwrap();
    let whole_calls = client.chat(&first_turn()).await.unwrap();
    let shape = |answer: &ChatAnswer| -> Vec<(String, serde_json::Value)> {
        answer.tool_calls.iter().map(|c| (c.name.clone(), c.arguments_object().unwrap().into())).collect()
    };
    assert_eq!(shape(&streamed_calls), shape(&whole_calls));
    assert_eq!(shape(&streamed_calls)[1].1["message"], "soccer robots");
    assert_eq!(streamed_calls.finish_reason.as_deref(), Some("tool_calls"));

    let requests = llm.requests();
    let streaming: Vec<bool> = requests.iter().map(|r| r.is_streaming()).collect();
    assert_eq!(streaming, [true, false, true, false]);
    assert_eq!(requests[0].body["stream_options"]["include_usage"], true);
}

#[tokio::test]
async fn errors_before_a_stream_are_retried_as_for_a_whole_answer() {
    let llm = ScriptedLlm::start([LlmStep::error(503), LlmStep::text("streamed after a retry")]).await;

    let answer = client(&llm).chat_stream(&first_turn()).await.unwrap().finish().await.unwrap();

    assert_eq!(answer.text(), Some("streamed after a retry"));
    assert_eq!(llm.requests().len(), 2);
}

#[tokio::test]
async fn answers_without_usable_content_are_bad_responses() {
    let bodies = [
        LlmStep::raw(200, "application/json", json!({"object": "chat.completion", "choices": []}).to_string()),
        LlmStep::raw(200, "application/json", json!({"choices": [{"message": {"content": null}}]}).to_string()),
        LlmStep::raw(
            200,
            "application/json",
            json!({"choices": [{"message": {"refusal": "I can't help"}}]}).to_string(),
        ),
        LlmStep::raw(200, "text/html", "<html>welcome to nginx</html>"),
        LlmStep::text("   "),
    ];
    for step in bodies {
        let llm = ScriptedLlm::start([step.clone()]).await;
        let error = client(&llm).chat(&first_turn()).await.unwrap_err();
        assert!(matches!(error, LlmError::BadResponse(_)), "{step:?}: {error:?}");
        assert!(!error.to_string().contains("nginx"), "bodies are not quoted: {error}");
    }
}

#[tokio::test]
async fn a_refused_connection_is_a_transport_error() {
    let error = client_with(config(&refused_base_url())).chat(&first_turn()).await.unwrap_err();
    assert!(matches!(error, LlmError::Transport(_)), "{error:?}");
}

#[tokio::test]
async fn base_urls_with_or_without_a_trailing_slash_reach_chat_completions() {
    let llm = ScriptedLlm::repeating(LlmStep::text("ok")).await;
    for base_url in [llm.base_url().to_owned(), format!("{}/", llm.base_url())] {
        client_with(config(&base_url)).chat(&first_turn()).await.unwrap_or_else(|e| panic!("{base_url}: {e}"));
    }
    let paths: Vec<String> = llm.requests().into_iter().map(|r| r.path).collect();
    assert_eq!(paths, [CHAT_COMPLETIONS_PATH, CHAT_COMPLETIONS_PATH]);
}

// --- the API key ---

#[tokio::test]
async fn the_key_reaches_the_endpoint_and_no_redirect_target() {
    let elsewhere = ScriptedLlm::repeating(LlmStep::text("I collect keys")).await;
    let llm = ScriptedLlm::start([
        LlmStep::text("ok"),
        LlmStep::redirect(&format!("{}/chat/completions", elsewhere.base_url())),
    ])
    .await;
    let client = client(&llm);

    client.chat(&first_turn()).await.expect("an answer");
    let error = client.chat(&first_turn()).await.unwrap_err();

    assert!(matches!(error, LlmError::Http { status: 307, .. }), "{error:?}");
    let sent: Vec<Option<String>> = llm.requests().into_iter().map(|r| r.authorization).collect();
    assert_eq!(sent, [Some(format!("Bearer {API_KEY}")), Some(format!("Bearer {API_KEY}"))]);
    assert!(elsewhere.requests().is_empty(), "the redirect was not followed");

    let keyless = LlmClient::with_api_key(config(llm.base_url()), SERVICE, None).unwrap();
    let _ = keyless.chat(&first_turn()).await;
    assert_eq!(llm.requests().last().unwrap().authorization, None, "no key, no header");
}

#[test]
fn the_key_never_reaches_the_logs_or_the_errors() {
    let logs = SharedBuffer::default();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(logs.clone())
        .with_ansi(false)
        .finish();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let errors = tracing::subscriber::with_default(subscriber, || {
        runtime.block_on(async {
            let llm = ScriptedLlm::start([
                LlmStep::error(503),
                LlmStep::text("ok"),
                LlmStep::raw(401, "application/json", json!({"error": {"message": "Incorrect API key"}}).to_string()),
                LlmStep::text("streamed"),
            ])
            .await;
            let client = client(&llm);
            client.chat(&first_turn()).await.expect("an answer after a retry");
            let unauthorized = client.chat(&first_turn()).await.unwrap_err();
            client.chat_stream(&first_turn()).await.unwrap().finish().await.unwrap();
            tracing::debug!(?client, "the client as logged");
            assert_eq!(llm.wait_for_requests(4, WAIT).await.len(), 4);
            vec![unauthorized.to_string(), format!("{unauthorized:?}")]
        })
    });
    let logged = logs.text();
    assert!(logged.contains("retrying") && logged.contains("gen_ai.chat"), "the calls were logged: {logged}");
    assert!(logged.contains("the client as logged"), "{logged}");
    assert!(!logged.contains(API_KEY), "the key is in the logs:\n{logged}");
    assert!(errors[0].contains("OPENAI_API_KEY"), "a 401 points at the key's variable: {}", errors[0]);
    assert!(errors.iter().all(|e| !e.contains(API_KEY)), "{errors:?}");
}

/// A log destination the test reads back.
#[derive(Debug, Clone, Default)]
struct SharedBuffer(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl SharedBuffer {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl std::io::Write for SharedBuffer {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for SharedBuffer {
    type Writer = Self;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

// --- telemetry ---

#[test]
fn token_usage_and_durations_are_recorded_by_model_and_type() {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let llm = ScriptedLlm::start([
                LlmStep::text("a").with_usage(100, 7),
                LlmStep::text("b").with_usage(50, 3),
                LlmStep::error(400),
            ])
            .await;
            let client = client(&llm);
            client.chat(&first_turn()).await.unwrap();
            client.chat_stream(&first_turn()).await.unwrap().finish().await.unwrap();
            client.chat(&first_turn()).await.unwrap_err();
        });
    });
    let readings = mesh_test_support::metrics::read(&snapshotter);
    let find = |name: &str, extra: &[(&str, &str)]| {
        let mut wanted: Vec<(String, String)> =
            [("service", SERVICE), ("gen_ai_operation_name", "chat"), ("gen_ai_request_model", MODEL)]
                .iter()
                .chain(extra)
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect();
        wanted.sort_unstable();
        readings.iter().find(|(n, labels, _)| n == name && *labels == wanted).map(|(.., value)| value)
    };
    assert_eq!(find(mesh_llm::TOKEN_USAGE_METRIC, &[("gen_ai_token_type", "input")]), Some(&DebugValue::Counter(150)));
    assert_eq!(find(mesh_llm::TOKEN_USAGE_METRIC, &[("gen_ai_token_type", "output")]), Some(&DebugValue::Counter(10)));
    let timed = |error_type: &str| match find(mesh_llm::DURATION_METRIC, &[("error_type", error_type)]) {
        Some(DebugValue::Histogram(values)) => values.len(),
        other => panic!("{error_type}: {other:?}"),
    };
    assert_eq!(timed(""), 2, "two calls answered");
    assert_eq!(timed("http_error"), 1, "one refused");
}

// --- the planners' JSON answers ---

#[derive(Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
struct Plan {
    agents: Vec<String>,
}

async fn plan_from(llm: &ScriptedLlm) -> Result<Plan, LlmError> {
    client(llm).complete_json(SYSTEM, USER, |_: &Plan| Ok(())).await
}

#[tokio::test]
async fn a_json_answer_is_parsed_from_a_json_object_request() {
    let llm = ScriptedLlm::start([
        LlmStep::json(json!({"agents": ["weather", "geo"]})),
        LlmStep::text("```json\n{\"agents\": []}\n```"),
    ])
    .await;

    assert_eq!(plan_from(&llm).await.unwrap(), Plan { agents: vec!["weather".into(), "geo".into()] });
    assert_eq!(plan_from(&llm).await.unwrap(), Plan { agents: vec![] }, "a fenced answer is accepted");

    let request = &llm.requests()[0];
    assert_eq!(request.body["response_format"], json!({"type": "json_object"}));
    assert_eq!(request.body["temperature"], 0.0);
    assert_eq!(request.roles(), ["system", "user"]);
    assert_eq!(request.body.get("tools"), None, "no tools offered");
}

#[tokio::test]
async fn json_answers_of_the_wrong_shape_or_refused_by_validation_are_errors() {
    let llm = ScriptedLlm::start([
        LlmStep::text("{\"agents\": [\"weather\","),
        LlmStep::json(json!({"agent": "weather"})),
        LlmStep::json(json!({"agents": ["teleporter"]})),
        LlmStep::tool_call("list_agents", json!({})),
    ])
    .await;

    assert!(matches!(plan_from(&llm).await, Err(LlmError::InvalidJson(_))));
    assert!(matches!(plan_from(&llm).await, Err(LlmError::InvalidJson(reason)) if reason.contains("agent")));
    let known_only = |plan: &Plan| match plan.agents.iter().find(|a| *a != "weather") {
        Some(unknown) => Err(format!("unknown agent {unknown:?}")),
        None => Ok(()),
    };
    let refused = client(&llm).complete_json(SYSTEM, USER, known_only).await.unwrap_err();
    assert_eq!(refused, LlmError::Rejected("unknown agent \"teleporter\"".into()));
    assert!(matches!(plan_from(&llm).await, Err(LlmError::BadResponse(reason)) if reason.contains("called tools")));
}
