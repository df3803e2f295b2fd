//! The settings reference (`docs/reference/settings.md`), generated from the configuration types:
//! their fields and doc comments read from the source, their defaults from the values the
//! binaries start with (`Default`, printed with `{:#?}`), their environment names derived as
//! `mesh_config::ConfigLoader` reads them (`<PREFIX>_<KEY>`, `__` between a section and its key).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::{read, repo_root};

pub const PAGE: &str = "docs/reference/settings.md";

/// A field of a configuration struct as its source declares it.
struct Field {
    name: String,
    ty: String,
    doc: String,
    flatten: bool,
}

/// A section type some services nest under a key (`[auth]`, `[serve]`, ...), documented once.
struct Section {
    /// The type's name in field declarations.
    ty: &'static str,
    /// The key services nest it under, and the heading it is documented under.
    key: &'static str,
    file: &'static str,
    debug: String,
    about: &'static str,
}

/// A binary's configuration.
struct Service {
    name: &'static str,
    env_prefix: &'static str,
    ty: &'static str,
    file: &'static str,
    debug: String,
    port: u16,
}

fn sections() -> Vec<Section> {
    vec![
        Section {
            ty: "AgentConfig",
            key: "agent",
            file: "shared/agent-kit/src/app.rs",
            debug: format!("{:#?}", mesh_agent_kit::AgentConfig::default()),
            about: "Every agent built on the kit (orchestrator, search, entity-extraction, profile-selection, \
                    llm-agent) takes these keys at the top level of its file, and as `<PREFIX>_<KEY>` in its \
                    environment (e.g. `MESH_SEARCH_TASK_DURABILITY=memory`). The default port is each agent's own.",
        },
        Section {
            ty: "AuthConfig",
            key: "auth",
            file: "shared/auth/src/config.rs",
            debug: format!("{:#?}", mesh_auth::AuthConfig::default()),
            about: "How a service authenticates its callers, and the credential it presents to others: the \
                    `[auth]` table of a service's file, `<PREFIX>_AUTH__<KEY>` in its environment, and \
                    `MESH_AUTH_<KEY>` for the whole suite under `a2a-mesh up`.",
        },
        Section {
            ty: "ServeConfig",
            key: "serve",
            file: "shared/server/src/serve.rs",
            debug: format!("{:#?}", mesh_server::http::ServeConfig::default()),
            about: "How every server times and caps its connections: the `[serve]` table, \
                    `<PREFIX>_SERVE__<KEY>` in the environment.",
        },
        Section {
            ty: "BusConfig",
            key: "bus",
            file: "shared/bus/src/config.rs",
            debug: format!("{:#?}", mesh_bus::BusConfig::default()),
            about: "The conversation bus: the `[bus]` table, `<PREFIX>_BUS__<KEY>` in the environment, and \
                    `MESH_BUS_<KEY>` for the whole suite under `a2a-mesh up`. An agent without it stays off \
                    the bus.",
        },
        Section {
            ty: "LlmConfig",
            key: "llm",
            file: "shared/llm/src/config.rs",
            debug: format!("{:#?}", mesh_llm::LlmConfig::default()),
            about: "An OpenAI-compatible endpoint: the `[llm]` table, `<PREFIX>_LLM__<KEY>` in the environment. \
                    The planners switch to it when both `base_url` and `model` are set.",
        },
        Section {
            ty: "DenseConfig",
            key: "dense",
            file: "shared/embedding/src/model.rs",
            debug: format!("{:#?}", search::DenseConfig::default()),
            about: "The embedding model, of the search agent's `dense` profile and of the registry's search \
                    over agent cards: the `[dense]` table, `MESH_SEARCH_DENSE__<KEY>` or \
                    `MESH_REGISTRY_DENSE__<KEY>` in the environment.",
        },
    ]
}

