//! The gateway's authorisation rules, written in CEL (the `cel` crate) in a TOML policy file and
//! reloaded on SIGHUP:
//!
//! ```toml
//! default = "allow"            # what a call no rule matches gets: "allow" or "deny"
//!
//! [[rules]]
//! name = "users-do-not-cancel"
//! effect = "deny"              # "allow" or "deny"
//! when = 'method == "CancelTask" && !("admin" in caller.roles)'
//! ```
//!
//! The first rule whose `when` is true decides. Every expression sees `caller` (`subject`,
//! `tenant`, `roles`), `tenant` (the tenant the call acts for), `agent` (the target), `method`
//! (the A2A 1.0 name, e.g. `SendMessage`, whatever the version), `skill` (on `/skills/{skill}/`,
//! else `""`), `binding` (`JSONRPC`, `HTTP+JSON`), `version` (`1.0`, `0.3`) and `chain` (the
//! agents the call came through). An expression that fails or gives no boolean denies the call.
//! A file that does not load keeps the rules in force (at start: the gateway does not start).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arc_swap::ArcSwap;
use cel::{Context, Env, Program, Value};
use serde::Deserialize;

use crate::error::GatewayError;

/// What the rules decide on.
#[derive(Debug, Clone, Default)]
pub struct Subject<'a> {
    pub caller: &'a str,
    pub caller_tenant: &'a str,
    pub roles: Vec<&'a str>,
    pub tenant: &'a str,
    pub agent: &'a str,
    pub method: &'a str,
    pub skill: &'a str,
    pub binding: &'a str,
    pub version: &'a str,
    pub chain: &'a [String],
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Effect {
    Allow,
    Deny,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleFile {
    #[serde(default = "allow")]
    default: Effect,
    #[serde(default)]
    rules: Vec<RuleDef>,
}

fn allow() -> Effect {
    Effect::Allow
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleDef {
    name: String,
    effect: Effect,
    when: String,
}

struct Rule {
    name: String,
    effect: Effect,
    program: Program,
}

/// One loaded set of rules.
pub struct Rules {
    default: Effect,
    rules: Vec<Rule>,
    env: Arc<Env>,
}

impl std::fmt::Debug for Rules {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.rules.iter().map(|r| r.name.as_str()).collect();
        f.debug_struct("Rules").field("default", &self.default).field("rules", &names).finish()
    }
}

impl Rules {
    /// No rules: every call authentication lets in is allowed.
    pub fn allow_all() -> Self {
        Self { default: Effect::Allow, rules: Vec::new(), env: Arc::new(Env::stdlib()) }
    }

    /// The rules of a policy file's text; every expression must compile.
    pub fn parse(text: &str) -> Result<Self, String> {
        let file: RuleFile = toml::from_str(text).map_err(|e| e.to_string())?;
        let env = Arc::new(Env::stdlib());
        let rules = file
            .rules
            .into_iter()
            .map(|rule| {
                let program = env.compile(&rule.when).map_err(|e| format!("rule {:?}: {e}", rule.name))?;
                Ok(Rule { name: rule.name, effect: rule.effect, program })
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(Self { default: file.default, rules, env })
    }

    /// `Ok` when the call may go on, else the name of the rule that denies it.
    pub fn decide(&self, subject: &Subject<'_>) -> Result<(), String> {
        if self.rules.is_empty() {
            return match self.default {
                Effect::Allow => Ok(()),
                Effect::Deny => Err("the default rule".into()),
            };
        }
        let mut context = Context::with_env(self.env.clone());
        let text = |s: &str| Value::String(Arc::new(s.to_owned()));
        let list = |items: Vec<Value>| Value::List(Arc::new(items));
        let mut caller = std::collections::HashMap::new();
        caller.insert("subject".to_owned(), text(subject.caller));
        caller.insert("tenant".to_owned(), text(subject.caller_tenant));
        caller.insert("roles".to_owned(), list(subject.roles.iter().map(|r| text(r)).collect()));
        context.add_variable_from_value("caller", caller);
        for (name, value) in [
            ("tenant", subject.tenant),
            ("agent", subject.agent),
            ("method", subject.method),
            ("skill", subject.skill),
            ("binding", subject.binding),
            ("version", subject.version),
        ] {
            context.add_variable_from_value(name, text(value));
        }
        context.add_variable_from_value("chain", list(subject.chain.iter().map(|a| text(a)).collect()));
        for rule in &self.rules {
            match rule.program.execute(&context) {
                Ok(Value::Bool(true)) => {
                    return match rule.effect {
                        Effect::Allow => Ok(()),
                        Effect::Deny => Err(format!("rule {:?}", rule.name)),
                    };
                }
                Ok(Value::Bool(false)) => {}
                Ok(other) => return Err(format!("rule {:?} gave {other:?}, not a boolean", rule.name)),
                Err(error) => return Err(format!("rule {:?} failed: {error}", rule.name)),
            }
        }
        match self.default {
            Effect::Allow => Ok(()),
            Effect::Deny => Err("the default rule".into()),
        }
    }
}

/// The rules in force, replaced whole when the file is reloaded.
#[derive(Debug)]
pub struct Policy {
    file: Option<PathBuf>,
    rules: ArcSwap<Rules>,
}

impl Policy {
    /// The rules of `file` (none: allow all).
    pub fn load(file: Option<&Path>) -> Result<Self, GatewayError> {
        let rules = match file {
            Some(path) => read(path)?,
            None => Rules::allow_all(),
        };
        Ok(Self { file: file.map(Path::to_owned), rules: ArcSwap::from_pointee(rules) })
    }

    /// Reads the file again; on failure the rules in force stay.
    pub fn reload(&self) -> Result<(), GatewayError> {
        let Some(path) = &self.file else { return Ok(()) };
        self.rules.store(Arc::new(read(path)?));
        Ok(())
    }

    pub fn decide(&self, subject: &Subject<'_>) -> Result<(), GatewayError> {
        self.rules.load().decide(subject).map_err(GatewayError::PolicyDenied)
    }

    /// Reloads the file on every SIGHUP, for as long as the process runs.
    pub async fn reload_on_hangup(self: Arc<Self>) {
        #[cfg(unix)]
        {
            let mut hangups = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
                Ok(signal) => signal,
                Err(error) => {
                    tracing::error!(%error, "cannot listen for SIGHUP: the policy will not be reloaded");
                    return;
                }
            };
            while hangups.recv().await.is_some() {
                match self.reload() {
                    Ok(()) => tracing::info!(rules = ?self.rules.load(), "policy reloaded"),
                    Err(error) => tracing::error!(%error, "policy not reloaded; the rules in force stay"),
                }
            }
        }
    }
}

fn read(path: &Path) -> Result<Rules, GatewayError> {
    let failed = |reason: String| GatewayError::Policy { path: path.display().to_string(), reason };
    let text = std::fs::read_to_string(path).map_err(|e| failed(e.to_string()))?;
    Rules::parse(&text).map_err(failed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subject<'a>(method: &'a str, roles: Vec<&'a str>) -> Subject<'a> {
        Subject {
            caller: "ann",
            tenant: "acme",
            agent: "echo",
            method,
            roles,
            binding: "JSONRPC",
            ..Subject::default()
        }
    }

    #[test]
    fn the_first_matching_rule_decides_and_the_default_covers_the_rest() {
        let rules = Rules::parse(
            r#"
            default = "deny"
            [[rules]]
            name = "admins"
            effect = "allow"
            when = '"admin" in caller.roles'
            [[rules]]
            name = "no-cancel"
            effect = "deny"
            when = 'method == "CancelTask"'
            [[rules]]
            name = "acme-echo"
            effect = "allow"
            when = 'tenant == "acme" && agent == "echo" && size(chain) == 0'
            "#,
        )
        .unwrap();
        assert_eq!(rules.decide(&subject("SendMessage", vec!["user"])), Ok(()));
        assert_eq!(rules.decide(&subject("CancelTask", vec!["user"])), Err("rule \"no-cancel\"".into()));
        assert_eq!(rules.decide(&subject("CancelTask", vec!["admin"])), Ok(()));
        let other = Subject { tenant: "globex", ..subject("SendMessage", vec!["user"]) };
        assert_eq!(rules.decide(&other), Err("the default rule".into()));
    }

    #[test]
    fn a_rule_that_fails_or_is_not_boolean_denies_and_a_bad_file_is_refused() {
        let rules = Rules::parse("[[rules]]\nname = \"odd\"\neffect = \"allow\"\nwhen = 'method + 1'\n").unwrap();
        assert!(rules.decide(&subject("SendMessage", vec![])).is_err());
        assert!(Rules::parse("[[rules]]\nname = \"x\"\neffect = \"allow\"\nwhen = '(('\n").is_err());
        assert!(Rules::parse("default = \"maybe\"").is_err());
    }

    #[test]
    fn a_reload_that_fails_keeps_the_rules_in_force() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("policy.toml");
        std::fs::write(&path, "default = \"deny\"").unwrap();
        let policy = Policy::load(Some(&path)).unwrap();
        assert!(policy.decide(&subject("SendMessage", vec![])).is_err());
        std::fs::write(&path, "default = \"allow\"").unwrap();
        policy.reload().unwrap();
        assert!(policy.decide(&subject("SendMessage", vec![])).is_ok());
        std::fs::write(&path, "default = ").unwrap();
        assert!(policy.reload().is_err());
        assert!(policy.decide(&subject("SendMessage", vec![])).is_ok(), "the last good rules stay");
    }
}
