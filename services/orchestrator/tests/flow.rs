//! The orchestrator against a real registry and real search agent on port 0, with planning
//! agents that are real, slow, failing, missing or killed.

use std::time::{Duration, Instant};

use mesh_agent_kit::{AgentApp, AgentConfig, AgentError, AgentHandler, AgentReply, TaskInput};
use mesh_client::{ClientError, HttpClient, RegistryClient, reply_data, send_task};
use mesh_protocol::a2a::v1::AgentCard;
use mesh_protocol::agents::{AgentCall, QueryAnswer};
use mesh_protocol::error::FailureStatus;
use mesh_protocol::seed::{ConfidenceLevel, Part, ResponseStatus, TaskRequest, TaskResponse};
use orchestrator::OrchestratorConfig;
use registry::{Application, RegistryConfig};
use serde_json::{Value, json};
use tokio::sync::oneshot;

/// Upper bound for waiting on registrations.
const WAIT_DEADLINE_MS: u64 = 10_000;
/// Planning timeout of the orchestrator under test: short, so slow planners are cut off fast.
const TEST_PLANNING_TIMEOUT_MS: u64 = 400;
/// How long the slow fake planners take: far beyond the planning timeout.
const HANGING_PLANNER_MS: u64 = 30_000;
/// Search timeout of the orchestrator under test.
const TEST_SEARCH_TIMEOUT_MS: u64 = 600;
/// How long the overlapping fake planners take.
const PLANNER_DELAY_MS: u64 = 250;

/// A server running in the background until dropped or stopped.
struct Running {
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    fn spawn(app: AgentApp) -> Self {
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let _ = app
                .run_until_stopped(async {
                    let _ = stopped.await;
                })
                .await;
        });
        Self { stop: Some(stop), task }
    }

    /// Stops the server and waits until it has closed every connection.
    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = (&mut self.task).await;
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// How a fake planner behaves.
#[derive(Debug, Clone, Copy)]
enum Behaviour {
    /// Answers a valid payload after a delay.
    Answer { delay_ms: u64 },
    /// Answers 503.
    Fail,
    /// Answers a valid payload marked PARTIAL with this warning.
    Partial(&'static str),
}

#[derive(Debug)]
struct FakePlanner {
    capability: &'static str,
    behaviour: Behaviour,
}

impl AgentHandler for FakePlanner {
    async fn handle(&self, _task: TaskInput) -> Result<AgentReply, AgentError> {
        let (delay_ms, warnings) = match self.behaviour {
            Behaviour::Fail => return Err(AgentError::Unavailable("planner backend down".into())),
            Behaviour::Answer { delay_ms } => (delay_ms, Vec::new()),
            Behaviour::Partial(warning) => (0, vec![warning.to_owned()]),
        };
        tokio::time::sleep(Duration::from_millis(delay_ms)).await;
        let data = if self.capability == "entity_extraction" {
            json!({"entities": [{"text": "soccer", "type": "CONCEPT", "start": 0, "end": 6, "confidence": 0.5}],
                   "entity_count": 1, "dominant_types": ["CONCEPT"], "method": "rules"})
        } else {
            json!({"selected_profile": "bm25", "confidence": 0.9, "alternatives": [], "intent": "general_search",
                   "modality": "any", "complexity": "simple", "reasoning": "fake", "method": "rules"})
        };
        Ok(AgentReply { warnings, ..AgentReply::data(data) })
    }
}

fn card(name: &str, capability: &str) -> AgentCard {
    serde_json::from_value(json!({
        "name": name, "description": "test planner", "version": "1", "supportedInterfaces": [], "capabilities": {},
        "defaultInputModes": ["text/plain"], "defaultOutputModes": ["application/json"],
        "skills": [{"id": capability, "name": capability, "description": capability, "tags": []}]
    }))
    .unwrap()
}

struct Mesh {
    http: HttpClient,
    registry: RegistryClient,
    registry_url: String,
    _registry: tokio::task::JoinHandle<()>,
    _data: tempfile::TempDir,
    servers: Vec<Running>,
}

/// A search agent on the bundled sample, its index in memory (replicas do not share a directory)
/// and without the embedding model: these tests are about the flow, not the ranking.
fn search_config(agent: AgentConfig) -> search::SearchConfig {
    search::SearchConfig {
        agent,
        data_dir: None,
        dense: search::DenseConfig { enabled: false, ..Default::default() },
        ..Default::default()
    }
}

impl Mesh {
    /// A registry and a real search agent.
    async fn start() -> Self {
        let mut mesh = Self::without_search().await;
        let config = search_config(mesh.agent_config());
        let search = search::build(&config, mesh.http.clone()).await.unwrap();
        mesh.add(search, "search").await;
        mesh
    }

