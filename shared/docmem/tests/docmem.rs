//! Docmem on SQLite (always) and PostgreSQL (when `MESH_TEST_POSTGRES_URL` is set; under CI its
//! absence fails).

use mesh_docmem::{Context, Docmem, DocmemError, NewChild};

async fn stores() -> Vec<(String, Docmem, Option<tempfile::TempDir>)> {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("docmem.db").display());
    let mut stores = vec![("sqlite".to_owned(), Docmem::open(&url).await.unwrap(), Some(dir))];
    if let Some(url) = mesh_test_support::postgres_url() {
        stores.push(("postgres".to_owned(), Docmem::open(&url).await.unwrap(), None));
    }
    stores
}

#[tokio::test]
async fn a_conversation_reads_back_in_order_with_its_contexts() {
    for (backend, docmem, _dir) in stores().await {
        let root = docmem.create_root("", &Context::default(), "").await.unwrap();
        assert_eq!(root.root_id, root.id);
        let texts = [("ui-123", "Hello, how are you?"), ("conv-456", "Fine, thanks."), ("tool", "total 48\n")];
        for (agent, text) in texts {
            docmem.append_child(&root.id, &Context::agent_text(agent), text).await.unwrap();
        }
        let messages = docmem.read_conversation(&root.id).await.unwrap();
        let read: Vec<(&str, &str)> =
            messages.iter().map(|n| (n.context.agent_id().unwrap(), n.content.as_str())).collect();
        assert_eq!(read, texts, "{backend}");
        assert_eq!(messages.iter().map(|n| n.position).collect::<Vec<_>>(), [0, 1, 2], "{backend}");
        assert_eq!(messages[0].context.to_string(), "text:agent:ui-123");
        let got = docmem.get(&messages[1].id).await.unwrap();
        assert_eq!(got, messages[1], "{backend}");
        assert_eq!(docmem.read_tree(&root.id).await.unwrap()[0].id, root.id);
    }
}

#[tokio::test]
async fn a_document_named_before_it_is_written_gets_that_id_once() {
    for (backend, docmem, _dir) in stores().await {
        let id = uuid::Uuid::new_v4().to_string();
        assert!(matches!(docmem.get(&id).await, Err(DocmemError::NotFound(_))), "{backend}");
        let root = docmem.create_root_with_id(&id, "acme", &Context::default(), "").await.unwrap();
        assert_eq!((root.id.as_str(), root.root_id.as_str(), root.tenant.as_str()), (id.as_str(), id.as_str(), "acme"));
        assert_eq!(docmem.get(&id).await.unwrap(), root, "{backend}");
        // The id is taken: a second document under it is refused, and the first stays as it was.
        assert!(docmem.create_root_with_id(&id, "globex", &Context::default(), "").await.is_err(), "{backend}");
        assert_eq!(docmem.get(&id).await.unwrap().tenant, "acme", "{backend}");
    }
}

#[tokio::test]
async fn a_stale_edit_is_refused_with_a_conflict() {
    for (backend, docmem, _dir) in stores().await {
        let root = docmem.create_root("", &Context::default(), "").await.unwrap();
        let node = docmem.append_child(&root.id, &Context::agent_text("ui-1"), "draft").await.unwrap();
        let edited = docmem.edit(&node.id, node.version, &node.context, "final").await.unwrap();
        assert_eq!((edited.version, edited.content.as_str()), (2, "final"), "{backend}");
        let stale = docmem.edit(&node.id, node.version, &node.context, "late").await.unwrap_err();
        assert_eq!(stale, DocmemError::Conflict { id: node.id.clone(), expected: 1, actual: 2 }, "{backend}");
        assert!(stale.to_string().contains("read it again"), "{stale}");
        assert_eq!(docmem.get(&node.id).await.unwrap().content, "final", "{backend}");
    }
}

