//! What every operation of the registry's OpenAPI document may answer besides what its own
//! annotation lists: the refusals of the layers every request passes (authentication, the header
//! check, the rate limit, load shedding, the timeout) and of the extractors (path, query, JSON
//! body). They are added here, from what each operation takes, rather than on each annotation, so
//! an operation added later is described right too; schemathesis checks the document against the
//! real server (tests/registry/schemathesis.rs).

use utoipa::Modify;
use utoipa::openapi::path::{Operation, ParameterIn};
use utoipa::openapi::schema::{Object, Type};
use utoipa::openapi::security::{
    ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme,
};
use utoipa::openapi::{ContentBuilder, Header, OpenApi, Ref, RefOr, ResponseBuilder};

/// The security scheme of `Authorization: Bearer` (a mesh JWT or an API key).
const BEARER_SCHEME: &str = "bearer";
/// The security scheme of an API key in its own header.
const API_KEY_SCHEME: &str = "api_key";

/// The header of refusals that end by waiting, in whole seconds.
const RETRY_AFTER: &str = "Retry-After";

/// Adds the security schemes and the answers shared by every operation.
pub(crate) struct SharedAnswers;

impl Modify for SharedAnswers {
    fn modify(&self, openapi: &mut OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        let bearer = HttpBuilder::new()
            .scheme(HttpAuthScheme::Bearer)
            .description(Some("A mesh JWT (HS256, EdDSA or ES256) or a static API key"))
            .build();
        components.add_security_scheme(BEARER_SCHEME, SecurityScheme::Http(bearer));
        components.add_security_scheme(
            API_KEY_SCHEME,
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::new(mesh_auth::API_KEY_HEADER))),
        );
        // Either scheme; a registry without credentials configured (on loopback) asks for none.
        openapi.security = Some(vec![
            SecurityRequirement::new(BEARER_SCHEME, Vec::<String>::new()),
            SecurityRequirement::new(API_KEY_SCHEME, Vec::<String>::new()),
        ]);
        for item in openapi.paths.paths.values_mut() {
            let operations = [&mut item.get, &mut item.put, &mut item.post, &mut item.delete, &mut item.patch];
            for operation in operations.into_iter().flatten() {
                add_shared_answers(operation);
            }
        }
    }
}

