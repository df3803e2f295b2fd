use std::num::{NonZeroU32, NonZeroUsize};
use std::sync::Arc;

use mesh_docmem::Docmem;
use serde::Deserialize;

use crate::{BusError, ConversationBus, KAFKA_TOPIC_PARTITIONS_DEFAULT, KafkaBus, LogBus};

/// The database of docmem and the embedded log when none is configured.
pub const BUS_DATABASE_URL_DEFAULT: &str = "sqlite://data/bus.db";
/// Conversations an agent keeps cached.
pub const CACHE_CONVERSATIONS_MAX_DEFAULT: usize = 10_000;
/// The instance id of an agent's topic and id when none is configured: `{agent-type}-1`.
pub const INSTANCE_ID_DEFAULT: &str = "1";

/// Where conversations live. In every agent's configuration as its `bus` section (e.g.
/// `MESH_ORCHESTRATOR_BUS__KAFKA_BROKERS`), and for the whole suite as `MESH_BUS_*` (e.g.
/// `MESH_BUS_KAFKA_BROKERS=127.0.0.1:9092`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct BusConfig {
    /// Kafka bootstrap servers; the embedded log serves when absent.
    pub kafka_brokers: Option<String>,
    /// Partitions of each topic the agents create on Kafka. The instances of an agent in one
    /// group share its conversations by partition; a conversation stays in one. Every process on
    /// the bus should agree on it: whoever creates a topic first sets its count.
    pub kafka_topic_partitions: u32,
    /// Docmem's database, and the embedded log's: `sqlite://PATH` or `postgres://...`.
    pub database_url: String,
    /// This agent's instance id: its topic and id are `{agent-type}-{instance_id}`.
    pub instance_id: String,
    /// Conversations an agent keeps cached.
    pub cache_conversations_max: usize,
    /// Records the embedded log keeps per topic (older ones are deleted, like Kafka's retention);
    /// all when absent.
    pub log_retention_records: Option<u64>,
}

impl Default for BusConfig {
    fn default() -> Self {
        Self {
            kafka_brokers: None,
            kafka_topic_partitions: KAFKA_TOPIC_PARTITIONS_DEFAULT,
            database_url: BUS_DATABASE_URL_DEFAULT.into(),
            instance_id: INSTANCE_ID_DEFAULT.into(),
            cache_conversations_max: CACHE_CONVERSATIONS_MAX_DEFAULT,
            log_retention_records: None,
        }
    }
}

impl BusConfig {
    pub fn cache_conversations_max(&self) -> Result<NonZeroUsize, BusError> {
        NonZeroUsize::new(self.cache_conversations_max)
            .ok_or_else(|| BusError::Config("cache_conversations_max must be at least 1".into()))
    }

    pub fn kafka_topic_partitions(&self) -> Result<NonZeroU32, BusError> {
        NonZeroU32::new(self.kafka_topic_partitions)
            .ok_or_else(|| BusError::Config("kafka_topic_partitions must be at least 1".into()))
    }
}

/// Opens the configured bus and docmem.
pub async fn open_bus(config: &BusConfig) -> Result<(Arc<dyn ConversationBus>, Docmem), BusError> {
    let docmem = Docmem::open(&config.database_url).await?;
    let bus: Arc<dyn ConversationBus> = match config.kafka_brokers.as_deref().filter(|b| !b.is_empty()) {
        Some(brokers) => Arc::new(KafkaBus::connect(brokers, config.kafka_topic_partitions()?)?),
        None => Arc::new(LogBus::open(&config.database_url, config.log_retention_records).await?),
    };
    Ok((bus, docmem))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_topic_needs_at_least_one_partition() {
        let config = BusConfig { kafka_topic_partitions: 0, ..BusConfig::default() };
        assert!(matches!(config.kafka_topic_partitions(), Err(BusError::Config(_))));
        assert_eq!(BusConfig::default().kafka_topic_partitions().unwrap().get(), KAFKA_TOPIC_PARTITIONS_DEFAULT);
    }
}
