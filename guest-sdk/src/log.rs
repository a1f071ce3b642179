//! Logging into the host's tracing, which tags every message with job, operator, subtask and
//! checkpoint.
//!
//! Each call is one crossing to the host; keep per-record logging at `trace` and out of hot
//! loops. The macros format like `format!`:
//!
//! ```
//! let word = "fox";
//! weir_guest::log::info("operator opened");
//! weir_guest::info!("first word: {word}");
//! ```
//!
//! Off `wasm32` (native unit tests), messages go to standard error instead.

use crate::bindings::weir::operator::log::Level;

/// Logs `message` at trace level.
pub fn trace(message: &str) {
    log(Level::Trace, message);
}

/// Logs `message` at debug level.
pub fn debug(message: &str) {
    log(Level::Debug, message);
}

/// Logs `message` at info level.
pub fn info(message: &str) {
    log(Level::Info, message);
}

/// Logs `message` at warn level.
pub fn warn(message: &str) {
    log(Level::Warn, message);
}

/// Logs `message` at error level.
pub fn error(message: &str) {
    log(Level::Error, message);
}

#[cfg(target_arch = "wasm32")]
fn log(level: Level, message: &str) {
    crate::bindings::weir::operator::log::log(level, message);
}

#[cfg(not(target_arch = "wasm32"))]
fn log(level: Level, message: &str) {
    eprintln!("[weir {level:?}] {message}");
}

/// Logs a `format!`-style message at trace level.
#[macro_export]
macro_rules! trace {
    ($($arg:tt)*) => { $crate::log::trace(&::std::format!($($arg)*)) };
}

/// Logs a `format!`-style message at debug level.
#[macro_export]
macro_rules! debug {
    ($($arg:tt)*) => { $crate::log::debug(&::std::format!($($arg)*)) };
}

/// Logs a `format!`-style message at info level.
#[macro_export]
macro_rules! info {
    ($($arg:tt)*) => { $crate::log::info(&::std::format!($($arg)*)) };
}

/// Logs a `format!`-style message at warn level.
#[macro_export]
macro_rules! warn {
    ($($arg:tt)*) => { $crate::log::warn(&::std::format!($($arg)*)) };
}

/// Logs a `format!`-style message at error level.
#[macro_export]
macro_rules! error {
    ($($arg:tt)*) => { $crate::log::error(&::std::format!($($arg)*)) };
}
