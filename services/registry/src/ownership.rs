//! Who may hold a name in the directory (issue #12). With authentication on, the first identity
//! to register a name owns it: an agent registers only under its own subject's name, anyone else
//! is refused `409 NAME_TAKEN`, and only the owner or an admin removes it. With authentication
//! off (a registry on loopback) there are no owners, as before.

use mesh_auth::{Caller, Role};

use crate::error::RegistryError;

/// The owner to record when `caller` registers `name`, whose current owner is `current`
/// (`None`: no owner yet, or not registered); refused when the caller may not hold the name.
pub fn claim(caller: &Caller, name: &str, current: Option<&str>) -> Result<Option<String>, RegistryError> {
    let principal = match caller {
        Caller::Open => return Ok(None),
        Caller::Anonymous => {
            return Err(RegistryError::NameForbidden { subject: String::new(), name: name.to_owned() });
        }
        Caller::Authenticated(principal) => principal,
    };
    let admin = principal.has(Role::Admin);
    if !admin && principal.subject != name {
        return Err(RegistryError::NameForbidden { subject: principal.subject.clone(), name: name.to_owned() });
    }
    match current {
        Some(owner) if owner != principal.subject && !admin => Err(RegistryError::NameTaken(name.to_owned())),
        Some(owner) => Ok(Some(owner.to_owned())),
        None => Ok(Some(principal.subject.clone())),
    }
}

/// Whether `caller` may remove `name`, owned by `owner`.
pub fn may_remove(caller: &Caller, name: &str, owner: Option<&str>) -> Result<(), RegistryError> {
    let allowed = match caller {
        Caller::Open => true,
        Caller::Anonymous => false,
        Caller::Authenticated(principal) => {
            principal.has(Role::Admin) || owner.map_or(principal.subject == name, |owner| owner == principal.subject)
        }
    };
    match (allowed, caller.principal()) {
        (true, _) => Ok(()),
        (false, principal) => Err(RegistryError::NameForbidden {
            subject: principal.map(|p| p.subject.clone()).unwrap_or_default(),
            name: name.to_owned(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use mesh_auth::Principal;

    use super::*;

    fn caller(subject: &str, roles: &[Role]) -> Caller {
        Caller::Authenticated(Principal { subject: subject.into(), tenant: String::new(), roles: roles.to_vec() })
    }

    #[test]
    fn the_first_identity_owns_a_name() {
        let search = caller("search", &[Role::Agent]);
        assert_eq!(claim(&search, "search", None).unwrap(), Some("search".into()));
        assert_eq!(claim(&search, "search", Some("search")).unwrap(), Some("search".into()));
        assert!(matches!(claim(&search, "orchestrator", None), Err(RegistryError::NameForbidden { .. })));
        assert!(matches!(claim(&search, "search", Some("impostor")), Err(RegistryError::NameTaken(_))));
        let admin = caller("ops", &[Role::Admin]);
        assert_eq!(claim(&admin, "search", Some("search")).unwrap(), Some("search".into()), "an admin keeps the owner");
        assert_eq!(claim(&admin, "new", None).unwrap(), Some("ops".into()));
        assert_eq!(claim(&Caller::Open, "anything", Some("x")).unwrap(), None);
        assert!(claim(&caller("u", &[Role::User]), "u", None).is_ok(), "the route, not this check, refuses users");
    }

    #[test]
    fn only_the_owner_or_an_admin_removes_a_name() {
        assert!(may_remove(&caller("search", &[Role::Agent]), "search", Some("search")).is_ok());
        assert!(may_remove(&caller("search", &[Role::Agent]), "search", None).is_ok());
        assert!(may_remove(&caller("other", &[Role::Agent]), "search", Some("search")).is_err());
        assert!(may_remove(&caller("ops", &[Role::Admin]), "search", Some("search")).is_ok());
        assert!(may_remove(&Caller::Open, "search", Some("search")).is_ok());
        assert!(may_remove(&Caller::Anonymous, "search", None).is_err());
    }
}