fn services() -> Vec<Service> {
    vec![
        Service {
            name: "registry",
            env_prefix: registry::config::ENV_PREFIX,
            ty: "RegistryConfig",
            file: "services/registry/src/config.rs",
            debug: format!("{:#?}", registry::RegistryConfig::default()),
            port: registry::RegistryConfig::default().port,
        },
        Service {
            name: "orchestrator",
            env_prefix: orchestrator::config::ENV_PREFIX,
            ty: "OrchestratorConfig",
            file: "services/orchestrator/src/config.rs",
            debug: format!("{:#?}", orchestrator::OrchestratorConfig::default()),
            port: orchestrator::OrchestratorConfig::default().agent.port,
        },
        Service {
            name: "search",
            env_prefix: search::config::ENV_PREFIX,
            ty: "SearchConfig",
            file: "services/search/src/config.rs",
            debug: format!("{:#?}", search::SearchConfig::default()),
            port: search::config::SEARCH_PORT_DEFAULT,
        },
        Service {
            name: "entity-extraction",
            env_prefix: entity_extraction::ENV_PREFIX,
            ty: "PlannerConfig",
            file: "shared/planner/src/lib.rs",
            debug: format!("{:#?}", entity_extraction::EntityExtractionConfig::default()),
            port: entity_extraction::ENTITY_EXTRACTION_PORT_DEFAULT,
        },
        Service {
            name: "profile-selection",
            env_prefix: profile_selection::ENV_PREFIX,
            ty: "PlannerConfig",
            file: "shared/planner/src/lib.rs",
            debug: format!("{:#?}", profile_selection::ProfileSelectionConfig::default()),
            port: profile_selection::PROFILE_SELECTION_PORT_DEFAULT,
        },
        Service {
            name: "ui-agent",
            env_prefix: ui_agent::ENV_PREFIX,
            ty: "UiAgentConfig",
            file: "services/ui-agent/src/lib.rs",
            debug: format!("{:#?}", ui_agent::UiAgentConfig::default()),
            port: ui_agent::UiAgentConfig::default().port,
        },
        Service {
            name: "gateway",
            env_prefix: gateway::ENV_PREFIX,
            ty: "GatewayConfig",
            file: "services/gateway/src/lib.rs",
            debug: format!("{:#?}", gateway::GatewayConfig::default()),
            port: gateway::GatewayConfig::default().port,
        },
        Service {
            name: "llm-agent",
            env_prefix: llm_agent::ENV_PREFIX,
            ty: "LlmAgentsConfig",
            file: "services/llm-agent/src/lib.rs",
            debug: format!("{:#?}", llm_agent::LlmAgentsConfig::default()),
            port: llm_agent::LLM_AGENT_PORT_DEFAULT,
        },
    ]
}

/// The fields of `pub struct {name}` in `file`, with the doc comments above them.
fn struct_fields(file: &str, name: &str) -> Vec<Field> {
    let text = read(&repo_root().join(file));
    let opening = format!("pub struct {name} {{");
    let start = text.find(&opening).unwrap_or_else(|| panic!("{file} declares no `{opening}`"));
    let mut fields = Vec::new();
    let (mut doc, mut flatten, mut pending) = (Vec::<String>::new(), false, String::new());
    for line in text[start..].lines().skip(1) {
        if line == "}" {
            break;
        }
        let line = line.trim();
        if !pending.is_empty() || line.starts_with("pub ") {
            // A declaration may wrap over several lines; it ends with its comma.
            pending.push_str(line);
            if !pending.ends_with(',') {
                continue;
            }
            let declaration = std::mem::take(&mut pending);
            let (field, ty) = declaration["pub ".len()..]
                .split_once(':')
                .unwrap_or_else(|| panic!("{file}: unreadable field `{declaration}` of {name}"));
            fields.push(Field {
                name: field.trim().to_owned(),
                ty: ty.trim().trim_end_matches(',').to_owned(),
                doc: doc.join(" "),
                flatten,
            });
            (doc, flatten) = (Vec::new(), false);
        } else if let Some(comment) = line.strip_prefix("///") {
            doc.push(comment.trim().to_owned());
        } else if line.starts_with("#[serde(flatten") {
            flatten = true;
        }
    }
    assert!(!fields.is_empty(), "{file}: no fields read from {name}");
    fields
}

/// The top-level fields of a pretty `Debug` (`{:#?}`) of a struct, each value on one line.
fn debug_fields(debug: &str) -> BTreeMap<String, String> {
    const FIELD_INDENT: &str = "    ";
    let mut fields = BTreeMap::new();
    let mut lines = debug.lines().skip(1);
    while let Some(line) = lines.next() {
        let Some(body) = line.strip_prefix(FIELD_INDENT).filter(|b| !b.starts_with(' ')) else {
            continue;
        };
        let Some((name, first)) = body.split_once(": ") else { continue };
        let mut value = first.to_owned();
        if first.ends_with(['{', '[', '(']) {
            // A nested value: its lines until the one closing it at the field's indentation.
            for inner in lines.by_ref() {
                let closing = inner.strip_prefix(FIELD_INDENT).is_some_and(|b| !b.starts_with(' '));
                value.push_str(inner.trim());
                if !closing {
                    value.push(' ');
                }
                if closing {
                    break;
                }
            }
        }
        let value = value.trim_end_matches(',').replace(", ]", "]").replace(", )", ")").replace(", }", " }");
        fields.insert(name.to_owned(), value.replace("[ ", "[").replace("( ", "("));
    }
    fields
}

/// A default as a reader writes it in a TOML file.
fn display_default(value: &str) -> String {
    if value == "None" {
        return "unset".to_owned();
    }
    if value == "[]" {
        return "empty".to_owned();
    }
    let value = value.strip_prefix("Some(").and_then(|v| v.strip_suffix(')')).unwrap_or(value);
    let is_unit_variant = value.chars().next().is_some_and(|c| c.is_ascii_uppercase())
        && value.chars().all(|c| c.is_ascii_alphanumeric());
    if is_unit_variant {
        // Enum values are spelled in snake case in files and the environment.
        let mut snake = String::new();
        for (i, c) in value.chars().enumerate() {
            if c.is_ascii_uppercase() && i > 0 {
                snake.push('_');
            }
            snake.push(c.to_ascii_lowercase());
        }
        return format!("`{snake}`");
    }
    let unquoted = value.strip_prefix('"').and_then(|v| v.strip_suffix('"')).filter(|v| !v.is_empty());
    format!("`{}`", unquoted.unwrap_or(value))
}

