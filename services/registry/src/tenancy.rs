//! Whose link messages and events a caller reads, and in whose name and tenant it writes them
//! (issue #34): link history and the events of link messages and calls belong to the tenant of
//! the call that produced them.
//!
//! A user reads only its own tenant's. Admins, and agents whose credential names no tenant (the
//! mesh's own agents, which act for every tenant by carrying each user's tenant on), read every
//! tenant's, or one they name. An agent whose credential names a tenant acts for that tenant only.
//! The same rule decides which tenant a recorded message or call report may carry: a caller writes
//! only into a tenant it could read.

use mesh_auth::{Caller, Role};
use mesh_protocol::call::validate_tenant_id;

use crate::error::RegistryError;

/// The tenants whose link messages and events a caller reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TenantView {
    /// Every tenant's.
    All,
    /// One tenant's (`""`: the default tenant).
    Only(String),
}

impl TenantView {
    /// What `caller` reads when it asks for `requested` (`None`: all it may read). Naming a
    /// tenant the caller does not act for is refused, as is a malformed tenant id.
    pub fn of(caller: &Caller, requested: Option<&str>) -> Result<Self, RegistryError> {
        let requested = requested.filter(|t| !t.is_empty());
        if let Some(tenant) = requested {
            validate_tenant_id(tenant).map_err(RegistryError::InvalidTenant)?;
        }
        let named = || requested.map_or(Self::All, |t| Self::Only(t.to_owned()));
        match caller {
            Caller::Open => Ok(named()),
            Caller::Anonymous => Err(RegistryError::TenantForbidden(requested.unwrap_or_default().to_owned())),
            Caller::Authenticated(p) if p.has(Role::Admin) || (p.has(Role::Agent) && p.tenant.is_empty()) => {
                Ok(named())
            }
            Caller::Authenticated(p) => match requested {
                Some(other) if other != p.tenant => Err(RegistryError::TenantForbidden(other.to_owned())),
                _ => Ok(Self::Only(p.tenant.clone())),
            },
        }
    }

    /// The one tenant a write by `caller` naming `named` goes to: the named one when the caller
    /// acts for it, else the caller's own (the default tenant for an open registry).
    pub fn for_write(caller: &Caller, named: Option<&str>) -> Result<String, RegistryError> {
        Ok(match Self::of(caller, named)? {
            Self::Only(tenant) => tenant,
            Self::All => caller.principal().map(|p| p.tenant.clone()).unwrap_or_default(),
        })
    }

    /// The tenant an agent registered by `caller` belongs to: a tenant agent's own; `""` (every
    /// tenant's) for an admin, a tenant-less agent, or an open registry.
    pub fn registering(caller: &Caller) -> String {
        match caller {
            Caller::Authenticated(p) if !p.has(Role::Admin) => p.tenant.clone(),
            _ => String::new(),
        }
    }

    /// Whether a reader with this view sees `tenant`'s messages and events.
    pub fn sees(&self, tenant: &str) -> bool {
        match self {
            Self::All => true,
            Self::Only(own) => own == tenant,
        }
    }

    /// The one tenant this view is narrowed to, if it is.
    pub fn only(&self) -> Option<&str> {
        match self {
            Self::All => None,
            Self::Only(tenant) => Some(tenant),
        }
    }
}

/// Refuses an agent that records a message or reports a call in another agent's name. Admins
/// (who administer the graph) and an open registry (which trusts every caller) name anyone.
pub fn check_sender(caller: &Caller, claimed: &str) -> Result<(), RegistryError> {
    match caller {
        Caller::Authenticated(p) if !p.has(Role::Admin) && p.subject != claimed => Err(RegistryError::SenderForbidden(
            format!("{:?} records messages and reports calls only as itself, not as {claimed:?}", p.subject),
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use mesh_auth::Principal;

    use super::*;

    fn caller(subject: &str, tenant: &str, roles: &[Role]) -> Caller {
        Caller::Authenticated(Principal { subject: subject.into(), tenant: tenant.into(), roles: roles.to_vec() })
    }

    fn only(tenant: &str) -> TenantView {
        TenantView::Only(tenant.into())
    }

    #[test]
    fn a_user_reads_and_writes_its_own_tenant_only() {
        let alice = caller("alice", "acme", &[Role::User]);
        assert_eq!(TenantView::of(&alice, None).unwrap(), only("acme"));
        assert_eq!(TenantView::of(&alice, Some("acme")).unwrap(), only("acme"));
        assert!(
            matches!(TenantView::of(&alice, Some("globex")), Err(RegistryError::TenantForbidden(t)) if t == "globex")
        );
        assert_eq!(TenantView::for_write(&alice, None).unwrap(), "acme");
        let default_user = caller("dan", "", &[Role::User]);
        assert_eq!(TenantView::of(&default_user, None).unwrap(), only(""), "the default tenant is a tenant too");
    }

    #[test]
    fn admins_and_agents_of_no_tenant_read_all_or_narrow_and_bound_agents_keep_to_theirs() {
        for reader in [caller("ops", "", &[Role::Admin]), caller("search", "", &[Role::Agent]), Caller::Open] {
            assert_eq!(TenantView::of(&reader, None).unwrap(), TenantView::All, "{reader:?}");
            assert_eq!(TenantView::of(&reader, Some("globex")).unwrap(), only("globex"), "{reader:?}");
            assert_eq!(TenantView::for_write(&reader, Some("acme")).unwrap(), "acme");
            assert_eq!(TenantView::for_write(&reader, None).unwrap(), "");
        }
        let bound = caller("search", "acme", &[Role::Agent]);
        assert_eq!(TenantView::of(&bound, None).unwrap(), only("acme"));
        assert!(matches!(TenantView::for_write(&bound, Some("globex")), Err(RegistryError::TenantForbidden(_))));
        assert!(matches!(TenantView::of(&Caller::Anonymous, None), Err(RegistryError::TenantForbidden(_))));
        assert!(matches!(TenantView::of(&Caller::Open, Some("no spaces")), Err(RegistryError::InvalidTenant(_))));
        assert!(TenantView::All.sees("acme") && only("acme").sees("acme") && !only("acme").sees(""));
        assert_eq!((TenantView::All.only(), only("acme").only()), (None, Some("acme")));
    }

    #[test]
    fn an_agent_writes_only_in_its_own_name() {
        assert!(check_sender(&caller("search", "", &[Role::Agent]), "search").is_ok());
        let forged = check_sender(&caller("search", "", &[Role::Agent]), "orchestrator");
        assert!(matches!(forged, Err(RegistryError::SenderForbidden(m)) if m.contains("orchestrator")));
        assert!(check_sender(&caller("ops", "", &[Role::Admin]), "orchestrator").is_ok());
        assert!(check_sender(&Caller::Open, "orchestrator").is_ok());
    }
}
