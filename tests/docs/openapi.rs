//! The registry's operations, rendered from the OpenAPI document it serves at `/openapi.json`
//! (`docs/reference/registry-openapi.md`), so the reference lists what the code describes.

use std::fmt::Write as _;

use serde_json::Value;

pub const PAGE: &str = "docs/reference/registry-openapi.md";

const METHODS: [&str; 5] = ["get", "post", "put", "delete", "patch"];

pub fn render() -> String {
    let document: Value = serde_json::from_str(&registry::openapi_document()).expect("the OpenAPI document is JSON");
    let mut out = String::from(
        "# The registry's OpenAPI document\n\n<!-- Generated from the registry's OpenAPI document by tests/docs/openapi.rs: do not edit by hand. -->\n\
         <!-- Regenerate with `MESH_DOCS_UPDATE=1 cargo test -p a2a-mesh --test docs`. -->\n\n\
         Every operation the registry's OpenAPI document (`GET /openapi.json`) describes, with the statuses \
         it documents. The document itself has the request and answer schemas; \
         [HTTP APIs](http-apis.md) explains them.\n\n",
    );
    let version = document.pointer("/info/version").and_then(Value::as_str).unwrap_or("");
    let _ = writeln!(out, "OpenAPI {}, document version {version}.\n", document["openapi"].as_str().unwrap_or(""));
    out.push_str("| method | path | what | statuses |\n|---|---|---|---|\n");
    let paths = document["paths"].as_object().expect("the document has paths");
    for (path, item) in paths {
        for method in METHODS {
            let Some(operation) = item.get(method) else { continue };
            // The handler's first paragraph: utoipa's summary is only its first line.
            let text = operation["description"].as_str().or_else(|| operation["summary"].as_str()).unwrap_or("");
            let summary = text.split("\n\n").next().unwrap_or("").replace('\n', " ").replace('|', "\\|");
            let statuses: Vec<&str> =
                operation["responses"].as_object().map(|r| r.keys().map(String::as_str).collect()).unwrap_or_default();
            let _ = writeln!(out, "| `{}` | `{path}` | {summary} | {} |", method.to_uppercase(), statuses.join(", "));
        }
    }
    out
}
