//! [`Holder`]: who holds a lease, said so that a person can find the process, and so that a
//! run on the same machine can tell at once that the holder is gone.
//!
//! A lease expires by itself, but a run killed with `kill -9` should not keep its job locked
//! for the whole lease: the user restores at once. So a holder records its process (pid and
//! start time) and the machine it runs on (the kernel's boot id and its pid namespace). A
//! contender on the same machine sees whether that process still runs; elsewhere only the
//! expiry counts. Inside one process, the leases still held are registered ([`HELD`]), so a
//! run that ended without releasing (a test that dropped it) does not lock its job either.

use std::collections::HashSet;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::clock::utc;

/// The tokens of the leases this process holds: a lease whose holder is this very process
/// but whose token is not here was dropped without a release, and is free.
static HELD: Mutex<Option<HashSet<String>>> = Mutex::new(None);

/// Who holds a lease.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    /// Drawn per lease: the holder's proof that the lease is its own.
    pub token: String,
    /// The machine's host name, for people.
    pub host: String,
    pub pid: u32,
    /// When the holder took the lease (milliseconds since the Unix epoch).
    pub since_ms: u64,
    /// The kernel's boot id and the pid namespace: two holders with the same one see the
    /// same processes. `None` where the system does not say (not Linux).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine: Option<String>,
    /// The holder process's start time (clock ticks after boot), so that a pid used again by
    /// another process is not taken for the holder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process_start: Option<u64>,
}

impl Holder {
    /// This process, holding a lease from `now_ms` under a new `token`.
    pub fn this_process(token: String, now_ms: u64) -> Self {
        let pid = std::process::id();
        Self {
            token,
            host: host_name(),
            pid,
            since_ms: now_ms,
            machine: machine_id(),
            process_start: process_start(pid),
        }
    }

    /// Whether the holder is known to have stopped: it ran on this machine and its process
    /// is gone (or is this process, which no longer holds the lease). `false` when it cannot
    /// be known: then only the lease's expiry frees it.
    pub fn is_gone(&self) -> bool {
        let Some(machine) = &self.machine else {
            return false;
        };
        if machine_id().as_ref() != Some(machine) {
            return false;
        }
        if self.pid == std::process::id() && self.process_start == process_start(self.pid) {
            return !is_held_here(&self.token);
        }
        match (self.process_start, process_start(self.pid)) {
            // No such process, or another one under the same pid.
            (_, None) => true,
            (Some(recorded), Some(now)) => recorded != now,
            (None, Some(_)) => false,
        }
    }

    /// `pid 1234 on host a1 since 08:41:03 UTC`.
    pub fn describe(&self) -> String {
        format!(
            "pid {} on host {} since {}",
            self.pid,
            self.host,
            utc(self.since_ms)
        )
    }
}

/// Registers a lease this process now holds.
pub(super) fn hold_here(token: &str) {
    HELD.lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert_with(HashSet::new)
        .insert(token.to_owned());
}

/// Forgets a lease this process no longer holds.
pub(super) fn let_go_here(token: &str) {
    if let Some(held) = HELD.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
        held.remove(token);
    }
}

fn is_held_here(token: &str) -> bool {
    HELD.lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .is_some_and(|held| held.contains(token))
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

/// The boot id and pid namespace of this process (Linux), or `None`.
fn machine_id() -> Option<String> {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let namespace = std::fs::read_link("/proc/self/ns/pid").ok()?;
    Some(format!("{}/{}", boot.trim(), namespace.display()))
}

/// A process's start time in clock ticks after boot (`/proc/<pid>/stat`, field 22), or
/// `None` when there is no such process, or it has exited and only waits to be reaped (a
/// zombie: killed runs stay so where the parent, in a container often an init that does not
/// reap, has not waited for them).
fn process_start(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name, field 2, is in parentheses and may hold spaces: count after it.
    let mut fields = stat[stat.rfind(')')? + 1..].split_whitespace();
    // Field 3: the state.
    if matches!(fields.next()?, "Z" | "X") {
        return None;
    }
    fields.nth(18)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_killed_process_is_gone_before_anyone_reaps_it() {
        let mut child = std::process::Command::new("sleep")
            .arg("600")
            .spawn()
            .expect("sleep");
        let pid = child.id();
        assert!(process_start(pid).is_some(), "a running process");
        child.kill().expect("SIGKILL");
        // Not waited for: a zombie until the end of the test.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while process_start(pid).is_some() {
            assert!(
                std::time::Instant::now() < deadline,
                "a killed process still counts as running"
            );
            std::thread::yield_now();
        }
        child.wait().expect("reap");
    }

    #[test]
    fn this_process_is_alive_while_it_holds_the_lease() {
        let holder = Holder::this_process("t-alive".into(), 0);
        hold_here("t-alive");
        assert!(!holder.is_gone());
        let_go_here("t-alive");
        assert!(
            holder.is_gone(),
            "released here: free on this machine at once"
        );
    }

    #[test]
    fn a_process_that_is_gone_is_seen_as_gone_on_the_same_machine_only() {
        let mut holder = Holder::this_process("t-gone".into(), 0);
        // A child that has exited: its pid names no process now (or another one, with
        // another start time).
        let mut child = std::process::Command::new("true")
            .spawn()
            .expect("spawn true");
        holder.pid = child.id();
        holder.process_start = process_start(child.id());
        child.wait().expect("wait");
        assert!(holder.is_gone());
        holder.machine = Some("another-machine".into());
        assert!(
            !holder.is_gone(),
            "another machine's process is not visible here"
        );
        holder.machine = None;
        assert!(!holder.is_gone());
    }
}
