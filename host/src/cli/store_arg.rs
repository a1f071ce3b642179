//! The STORE argument of the commands that read a job's checkpoints offline (`weir
//! checkpoints`, `weir state`):
//!
//! - a job file, whose `[checkpoints] store` and job name are used;
//! - a folder (relative or absolute): the store `file://` of its absolute path, every job
//!   under it; or, when it is one job's folder in a store (it holds that job's
//!   `checkpoints/chk-….json`) or that `checkpoints/` folder itself, that job only;
//! - an object-store URL (`file:///var/weir`, `s3://bucket/prefix`): every job under it.
//!
//! A Kafka job keeps checkpoints per partition: each partition is a job named
//! `job/partitions/p`. Nothing here writes: a missing local folder is an error, not created.

use std::sync::Arc;

use anyhow::anyhow;
use object_store::ObjectStore;
use object_store::path::Path;

use super::Failure;
use crate::checkpoint::CheckpointStore;
use crate::checkpoint::storage::open_store;
use crate::job::JobSpec;

/// What joins a Kafka job's name and a partition's number in the name of the partition's
/// checkpoints: their folder.
pub(super) const PARTITIONS: &str = "/partitions/";

/// An opened STORE argument.
pub(super) struct StoreArg {
    /// The store's URL, for messages.
    pub url: String,
    store: Arc<dyn ObjectStore>,
    prefix: Path,
    /// The one job STORE names (a job file, one job's folder), if it does.
    job: Option<String>,
}

impl StoreArg {
    /// Reads STORE: a job file if it is a file or looks like one, a folder, else a URL.
    /// `hint` ends the message for an argument that is none of them.
    pub(super) fn open(arg: &str, hint: &str) -> Result<Self, Failure> {
        let as_path = std::path::Path::new(arg);
        let (url, job) = if as_path.is_file() || arg.ends_with(".toml") {
            let spec = JobSpec::load(as_path).map_err(Failure::input)?;
            let checkpoints = spec.checkpoints.ok_or_else(|| {
                Failure::input(anyhow!(
                    "job `{}` ({arg}) keeps no checkpoints: it has no [checkpoints] section",
                    spec.name
                ))
            })?;
            (checkpoints.store, Some(spec.name))
        } else if as_path.is_dir() {
            folder(as_path).map_err(Failure::input)?
        } else if url::Url::parse(arg).is_ok() {
            (arg.to_owned(), None)
        } else {
            return Err(Failure::input(anyhow!(
                "{arg} is neither a job file, a folder nor a store URL{hint}"
            )));
        };
        // `open_store` creates a missing local folder (a job needs it); reading must not.
        if let Ok(parsed) = url::Url::parse(&url)
            && parsed.scheme() == "file"
            && let Ok(dir) = parsed.to_file_path()
            && !dir.is_dir()
        {
            return Err(Failure::input(anyhow!(
                "cannot read the store {url}: the folder {} does not exist",
                dir.display()
            )));
        }
        let (store, prefix) = open_store(&url).map_err(|e| {
            Failure::input(
                anyhow!(e).context(format!("{arg} is neither a store URL nor a job file")),
            )
        })?;
        Ok(Self {
            url,
            store,
            prefix,
            job,
        })
    }

    /// The checkpoints of `job`, or of a Kafka job's partition named `job/partitions/p`.
    pub(super) fn store_of(&self, job: &str) -> CheckpointStore {
        let store = match job
            .split_once(PARTITIONS)
            .and_then(|(name, p)| Some((name, p.parse().ok()?)))
        {
            Some((name, partition)) => {
                CheckpointStore::new(self.store.clone(), &self.prefix, name).partition(partition)
            }
            None => CheckpointStore::new(self.store.clone(), &self.prefix, job),
        };
        store.named_by(&self.url)
    }

    /// A store error as an input failure that names the store.
    pub(super) fn unreadable(&self, e: impl Into<anyhow::Error>) -> Failure {
        Failure::input(
            e.into()
                .context(format!("cannot read the store {}", self.url)),
        )
    }

    /// The job to read: `job` (`--job`), the one STORE names, or the store's only one.
    /// `what` is what was asked for (`checkpoint 7`), for the message when there is none.
    pub(super) async fn one_job(&self, job: Option<&str>, what: &str) -> Result<String, Failure> {
        if let Some(job) = job.or(self.job.as_deref()) {
            return Ok(job.to_owned());
        }
        let jobs = self.jobs().await?;
        match jobs.as_slice() {
            [only] => Ok(only.clone()),
            [] => Err(Failure::input(anyhow!(
                "{what} does not exist: {} holds no checkpoints",
                self.url
            ))),
            _ => Err(Failure::input(anyhow!(
                "{} holds the checkpoints of several jobs ({}); choose one with --job",
                self.url,
                jobs.join(", ")
            ))),
        }
    }

    /// The jobs to look at: the one STORE names, or every folder under the prefix that has a
    /// `checkpoints/` folder and every partition of a Kafka job (`job/partitions/p`), sorted
    /// by name, partitions in number order.
    pub(super) async fn jobs(&self) -> Result<Vec<String>, Failure> {
        if let Some(job) = &self.job {
            return Ok(vec![job.clone()]);
        }
        let list = |prefix: Path| async move {
            self.store
                .list_with_delimiter(Some(&prefix))
                .await
                .map_err(|e| self.unreadable(e))
        };
        let mut jobs = Vec::new();
        for folder in list(self.prefix.clone()).await?.common_prefixes {
            let Some(name) = folder.filename().map(str::to_owned) else {
                continue;
            };
            let inside = list(folder.clone()).await?;
            let has = |sub: &str| {
                inside
                    .common_prefixes
                    .iter()
                    .any(|p| p.filename() == Some(sub))
            };
            if has("checkpoints") {
                jobs.push((name.clone(), -1));
            }
            if has("partitions") {
                let partitions = list(folder.clone().join("partitions")).await?;
                jobs.extend(
                    partitions
                        .common_prefixes
                        .iter()
                        .filter_map(|p| p.filename()?.parse::<i64>().ok())
                        .map(|p| (name.clone(), p)),
                );
            }
        }
        jobs.sort();
        Ok(jobs
            .into_iter()
            .map(|(name, p)| match p {
                -1 => name,
                p => format!("{name}{PARTITIONS}{p}"),
            })
            .collect())
    }
}

/// The store URL and job a folder names (see the module's documentation).
fn folder(path: &std::path::Path) -> anyhow::Result<(String, Option<String>)> {
    let dir = std::path::absolute(path)?;
    let job_folder = if holds_metadata(&dir.join("checkpoints")) {
        Some(dir.as_path())
    } else if dir.file_name().is_some_and(|n| n == "checkpoints") && holds_metadata(&dir) {
        dir.parent()
    } else {
        None
    };
    let (store, job) = match job_folder.and_then(|j| Some((j.parent()?, j.file_name()?))) {
        Some((store, job)) => (store, Some(job.to_string_lossy().into_owned())),
        None => (dir.as_path(), None),
    };
    let url = url::Url::from_directory_path(store)
        .map_err(|()| anyhow!("cannot name {} as a URL", store.display()))?;
    Ok((url.to_string(), job))
}

/// Whether `dir` directly holds checkpoint metadata, `chk-<id>.json`.
fn holds_metadata(dir: &std::path::Path) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    entries.flatten().any(|e| {
        let name = e.file_name();
        let name = name.to_string_lossy();
        name.starts_with("chk-")
            && name.ends_with(".json")
            && e.file_type().is_ok_and(|t| t.is_file())
    })
}
