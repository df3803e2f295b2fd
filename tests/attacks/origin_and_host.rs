//! Issue #34, finding 7: cross-site WebSocket hijacking. Attacked: the UI agent's `/ws` opened
//! by a web page of another site, which a browser lets any page do (sending the page's `Origin`)
//! and which would read the answers. What must hold: an upgrade whose `Origin` is not an allowed
//! origin is refused (403 with the JSON body) before anything is opened; the UI agent's own origin
//! (under any loopback name), the suite's dashboard (the registry's origin) and clients that send
//! no `Origin` (`a2a-mesh chat`, any non-browser client) are let in.

use mesh_auth::Role;
use reqwest::StatusCode;

use crate::secured::{Mesh, token};
use crate::ui_websocket::{AGENT, Ui, handshake, refusal};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_upgrades_from_pages_of_other_origins_are_refused() {
    let ui = Ui::start(&[]).await;
    let alice = token("alice", "acme", &[Role::User]);
    let url = ui.socket_url(&format!("agent={AGENT}"));
    let port = ui.url.rsplit(':').next().unwrap().to_owned();
    for origin in [
        "http://evil.example".to_owned(),
        "null".to_owned(),
        format!("http://127.0.0.1.evil.example:{port}"),
        format!("https://127.0.0.1:{port}"),
        "http://127.0.0.1:1".to_owned(),
    ] {
        let (status, body) = refusal(&url, &alice, &[("origin", &origin)]).await;
        assert_eq!(
            (status, body["error_code"].as_str()),
            (StatusCode::FORBIDDEN, Some("ORIGIN_NOT_ALLOWED")),
            "{origin}: {body}"
        );
    }
    ui.wait_for_counts(0, 0).await;

    for origin in
        [format!("http://127.0.0.1:{port}"), format!("http://localhost:{port}"), format!("http://[::1]:{port}")]
    {
        let opened = handshake(&url, &alice, &[("origin", &origin)]).await;
        assert!(opened.is_ok(), "{origin}: {:?}", opened.err());
    }
    assert!(handshake(&url, &alice, &[]).await.is_ok(), "a client sending no Origin (not a browser)");
    ui.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_suite_lets_in_the_cli_and_its_dashboard_and_refuses_other_pages() {
    let (mesh, _data) = Mesh::start().await;
    let url = format!("{}/ws?agent=orchestrator", mesh.suite.urls.ui_agent.replacen("http://", "ws://", 1));
    let dashboard = mesh.suite.urls.registry.clone();
    let opened = handshake(&url, &mesh.alice, &[("origin", &dashboard)]).await;
    assert!(opened.is_ok(), "the registry's dashboard ({dashboard}): {:?}", opened.err());
    drop(opened);
    assert!(handshake(&url, &mesh.alice, &[]).await.is_ok(), "`a2a-mesh chat` sends no Origin");
    let (status, body) = refusal(&url, &mesh.alice, &[("origin", "http://evil.example")]).await;
    assert_eq!((status, body["error_code"].as_str()), (StatusCode::FORBIDDEN, Some("ORIGIN_NOT_ALLOWED")), "{body}");
    mesh.suite.stop().await.unwrap();
}
