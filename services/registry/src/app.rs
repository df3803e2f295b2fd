use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use mesh_client::{AddressPolicy, HttpClient, OutboundGuard, SystemLookup};
use mesh_server::auth::AccessControl;
use mesh_server::http::{HttpLimits, reachable_url, serve_draining, turn_unready};
use mesh_server::observe::with_observed_layers;
use mesh_server::{DatabaseProbe, ServiceMetrics};
use tokio::net::TcpListener;

use crate::api::{RegistryState, router};
use crate::config::RegistryConfig;
use crate::directory::Directory;
use crate::discovery::DiscoveryIndex;
use crate::error::RegistryError;
use crate::events::{EventHub, SubscriberLimits};
use crate::graph_api::sync_config_links;
use crate::health::{Checker, PollSettings};
use crate::intake::IntakePolicy;
use crate::links::LinkStore;
use crate::mirror::{MirrorConfig, Mirrors};
use crate::store::AgentStore;

/// The registry's name in traces, metrics and `/health`.
pub const REGISTRY_SERVICE: &str = "registry";

/// A registry with its database open, its agents loaded and its listener bound.
#[derive(Debug)]
pub struct Application {
    listener: TcpListener,
    service: RegistryService,
}

/// The registry without a listener: its routes and its health poller, for serving on any network
/// (the deterministic simulation serves it on a simulated one).
#[derive(Debug, Clone)]
pub struct RegistryService {
    router: axum::Router,
    state: Arc<RegistryState>,
    /// The registrations' version loaded at start, which the sync goes on from.
    version: i64,
    shutdown_drain: Duration,
    shutdown_unready: Duration,
    serve: mesh_server::http::ServeConfig,
    /// Whether the database answers, for `/health`.
    database: DatabaseProbe,
    /// What `/health` reports; shutdown marks it draining.
    metrics: Arc<ServiceMetrics>,
    /// The model behind the dense ranking of agents.
    dense: mesh_embedding::DenseConfig,
    /// The registries this one mirrors.
    mirrors: Vec<MirrorConfig>,
}

impl RegistryService {
    /// Opens the database, loads the registrations and builds the routes.
    pub async fn open(config: &RegistryConfig, http: HttpClient) -> Result<Self, RegistryError> {
        let store = AgentStore::open(&config.database_url).await?;
        // The version first: a change landing during the load is then loaded again at the first sync.
        let version = store.version().await?;
        let agents = store.load_all().await?;
        tracing::info!(agents = agents.len(), "loaded registrations");
        let directory = Arc::new(Directory::new(agents));
        let links = LinkStore::new(store.database());
        let limits = SubscriberLimits {
            all_max: config.event_subscribers_max,
            per_tenant_max: config.event_subscribers_per_tenant_max,
        };
        let events = Arc::new(EventHub::new(config.events_buffered, limits));
        let poll = PollSettings {
            interval: Duration::from_millis(config.health_check_interval_ms.max(1)),
            timeout: Duration::from_millis(config.health_check_timeout_ms),
            concurrency_max: config.health_check_concurrency_max,
            sync_interval: Duration::from_millis(config.sync_interval_ms.max(1)),
        };
        let checker = Arc::new(Checker::new(directory.clone(), store.clone(), events.clone(), http.clone(), poll));
        let state = Arc::new(RegistryState {
            directory,
            store,
            links,
            events,
            graph_mode: std::sync::RwLock::new(config.graph_mode),
            http,
            health_check_timeout: Duration::from_millis(config.health_check_timeout_ms),
            checker,
            intake: IntakePolicy::from_config(config)?,
            discovery: Arc::new(DiscoveryIndex::default()),
            mirrors: Arc::new(Mirrors::new(&config.mirrors, config.registrations_max)),
        });
        sync_config_links(&state, &config.links).await?;
        let access = AccessControl::from_config(&config.auth)
            .map_err(|e| RegistryError::Startup(e.to_string()))?
            .with_public(crate::dashboard::PUBLIC_PATHS, crate::dashboard::PUBLIC_PREFIXES);
        mesh_auth::check_exposure(&config.host, access.enabled(), config.auth.insecure)
            .map_err(|e| RegistryError::Startup(e.to_string()))?;
        let limits = HttpLimits {
            request_timeout: Duration::from_millis(config.request_timeout_ms),
            body_limit_bytes: config.body_limit_bytes,
            concurrency_max: config.concurrency_max,
            rate_limit_per_s: config.rate_limit_per_s,
            rate_limit_burst: config.rate_limit_burst,
            access,
            allowed_hosts: config.serve.allowed_hosts.clone(),
        };
        let metrics = ServiceMetrics::new(REGISTRY_SERVICE);
        // Without its database the registry can neither register nor refresh: it cannot serve.
        let database = DatabaseProbe::register(&metrics);
        let routes = router(state.clone(), metrics.clone()).merge(crate::dashboard::routes(state.clone()));
        let router = with_observed_layers(routes, limits, REGISTRY_SERVICE);
        Ok(Self {
            router,
            state,
            version,
            shutdown_drain: Duration::from_millis(config.shutdown_drain_ms),
            serve: config.serve.clone(),
            shutdown_unready: Duration::from_millis(config.shutdown_unready_ms),
            database,
            metrics,
            dense: config.dense.clone(),
            mirrors: config.mirrors.clone(),
        })
    }