fn add_shared_answers(operation: &mut Operation) {
    let takes = |location: ParameterIn| {
        operation.parameters.iter().flatten().any(|p| matches!(p, RefOr::T(p) if p.parameter_in == location))
    };
    let mut unreadable = vec!["a header value holds a control character (REQUEST_HEADER_INVALID)"];
    if takes(ParameterIn::Path) {
        unreadable.push("a path parameter is not UTF-8 once percent-decoded (REQUEST_INVALID_PATH)");
    }
    if takes(ParameterIn::Query) {
        unreadable.push("the query cannot be read into the parameters (REQUEST_INVALID_QUERY)");
    }
    let has_body = operation.request_body.is_some();
    if has_body {
        unreadable.push("the body is not JSON (REQUEST_MALFORMED_JSON)");
    }
    let mut shared = vec![
        (400, format!("Unreadable request: {}", unreadable.join("; ")), None),
        (
            401,
            "With authentication on: no credentials (AUTH_REQUIRED) or invalid ones (AUTH_INVALID)".to_owned(),
            Some(("WWW-Authenticate", "The Bearer challenge, with `error=\"invalid_token\"` for invalid credentials")),
        ),
        (
            429,
            "The caller's tenant is over its rate limit (RATE_LIMITED)".to_owned(),
            Some((RETRY_AFTER, "Seconds to wait")),
        ),
        (
            503,
            "The server is handling as many requests as it may (SERVER_OVERLOADED), or its storage is unavailable \
             (STORAGE_UNAVAILABLE)"
                .to_owned(),
            Some((RETRY_AFTER, "Seconds to wait, when overloaded")),
        ),
        (504, "The request did not complete in time (REQUEST_TIMEOUT)".to_owned(), None),
    ];
    if has_body {
        shared.extend([
            (413, "The body is larger than the server accepts (REQUEST_BODY_TOO_LARGE)".to_owned(), None),
            (
                415,
                "The body is not sent as `Content-Type: application/json` (REQUEST_UNSUPPORTED_MEDIA_TYPE)".to_owned(),
                None,
            ),
            (422, "The JSON body does not have the documented shape (REQUEST_INVALID_BODY)".to_owned(), None),
        ]);
    }
    for (status, description, header) in shared {
        match operation.responses.responses.get_mut(&status.to_string()) {
            // The operation's own reasons for this status come first; the shared ones follow.
            Some(RefOr::T(own)) if own.description.is_empty() => own.description = description,
            Some(RefOr::T(own)) => own.description = format!("{}. Also: {description}", own.description),
            Some(RefOr::Ref(_)) => {}
            None => {
                let mut response = ResponseBuilder::new().description(description).content(
                    "application/json",
                    ContentBuilder::new().schema(Some(Ref::from_schema_name("ErrorBody"))).build(),
                );
                if let Some((name, meaning)) = header {
                    let kind = if name == RETRY_AFTER { Type::Integer } else { Type::String };
                    let mut value = Header::new(Object::with_type(kind));
                    value.description = Some(meaning.to_owned());
                    response = response.header(name, value);
                }
                operation.responses.responses.insert(status.to_string(), RefOr::T(response.build()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use crate::api::openapi_document;

    #[test]
    fn every_operation_lists_the_refusals_of_the_shared_layers_with_an_error_body() {
        let document: Value = serde_json::from_str(&openapi_document()).unwrap();
        let mut operations = 0;
        for (path, item) in document["paths"].as_object().unwrap() {
            for (method, operation) in item.as_object().unwrap() {
                operations += 1;
                let responses = &operation["responses"];
                let mut expected = vec!["400", "401", "429", "503", "504"];
                if operation.get("requestBody").is_some() {
                    expected.extend(["413", "415", "422"]);
                }
                for status in expected {
                    let response = &responses[status];
                    let schema = &response["content"]["application/json"]["schema"]["$ref"];
                    assert_eq!(schema, "#/components/schemas/ErrorBody", "{method} {path} answers {status}");
                    assert!(!response["description"].as_str().unwrap().is_empty(), "{method} {path} {status}");
                }
                assert!(responses["401"]["headers"]["WWW-Authenticate"].is_object(), "{method} {path}");
            }
        }
        assert!(operations >= 22, "the registry documents its operations");
        let schemes = &document["components"]["securitySchemes"];
        assert_eq!(schemes["bearer"]["scheme"], "bearer");
        assert_eq!(schemes["api_key"]["name"], "x-api-key");
    }

    #[test]
    fn an_operation_keeps_its_own_reasons_for_a_shared_status() {
        let document: Value = serde_json::from_str(&openapi_document()).unwrap();
        let register_422 = document["paths"]["/register"]["post"]["responses"]["422"]["description"].as_str().unwrap();
        assert!(register_422.starts_with("The agent's address is refused"), "{register_422}");
        assert!(register_422.contains("REQUEST_INVALID_BODY"), "{register_422}");
    }

    #[test]
    fn the_fields_a_gateway_routes_by_and_the_receipts_are_documented() {
        let document: Value = serde_json::from_str(&openapi_document()).unwrap();
        let schemas = &document["components"]["schemas"];
        let agent = serde_json::to_string(&schemas["RegisteredAgent"]).unwrap();
        for field in ["path", "health_probe", "interfaces", "AgentRecord"] {
            assert!(agent.contains(field), "RegisteredAgent documents {field}: {agent}");
        }
        let interface = &schemas["AgentInterfaceRecord"]["properties"];
        for field in ["protocol_binding", "protocol_version", "url"] {
            assert!(interface.get(field).is_some(), "{field}");
        }
        assert!(schemas["RegisterRequest"]["properties"]["agent_card_url"].is_object());
        let list = &document["paths"]["/agents"]["get"]["responses"]["200"]["content"]["application/json"]["schema"];
        assert_eq!(list["$ref"], "#/components/schemas/AgentsAnswer");
        let answers = serde_json::to_string(&schemas["AgentsAnswer"]["oneOf"]).unwrap();
        for shape in ["RegisteredAgents", "AgentMatches"] {
            assert!(answers.contains(shape), "GET /agents answers {shape}: {answers}");
        }
        let receipts = &document["paths"]["/api/links/{id}/receipts"]["post"];
        assert_eq!(
            receipts["requestBody"]["content"]["application/json"]["schema"]["$ref"],
            "#/components/schemas/LinkReceipt"
        );
        assert!(receipts["responses"]["202"].is_object());
    }
}