#[tokio::test]
async fn of_two_concurrent_edits_of_one_version_exactly_one_wins() {
    for (backend, docmem, _dir) in stores().await {
        let root = docmem.create_root("", &Context::default(), "").await.unwrap();
        let node = docmem.append_child(&root.id, &Context::agent_text("ui-1"), "v1").await.unwrap();
        let edits = (0..8).map(|i| {
            let (docmem, node) = (docmem.clone(), node.clone());
            tokio::spawn(async move { docmem.edit(&node.id, 1, &node.context, &format!("edit {i}")).await })
        });
        let mut won = Vec::new();
        let mut conflicts = 0;
        for edit in edits {
            match edit.await.unwrap() {
                Ok(node) => won.push(node),
                Err(DocmemError::Conflict { expected: 1, actual: 2, .. }) => conflicts += 1,
                Err(other) => panic!("{backend}: unexpected {other}"),
            }
        }
        assert_eq!((won.len(), conflicts), (1, 7), "{backend}");
        assert_eq!(docmem.get(&node.id).await.unwrap().content, won[0].content, "{backend}");
    }
}

/// A retried append (its id taken already) rolls its transaction back before the next writer's
/// turn: merely dropped, it held SQLite's write lock until its connection reached the pool again,
/// and the next write failed with "database is locked" (CI saw it once in the test below; this
/// one failed in 98 of 100 runs of this file's tests before the fix, none of 100 after).
#[tokio::test]
async fn a_retried_append_leaves_the_database_writable_at_once() {
    for (backend, docmem, _dir) in stores().await {
        let root = docmem.create_root("", &Context::default(), "").await.unwrap();
        let id = uuid::Uuid::new_v4().to_string();
        docmem.append_child_with_id(&id, &root.id, &Context::agent_text("a"), "once").await.unwrap();
        for round in 0..200 {
            let again = docmem.append_child_with_id(&id, &root.id, &Context::agent_text("a"), "again").await;
            assert_eq!(again.unwrap().content, "once", "{backend}, round {round}");
            let batch = [(Context::agent_text("b"), round.to_string())];
            let appended = docmem.append_children(&root.id, &batch).await;
            assert_eq!(appended.unwrap()[0].position, round + 1, "{backend}, round {round}");
        }
    }
}

#[tokio::test]
async fn concurrent_appends_get_distinct_places_and_ids_are_idempotent() {
    for (backend, docmem, _dir) in stores().await {
        let root = docmem.create_root("", &Context::default(), "").await.unwrap();
        let appends = (0..16).map(|i| {
            let (docmem, root) = (docmem.clone(), root.id.clone());
            tokio::spawn(async move { docmem.append_child(&root, &Context::agent_text("a"), &i.to_string()).await })
        });
        for append in appends {
            append.await.unwrap().unwrap();
        }
        let positions: Vec<i64> =
            docmem.read_conversation(&root.id).await.unwrap().iter().map(|n| n.position).collect();
        assert_eq!(positions, (0..16).collect::<Vec<_>>(), "{backend}");
        let id = uuid::Uuid::new_v4().to_string();
        let first = docmem.append_child_with_id(&id, &root.id, &Context::agent_text("b"), "once").await.unwrap();
        let again = docmem.append_child_with_id(&id, &root.id, &Context::agent_text("b"), "twice").await.unwrap();
        assert_eq!(first, again, "{backend}");
        assert_eq!(docmem.read_conversation(&root.id).await.unwrap().len(), 17, "{backend}");
        let batch = [(Context::agent_text("c"), "x".to_owned()), (Context::agent_text("d"), "y".to_owned())];
        let appended = docmem.append_children(&root.id, &batch).await.unwrap();
        assert_eq!(appended.iter().map(|n| n.position).collect::<Vec<_>>(), [17, 18], "{backend}");
        let last = docmem.read_conversation(&root.id).await.unwrap().pop().unwrap();
        assert_eq!((last.content.as_str(), last.context.value.as_str()), ("y", "d"), "{backend}");
        let child = |id: &str| NewChild {
            id: id.into(),
            parent_id: root.id.clone(),
            context: Context::agent_text("e"),
            content: id.into(),
        };
        let (a, b) = (uuid::Uuid::new_v4().to_string(), uuid::Uuid::new_v4().to_string());
        let many = docmem.append_many(&[child(&a), child(&b)]).await.unwrap();
        assert_eq!(many.iter().map(|n| n.position).collect::<Vec<_>>(), [19, 20], "{backend}");
        // Appending them again (a retried batch) returns them unchanged, and adds nothing.
        assert_eq!(docmem.append_many(&[child(&a), child(&b)]).await.unwrap(), many, "{backend}");
        assert_eq!(docmem.read_conversation(&root.id).await.unwrap().len(), 21, "{backend}");
    }
}

