//! The HTTP API of `weir serve`.
//!
//! | method and path | what |
//! |---|---|
//! | `POST /v1/jobs` | submit a job ([`SubmitRequest`]); 201 with its [`JobInfo`] |
//! | `GET /v1/jobs` | every job |
//! | `GET /v1/jobs/{id}` | one job: status, records per operator, last checkpoint |
//! | `POST /v1/jobs/{id}/cancel[?checkpoint=true]` | stop a job (after a last checkpoint); its checkpoints stay |
//! | `POST /v1/jobs/{id}/checkpoint` | take a checkpoint now |
//! | `POST /v1/jobs/{id}/restart[?checkpoint=N\|savepoint=NAME][&allow_dropped_state=OP,...]` | run an ended job again from checkpoint `N` or a savepoint (default: its latest checkpoint), dropping the state named |
//! | `POST /v1/jobs/{id}/savepoints` | copy a completed checkpoint into a named savepoint ([`SavepointRequest`]) |
//! | `POST /v1/jobs/{id}/upgrade` | swap the job's code for a new version, keeping its state ([`UpgradeRequest`]); 202 with its [`JobInfo`] (whose last `upgrades` entry says how it goes), or with `check`, 200 with an [`UpgradeCheck`] |
//! | `GET /v1/jobs/{id}/logs[?tail=N][&operator=OP][&level=L]` | the last `N` (default 200) lines its guests logged ([`LogLine`]s), of operator `OP`, at level `L` or above |
//! | `GET /v1/jobs/{id}/checkpoints` | its completed checkpoints ([`CheckpointSummary`]s, what `weir checkpoints list --json` prints) |
//! | `GET /v1/jobs/{id}/checkpoints/{ID\|latest}` | one of them: metadata and stored artifacts ([`CheckpointDetail`]) |
//! | `GET /v1/jobs/{id}/checkpoints/history[?limit=N][&before=CURSOR]` | the checkpoints it tried in this host's run of it, failed ones too, with their costs ([`CheckpointRecord`]s), newest first; a page of `N` older than `CURSOR` ([`HistoryOptions`]) |
//! | `GET /v1/jobs/{id}/graph` | its operator graph: per node and subtask, counts, rates, state, watermark, backpressure ([`JobGraph`]) |
//! | `GET /v1/jobs/{id}/rates[?since_ms=T]` | its records per second over the last five minutes, one point a second ([`RatesBody`]) |
//! | `GET /metrics` | Prometheus text |
//! | `GET /` | the web console ([`super::console`]) |
//!
//! Every call but the console's assets needs the host's bearer token: 401 without one or
//! with a wrong one. Every response carries the console's security headers.

use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, Path, Query, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};

use super::Registry;
use super::graph::JobGraph;
use super::job_checkpoints::{InspectError, SaveError, Which};
use super::protocol::{
    CheckpointDetail, CheckpointSummary, ErrorBody, JobInfo, SavepointInfo, SavepointRequest,
    SubmitRequest, UpgradeCheck, UpgradeRequest,
};
use super::rates::RatesBody;
use super::registry::{CheckpointsError, RestartError, UpgradeAnswer, UpgradeError};
use crate::checkpoint::RestoreFrom;
use crate::checkpoint::history::CheckpointRecord;
use crate::checkpoint::savepoint::SavepointError;
use crate::ids::CheckpointId;
use crate::operator::LogLine;

/// The largest submission accepted (a job file and its components, base64-encoded).
const MAX_SUBMISSION: usize = 512 << 20;

/// The API over `registry`, guarded by `token`.
pub fn router(registry: Arc<Registry>, token: String) -> Router {
    Router::new()
        .route("/v1/jobs", post(submit).get(list))
        .route("/v1/jobs/{id}", get(show))
        .route("/v1/jobs/{id}/cancel", post(cancel))
        .route("/v1/jobs/{id}/checkpoint", post(checkpoint))
        .route("/v1/jobs/{id}/restart", post(restart))
        .route("/v1/jobs/{id}/logs", get(logs))
        .route("/v1/jobs/{id}/graph", get(graph))
        .route("/v1/jobs/{id}/rates", get(rates))
        .route("/v1/jobs/{id}/checkpoints", get(checkpoints))
        .route("/v1/jobs/{id}/savepoints", post(take_savepoint))
        .route("/v1/jobs/{id}/upgrade", post(upgrade))
        .route("/v1/jobs/{id}/checkpoints/history", get(checkpoint_history))
        .route(
            "/v1/jobs/{id}/checkpoints/{checkpoint}",
            get(checkpoint_detail),
        )
        .route("/metrics", get(metrics))
        // Components travel in the submission: a Python or JavaScript one weighs tens of MB.
        .layer(DefaultBodyLimit::max(MAX_SUBMISSION))
        .layer(middleware::from_fn_with_state(
            Arc::<str>::from(token),
            authorize,
        ))
        .merge(super::console::router())
        .layer(middleware::from_fn(super::console::security_headers))
        .with_state(registry)
}

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (
        status,
        Json(ErrorBody {
            error: message.into(),
        }),
    )
        .into_response()
}

