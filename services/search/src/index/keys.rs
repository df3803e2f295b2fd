//! Whose a document is. Beside the shared corpus, each tenant may hold documents of its own; a
//! tenant's searches see the shared corpus and its own documents, never another tenant's.
//!
//! Inside the index a document is known by its key, `{tenant}/{id}`, the tenant being empty for
//! the shared corpus. Tenant ids are never empty and never hold a `/`
//! ([`mesh_protocol::call::validate_tenant_id`]), so the first `/` splits any key back into its
//! tenant and id, whatever the id holds, and two owners' documents of one id never collide.

/// The tenant field's term for documents of the shared corpus: not a valid tenant id, so no
/// tenant can name it.
pub(super) const SHARED_TENANT_TERM: &str = "/";

/// The key of document `id` of `tenant` (`None`: the shared corpus).
pub fn document_key(tenant: Option<&str>, id: &str) -> String {
    format!("{}/{id}", tenant.unwrap_or_default())
}

/// The tenant (`None`: the shared corpus) and id of a document key.
pub fn split_key(key: &str) -> (Option<&str>, &str) {
    match key.split_once('/') {
        Some(("", id)) => (None, id),
        Some((tenant, id)) => (Some(tenant), id),
        // Every key holds a `/`; a bare id can only mean the shared corpus.
        None => (None, key),
    }
}

/// The term the tenant field holds for documents of `tenant`.
pub(super) fn tenant_term(tenant: Option<&str>) -> &str {
    tenant.unwrap_or(SHARED_TENANT_TERM)
}

/// Whether a search for `tenant` (`None`: only the shared corpus) may see the document of `key`.
pub(super) fn visible_to(tenant: Option<&str>, key: &str) -> bool {
    match split_key(key).0 {
        None => true,
        owner => owner == tenant,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_split_back_whatever_the_id_holds() {
        for (tenant, id) in [(None, "a"), (Some("acme"), "a"), (None, "x/y"), (Some("acme"), "/lead/"), (None, "")] {
            assert_eq!(split_key(&document_key(tenant, id)), (tenant, id));
        }
        assert_ne!(document_key(None, "acme/a"), document_key(Some("acme"), "a"), "no collision across owners");
    }

    #[test]
    fn a_tenant_sees_the_shared_corpus_and_its_own_documents_only() {
        assert!(visible_to(Some("acme"), &document_key(None, "d")));
        assert!(visible_to(Some("acme"), &document_key(Some("acme"), "d")));
        assert!(!visible_to(Some("acme"), &document_key(Some("globex"), "d")));
        assert!(!visible_to(Some("acme"), &document_key(Some("acme-2"), "d")), "a tenant is not a prefix");
        assert!(visible_to(None, &document_key(None, "d")));
        assert!(!visible_to(None, &document_key(Some("acme"), "d")), "no tenant sees only the shared corpus");
    }
}