/// A doc comment as a table cell: intra-doc links as code, no cell separators.
fn cell(doc: &str) -> String {
    if doc.is_empty() {
        return "(undocumented)".to_owned();
    }
    doc.replace("[`", "`").replace("`]", "`").replace('|', "\\|")
}

fn type_name(ty: &str) -> &str {
    let inner = ty.strip_prefix("Option<").and_then(|t| t.strip_suffix('>')).unwrap_or(ty);
    inner.rsplit("::").next().unwrap_or(inner)
}

fn environment_name(prefix: &str, section: Option<&str>, key: &str) -> String {
    match section {
        Some(section) => format!("{prefix}_{}__{}", section.to_uppercase(), key.to_uppercase()),
        None => format!("{prefix}_{}", key.to_uppercase()),
    }
}

/// The rows of one struct's table: key, environment, default, what.
fn rows(out: &mut String, fields: &[Field], defaults: &BTreeMap<String, String>, prefix: &str, section: Option<&str>) {
    let known = sections();
    out.push_str("| key | environment | default | what |\n|---|---|---|---|\n");
    for field in fields {
        let key = match section {
            Some(section) => format!("{section}.{}", field.name),
            None => field.name.clone(),
        };
        if field.flatten {
            let nested = known.iter().find(|s| s.ty == type_name(&field.ty));
            let target = nested.map_or(String::new(), |s| format!(" ([{} keys](#{}))", s.key, anchor(s.key)));
            let _ =
                writeln!(out, "| every agent key{target} | `{prefix}_<KEY>` | | the kit's keys, at the top level |");
            continue;
        }
        if let Some(nested) = known.iter().find(|s| s.ty == type_name(&field.ty)) {
            let _ = writeln!(
                out,
                "| `[{key}]` | `{prefix}_{}__<KEY>` | [its keys](#{}) | {} |",
                field.name.to_uppercase(),
                anchor(nested.key),
                cell(&field.doc)
            );
            continue;
        }
        let environment = if field.ty.starts_with("Vec<") {
            "(a list: file only)".to_owned()
        } else {
            format!("`{}`", environment_name(prefix, section, &field.name))
        };
        let default = defaults.get(&field.name).map_or_else(|| "-".to_owned(), |v| display_default(v));
        let _ = writeln!(out, "| `{key}` | {environment} | {default} | {} |", cell(&field.doc));
    }
    out.push('\n');
}

/// The anchor of a section's heading (`### Section: auth`).
fn anchor(key: &str) -> String {
    format!("section-{key}")
}

pub fn render() -> String {
    let mut out = String::new();
    out.push_str(
        "# Settings\n\n<!-- Generated from the configuration types by tests/docs/settings.rs: do not edit by hand. -->\n\
         <!-- Regenerate with `MESH_DOCS_UPDATE=1 cargo test -p a2a-mesh --test docs`. -->\n\n\
         Every binary reads its settings in layers, each overriding the one before: the defaults below, \
         a TOML file (`--config FILE`, its keys as below), environment variables, and flags (`--host`, \
         `--port`, and the ones `--help` lists). An environment variable is the service's prefix, `_` and \
         the key in capitals; a key of a section (a TOML table) is `<PREFIX>_<SECTION>__<KEY>`. Lists are \
         set in the file. How the layers work: [Configuration](configuration.md).\n\n",
    );
    out.push_str("| service | environment prefix | default port |\n|---|---|---:|\n");
    let services = services();
    for service in &services {
        let _ = writeln!(out, "| [{0}](#{0}) | `{1}_` | {2} |", service.name, service.env_prefix, service.port);
    }
    out.push('\n');
    out.push_str(
        "Under `a2a-mesh up` every service reads its own prefix as above, and the suite also reads \
         `MESH_BUS_<KEY>` ([bus keys](#section-bus)) and `MESH_AUTH_<KEY>` ([auth keys](#section-auth)) \
         for all of its services, and `",
    );
    let _ = write!(
        out,
        "{}`, `{}` and `{}` for its LLM agents.\n\n",
        a2a_mesh::LLM_BASE_URL_ENV,
        a2a_mesh::LLM_MODEL_ENV,
        a2a_mesh::LLM_API_KEY_ENV
    );
    for service in &services {
        let _ = write!(
            out,
            "## {}\n\nEnvironment prefix `{}`, default port {}.\n\n",
            service.name, service.env_prefix, service.port
        );
        let fields = struct_fields(service.file, service.ty);
        rows(&mut out, &fields, &debug_fields(&service.debug), service.env_prefix, None);
    }
    out.push_str("## Sections\n\n");
    for section in sections() {
        let _ = write!(out, "### Section: {}\n\n{}\n\n", section.key, section.about);
        let fields = struct_fields(section.file, section.ty);
        let (prefix, nested) =
            if section.key == "agent" { ("<PREFIX>", None) } else { ("<PREFIX>", Some(section.key)) };
        rows(&mut out, &fields, &debug_fields(&section.debug), prefix, nested);
    }
    out.trim_end().to_owned() + "\n"
}
