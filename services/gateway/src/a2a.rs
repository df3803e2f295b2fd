//! What the gateway reads of an A2A request and answer, in both JSON bindings and both protocol
//! versions: the method (named as A2A 1.0 names it, whatever the version), the task and the
//! conversation it addresses, and the task an answer creates; and the card with its interfaces
//! pointed at the gateway.

use serde_json::{Map, Value};

/// The JSON-RPC binding's name on cards.
pub const JSONRPC: &str = "JSONRPC";
/// The HTTP+JSON binding's name on cards.
pub const HTTP_JSON: &str = "HTTP+JSON";
pub const VERSION_1_0: &str = "1.0";
pub const VERSION_0_3: &str = "0.3";

/// The binding a call came in on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Binding {
    JsonRpc,
    HttpJson,
}

impl Binding {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::JsonRpc => JSONRPC,
            Self::HttpJson => HTTP_JSON,
        }
    }
}

/// One A2A call, as the gateway's checks see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct A2aCall {
    pub binding: Binding,
    pub version: &'static str,
    /// The A2A 1.0 method name (`SendMessage`, `GetTask`, ...); an unknown JSON-RPC method keeps
    /// its own name, so a policy can still name it.
    pub method: String,
    /// Whether the answer is a stream of events.
    pub streaming: bool,
    /// The task the call addresses (its id, or the task a message continues).
    pub task_id: Option<String>,
    /// The conversation a message belongs to.
    pub context_id: Option<String>,
}

/// A2A 0.3 JSON-RPC method names and their 1.0 names.
const V03_METHODS: [(&str, &str); 10] = [
    ("message/send", "SendMessage"),
    ("message/stream", "SendStreamingMessage"),
    ("tasks/get", "GetTask"),
    ("tasks/cancel", "CancelTask"),
    ("tasks/resubscribe", "SubscribeToTask"),
    ("tasks/pushNotificationConfig/set", "CreateTaskPushNotificationConfig"),
    ("tasks/pushNotificationConfig/get", "GetTaskPushNotificationConfig"),
    ("tasks/pushNotificationConfig/list", "ListTaskPushNotificationConfigs"),
    ("tasks/pushNotificationConfig/delete", "DeleteTaskPushNotificationConfig"),
    ("agent/getAuthenticatedExtendedCard", "GetExtendedAgentCard"),
];

/// The methods whose answer is a stream of events.
fn is_streaming(method: &str) -> bool {
    matches!(method, "SendStreamingMessage" | "SubscribeToTask")
}

/// The call a JSON-RPC request makes: its method and parameters.
pub fn jsonrpc_call(method: &str, params: Option<&Value>) -> A2aCall {
    let (version, method) = match V03_METHODS.iter().find(|(v03, _)| *v03 == method) {
        Some((_, v10)) => (VERSION_0_3, (*v10).to_owned()),
        None => (VERSION_1_0, method.to_owned()),
    };
    // A 1.0 push notification config's `id` is the config's; in 0.3 a task's `id` names it there too.
    let id_names_task = version == VERSION_0_3 || !method.contains("PushNotificationConfig");
    let (task_id, context_id) = params.map(|params| addressed(params, id_names_task)).unwrap_or_default();
    A2aCall { binding: Binding::JsonRpc, version, streaming: is_streaming(&method), method, task_id, context_id }
}

/// The task and conversation a call's parameters (or an HTTP+JSON body) address: a message's
/// `taskId` and `contextId`, or the task named by `taskId` (or `id`, when `id_names_task`). Each
/// field is read by its JSON name or its proto name (`task_id`), as ProtoJSON parsers accept both.
fn addressed(params: &Value, id_names_task: bool) -> (Option<String>, Option<String>) {
    let text = |value: Option<&Value>| value.and_then(Value::as_str).filter(|s| !s.is_empty()).map(str::to_owned);
    let field = |object: &Value, json: &str, proto: &str| text(object.get(json).or_else(|| object.get(proto)));
    match params.get("message") {
        Some(message) => (field(message, "taskId", "task_id"), field(message, "contextId", "context_id")),
        None => {
            let id = if id_names_task { text(params.get("id")) } else { None };
            (field(params, "taskId", "task_id").or(id), None)
        }
    }
}