#[tokio::test]
async fn deletes_remove_subtrees_and_lists_page_and_filter() {
    for (backend, docmem, _dir) in stores().await {
        let agent = format!("agent-{}", uuid::Uuid::new_v4());
        let mut roots = Vec::new();
        for _ in 0..5 {
            let root = docmem.create_root("", &Context::default(), "").await.unwrap();
            docmem.append_child(&root.id, &Context::agent_text(&agent), "hi").await.unwrap();
            roots.push(root.id);
        }
        let first = docmem.list_roots(None, Some(&agent), None, 2).await.unwrap();
        assert_eq!(first.roots.len(), 2, "{backend}");
        let mut seen: Vec<String> = first.roots.iter().map(|r| r.id.clone()).collect();
        let mut before = first.next_before;
        while let Some(cursor) = before {
            let page = docmem.list_roots(None, Some(&agent), Some(&cursor), 2).await.unwrap();
            seen.extend(page.roots.iter().map(|r| r.id.clone()));
            before = page.next_before;
        }
        seen.sort();
        let mut expected = roots.clone();
        expected.sort();
        assert_eq!(seen, expected, "{backend}: every root once, newest first by pages");
        assert!(matches!(docmem.list_roots(None, None, None, 0).await, Err(DocmemError::Invalid(_))));

        let message = docmem.read_conversation(&roots[0]).await.unwrap().remove(0);
        let reply = docmem.append_child(&message.id, &Context::agent_text("x"), "nested").await.unwrap();
        docmem.delete(&message.id).await.unwrap();
        assert_eq!(docmem.get(&reply.id).await.unwrap_err(), DocmemError::NotFound(reply.id.clone()));
        docmem.delete(&roots[1]).await.unwrap();
        assert!(matches!(docmem.read_tree(&roots[1]).await, Err(DocmemError::NotFound(_))), "{backend}");
        assert!(docmem.prune_roots_older_than("0000").await.unwrap() == 0, "{backend}: nothing that old");
    }
}

#[tokio::test]
async fn every_node_carries_its_documents_tenant_and_lists_filter_by_tenant() {
    for (backend, docmem, _dir) in stores().await {
        // Tenants of their own, so rows other tests (or runs) left in a shared PostgreSQL do not count.
        let (acme, globex) = (format!("acme-{}", uuid::Uuid::new_v4()), format!("globex-{}", uuid::Uuid::new_v4()));
        let root = docmem.create_root(&acme, &Context::default(), "").await.unwrap();
        assert_eq!(root.tenant, acme, "{backend}");
        let one = docmem.append_child(&root.id, &Context::agent_text("ui-1"), "hi").await.unwrap();
        let nested = docmem.append_children(&one.id, &[(Context::agent_text("x"), "n".into())]).await.unwrap();
        let child = NewChild {
            id: uuid::Uuid::new_v4().to_string(),
            parent_id: root.id.clone(),
            context: Context::agent_text("y"),
            content: "m".into(),
        };
        let many = docmem.append_many(&[child]).await.unwrap();
        for node in [&one, &nested[0], &many[0]] {
            assert_eq!(node.tenant, acme, "{backend}: appended nodes take the root's tenant");
            assert_eq!(docmem.get(&node.id).await.unwrap().tenant, acme, "{backend}: and keep it when read back");
        }
        let other = docmem.create_root(&globex, &Context::default(), "").await.unwrap();
        let listed = |page: mesh_docmem::RootPage| page.roots.into_iter().map(|r| r.id).collect::<Vec<_>>();
        assert_eq!(
            listed(docmem.list_roots(Some(&acme), None, None, 10).await.unwrap()),
            std::slice::from_ref(&root.id),
            "{backend}"
        );
        assert_eq!(
            listed(docmem.list_roots(Some(&globex), None, None, 10).await.unwrap()),
            std::slice::from_ref(&other.id),
            "{backend}"
        );
        let everyone = listed(docmem.list_roots(None, None, None, 100).await.unwrap());
        assert!(everyone.contains(&root.id) && everyone.contains(&other.id), "{backend}: no tenant lists all");
        let by_agent = listed(docmem.list_roots(Some(&globex), Some("ui-1"), None, 10).await.unwrap());
        assert!(by_agent.is_empty(), "{backend}: both filters apply");
    }
}