/// Refuses calls without `Authorization: Bearer <token>`.
async fn authorize(State(token): State<Arc<str>>, request: Request, next: Next) -> Response {
    let given = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    match given {
        Some(given) if same(given.as_bytes(), token.as_bytes()) => next.run(request).await,
        Some(_) => error(StatusCode::UNAUTHORIZED, "wrong token"),
        None => error(
            StatusCode::UNAUTHORIZED,
            "missing token: send Authorization: Bearer <token>",
        ),
    }
}

/// Compares in time that depends only on the lengths, so a wrong guess learns nothing from
/// how long the refusal took.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn submit(
    State(registry): State<Arc<Registry>>,
    Json(request): Json<SubmitRequest>,
) -> Response {
    // Checking components compiles them: off the async workers.
    match tokio::task::spawn_blocking(move || registry.submit(request)).await {
        Ok(Ok(info)) => (StatusCode::CREATED, Json(info)).into_response(),
        Ok(Err(e)) => error(StatusCode::BAD_REQUEST, e.to_string()),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

async fn list(State(registry): State<Arc<Registry>>) -> Json<Vec<JobInfo>> {
    Json(registry.list())
}

async fn show(State(registry): State<Arc<Registry>>, Path(id): Path<String>) -> Response {
    match registry.get(&id) {
        Some(info) => Json(info).into_response(),
        None => error(StatusCode::NOT_FOUND, format!("no job {id}")),
    }
}

/// `?checkpoint=true`: stop after a last checkpoint.
#[derive(Debug, serde::Deserialize)]
pub struct CancelOptions {
    #[serde(default)]
    pub checkpoint: bool,
}

async fn cancel(
    State(registry): State<Arc<Registry>>,
    Path(id): Path<String>,
    Query(options): Query<CancelOptions>,
) -> Response {
    match registry.cancel(&id, options.checkpoint) {
        Some(info) => Json(info).into_response(),
        None => error(StatusCode::NOT_FOUND, format!("no job {id}")),
    }
}

async fn checkpoint(State(registry): State<Arc<Registry>>, Path(id): Path<String>) -> Response {
    match registry.checkpoint(&id) {
        Some(info) => Json(info).into_response(),
        None => error(StatusCode::NOT_FOUND, format!("no job {id}")),
    }
}

/// `?checkpoint=N` or `?savepoint=NAME`: restart from checkpoint `N`, or the savepoint
/// `NAME`, instead of the latest checkpoint; `&allow_dropped_state=OP[.STATE],...`: what
/// of its state the restore may drop.
#[derive(Debug, serde::Deserialize)]
pub struct RestartOptions {
    pub checkpoint: Option<u64>,
    pub savepoint: Option<String>,
    pub allow_dropped_state: Option<String>,
}

async fn restart(
    State(registry): State<Arc<Registry>>,
    Path(id): Path<String>,
    Query(options): Query<RestartOptions>,
) -> Response {
    let from = match (options.checkpoint, options.savepoint) {
        (Some(_), Some(_)) => {
            return error(
                StatusCode::BAD_REQUEST,
                "restart from a checkpoint or a savepoint, not both",
            );
        }
        (Some(n), None) => Some(RestoreFrom::Id(CheckpointId(n))),
        (None, Some(name)) => Some(RestoreFrom::Savepoint(name)),
        (None, None) => None,
    };
    let allowed = options
        .allow_dropped_state
        .iter()
        .flat_map(|list| list.split(','))
        .filter(|op| !op.is_empty())
        .map(str::to_owned)
        .collect();
    match registry.restart(&id, from, allowed).await {
        Ok(info) => Json(info).into_response(),
        Err(e @ RestartError::NoSuchJob(_)) => error(StatusCode::NOT_FOUND, e.to_string()),
        Err(e @ (RestartError::Running(_) | RestartError::Upgrading(_))) => {
            error(StatusCode::CONFLICT, e.to_string())
        }
        Err(e @ RestartError::Unusable(_)) => error(StatusCode::BAD_REQUEST, e.to_string()),
    }
}

/// `?tail=N`: how many of the last lines; `operator`, `level`: only those of that operator,
/// at that level or above.
#[derive(Debug, serde::Deserialize)]
pub struct LogOptions {
    #[serde(default = "default_tail")]
    pub tail: usize,
    pub operator: Option<String>,
    pub level: Option<String>,
}

/// Log levels, least severe first.
const LEVELS: [&str; 5] = ["trace", "debug", "info", "warn", "error"];

fn severity(level: &str) -> Option<usize> {
    LEVELS.iter().position(|l| l.eq_ignore_ascii_case(level))
}

fn default_tail() -> usize {
    200
}

async fn logs(
    State(registry): State<Arc<Registry>>,
    Path(id): Path<String>,
    Query(options): Query<LogOptions>,
) -> Response {
    let least = match options.level.as_deref().filter(|l| !l.is_empty()) {
        None => 0,
        Some(level) => match severity(level) {
            Some(least) => least,
            None => {
                return error(
                    StatusCode::BAD_REQUEST,
                    format!("no log level `{level}`: use one of {}", LEVELS.join(", ")),
                );
            }
        },
    };
    let operator = options.operator.filter(|o| !o.is_empty());
    let keep = move |line: &LogLine| {
        // A printed line's level is its stream's: unknown levels count as info.
        severity(&line.level).unwrap_or(2) >= least
            && operator.as_ref().is_none_or(|o| *o == line.operator)
    };
    // Reading the file blocks.
    let read =
        tokio::task::spawn_blocking(move || registry.logs(&id, options.tail, keep).ok_or(id)).await;
    match read {
        Ok(Ok(Ok(lines))) => Json::<Vec<LogLine>>(lines).into_response(),
        Ok(Ok(Err(e))) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        Ok(Err(id)) => error(StatusCode::NOT_FOUND, format!("no job {id}")),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

async fn graph(State(registry): State<Arc<Registry>>, Path(id): Path<String>) -> Response {
    match registry.graph(&id) {
        Some(graph) => Json::<JobGraph>(graph).into_response(),
        None => error(StatusCode::NOT_FOUND, format!("no job {id}")),
    }
}

/// `?since_ms=T`: only the points after `T`.
#[derive(Debug, serde::Deserialize)]
pub struct RatesOptions {
    pub since_ms: Option<u64>,
}

async fn rates(
    State(registry): State<Arc<Registry>>,
    Path(id): Path<String>,
    Query(options): Query<RatesOptions>,
) -> Response {
    match registry.rates(&id, options.since_ms) {
        Some(rates) => Json::<RatesBody>(rates).into_response(),
        None => error(StatusCode::NOT_FOUND, format!("no job {id}")),
    }
}

/// `?limit=N&before=CURSOR`: a page of the history, newest first: at most `N` records (all
/// of them without `limit`), after (older than) the record `CURSOR` names,
/// `<triggered_at_ms>.<id>.<partition or ->`: the console passes its last row's.
#[derive(Debug, serde::Deserialize)]
pub struct HistoryOptions {
    pub limit: Option<usize>,
    pub before: Option<String>,
}

/// A history cursor: the sort key of the record it names.
fn history_cursor(text: &str) -> Option<(u64, u64, i64)> {
    let mut parts = text.split('.');
    let at = parts.next()?.parse().ok()?;
    let id = parts.next()?.parse().ok()?;
    let partition = match parts.next()? {
        "-" => -1,
        p => i64::from(p.parse::<i32>().ok()?),
    };
    parts.next().is_none().then_some((at, id, partition))
}

async fn checkpoint_history(
    State(registry): State<Arc<Registry>>,
    Path(id): Path<String>,
    Query(options): Query<HistoryOptions>,
) -> Response {
    let before = match options.before.as_deref().map(history_cursor) {
        None => None,
        Some(Some(cursor)) => Some(cursor),
        Some(None) => {
            return error(
                StatusCode::BAD_REQUEST,
                "before: a cursor `<triggered_at_ms>.<id>.<partition or ->` (a record's)",
            );
        }
    };
    let Some(records) = registry.checkpoint_history(&id) else {
        return error(StatusCode::NOT_FOUND, format!("no job {id}"));
    };
    // Newest first already; the key sorts the same way.
    let key = |r: &CheckpointRecord| (r.triggered_at_ms, r.id, r.partition.map_or(-1, i64::from));
    let page: Vec<CheckpointRecord> = records
        .into_iter()
        .filter(|r| before.is_none_or(|b| key(r) < b))
        .take(options.limit.unwrap_or(usize::MAX))
        .collect();
    Json(page).into_response()
}

/// 404 for a job that does not exist or keeps no checkpoints of its own (a Kafka job's are
/// per partition), 500 for a store that cannot be opened.
fn checkpoints_error(e: CheckpointsError) -> Response {
    let status = match e {
        CheckpointsError::NoSuchJob(_)
        | CheckpointsError::KeepsNone { .. }
        | CheckpointsError::PerPartition { .. } => StatusCode::NOT_FOUND,
        CheckpointsError::Store { .. } => StatusCode::INTERNAL_SERVER_ERROR,
    };
    error(status, e.to_string())
}

async fn checkpoints(State(registry): State<Arc<Registry>>, Path(id): Path<String>) -> Response {
    let checkpoints = match registry.checkpoints(&id) {
        Ok(c) => c,
        Err(e) => return checkpoints_error(e),
    };
    match checkpoints.summaries().await {
        Ok(rows) => Json::<Vec<CheckpointSummary>>(rows).into_response(),
        Err(e) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("job {id}: cannot read its checkpoints: {e}"),
        ),
    }
}

async fn checkpoint_detail(
    State(registry): State<Arc<Registry>>,
    Path((id, checkpoint)): Path<(String, String)>,
) -> Response {
    let which: Which = match checkpoint.parse() {
        Ok(which) => which,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    let checkpoints = match registry.checkpoints(&id) {
        Ok(c) => c,
        Err(e) => return checkpoints_error(e),
    };
    match checkpoints.detail(which).await {
        Ok(detail) => Json::<CheckpointDetail>(detail).into_response(),
        Err(e @ (InspectError::NoCheckpoints { .. } | InspectError::NoSuchCheckpoint { .. })) => {
            error(StatusCode::NOT_FOUND, format!("job {id}: {e}"))
        }
        Err(e) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("job {id}: cannot read checkpoint {which}: {e}"),
        ),
    }
}

async fn take_savepoint(
    State(registry): State<Arc<Registry>>,
    Path(id): Path<String>,
    Json(request): Json<SavepointRequest>,
) -> Response {
    let checkpoints = match registry.checkpoints(&id) {
        Ok(c) => c,
        Err(e) => return checkpoints_error(e),
    };
    let which = request
        .checkpoint
        .map_or(Which::Latest, |n| Which::Id(CheckpointId(n)));
    match checkpoints.save_as(which, &request.name).await {
        Ok(info) => Json::<SavepointInfo>(info).into_response(),
        Err(e) => {
            let status = match &e {
                SaveError::Savepoint(SavepointError::BadName(_)) => StatusCode::BAD_REQUEST,
                SaveError::Savepoint(SavepointError::Exists(_))
                | SaveError::Inspect(InspectError::NoCheckpoints { .. }) => StatusCode::CONFLICT,
                SaveError::Inspect(InspectError::NoSuchCheckpoint { .. }) => StatusCode::NOT_FOUND,
                _ => StatusCode::INTERNAL_SERVER_ERROR,
            };
            error(status, format!("job {id}: {e}"))
        }
    }
}

async fn upgrade(
    State(registry): State<Arc<Registry>>,
    Path(id): Path<String>,
    Json(request): Json<UpgradeRequest>,
) -> Response {
    match registry.upgrade(&id, request).await {
        Ok(UpgradeAnswer::Started(info)) => (StatusCode::ACCEPTED, Json(info)).into_response(),
        Ok(UpgradeAnswer::Checked(check)) => Json::<UpgradeCheck>(check).into_response(),
        Err(e @ UpgradeError::NoSuchJob(_)) => error(StatusCode::NOT_FOUND, e.to_string()),
        Err(e @ UpgradeError::InProgress(_)) => error(StatusCode::CONFLICT, e.to_string()),
        Err(e @ UpgradeError::Refused(_)) => error(StatusCode::BAD_REQUEST, e.to_string()),
    }
}

async fn metrics(State(registry): State<Arc<Registry>>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        super::prometheus::render(&registry),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::history_cursor;

    #[test]
    fn history_cursors_name_a_record_by_time_id_and_partition() {
        assert_eq!(history_cursor("1700.12.-"), Some((1700, 12, -1)));
        assert_eq!(history_cursor("1700.12.3"), Some((1700, 12, 3)));
        for bad in ["", "1700", "1700.12", "1700.12.x", "1700.12.3.4", "a.b.c"] {
            assert_eq!(history_cursor(bad), None, "{bad:?}");
        }
    }
}