/// The call an HTTP+JSON request makes: `method` and `path` below the agent's interface URL
/// (0.3 under `/v1`), `body` for a message.
pub fn http_json_call(method: &http::Method, path: &str, body: Option<&Value>) -> Option<A2aCall> {
    let (version, rest) = match path.strip_prefix("/v1/") {
        Some(rest) => (VERSION_0_3, rest),
        None => (VERSION_1_0, path.strip_prefix('/')?),
    };
    let get = method == http::Method::GET;
    let post = method == http::Method::POST;
    let (name, task_id) = match rest {
        "message:send" if post => ("SendMessage", None),
        "message:stream" if post => ("SendStreamingMessage", None),
        "tasks" if get => ("ListTasks", None),
        "extendedAgentCard" | "card" if get => ("GetExtendedAgentCard", None),
        _ => {
            let tasks = rest.strip_prefix("tasks/")?;
            let (task, tail) = tasks.split_once('/').map_or((tasks, ""), |(task, tail)| (task, tail));
            let (task, verb) = task.split_once(':').map_or((task, ""), |(task, verb)| (task, verb));
            let name = match (verb, tail, method.as_str()) {
                ("", "", "GET") => "GetTask",
                ("cancel", "", "POST") => "CancelTask",
                ("subscribe", "", "GET" | "POST") => "SubscribeToTask",
                ("", "pushNotificationConfigs", "POST") => "CreateTaskPushNotificationConfig",
                ("", "pushNotificationConfigs", "GET") => "ListTaskPushNotificationConfigs",
                ("", tail, "GET") if tail.starts_with("pushNotificationConfigs/") => "GetTaskPushNotificationConfig",
                ("", tail, "DELETE") if tail.starts_with("pushNotificationConfigs/") => {
                    "DeleteTaskPushNotificationConfig"
                }
                _ => return None,
            };
            (name, Some(task.to_owned()).filter(|t| !t.is_empty()))
        }
    };
    // The task is in the path; a body's `id` is a push notification config's.
    let (body_task, context_id) = body.map(|body| addressed(body, false)).unwrap_or_default();
    Some(A2aCall {
        binding: Binding::HttpJson,
        version,
        method: name.to_owned(),
        streaming: is_streaming(name),
        task_id: task_id.or(body_task),
        context_id,
    })
}

/// The task (and conversation) an answer or a stream event names: a task's `id`, or the
/// `taskId` of a message or an update. `answer` is the JSON of a JSON-RPC response (its `result`
/// is read) or of an HTTP+JSON body; `None` when it is not a JSON object.
///
/// Read into the few members it needs, every other one skipped unread: the relay reads every
/// answer, and building a whole `serde_json::Value` of it (artifacts included) and dropping it
/// again cost the gateway more than any other step of a call but authentication.
pub fn answered_task(answer: &[u8]) -> Option<(Option<String>, Option<String>)> {
    let read: Named<'_> = serde_json::from_slice(answer).ok()?;
    let payload = match read.result {
        Some(result) => *result,
        None => read,
    };
    Some(payload.task_and_context())
}

/// The members of an answer, a stream event or what they hold that name a task.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct Named<'a> {
    /// A JSON-RPC response's result.
    #[serde(borrow)]
    result: Option<Box<Named<'a>>>,
    #[serde(borrow)]
    task: Option<Box<Named<'a>>>,
    #[serde(borrow)]
    message: Option<Box<Named<'a>>>,
    #[serde(borrow)]
    status_update: Option<Box<Named<'a>>>,
    #[serde(borrow)]
    artifact_update: Option<Box<Named<'a>>>,
    #[serde(borrow)]
    id: Text<'a>,
    #[serde(borrow)]
    task_id: Text<'a>,
    #[serde(borrow)]
    context_id: Text<'a>,
    #[serde(borrow)]
    kind: Text<'a>,
    status: Option<serde::de::IgnoredAny>,
}

impl Named<'_> {
    /// What `self` (a JSON-RPC result or an HTTP+JSON body) names: the task, message or update
    /// it wraps, else itself.
    fn task_and_context(self) -> (Option<String>, Option<String>) {
        let Named { result: _, task, message, status_update, artifact_update, id, task_id, context_id, kind, status } =
            self;
        let wraps_task = task.is_some();
        let (id, task_id, context_id, kind, status) = match task.or(message).or(status_update).or(artifact_update) {
            Some(inner) => (inner.id, inner.task_id, inner.context_id, inner.kind, inner.status),
            None => (id, task_id, context_id, kind, status),
        };
        let text = |value: Text<'_>| value.0.filter(|s| !s.is_empty()).map(std::borrow::Cow::into_owned);
        let names_itself = wraps_task || kind.0.as_deref() == Some("task") || status.is_some();
        let task = text(task_id).or_else(|| if names_itself { text(id) } else { None });
        (task, text(context_id))
    }
}

/// A member read as text when it is a string and skipped, as `None`, when it is any other value:
/// a JSON-RPC response's numeric `id` must not make its `result` unreadable.
#[derive(Debug, Default)]
struct Text<'a>(Option<std::borrow::Cow<'a, str>>);

