//! Finding 5: anonymous callers and users must not empty the buckets the mesh's own agents draw
//! on. The registry of a suite with authentication on gets a small rate limit; an anonymous
//! flood of its public `/metrics`, and a user's flood of its directory, then leave an agent's
//! calls, and an anonymous caller at another address, answered.

use mesh_auth::Role;
use reqwest::{Method, StatusCode};

use crate::secured::{Mesh, token};

/// The registry's limit in these tests: small enough that a flood empties a bucket at once.
const RATE_LIMIT_PER_S: u32 = 2;
const RATE_LIMIT_BURST: u32 = 20;
/// Requests a flood sends at most; far more than the burst.
const FLOOD_REQUESTS_MAX: u32 = 500;

/// A client whose connections leave from `address` (any of 127.0.0.0/8 is this machine).
fn client_from(address: &str) -> reqwest::Client {
    reqwest::Client::builder().local_address(address.parse::<std::net::IpAddr>().unwrap()).build().unwrap()
}

/// The suite with authentication on and the registry's small rate limit.
async fn limited_mesh() -> (Mesh, tempfile::TempDir) {
    Mesh::start_with(|config| {
        config.registry.rate_limit_per_s = RATE_LIMIT_PER_S;
        config.registry.rate_limit_burst = RATE_LIMIT_BURST;
    })
    .await
}

/// Sends `request` until it is answered `429`, failing past [`FLOOD_REQUESTS_MAX`] requests.
async fn flood_until_limited(request: impl Fn() -> reqwest::RequestBuilder) {
    for _ in 0..FLOOD_REQUESTS_MAX {
        if request().send().await.unwrap().status() == StatusCode::TOO_MANY_REQUESTS {
            return;
        }
    }
    panic!("{FLOOD_REQUESTS_MAX} requests were never rate limited");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_anonymous_flood_empties_only_its_own_addresss_bucket() {
    let (mesh, _data) = limited_mesh().await;
    let metrics = mesh.registry("/metrics");
    let flooder = client_from("127.0.0.1");
    flood_until_limited(|| flooder.get(&metrics)).await;

    // An agent acting as itself, with no tenant, as the suite's agents call the registry.
    let agent = token("search", "", &[Role::Agent]);
    let answer = flooder.get(mesh.registry("/agents")).bearer_auth(&agent).send().await.unwrap();
    assert_eq!(answer.status(), StatusCode::OK, "an agent's call waits behind anonymous traffic");
    // Another anonymous caller, at another address.
    let answer = client_from("127.0.0.2").get(&metrics).send().await.unwrap();
    assert_eq!(answer.status(), StatusCode::OK, "every anonymous caller shares one bucket");
    let answer = flooder.get(&metrics).send().await.unwrap();
    assert_eq!(answer.status(), StatusCode::TOO_MANY_REQUESTS, "the flooder itself stays limited");
    let body: serde_json::Value = answer.json().await.unwrap();
    assert_eq!(body["error_code"], "RATE_LIMITED", "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_users_flood_of_its_tenant_never_throttles_the_agents_acting_for_that_tenant() {
    let (mesh, _data) = limited_mesh().await;
    let agents = mesh.registry("/agents");
    flood_until_limited(|| mesh.http.request(Method::GET, &agents).bearer_auth(&mesh.alice)).await;

    let agent = token("orchestrator", "", &[Role::Agent]);
    let answer = mesh.http.get(&agents).bearer_auth(&agent).header("x-mesh-tenant", "acme").send().await.unwrap();
    assert_eq!(answer.status(), StatusCode::OK, "an agent acting for acme waits behind acme's user");
    let answer = mesh.http.get(&agents).bearer_auth(&mesh.alice).send().await.unwrap();
    assert_eq!(answer.status(), StatusCode::TOO_MANY_REQUESTS, "the user itself stays limited");
}