    /// Checks that the database answers, forever, for `/health`.
    pub async fn probe_database(&self) {
        self.database.run(REGISTRY_SERVICE, || self.state.store.ping()).await;
    }

    /// The routes, with the shared layers.
    pub fn router(&self) -> axum::Router {
        self.router.clone()
    }

    /// Polls the agents whose checks are due forever (sharing them with the other replicas of
    /// its database), starting at once, and keeps in step with the changes those replicas make.
    pub async fn poll_health(&self) {
        let checker = self.state.checker.clone();
        tokio::join!(checker.clone().poll_forever(), checker.sync_forever(self.version));
    }

    /// Keeps the search over agent cards in step with the registrations forever, loading the
    /// embedding model first when configured (searches rank by words meanwhile).
    pub async fn index_agents(&self) {
        let (index, directory, dense) =
            (self.state.discovery.clone(), self.state.directory.clone(), self.dense.clone());
        let load = async {
            if let (Some(encoder), _) = mesh_embedding::load_encoder(&dense).await {
                index.set_encoder(encoder);
                // The skills indexed so far are embedded at the next pass.
                directory.touch();
            }
        };
        tokio::join!(load, crate::discovery::follow(index.clone(), directory.clone()));
    }

    /// Follows the catalogs of the registries this one mirrors forever, through the registry's
    /// outbound client (its address policy).
    pub async fn follow_mirrors(&self) {
        let follows = self
            .mirrors
            .iter()
            .map(|config| crate::mirror::follow(self.state.mirrors.clone(), config.clone(), self.state.http.clone()));
        futures::future::join_all(follows).await;
    }

    /// The search index over agent cards, to wait for a registration to become searchable.
    pub fn discovery(&self) -> Arc<DiscoveryIndex> {
        self.state.discovery.clone()
    }

    /// Applies a reloaded configuration's graph: its mode and its links (config wins over links
    /// changed through the API; links no longer configured are deleted).
    pub async fn reload_graph(&self, config: &RegistryConfig) -> Result<(), RegistryError> {
        self.state.set_graph_mode(config.graph_mode);
        sync_config_links(&self.state, &config.links).await?;
        tracing::info!(mode = ?config.graph_mode, links = config.links.len(), "graph configuration reloaded");
        Ok(())
    }

    /// Ends the open event streams, so a stopping server is not held open by its readers.
    pub fn close_events(&self) {
        self.state.events.close();
    }

    /// Stops using the database (shutdown does this last). Lookups go on from memory; writes
    /// answer 503 from then on, which is how the simulation injects a storage fault.
    pub async fn close_storage(&self) {
        self.state.store.close().await;
    }
}

impl Application {
    /// Builds the registry with its outbound client under the configured address policy: every
    /// URL it fetches was chosen by a registrant.
    pub async fn build(config: &RegistryConfig) -> Result<Self, RegistryError> {
        let policy = AddressPolicy::from_networks(&config.allowed_networks)
            .map_err(|e| RegistryError::Startup(e.to_string()))?;
        let guard = OutboundGuard::new(policy, Arc::new(SystemLookup));
        Self::build_with_client(config, HttpClient::guarded(guard).map_err(|e| RegistryError::Startup(e.to_string()))?)
            .await
    }

    /// As [`Self::build`], with the outbound client given (tests swap the transport).
    pub async fn build_with_client(config: &RegistryConfig, http: HttpClient) -> Result<Self, RegistryError> {
        let service = RegistryService::open(config, http).await?;
        let addr = format!("{}:{}", config.host, config.port);
        let listener = TcpListener::bind(&addr).await.map_err(|source| RegistryError::Bind { addr, source })?;
        Ok(Self { listener, service })
    }

    pub fn port(&self) -> u16 {
        self.listener.local_addr().map(|a| a.port()).unwrap_or_default()
    }

    /// Base URL the registry is reachable at (loopback when bound to a wildcard address).
    pub fn url(&self) -> String {
        self.listener.local_addr().map(reachable_url).unwrap_or_default()
    }

    /// The service, to reload its graph configuration while it runs.
    pub fn service(&self) -> RegistryService {
        self.service.clone()
    }

    /// Serves and polls health until `shutdown` resolves; then answers not ready while still
    /// serving for `shutdown_unready_ms`, and finishes in-flight requests (for at most
    /// `shutdown_drain_ms`).
    pub async fn run_until_stopped(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), RegistryError> {
        let service = self.service.clone();
        let poller = tokio::spawn(async move { service.poll_health().await });
        let service = self.service.clone();
        let indexer = tokio::spawn(async move { service.index_agents().await });
        let service = self.service.clone();
        let mirrors = tokio::spawn(async move { service.follow_mirrors().await });
        let service = self.service.clone();
        let database_probe = tokio::spawn(async move { service.probe_database().await });
        let service = self.service.clone();
        let shutdown = async move {
            turn_unready(shutdown, &service.metrics, service.shutdown_unready, async {}).await;
            service.close_events();
        };
        let served = serve_draining(
            self.listener,
            self.service.router(),
            shutdown,
            self.service.shutdown_drain,
            &self.service.serve,
        )
        .await;
        poller.abort();
        indexer.abort();
        mirrors.abort();
        database_probe.abort();
        self.service.close_storage().await;
        served.map_err(|e| RegistryError::Startup(format!("server failed: {e}")))
    }
}