impl<'de: 'a, 'a> serde::Deserialize<'de> for Text<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(TextVisitor)
    }
}

struct TextVisitor;

impl<'de> serde::de::Visitor<'de> for TextVisitor {
    type Value = Text<'de>;

    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("any JSON value")
    }

    fn visit_borrowed_str<E>(self, value: &'de str) -> Result<Text<'de>, E> {
        Ok(Text(Some(std::borrow::Cow::Borrowed(value))))
    }

    fn visit_str<E>(self, value: &str) -> Result<Text<'de>, E> {
        Ok(Text(Some(std::borrow::Cow::Owned(value.to_owned()))))
    }

    fn visit_bool<E>(self, _: bool) -> Result<Text<'de>, E> {
        Ok(Text(None))
    }

    fn visit_i64<E>(self, _: i64) -> Result<Text<'de>, E> {
        Ok(Text(None))
    }

    fn visit_u64<E>(self, _: u64) -> Result<Text<'de>, E> {
        Ok(Text(None))
    }

    fn visit_f64<E>(self, _: f64) -> Result<Text<'de>, E> {
        Ok(Text(None))
    }

    fn visit_unit<E>(self) -> Result<Text<'de>, E> {
        Ok(Text(None))
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Text<'de>, A::Error> {
        while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
        Ok(Text(None))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Text<'de>, A::Error> {
        while map.next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?.is_some() {}
        Ok(Text(None))
    }
}

/// Where an agent's card says each binding is served, by version; only URLs on the agent's
/// registered `origin` count, so a card cannot send the gateway elsewhere.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Interfaces {
    /// `(binding, version, url)`.
    pub urls: Vec<(String, String, String)>,
}

impl Interfaces {
    /// The interfaces `card` declares (1.0 `supportedInterfaces`, 0.3 `url`, `preferredTransport`
    /// and `additionalInterfaces`) whose URL is on `origin`.
    pub fn of_card(card: &Value, origin: &str) -> Self {
        let mut urls = Vec::new();
        let mut add = |binding: Option<&str>, version: Option<&str>, url: Option<&str>| {
            if let (Some(binding), Some(url)) = (binding, url)
                && same_origin(url, origin)
            {
                urls.push((binding.to_owned(), version.unwrap_or(VERSION_1_0).to_owned(), url.to_owned()));
            }
        };
        for interface in card.get("supportedInterfaces").and_then(Value::as_array).into_iter().flatten() {
            let field = |key: &str| interface.get(key).and_then(Value::as_str);
            add(field("protocolBinding"), field("protocolVersion"), field("url"));
        }
        let v03 = card.get("protocolVersion").and_then(Value::as_str).map(|_| VERSION_0_3);
        let preferred = card.get("preferredTransport").and_then(Value::as_str).unwrap_or(JSONRPC);
        if card.get("supportedInterfaces").is_none() {
            add(Some(preferred), v03, card.get("url").and_then(Value::as_str));
            for interface in card.get("additionalInterfaces").and_then(Value::as_array).into_iter().flatten() {
                add(
                    interface.get("transport").and_then(Value::as_str),
                    v03,
                    interface.get("url").and_then(Value::as_str),
                );
            }
        }
        Self { urls }
    }

    /// The URL of `binding` in `version`, else of `binding` in any version.
    pub fn url(&self, binding: Binding, version: &str) -> Option<&str> {
        let binding = binding.as_str();
        let of = |wanted: Option<&str>| {
            self.urls
                .iter()
                .find(|(b, v, _)| b == binding && wanted.is_none_or(|w| w == v))
                .map(|(_, _, url)| url.as_str())
        };
        of(Some(version)).or_else(|| of(None))
    }
}

/// Whether `url` is on `origin` (`scheme://host:port`, as the agent registered it).
pub fn same_origin(url: &str, origin: &str) -> bool {
    match (url::Url::parse(url), url::Url::parse(origin)) {
        (Ok(url), Ok(origin)) => url.origin() == origin.origin(),
        _ => false,
    }
}

