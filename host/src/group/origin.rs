//! Where a job began writing each of its repartition topics (DESIGN.md §12.1).
//!
//! A partition of a later stage with no checkpoint of its own starts reading the topic at the
//! job's *origin* in it: the offsets the topic ended at when the job first started, recorded
//! once in the job's folder (`<job>/repartition/<topic>.json`) by whichever process got there
//! first. Not at whatever the topic still holds: a topic kept from an earlier start of the
//! job (its folder deleted to start over) holds that start's records, which this start must
//! not count again; and records deleted (by retention, or the broker's size limit) before
//! the stage read them are an error the reader reports, never a silent jump to what is left.
//!
//! No stage writes the topic before the origin exists: each process records or reads it
//! before it runs any stage, so the origin is at or before every record of this start.

use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use serde::{Deserialize, Serialize};

use super::{GroupError, blocking, metadata_client};
use crate::checkpoint::CheckpointStore;
use crate::connectors::ConnectorError;
use crate::connectors::kafka::settings::KafkaSourceSpec;
use crate::connectors::kafka::source::kafka_error;
use crate::job::JobSpec;
use crate::job::spec::SourceSpec;

/// The object that records a topic's origin.
#[derive(Debug, Serialize, Deserialize)]
struct Origin {
    topic: String,
    /// By partition: the offset the job's first record in it has, or later.
    offsets: Vec<i64>,
}

/// Gives every stage after the first (`stages[1..]` of `job`) the origin of the topic it
/// reads, recording it first if this is the job's first start.
pub(super) async fn set_origins(job: &JobSpec, stages: &mut [JobSpec]) -> Result<(), GroupError> {
    let Some(checkpoints) = &job.checkpoints else {
        return Ok(());
    };
    let store_failure = |source| GroupError::Store {
        job: job.name.clone(),
        source,
    };
    let folder = CheckpointStore::open(&checkpoints.store, &job.name).map_err(store_failure)?;
    for k in 1..stages.len() {
        let later: Vec<String> = stages[k..].iter().map(|s| s.name.clone()).collect();
        let SourceSpec::Kafka(kafka) = &mut stages[k].source else {
            continue;
        };
        let partitions = kafka
            .repartition_input
            .as_ref()
            .map_or(0, |input| input.partitions);
        let offsets = origin(job, &folder, kafka, partitions, &later, &checkpoints.store).await?;
        if let Some(input) = &mut kafka.repartition_input {
            input.origin = offsets;
        }
    }
    Ok(())
}

/// The origin of `kafka.topic` (with `partitions`), read from the job's `folder`, or
/// recorded there now. `later` names the stages from the one reading the topic on: if the
/// origin is missing while one of their folders holds checkpoints, those are of an earlier
/// start of the job, and running would mix the two.
async fn origin(
    job: &JobSpec,
    folder: &CheckpointStore,
    kafka: &KafkaSourceSpec,
    partitions: u32,
    later: &[String],
    url: &str,
) -> Result<Vec<i64>, GroupError> {
    let path = folder.resolve(&format!("repartition/{}.json", kafka.topic));
    let store = folder.object_store().clone();
    let read = |store: std::sync::Arc<dyn ObjectStore>, path: object_store::path::Path| async move {
        match store.get(&path).await {
            Ok(found) => found.bytes().await.map(Some),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    };
    let bad = |message: String| GroupError::Origin {
        job: job.name.clone(),
        topic: kafka.topic.clone(),
        message,
    };
    // What is wrong with a recorded origin, if anything.
    let parse = |bytes: &[u8]| -> Result<Vec<i64>, String> {
        let origin: Origin =
            serde_json::from_slice(bytes).map_err(|e| format!("{}: {e}", folder.locate(&path)))?;
        if origin.topic != kafka.topic || origin.offsets.len() != partitions as usize {
            return Err(format!(
                "{} records {} partitions of topic `{}`, where the job reads {partitions} of \
                 `{}`: delete the job's folders to start over",
                folder.locate(&path),
                origin.offsets.len(),
                origin.topic,
                kafka.topic
            ));
        }
        Ok(origin.offsets)
    };
    if let Some(bytes) = read(store.clone(), path.clone())
        .await
        .map_err(|e| bad(e.to_string()))?
    {
        return parse(&bytes).map_err(bad);
    }
    for stage in later {
        let store_failure = |source| GroupError::Store {
            job: job.name.clone(),
            source,
        };
        let stage_folder = CheckpointStore::open(url, stage).map_err(store_failure)?;
        let left = stage_folder.list_all().await.map_err(store_failure)?;
        if !left.is_empty() {
            // Another process of the job may have recorded the origin and started its
            // stages since this one looked.
            if let Some(bytes) = read(store.clone(), path.clone())
                .await
                .map_err(|e| bad(e.to_string()))?
            {
                return parse(&bytes).map_err(bad);
            }
            return Err(GroupError::StageLeftOver {
                job: job.name.clone(),
                folder: stage_folder.locate(stage_folder.folder()),
            });
        }
    }
    let ends = {
        let (kafka, topic) = (kafka.clone(), kafka.topic.clone());
        blocking(move || topic_ends(&kafka, &topic, partitions))
            .await?
            .map_err(GroupError::Connect)?
    };
    let object = serde_json::to_vec_pretty(&Origin {
        topic: kafka.topic.clone(),
        offsets: ends.clone(),
    })
    .expect("an origin serialises");
    match store
        .put_opts(
            &path,
            PutPayload::from(object),
            PutOptions::from(PutMode::Create),
        )
        .await
    {
        Ok(_) => Ok(ends),
        // Another process of the job recorded it first: its origin is the job's.
        Err(object_store::Error::AlreadyExists { .. }) => {
            let bytes = read(store, path.clone())
                .await
                .map_err(|e| bad(e.to_string()))?
                .ok_or_else(|| bad(format!("{} vanished", folder.locate(&path))))?;
            parse(&bytes).map_err(bad)
        }
        Err(e) => Err(bad(e.to_string())),
    }
}

/// The end offset of each partition of `topic`.
fn topic_ends(
    kafka: &KafkaSourceSpec,
    topic: &str,
    partitions: u32,
) -> Result<Vec<i64>, ConnectorError> {
    use rdkafka::consumer::Consumer;
    let client = metadata_client(kafka)?;
    (0..partitions as i32)
        .map(|p| {
            client
                .fetch_watermarks(topic, p, kafka.connect_timeout())
                .map(|(_, high)| high)
                .map_err(|e| {
                    kafka_error(
                        &kafka.brokers,
                        format!("cannot read the end of topic `{topic}` partition {p}: {e}"),
                    )
                })
        })
        .collect()
}
