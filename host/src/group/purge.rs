//! Deleting from a repartition topic what its stage will never read again (DESIGN.md §12.1),
//! as Kafka Streams purges its repartition topics: once every checkpoint still retained of a
//! partition's pipeline resumes after an offset (`Source::input_released`), the records
//! before it go, by Kafka's DeleteRecords. Brokers that refuse it (an old version, a
//! client without the right to delete, the test broker) leave the topic to its retention,
//! which a warning says once.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use rdkafka::admin::{AdminClient, AdminOptions};
use rdkafka::client::DefaultClientContext;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::{Offset, TopicPartitionList};
use tokio::runtime::Handle;

use crate::connectors::kafka::settings::{KafkaSourceSpec, client_config};

/// Deletes the records of one repartition topic that its stage has released.
pub(super) struct Purger {
    kafka: KafkaSourceSpec,
    runtime: Handle,
    /// Made at the first purge; `None` if it could not be.
    admin: OnceLock<Option<AdminClient<DefaultClientContext>>>,
    /// By partition, the offset last asked to delete before: each release asks only for
    /// what is new.
    asked: Mutex<BTreeMap<i32, i64>>,
    /// Raised when the brokers refuse for good: the topic is left to its retention.
    refused: AtomicBool,
    /// Raised at the first failure, which alone is a warning.
    warned: AtomicBool,
}

impl Purger {
    pub(super) fn new(kafka: &KafkaSourceSpec, runtime: Handle) -> Self {
        Self {
            kafka: kafka.clone(),
            runtime,
            admin: OnceLock::new(),
            asked: Mutex::default(),
            refused: AtomicBool::new(false),
            warned: AtomicBool::new(false),
        }
    }

    /// Deletes the records of `partition` before `offset`, in the background.
    pub(super) fn purge(self: &Arc<Self>, partition: i32, offset: i64) {
        if self.refused.load(Ordering::Relaxed) {
            return;
        }
        {
            let mut asked = self.asked.lock().unwrap_or_else(|e| e.into_inner());
            let last = asked.entry(partition).or_insert(0);
            if *last >= offset {
                return;
            }
            *last = offset;
        }
        let this = self.clone();
        self.runtime.spawn(async move {
            if let Err(error) = this.delete(partition, offset).await {
                this.failed(partition, &error);
            }
        });
    }

    async fn delete(&self, partition: i32, offset: i64) -> Result<(), KafkaError> {
        let admin = self.admin.get_or_init(|| {
            client_config(
                &self.kafka.brokers,
                self.kafka.connect_timeout(),
                &[],
                &self.kafka.properties,
            )
            .create()
            .inspect_err(|e| tracing::warn!(error = %e, "cannot create an admin client"))
            .ok()
        });
        let Some(admin) = admin else {
            self.refused.store(true, Ordering::Relaxed);
            return Ok(());
        };
        let mut offsets = TopicPartitionList::new();
        offsets.add_partition_offset(&self.kafka.topic, partition, Offset::Offset(offset))?;
        let options = AdminOptions::new()
            .operation_timeout(Some(self.kafka.connect_timeout()))
            .request_timeout(Some(self.kafka.connect_timeout()));
        let result = admin.delete_records(&offsets, &options).await?;
        for element in result.elements() {
            element.error()?;
        }
        tracing::debug!(topic = %self.kafka.topic, partition, offset, "deleted released records");
        Ok(())
    }

    fn failed(&self, partition: i32, error: &KafkaError) {
        // What retrying will not change: the brokers cannot, or will not let this client.
        let for_good = matches!(
            error.rdkafka_error_code(),
            Some(
                RDKafkaErrorCode::UnsupportedFeature
                    | RDKafkaErrorCode::UnsupportedVersion
                    | RDKafkaErrorCode::TopicAuthorizationFailed
                    | RDKafkaErrorCode::ClusterAuthorizationFailed
                    | RDKafkaErrorCode::PolicyViolation
            )
        );
        if for_good {
            self.refused.store(true, Ordering::Relaxed);
        }
        if !self.warned.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                topic = %self.kafka.topic,
                partition,
                error = %error,
                "cannot delete records the next stage has checkpointed past (DeleteRecords): \
                 the repartition topic is bounded by its retention only"
            );
        } else {
            tracing::debug!(topic = %self.kafka.topic, partition, error = %error, "purge failed");
        }
    }
}