/// `card` as the gateway serves it: every JSON interface pointed at `base` (the agent's route on
/// the gateway, `http://gateway/agents/{name}`), gRPC ones dropped (not relayed), and the
/// agent's own signatures and security schemes dropped (they describe the agent, not the
/// gateway, which authenticates callers itself).
pub fn rewrite_card(card: &Value, base: &str) -> Value {
    let mut card = card.clone();
    let Some(fields) = card.as_object_mut() else { return card };
    let gateway_url = |binding: &str| match binding {
        HTTP_JSON => Some(base.to_owned()),
        JSONRPC => Some(format!("{base}/")),
        _ => None,
    };
    let rewrite_list = |list: &mut Value, binding_key: &str| {
        if let Some(items) = list.as_array_mut() {
            items.retain_mut(|item| {
                let binding = item.get(binding_key).and_then(Value::as_str).unwrap_or(JSONRPC).to_owned();
                match (gateway_url(&binding), item.as_object_mut()) {
                    (Some(url), Some(item)) => {
                        item.insert("url".into(), Value::String(url));
                        true
                    }
                    _ => false,
                }
            });
        }
    };
    if let Some(list) = fields.get_mut("supportedInterfaces") {
        rewrite_list(list, "protocolBinding");
    }
    if let Some(list) = fields.get_mut("additionalInterfaces") {
        rewrite_list(list, "transport");
    }
    if fields.contains_key("url") {
        let preferred = fields.get("preferredTransport").and_then(Value::as_str).unwrap_or(JSONRPC).to_owned();
        let (binding, url) = match gateway_url(&preferred) {
            Some(url) => (preferred, url),
            None => (JSONRPC.to_owned(), format!("{base}/")),
        };
        fields.insert("url".into(), Value::String(url));
        fields.insert("preferredTransport".into(), Value::String(binding));
    }
    for key in ["signatures", "securitySchemes", "securityRequirements", "security"] {
        fields.remove(key);
    }
    card
}

/// The skill ids a card lists.
pub fn skills(card: &Value) -> Vec<String> {
    card.get("skills")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|skill| skill.get("id").and_then(Value::as_str).map(str::to_owned))
        .collect()
}

