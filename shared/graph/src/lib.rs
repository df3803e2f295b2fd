//! The communication graph as agents enforce it (seed 004, issue #14): the direction policy
//! every agent checks its calls against, compiled from the registry's policy feed into a cache
//! read lock-free on every call, the record of one-way conversations, and the link context of
//! agent messages. The wire types (links, the policy document) are `mesh_protocol::graph`'s,
//! shared with the registry. No I/O: the check runs in well under a microsecond.

mod cache;
mod conversations;
mod link;
mod policy;

pub use cache::{CacheReport, FeedState, LinkCache};
pub use conversations::{CONVERSATIONS_MAX_DEFAULT, Conversations};
pub use link::{FROM_AGENT_METADATA_KEY, LINK_ID_METADATA_KEY, LinkContext, LinkReceipt, RELATIONSHIP_METADATA_KEY};
pub use policy::{Allowance, Decision, Denial, DenialReason, GRAPH_LINKS_MAX, Policy, PolicyError};