    /// A registry alone.
    async fn without_search() -> Self {
        let data = tempfile::tempdir().unwrap();
        let config = RegistryConfig {
            port: 0,
            database_url: format!("sqlite://{}", data.path().join("registry.db").display()),
            // Long: tests decide when agents die; the registry must not notice on its own.
            health_check_interval_ms: 3_600_000,
            ..RegistryConfig::default()
        };
        let app = Application::build(&config).await.unwrap();
        let registry_url = app.url();
        let registry_task = tokio::spawn(async move { app.run_until_stopped(std::future::pending()).await.unwrap() });
        let http = HttpClient::with_reqwest().unwrap();
        let registry = RegistryClient::new(&registry_url, http.clone()).unwrap();
        Self { http, registry, registry_url, _registry: registry_task, _data: data, servers: Vec::new() }
    }

    fn agent_config(&self) -> AgentConfig {
        AgentConfig { port: 0, registry_url: Some(self.registry_url.clone()), ..AgentConfig::default() }
    }

    /// Runs `app` and waits until the registry lists it as healthy.
    async fn add(&mut self, app: AgentApp, name: &str) -> usize {
        self.servers.push(Running::spawn(app));
        self.wait_healthy(name).await
    }

    /// Waits until the registry lists `name` as healthy; returns the index of the last server.
    async fn wait_healthy(&self, name: &str) -> usize {
        let deadline = Instant::now() + Duration::from_millis(WAIT_DEADLINE_MS);
        loop {
            if let Ok(agent) = self.registry.agent(name).await
                && agent.health_status == mesh_protocol::registry::HealthStatus::Healthy
            {
                return self.servers.len() - 1;
            }
            assert!(Instant::now() < deadline, "{name} never became healthy");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn add_real_planners(&mut self) {
        let config = entity_extraction::EntityExtractionConfig { agent: self.agent_config(), ..Default::default() };
        let app = entity_extraction::build(&config, self.http.clone()).await.unwrap();
        self.add(app, "entity_extraction").await;
        let config = profile_selection::ProfileSelectionConfig { agent: self.agent_config(), ..Default::default() };
        let app = profile_selection::build(&config, self.http.clone()).await.unwrap();
        self.add(app, "profile_selection").await;
    }

    async fn add_fake(&mut self, capability: &'static str, behaviour: Behaviour) -> usize {
        let config = self.agent_config();
        self.add_fake_with(config, capability, behaviour).await
    }

    /// A fake registered by hand rather than by itself: stopping it leaves its registration behind,
    /// as a crashed agent does.
    async fn add_fake_that_will_die(&mut self, capability: &'static str, behaviour: Behaviour) -> usize {
        let config = AgentConfig { registry_url: None, ..self.agent_config() };
        self.add_fake_with(config, capability, behaviour).await
    }

    async fn add_fake_with(&mut self, config: AgentConfig, capability: &'static str, behaviour: Behaviour) -> usize {
        let name = format!("fake_{capability}");
        let app =
            AgentApp::build(&config, card(&name, capability), FakePlanner { capability, behaviour }, self.http.clone())
                .await
                .unwrap();
        if config.registry_url.is_none() {
            let registration = mesh_protocol::registry::Registration {
                name: name.clone(),
                url: app.url().to_owned(),
                capabilities: vec![capability.to_owned()],
                health_endpoint: "/health".into(),
                process_endpoint: "/tasks/send".into(),
                agent_card_url: None,
            };
            self.servers.push(Running::spawn(app));
            self.registry.register(&registration).await.unwrap();
            return self.wait_healthy(&name).await;
        }
        self.add(app, &name).await
    }

    async fn orchestrator(&mut self) -> String {
        let config = OrchestratorConfig {
            agent: self.agent_config(),
            planning_timeout_ms: TEST_PLANNING_TIMEOUT_MS,
            search_timeout_ms: TEST_SEARCH_TIMEOUT_MS,
            ..OrchestratorConfig::default()
        };
        let app = orchestrator::build(&config, self.http.clone()).await.unwrap();
        let url = app.url().to_owned();
        self.servers.push(Running::spawn(app));
        url
    }

    async fn ask(&self, orchestrator: &str, query: &str, data: Option<Value>) -> Result<TaskResponse, ClientError> {
        let task = TaskRequest::from_text(None, query, data);
        send_task(&self.http, orchestrator, &task, Duration::from_millis(WAIT_DEADLINE_MS)).await
    }
}

fn call<'a>(answer: &'a QueryAnswer, capability: &str) -> &'a AgentCall {
    answer.metadata.agents.iter().find(|c| c.capability == capability).unwrap()
}

#[tokio::test]
async fn answers_with_fused_results_and_what_every_agent_did() {
    let mut mesh = Mesh::start().await;
    mesh.add_real_planners().await;
    let orchestrator = mesh.orchestrator().await;
    let response = mesh.ask(&orchestrator, "show me robots playing soccer", None).await.unwrap();
    assert_eq!(response.status, ResponseStatus::Success, "{:?}", response.warnings);
    let answer: QueryAnswer = reply_data(&orchestrator, &response).unwrap();
    assert!(!answer.results.is_empty());
    let top = &answer.results[0];
    let text = format!("{} {}", top.title, top.text).to_lowercase();
    assert!(text.contains("robot") && text.contains("soccer"), "top result: {}", top.title);
    let meta = &answer.metadata;
    assert!(!meta.selected_profile.is_empty() && !meta.profiles_used.is_empty());
    assert!(meta.profiles_used.contains(&meta.selected_profile));
    assert!((0.0..=1.0).contains(&meta.confidence));
    assert!(meta.entities.iter().any(|e| e.text == "soccer"), "{:?}", meta.entities);
    assert!(meta.total_time_ms >= meta.planning_time_ms + meta.search_time_ms * 0.99);
    for capability in ["entity_extraction", "profile_selection", "search"] {
        assert_eq!(call(&answer, capability).status, "success", "{capability}");
    }
    // Every result carries its fused score and where each profile ranked it.
    for hit in &answer.results {
        assert!(hit.score > 0.0 && !hit.profile_ranks.is_empty());
    }
    assert!(answer.results.windows(2).all(|w| w[0].score >= w[1].score));
    // People read the first part, the answer as `ask` prints it; programs read the data part.
    assert_eq!(response.messages[0].parts[0], Part::Text { text: answer.to_text() });
}

#[tokio::test]
async fn queries_rotate_over_search_replicas_and_use_the_replica_whose_card_they_read() {
    let mut mesh = Mesh::start().await;
    let config = search_config(AgentConfig { name: Some("search-2".into()), ..mesh.agent_config() });
    let second = search::build(&config, mesh.http.clone()).await.unwrap();
    mesh.add(second, "search-2").await;
    mesh.add_real_planners().await;
    let orchestrator = mesh.orchestrator().await;
    let mut used = Vec::new();
    for _ in 0..4 {
        let response = mesh.ask(&orchestrator, "show me robots playing soccer", None).await.unwrap();
        assert_eq!(response.status, ResponseStatus::Success, "{:?}", response.warnings);
        let answer: QueryAnswer = reply_data(&orchestrator, &response).unwrap();
        used.push(call(&answer, "search").agent.clone().unwrap());
    }
    assert_ne!(used[0], used[1], "consecutive queries go to different replicas: {used:?}");
    assert_eq!(used[0..2], used[2..4], "in a fixed rotation: {used:?}");
}

#[tokio::test]
async fn the_two_planning_calls_overlap_in_time() {
    let mut mesh = Mesh::start().await;
    mesh.add_fake("entity_extraction", Behaviour::Answer { delay_ms: PLANNER_DELAY_MS }).await;
    mesh.add_fake("profile_selection", Behaviour::Answer { delay_ms: PLANNER_DELAY_MS }).await;
    let orchestrator = mesh.orchestrator().await;
    let response = mesh.ask(&orchestrator, "robot soccer", None).await.unwrap();
    let answer: QueryAnswer = reply_data(&orchestrator, &response).unwrap();
    let (a, b) = (call(&answer, "entity_extraction"), call(&answer, "profile_selection"));
    assert_eq!((a.status.as_str(), b.status.as_str()), ("success", "success"));
    // Each call lasted at least the planner's delay; run one after the other they could not overlap.
    assert!(a.time_ms >= PLANNER_DELAY_MS as f64 && b.time_ms >= PLANNER_DELAY_MS as f64);
    let overlap = (a.started_ms + a.time_ms).min(b.started_ms + b.time_ms) - a.started_ms.max(b.started_ms);
    assert!(overlap > 0.0, "the planning calls did not overlap: {a:?} {b:?}");
    assert!(answer.metadata.planning_time_ms < 2.0 * PLANNER_DELAY_MS as f64, "{}", answer.metadata.planning_time_ms);
    // Selection 0.9 and the one entity 0.5: 0.75 * 0.9 + 0.25 * 0.5 = 0.8.
    assert_eq!(response.confidence_level, Some(ConfidenceLevel::High));
}

#[tokio::test]
async fn a_hanging_planner_gives_a_partial_answer_within_the_planning_timeout() {
    let mut mesh = Mesh::start().await;
    mesh.add_fake("entity_extraction", Behaviour::Answer { delay_ms: HANGING_PLANNER_MS }).await;
    mesh.add_fake("profile_selection", Behaviour::Answer { delay_ms: 0 }).await;
    let orchestrator = mesh.orchestrator().await;
    let started = Instant::now();
    let response = mesh.ask(&orchestrator, "robot soccer", None).await.unwrap();
    assert!(started.elapsed() < Duration::from_millis(TEST_PLANNING_TIMEOUT_MS * 5), "{:?}", started.elapsed());
    assert_eq!(response.status, ResponseStatus::Partial);
    assert!(
        response.warnings.iter().any(|w| w.contains("entity_extraction") && w.contains("timeout")),
        "{:?}",
        response.warnings
    );
    let answer: QueryAnswer = reply_data(&orchestrator, &response).unwrap();
    assert_eq!(call(&answer, "entity_extraction").status, "timeout");
    assert!(!answer.results.is_empty(), "it still searched");
    assert!(answer.metadata.entities.is_empty());
    // Selection's 0.9 is high; the planner that timed out lowers it a level.
    assert_eq!(response.confidence_level, Some(ConfidenceLevel::Medium));
}

#[tokio::test]
async fn a_planner_killed_mid_run_or_failing_or_missing_gives_a_partial_answer() {
    let mut mesh = Mesh::start().await;
    let entity = mesh.add_fake_that_will_die("entity_extraction", Behaviour::Answer { delay_ms: 0 }).await;
    mesh.add_fake("profile_selection", Behaviour::Fail).await;
    let orchestrator = mesh.orchestrator().await;
    let first = mesh.ask(&orchestrator, "robot soccer", None).await.unwrap();
    assert_eq!(first.status, ResponseStatus::Partial, "a failing profile selection makes it partial");
    let answer: QueryAnswer = reply_data(&orchestrator, &first).unwrap();
    assert_eq!(call(&answer, "profile_selection").status, "error");
    assert_eq!(answer.metadata.profiles_used, ["bm25"], "the search agent's default profile");

    // Dead without deregistering: the registry still lists it, the call is refused.
    mesh.servers.remove(entity).stop().await;
    let second = mesh.ask(&orchestrator, "robot soccer", None).await.unwrap();
    assert_eq!(second.status, ResponseStatus::Partial);
    let answer: QueryAnswer = reply_data(&orchestrator, &second).unwrap();
    assert_eq!(call(&answer, "entity_extraction").status, "error");
    assert!(!answer.results.is_empty());

    // Deregistered: no agent has the capability any more.
    mesh.registry.deregister("fake_entity_extraction", None).await.unwrap();
    let fresh = Mesh::orchestrator(&mut mesh).await; // a fresh discovery cache
    let third = mesh.ask(&fresh, "robot soccer", None).await.unwrap();
    let answer: QueryAnswer = reply_data(&fresh, &third).unwrap();
    assert_eq!(call(&answer, "entity_extraction").status, "unavailable");
    assert_eq!(third.status, ResponseStatus::Partial);
}

#[tokio::test]
async fn without_search_the_answer_is_a_clear_error() {
    let mut mesh = Mesh::start().await;
    mesh.add_real_planners().await;
    mesh.servers.remove(0).stop().await; // the search agent
    let orchestrator = mesh.orchestrator().await;
    let error = mesh.ask(&orchestrator, "robot soccer", None).await.unwrap_err();
    let ClientError::Status { status, body: Some(body), .. } = error else {
        panic!("expected an error body, got {error}")
    };
    assert_eq!((status, body.error_code.as_str()), (503, "DEPENDENCY_UNAVAILABLE"));
    assert!(body.error_message.contains("search"), "{}", body.error_message);
}

#[tokio::test]
async fn a_search_that_times_out_is_a_timeout_error_in_time() {
    let mut mesh = Mesh::without_search().await;
    mesh.add_fake("entity_extraction", Behaviour::Answer { delay_ms: 0 }).await;
    mesh.add_fake("profile_selection", Behaviour::Answer { delay_ms: 0 }).await;
    mesh.add_fake("search", Behaviour::Answer { delay_ms: HANGING_PLANNER_MS }).await;
    let orchestrator = mesh.orchestrator().await;
    let started = Instant::now();
    let error = mesh.ask(&orchestrator, "robot soccer", None).await.unwrap_err();
    assert!(started.elapsed() < Duration::from_millis(TEST_SEARCH_TIMEOUT_MS * 4), "{:?}", started.elapsed());
    let ClientError::Status { status, body: Some(body), .. } = error else {
        panic!("expected an error body, got {error}")
    };
    assert_eq!((status, body.status, body.error_code.as_str()), (504, FailureStatus::Timeout, "TASK_TIMEOUT"));
}

#[tokio::test]
async fn a_planners_own_warnings_make_the_answer_partial() {
    let mut mesh = Mesh::start().await;
    mesh.add_fake("entity_extraction", Behaviour::Partial("LLM backend failed; answered with the rules")).await;
    mesh.add_fake("profile_selection", Behaviour::Answer { delay_ms: 0 }).await;
    let orchestrator = mesh.orchestrator().await;
    let response = mesh.ask(&orchestrator, "robot soccer", None).await.unwrap();
    assert_eq!(response.status, ResponseStatus::Partial);
    assert_eq!(response.warnings, ["entity_extraction: LLM backend failed; answered with the rules"]);
    let answer: QueryAnswer = reply_data(&orchestrator, &response).unwrap();
    assert_eq!(call(&answer, "entity_extraction").status, "partial");
    assert_eq!(answer.metadata.entities.len(), 1, "the partial answer's entities are still used");
}

#[tokio::test]
async fn options_choose_profiles_and_top_k_and_bad_options_are_refused() {
    let mut mesh = Mesh::start().await;
    mesh.add_real_planners().await;
    let orchestrator = mesh.orchestrator().await;
    let response =
        mesh.ask(&orchestrator, "robot soccer", Some(json!({"profiles": ["tags", "bm25"], "top_k": 3}))).await.unwrap();
    let answer: QueryAnswer = reply_data(&orchestrator, &response).unwrap();
    assert_eq!(answer.metadata.profiles_used, ["tags", "bm25"]);
    assert_eq!(answer.results.len(), 3);
    assert!(answer.metadata.agents.iter().all(|c| c.capability != "profile_selection"), "no selection was needed");

    for (data, fragment) in [
        (json!({"top_k": 0}), "top_k"),
        (json!({"top_k": 1000}), "top_k"),
        (json!({"tenant_id": "bad tenant!"}), "tenant_id"),
        (json!({"tenant_id": ""}), "tenant_id"),
        (json!({"colour": "blue"}), "colour"),
        (json!({"profiles": ["nope"]}), "nope"),
    ] {
        let error = mesh.ask(&orchestrator, "robot soccer", Some(data.clone())).await.unwrap_err();
        let ClientError::Status { status, body: Some(body), .. } = error else { panic!("{data}: {error}") };
        assert_eq!(status, 400, "{data}: {}", body.error_message);
        assert!(body.error_message.contains(fragment), "{data}: {}", body.error_message);
    }
    let long_query = "robot ".repeat(500);
    let error = mesh.ask(&orchestrator, &long_query, None).await.unwrap_err();
    assert!(matches!(error, ClientError::Status { status: 400, .. }), "{error}");
    let error = mesh.ask(&orchestrator, "   ", None).await.unwrap_err();
    assert!(matches!(error, ClientError::Status { status: 400, .. }), "{error}");
}

#[tokio::test]
async fn a_dead_search_replica_is_retried_elsewhere_its_circuit_opens_and_the_registry_is_told() {
    let mut mesh = Mesh::start().await;
    // A second replica registered by hand, so stopping it leaves its registration behind (a crash).
    let config =
        search_config(AgentConfig { name: Some("search-2".into()), registry_url: None, ..mesh.agent_config() });
    let second = search::build(&config, mesh.http.clone()).await.unwrap();
    let registration = mesh_protocol::registry::Registration {
        name: "search-2".into(),
        url: second.url().to_owned(),
        capabilities: vec!["search".into()],
        health_endpoint: "/health".into(),
        process_endpoint: "/tasks/send".into(),
        agent_card_url: None,
    };
    mesh.servers.push(Running::spawn(second));
    mesh.registry.register(&registration).await.unwrap();
    let second = mesh.wait_healthy("search-2").await;
    mesh.add_real_planners().await;
    let orchestrator = mesh.orchestrator().await;
    mesh.servers.remove(second).stop().await;

    let mut used = Vec::new();
    for _ in 0..8 {
        // Answered every time; partial when the dead replica was the one whose card profile
        // selection needed (selection is skipped then), complete otherwise.
        let response = mesh.ask(&orchestrator, "show me robots playing soccer", None).await.unwrap();
        let answer: QueryAnswer = reply_data(&orchestrator, &response).unwrap();
        assert!(!answer.results.is_empty());
        used.push(call(&answer, "search").agent.clone().unwrap());
    }
    assert!(used.iter().all(|agent| agent == "search"), "every query answered by the live replica: {used:?}");

    let health: mesh_server::HealthReport =
        mesh.http.get_json(&format!("{orchestrator}/health"), Duration::from_secs(5)).await.unwrap();
    let circuit = health.circuits.iter().find(|c| c.agent == "search-2").expect("a circuit for search-2");
    assert_eq!(circuit.state, mesh_client::CircuitWord::Open, "{:?}", health.circuits);
    // The circuit opening told the registry, which checked at once rather than at its next poll.
    let deadline = Instant::now() + Duration::from_millis(WAIT_DEADLINE_MS);
    while mesh.registry.agent("search-2").await.unwrap().health_status
        != mesh_protocol::registry::HealthStatus::Unreachable
    {
        assert!(Instant::now() < deadline, "the registry never marked search-2 unreachable");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