/// An empty JSON object, for calls without parameters.
pub fn no_params() -> Value {
    Value::Object(Map::new())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn json_rpc_methods_of_both_versions_map_to_one_name_with_their_task() {
        let call = jsonrpc_call("tasks/get", Some(&json!({"id": "t1"})));
        assert_eq!((call.method.as_str(), call.version, call.task_id.as_deref()), ("GetTask", "0.3", Some("t1")));
        let call = jsonrpc_call("SendStreamingMessage", Some(&json!({"message": {"contextId": "c1", "taskId": "t2"}})));
        assert!(call.streaming);
        assert_eq!((call.task_id.as_deref(), call.context_id.as_deref()), (Some("t2"), Some("c1")));
        let call = jsonrpc_call("GetTaskPushNotificationConfig", Some(&json!({"taskId": "t3", "id": "cfg"})));
        assert_eq!(call.task_id.as_deref(), Some("t3"));
        // Proto field names (the conformance kit sends them); a 1.0 config's `id` is no task's.
        let call = jsonrpc_call("CreateTaskPushNotificationConfig", Some(&json!({"task_id": "t4", "id": "cfg"})));
        assert_eq!(call.task_id.as_deref(), Some("t4"));
        let call = jsonrpc_call("CreateTaskPushNotificationConfig", Some(&json!({"id": "cfg", "url": "https://x"})));
        assert_eq!(call.task_id, None);
        let call = jsonrpc_call("tasks/pushNotificationConfig/get", Some(&json!({"id": "t5"})));
        assert_eq!(call.task_id.as_deref(), Some("t5"));
        let call = jsonrpc_call("SendMessage", Some(&json!({"message": {"context_id": "c6", "task_id": "t6"}})));
        assert_eq!((call.task_id.as_deref(), call.context_id.as_deref()), (Some("t6"), Some("c6")));
        assert_eq!(jsonrpc_call("Whatever", None).method, "Whatever");
    }

    #[test]
    fn http_json_paths_of_both_versions_name_their_method_and_task() {
        let get = http::Method::GET;
        let post = http::Method::POST;
        let call = |method: &http::Method, path: &str| {
            http_json_call(method, path, None).map(|c| (c.method, c.version, c.task_id, c.streaming))
        };
        assert_eq!(call(&post, "/message:send"), Some(("SendMessage".into(), "1.0", None, false)));
        assert_eq!(call(&post, "/v1/message:stream"), Some(("SendStreamingMessage".into(), "0.3", None, true)));
        assert_eq!(call(&get, "/tasks/t1"), Some(("GetTask".into(), "1.0", Some("t1".into()), false)));
        assert_eq!(call(&post, "/v1/tasks/t1:cancel"), Some(("CancelTask".into(), "0.3", Some("t1".into()), false)));
        assert_eq!(call(&get, "/tasks/t1:subscribe").map(|c| c.3), Some(true));
        assert_eq!(call(&get, "/tasks").map(|c| c.0), Some("ListTasks".into()));
        assert_eq!(
            call(&http::Method::DELETE, "/tasks/t1/pushNotificationConfigs/p").map(|c| c.0),
            Some("DeleteTaskPushNotificationConfig".into())
        );
        assert_eq!(call(&post, "/tasks/t1:explode"), None);
        assert_eq!(call(&get, "/elsewhere"), None);
    }

    #[test]
    fn answers_name_their_task_in_either_version() {
        let named = |answer: Value| answered_task(&serde_json::to_vec(&answer).unwrap());
        let v10 = json!({"task": {"id": "t1", "contextId": "c1", "status": {}, "artifacts": [{"parts": []}]}});
        assert_eq!(named(v10.clone()), Some((Some("t1".into()), Some("c1".into()))));
        assert_eq!(
            named(json!({"jsonrpc": "2.0", "id": 1, "result": v10})),
            Some((Some("t1".into()), Some("c1".into())))
        );
        let v03 = json!({"kind": "task", "id": "t2", "contextId": "c2"});
        assert_eq!(named(json!({"id": 7, "result": v03})), Some((Some("t2".into()), Some("c2".into()))));
        let bare_task = json!({"id": "t5", "contextId": "c5", "status": {"state": "TASK_STATE_WORKING"}});
        assert_eq!(named(bare_task), Some((Some("t5".into()), Some("c5".into()))));
        let update = json!({"statusUpdate": {"taskId": "t3", "contextId": "c3"}});
        assert_eq!(named(update), Some((Some("t3".into()), Some("c3".into()))));
        let message = json!({"message": {"messageId": "m", "contextId": "c4"}});
        assert_eq!(named(message), Some((None, Some("c4".into()))));
        // A message's id is not a task's; empty ids name nothing.
        assert_eq!(named(json!({"id": "m1", "contextId": ""})), Some((None, None)));
        let escaped = json!({"task": {"id": "t\"6", "contextId": "c\n6"}});
        assert_eq!(named(escaped), Some((Some("t\"6".into()), Some("c\n6".into()))));
        // Ids of any other type name nothing, and do not hide the rest.
        let odd = json!({"task": {"id": 5, "contextId": ["c"], "kind": {"k": 1}}, "id": null});
        assert_eq!(named(odd), Some((None, None)));
        assert_eq!(answered_task(b"not json"), None);
        assert_eq!(answered_task(b"[1, 2]"), None);
    }

    #[test]
    fn a_card_points_at_the_gateway_and_keeps_only_interfaces_on_the_registered_origin() {
        let card = json!({
            "name": "echo",
            "supportedInterfaces": [
                {"url": "http://127.0.0.1:9/", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
                {"url": "http://127.0.0.1:9/rest", "protocolBinding": "HTTP+JSON", "protocolVersion": "0.3"},
                {"url": "http://evil.example/", "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
                {"url": "127.0.0.1:9", "protocolBinding": "GRPC", "protocolVersion": "1.0"},
            ],
            "signatures": [{"protected": "x", "signature": "y"}],
        });
        let interfaces = Interfaces::of_card(&card, "http://127.0.0.1:9");
        assert_eq!(interfaces.url(Binding::JsonRpc, "1.0"), Some("http://127.0.0.1:9/"));
        assert_eq!(interfaces.url(Binding::JsonRpc, "0.3"), Some("http://127.0.0.1:9/"), "not the foreign one");
        assert_eq!(interfaces.url(Binding::HttpJson, "1.0"), Some("http://127.0.0.1:9/rest"));
        let served = rewrite_card(&card, "http://gw/agents/echo");
        let urls: Vec<&str> =
            served["supportedInterfaces"].as_array().unwrap().iter().map(|i| i["url"].as_str().unwrap()).collect();
        assert_eq!(urls, ["http://gw/agents/echo/", "http://gw/agents/echo", "http://gw/agents/echo/"]);
        assert!(served.get("signatures").is_none());

        let v03 = json!({"protocolVersion": "0.3.0", "url": "http://127.0.0.1:9/", "additionalInterfaces": [
            {"url": "http://127.0.0.1:9/rest", "transport": "HTTP+JSON"}]});
        assert_eq!(
            Interfaces::of_card(&v03, "http://127.0.0.1:9/").url(Binding::HttpJson, "0.3"),
            Some("http://127.0.0.1:9/rest")
        );
        let served = rewrite_card(&v03, "http://gw/agents/echo");
        assert_eq!(served["url"], "http://gw/agents/echo/");
        assert_eq!(served["additionalInterfaces"][0]["url"], "http://gw/agents/echo");
    }
}
