//! The `registry` binary reloads its graph configuration on SIGHUP: links added to the file
//! appear, links removed from it go, and the graph mode follows the file.

use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mesh_protocol::graph::{GraphMode, GraphPolicy};

use crate::common::eventually;

struct Registry {
    child: Child,
    url: String,
    /// The lines the registry logged so far (also passed on to the test's stderr).
    log: Arc<Mutex<Vec<String>>>,
}

impl Registry {
    fn logged(&self, text: &str) -> bool {
        self.log.lock().unwrap().iter().any(|line| line.contains(text))
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn policy(http: &reqwest::Client, url: &str) -> Option<GraphPolicy> {
    http.get(format!("{url}/api/policy")).send().await.ok()?.json().await.ok()
}

fn pairs(policy: &GraphPolicy) -> Vec<(String, String)> {
    let mut pairs: Vec<_> = policy.links.iter().map(|l| (l.from_agent_id.clone(), l.to_agent_id.clone())).collect();
    pairs.sort();
    pairs
}

#[tokio::test]
async fn sighup_reloads_links_and_mode_from_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("registry.toml");
    let database_url = format!("sqlite://{}", dir.path().join("registry.db").display());
    std::fs::write(&file, "graph_mode = \"enforced\"\n[[links]]\nfrom = \"a\"\nto = \"b\"\n").unwrap();
    let port = mesh_test_support::free_port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_registry"))
        .args(["--port", &port.to_string(), "--database-url", &database_url, "--config", file.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the registry binary starts");
    let log = Arc::new(Mutex::new(Vec::new()));
    let (stderr, lines) = (child.stderr.take().unwrap(), log.clone());
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
            eprintln!("{line}");
            lines.lock().unwrap().push(line);
        }
    });
    let registry = Registry { child, url: format!("http://127.0.0.1:{port}"), log };
    let http = reqwest::Client::builder().timeout(Duration::from_secs(5)).build().unwrap();
    eventually("the registry serves its policy", || async { policy(&http, &registry.url).await.is_some() }).await;
    let first = policy(&http, &registry.url).await.unwrap();
    assert_eq!((first.mode, pairs(&first)), (GraphMode::Enforced, vec![("a".to_owned(), "b".to_owned())]));

    std::fs::write(
        &file,
        "graph_mode = \"open\"\n[[links]]\nfrom = \"b\"\nto = \"c\"\ndirection = \"one_way\"\nrelationship = \"subordinate\"\n",
    )
    .unwrap();
    let hup = Command::new("kill").args(["-HUP", &registry.child.id().to_string()]).status().unwrap();
    assert!(hup.success());
    eventually("the reloaded links are served", || async {
        policy(&http, &registry.url).await.is_some_and(|p| pairs(&p) == [("b".to_owned(), "c".to_owned())])
    })
    .await;
    let reloaded = policy(&http, &registry.url).await.unwrap();
    assert_eq!(reloaded.mode, GraphMode::Open);

    // A file that no longer parses changes nothing, and the registry keeps serving.
    std::fs::write(&file, "graph_mode = \"sideways\"\n").unwrap();
    Command::new("kill").args(["-HUP", &registry.child.id().to_string()]).status().unwrap();
    // The reload was attempted and refused (its error logged) before the check that nothing changed.
    eventually("the refused reload is logged", || async { registry.logged("cannot reload the configuration") }).await;
    assert_eq!(policy(&http, &registry.url).await.unwrap(), reloaded);
}
