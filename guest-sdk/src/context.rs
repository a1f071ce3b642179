//! What an operator learns, and declares, when it opens.

use serde::{Serialize, de::DeserializeOwned};

use crate::Timers;
use crate::bindings::weir::operator::types::Context;
use crate::state::Migration;
use crate::{Error, ListState, MapState, Result, ValueState};

/// Given to [`Operator::open`](crate::Operator::open): where the instance runs, its
/// configuration, and the place to declare its state.
#[derive(Debug)]
pub struct OpenContext {
    operator_name: String,
    subtask: u32,
    parallelism: u32,
    config: String,
}

impl OpenContext {
    pub(crate) fn new(context: Context) -> Self {
        Self {
            operator_name: context.operator_name,
            subtask: context.subtask,
            parallelism: context.parallelism,
            config: context.config,
        }
    }

    /// The operator's name in the job file.
    pub fn operator_name(&self) -> &str {
        &self.operator_name
    }

    /// This subtask's index, `0 .. parallelism()`.
    pub fn subtask(&self) -> u32 {
        self.subtask
    }

    /// How many subtasks run this operator.
    pub fn parallelism(&self) -> u32 {
        self.parallelism
    }

    /// The operator's `config` table from the job file, as a JSON object.
    pub fn config_json(&self) -> &str {
        &self.config
    }

    /// The configuration deserialized from its JSON. An empty configuration reads as `{}`, so
    /// a struct whose fields all have defaults accepts a missing `config` table.
    pub fn config<T: DeserializeOwned>(&self) -> Result<T> {
        let json = match self.config.trim() {
            "" => "{}",
            json => json,
        };
        serde_json::from_str(json).map_err(|e| {
            Error::new(format!(
                "invalid config for operator `{}`: {e}",
                self.operator_name
            ))
        })
    }

    /// Declares the value state `name`, one `T` per key. Declaring a name twice with the same
    /// type returns a handle to the same state.
    pub fn value_state<T>(&mut self, name: &str) -> Result<ValueState<T>>
    where
        T: Serialize + DeserializeOwned + Clone + 'static,
    {
        ValueState::declare(name)
    }

    /// Declares the value state `name` with values of `version` (1 is what
    /// [`value_state`](Self::value_state) stores). A value stored by an older version of the
    /// operator is read through `migrate(stored_version, old)`, once, as it is read, and
    /// written back in `version`; a value of a newer version is an error. A field added with
    /// `#[serde(default)]` needs no new version.
    ///
    /// ```ignore
    /// #[derive(Clone, Serialize, Deserialize)]
    /// struct Count { total: u64, last_seen: String }   // version 2: `count` became `total`
    /// #[derive(Deserialize)]
    /// struct CountV1 { count: u64, #[serde(default)] last_seen: String }
    ///
    /// let counts = ctx.versioned_value_state("count", 2, |_from, old| {
    ///     let v1: CountV1 = old.decode()?;
    ///     Ok(Count { total: v1.count, last_seen: v1.last_seen })
    /// })?;
    /// ```
    pub fn versioned_value_state<T>(
        &mut self,
        name: &str,
        version: u32,
        migrate: Migration<T>,
    ) -> Result<ValueState<T>>
    where
        T: Serialize + DeserializeOwned + Clone + 'static,
    {
        ValueState::declare_versioned(name, version, Some(migrate))
    }

    /// Declares the map state `name`, one map from `K` to `V` per key.
    pub fn map_state<K, V>(&mut self, name: &str) -> Result<MapState<K, V>>
    where
        K: Serialize + DeserializeOwned,
        V: Serialize + DeserializeOwned,
    {
        MapState::declare(name)
    }

    /// Declares the map state `name` with values of `version`, as
    /// [`versioned_value_state`](Self::versioned_value_state) does for a value: a map value
    /// stored by an older version of the operator is read through
    /// `migrate(stored_version, old)` and written back in `version`. Keys have no version.
    pub fn versioned_map_state<K, V>(
        &mut self,
        name: &str,
        version: u32,
        migrate: Migration<V>,
    ) -> Result<MapState<K, V>>
    where
        K: Serialize + DeserializeOwned,
        V: Serialize + DeserializeOwned,
    {
        MapState::declare_versioned(name, version, Some(migrate))
    }

    /// The operator's timers (see [`timers`](crate::timers)).
    pub fn timers(&mut self) -> Timers {
        Timers::new()
    }

    /// Declares the list state `name`, one list of `T` per key.
    pub fn list_state<T>(&mut self, name: &str) -> Result<ListState<T>>
    where
        T: Serialize + DeserializeOwned,
    {
        ListState::declare(name)
    }

    /// Declares the list state `name` with items of `version`: a `get` that finds items
    /// stored by an older version of the operator reads them through
    /// `migrate(stored_version, old)` and writes the whole list back in `version`.
    pub fn versioned_list_state<T>(
        &mut self,
        name: &str,
        version: u32,
        migrate: Migration<T>,
    ) -> Result<ListState<T>>
    where
        T: Serialize + DeserializeOwned,
    {
        ListState::declare_versioned(name, version, Some(migrate))
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    fn context(config: &str) -> OpenContext {
        OpenContext::new(Context {
            operator_name: "count".into(),
            subtask: 1,
            parallelism: 4,
            config: config.into(),
        })
    }

    #[derive(Debug, Default, Deserialize, PartialEq)]
    #[serde(default)]
    struct Config {
        limit: u32,
        word: Option<String>,
    }

    #[test]
    fn exposes_where_the_instance_runs() {
        let ctx = context(r#"{"limit": 3}"#);
        assert_eq!(
            (ctx.operator_name(), ctx.subtask(), ctx.parallelism()),
            ("count", 1, 4)
        );
        assert_eq!(ctx.config_json(), r#"{"limit": 3}"#);
    }

    #[test]
    fn parses_config_and_accepts_an_empty_one() -> Result<()> {
        assert_eq!(
            context(r#"{"limit": 3, "word": "x"}"#).config::<Config>()?,
            Config {
                limit: 3,
                word: Some("x".into())
            }
        );
        assert_eq!(context("").config::<Config>()?, Config::default());
        assert_eq!(context("{}").config::<Config>()?, Config::default());
        let error = context(r#"{"limit": "many"}"#)
            .config::<Config>()
            .expect_err("limit is not a number");
        assert!(
            error
                .message()
                .starts_with("invalid config for operator `count`"),
            "{error}"
        );
        Ok(())
    }
}
