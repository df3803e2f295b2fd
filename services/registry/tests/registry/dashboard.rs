//! The dashboard as the registry serves it: the embedded files with their headers, and the relays
//! of an agent's card and health (the page may talk to no other origin).

use serde_json::Value;

use crate::common::{FakeAgent, TestRegistry};

/// Every `src="/dashboard/..."` and `href="/dashboard/..."` of a page.
fn referenced_paths(html: &str) -> Vec<String> {
    let mut paths = Vec::new();
    for attribute in ["src=\"", "href=\""] {
        for (at, _) in html.match_indices(attribute) {
            let rest = &html[at + attribute.len()..];
            let value = &rest[..rest.find('"').expect("a closed attribute")];
            if value.starts_with("/dashboard/") {
                paths.push(value.to_owned());
            }
        }
    }
    paths
}

/// Every relative `import ... from './x'` of a module, resolved under `/dashboard/assets/`.
fn imported_paths(module: &str) -> Vec<String> {
    module
        .match_indices("from './")
        .map(|(at, _)| {
            let rest = &module[at + "from './".len()..];
            format!("/dashboard/assets/{}", &rest[..rest.find('\'').expect("a closed string")])
        })
        .collect()
}

#[tokio::test]
async fn serves_the_page_and_every_file_it_loads_with_type_validator_and_policy() {
    let registry = TestRegistry::start().await;
    let http = &registry.http;

    let page = http.get(format!("{}/dashboard", registry.url)).send().await.unwrap();
    assert_eq!(page.status(), 200);
    let headers = page.headers().clone();
    assert_eq!(headers["content-type"], "text/html; charset=utf-8");
    let csp = headers["content-security-policy"].to_str().unwrap();
    for directive in ["default-src 'self'", "script-src 'self'", "connect-src 'self'", "frame-ancestors 'none'"] {
        assert!(csp.contains(directive), "{directive} missing from {csp}");
    }
    assert!(!csp.contains("unsafe-inline") && !csp.contains("http"), "only the registry's own origin: {csp}");
    assert_eq!(headers["x-content-type-options"], "nosniff");
    assert_eq!(headers["cache-control"], "no-cache");
    let etag = headers["etag"].to_str().unwrap().to_owned();
    let html = page.text().await.unwrap();
    assert!(!html.contains("<style") && !html.contains("style=") && !html.contains("<script>"), "nothing inline");

    // Revalidation: the same ETag gives 304 without a body; the trailing slash is the same page.
    let again = http.get(format!("{}/dashboard/", registry.url)).header("if-none-match", &etag).send().await.unwrap();
    assert_eq!(again.status(), 304);
    assert_eq!(again.headers()["etag"], etag.as_str());
    assert!(again.bytes().await.unwrap().is_empty());

    // Everything the page and its modules load is embedded, with its type.
    let mut pending = referenced_paths(&html);
    assert!(pending.iter().any(|p| p.ends_with("app.js")) && pending.iter().any(|p| p.ends_with("style.css")));
    let mut seen = Vec::new();
    while let Some(path) = pending.pop() {
        if seen.contains(&path) {
            continue;
        }
        let response = http.get(format!("{}{path}", registry.url)).send().await.unwrap();
        assert_eq!(response.status(), 200, "{path}");
        let content_type = response.headers()["content-type"].to_str().unwrap().to_owned();
        assert!(response.headers().contains_key("etag"), "{path} has no ETag");
        let body = response.text().await.unwrap();
        if path.ends_with(".js") || path.ends_with(".mjs") {
            assert_eq!(content_type, "text/javascript; charset=utf-8", "{path}");
            pending.extend(imported_paths(&body));
        } else if path.ends_with(".css") {
            assert_eq!(content_type, "text/css; charset=utf-8", "{path}");
        }
        seen.push(path);
    }
    assert!(seen.iter().any(|p| p.ends_with("vendor/cytoscape.esm.min.mjs")), "the graph library is loaded: {seen:?}");
    let licence =
        http.get(format!("{}/dashboard/assets/vendor/cytoscape.LICENSE.txt", registry.url)).send().await.unwrap();
    assert_eq!(licence.status(), 200);

    let missing = http.get(format!("{}/dashboard/assets/nothing.js", registry.url)).send().await.unwrap();
    assert_eq!(missing.status(), 404);
    assert_eq!(missing.json::<Value>().await.unwrap()["error_code"], "ASSET_NOT_FOUND");
    registry.stop().await;
}

#[tokio::test]
async fn relays_a_registered_agents_card_and_refuses_what_is_not_json() {
    let registry = TestRegistry::start().await;
    let agent = FakeAgent::start("relay_agent").await;
    registry.client.register(&agent.registration(&["search"])).await.unwrap();
    let http = &registry.http;

    let card = http.get(format!("{}/dashboard/agents/relay_agent/card", registry.url)).send().await.unwrap();
    assert_eq!(card.status(), 200);
    assert_eq!(card.headers()["cache-control"], "no-store");
    let card: Value = card.json().await.unwrap();
    assert_eq!(card["name"], "relay_agent");
    assert_eq!(card["skills"][0]["id"], "search");

    // This fake agent answers /health with a bare status and no JSON: not relayed.
    let health = http.get(format!("{}/dashboard/agents/relay_agent/health", registry.url)).send().await.unwrap();
    assert_eq!(health.status(), 502);
    let body: Value = health.json().await.unwrap();
    assert_eq!(body["error_code"], "AGENT_UNREACHABLE");
    assert!(body["error_message"].as_str().unwrap().contains("not JSON"), "{body}");

    let unknown = http.get(format!("{}/dashboard/agents/nobody/card", registry.url)).send().await.unwrap();
    assert_eq!(unknown.status(), 404);
    assert_eq!(unknown.json::<Value>().await.unwrap()["error_code"], "AGENT_NOT_FOUND");

    // A stopped agent: the relay says so rather than hanging or answering 500.
    agent.kill().await;
    let gone = http.get(format!("{}/dashboard/agents/relay_agent/card", registry.url)).send().await.unwrap();
    assert_eq!(gone.status(), 502);
    assert_eq!(gone.json::<Value>().await.unwrap()["error_code"], "AGENT_UNREACHABLE");
    registry.stop().await;
}
