//! The state file on disk: read once at start, written atomically, only when what it holds changed.
//!
//! A write goes to a temporary file in the same directory, created afresh (never through a
//! link), which is flushed to disk, renamed over the old file, and the directory flushed too, so
//! a crash at any instant leaves either the old file or the new one, never a mix. A state larger
//! than the agent reads back is never written. Nothing here is fatal: a missing file starts
//! fresh; a file read in part (or from a newer version) keeps every approval it names, is logged
//! and copied aside (`<file>.corrupt`, `<file>.newer`), then replaced; a file that cannot be
//! written leaves the agent working from memory, logged once, with `..._state_up` at 0, and no
//! approval is sent whose attempt is not on disk.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use chrono::Utc;

use azure_scheduled_events_core::state::{self, ParseError, State};

use crate::config::file_input::{self, FileInputError};

/// Why a state file was not used: it could not be read, or what it holds was not understood.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read it: {0}")]
    Input(#[from] FileInputError),
    #[error(transparent)]
    Parse(#[from] ParseError),
}

/// What happened when the state file was opened, for one log line at start.
#[derive(Debug)]
pub enum Opened {
    /// No file yet (or state is kept in memory only).
    Fresh,
    Loaded,
    /// Read in part: the state holds what was understood (every approval the file names), the
    /// rest is `dropped`; the file as found is copied to `aside` (if that worked) and replaced
    /// at the first write.
    Partly {
        /// The format, when a newer agent wrote the file: only its approvals were read.
        newer: Option<u64>,
        dropped: Vec<String>,
        aside: Option<PathBuf>,
    },
    /// Not read at all: set aside at `aside` (if that worked) and replaced by a fresh state.
    Replaced {
        error: LoadError,
        aside: Option<PathBuf>,
    },
}

/// Reads and writes the state file, remembering what is on disk to write only changes.
#[derive(Debug)]
pub struct StateStore {
    path: Option<PathBuf>,
    state: State,
    written: Option<State>,
    /// Why what the state holds is not on disk (`None` when it is, or state is in memory by
    /// choice).
    unwritten: Option<Arc<str>>,
}

impl StateStore {
    /// Opens the state at `path`; `None` keeps state in memory only.
    pub fn open(path: Option<&Path>) -> (Self, Opened) {
        let Some(path) = path else {
            return (Self::in_memory(), Opened::Fresh);
        };
        // A missing directory is made for the agent alone; one it cannot make leaves the first write
        // to fail and say so, and state in memory.
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            let _ = create_private_dir(dir);
        }
        let store = |state: State, written: Option<State>| Self {
            path: Some(path.to_owned()),
            state,
            written,
            unwritten: None,
        };
        // Writing over a device or a FIFO would replace it, and over a file that cannot be read
        // the approvals it may name: state stays in memory, and no approval is sent.
        let unreadable = |error: FileInputError| {
            let mut opened = Self::in_memory();
            opened.unwritten = Some(Arc::from(error.to_string()));
            (
                opened,
                Opened::Replaced {
                    error: LoadError::Input(error),
                    aside: None,
                },
            )
        };
        let (bytes, read) = match find(path) {
            Found::Missing => return (store(State::new(), None), Opened::Fresh),
            Found::Unreadable(error) => return unreadable(error),
            Found::Read { bytes, read } => (bytes, *read),
        };
        if read.dropped.is_empty() && read.newer.is_none() {
            let state = read.state;
            return (store(state.clone(), Some(state)), Opened::Loaded);
        }
        // Copied, not moved: until the first write replaces it with what was kept, a
        // crash leaves the file as found, to be read the same way again.
        let aside = sibling(
            path,
            if read.newer.is_some() {
                "newer"
            } else {
                "corrupt"
            },
        );
        let aside = write_atomically(&aside, &bytes).ok().map(|()| aside);
        (
            store(read.state, None),
            Opened::Partly {
                newer: read.newer,
                dropped: read.dropped,
                aside,
            },
        )
    }

    /// What [`StateStore::open`] would do with the file at `path`, for `check-config`, without
    /// creating, copying or writing anything: `None` when it would read it whole (or find none),
    /// else what it would find and do, in a phrase.
    pub fn inspect(path: &Path) -> Option<String> {
        match find(path) {
            Found::Missing => None,
            Found::Unreadable(error) => Some(format!(
                "cannot read it: {error}; the agent would keep state in memory, leave the file as it is and send no approval"
            )),
            Found::Read { read, .. } => {
                let approvals = read.state.approvals.len();
                match read.newer {
                    Some(format) => Some(format!(
                        "written by a newer version of the agent (format {format}, this agent reads up to {}); the agent would keep the {approvals} approvals it names, copy it to {} and replace it at its first write",
                        state::VERSION,
                        sibling(path, "newer").display()
                    )),
                    None if read.dropped.is_empty() => None,
                    None => Some(format!(
                        "read in part ({}); the agent would keep every approval it names ({approvals}) and what else it understands, copy it to {} and replace it at its first write with what it kept",
                        read.dropped.join("; "),
                        sibling(path, "corrupt").display()
                    )),
                }
            }
        }
    }

    fn in_memory() -> Self {
        Self {
            path: None,
            state: State::new(),
            written: None,
            unwritten: None,
        }
    }

    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    pub fn state(&self) -> &State {
        &self.state
    }

    pub fn state_mut(&mut self) -> &mut State {
        &mut self.state
    }

    /// Whether the last write (or the first read) worked; true when state is in memory by choice.
    pub fn is_healthy(&self) -> bool {
        self.unwritten.is_none()
    }

    /// Why what the state holds is not on disk; `None` when it is, or state is in memory by
    /// choice.
    pub fn unwritten(&self) -> Option<&Arc<str>> {
        self.unwritten.as_ref()
    }

    /// Writes the state if it changed since the last successful write. The first failure after a
    /// success is logged; the next success is logged too.
    pub fn flush(&mut self) {
        let Some(path) = self.path.clone() else {
            return;
        };
        if self.written.as_ref() == Some(&self.state) {
            return;
        }
        match write_within_cap(&path, &self.state.to_bytes()) {
            Ok(()) => {
                if self.unwritten.is_some() {
                    tracing::info!(state_file = %path.display(), "state file written again");
                }
                self.unwritten = None;
                self.written = Some(self.state.clone());
            }
            Err(error) => {
                if self.unwritten.is_none() {
                    tracing::warn!(
                        state_file = %path.display(),
                        %error,
                        "cannot write the state file: keeping state in memory and sending no approval until it can be written, so reboot classification does not survive a restart"
                    );
                }
                self.unwritten = Some(Arc::from(error.to_string()));
            }
        }
    }
}

/// Writes `bytes` as the state file at `path`, unless they are more than the agent reads back
/// (`file_input::STATE_FILE`): a file it could not read at its next start would lose every
/// approval it holds.
fn write_within_cap(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let cap = file_input::STATE_FILE.max_bytes;
    if u64::try_from(bytes.len()).unwrap_or(u64::MAX) > cap {
        return Err(std::io::Error::other(format!(
            "the state takes {} bytes, more than the {cap} the agent reads back",
            bytes.len()
        )));
    }
    write_atomically(path, bytes)
}

/// Copies the file at `path` to `aside`, replacing an older copy there.
/// Creates `dir` and its missing parents, readable and writable by their owner only (0700 on Unix).
pub fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
}

/// `<file>.<suffix>` next to `path`.
/// What reading the state file finds, before anything is done about it.
enum Found {
    Missing,
    Unreadable(FileInputError),
    Read {
        bytes: Vec<u8>,
        read: Box<state::Read>,
    },
}

fn find(path: &Path) -> Found {
    let (bytes, oversized) = match file_input::read(path, file_input::STATE_FILE) {
        Err(error) if error.is_not_found() => return Found::Missing,
        // An older agent's file, written without a cap: its approvals are read once under a
        // larger one, and the next write replaces it with what this agent reads back.
        Err(too_large @ FileInputError::TooLarge { .. }) => {
            match file_input::read(path, file_input::OVERSIZED_STATE_FILE) {
                Ok(bytes) => (bytes, Some(too_large.to_string())),
                Err(error) => return Found::Unreadable(error),
            }
        }
        Err(error) => return Found::Unreadable(error),
        Ok(bytes) => (bytes, None),
    };
    let mut read = state::read(&bytes, Utc::now());
    read.dropped.extend(oversized);
    Found::Read {
        bytes,
        read: Box::new(read),
    }
}

fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".");
    name.push(suffix);
    path.with_file_name(name)
}

/// Temp file in the same directory, fsync, rename over `path`, fsync the directory.
///
/// The temporary file is always a new one: whatever is at its name (a file left by a crash, or a
/// link someone put there) is removed first (a link itself, never what it points to), and the
/// file is created exclusively, so a link made in between fails the write instead of being
/// followed; on Unix `O_NOFOLLOW` refuses a link in its place as well.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_owned(),
        _ => PathBuf::from("."),
    };
    let temp = sibling(path, "tmp");
    match fs::remove_file(&temp) {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => return Err(error),
        _ => {}
    }
    let mut options = fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NOFOLLOW);
    }
    let result = (|| {
        let mut file = options.open(&temp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        fs::rename(&temp, path)?;
        sync_directory(&dir)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&temp);
    }
    result
}

/// The rename is durable only once the directory entry is.
#[cfg(not(windows))]
fn sync_directory(dir: &Path) -> std::io::Result<()> {
    fs::File::open(dir)?.sync_all()
}

/// NTFS journals the rename itself, and Windows opens no directory as a file to flush it.
#[cfg(windows)]
fn sync_directory(_dir: &Path) -> std::io::Result<()> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use azure_scheduled_events_core::event::Document;
    use azure_scheduled_events_core::state::{
        ApprovalRecord, ApprovalStatus, Impact, MAX_PAST_APPROVALS, stored,
    };
    use azure_scheduled_events_core::tracker::Tracked;
    use chrono::{DateTime, Utc};

    use super::*;
    use crate::config::file_input::{BOOT_ID, STATE_FILE};
    use azure_scheduled_events_core::limits::MAX_EVENTS;

    fn t(seconds: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000 + seconds, 0).unwrap_or_default()
    }

    /// This VM's event `id` of `event_type` and `status`, as a document brings it, first seen at
    /// `seen`.
    fn tracked(
        id: &str,
        event_type: &str,
        status: &str,
        seen: DateTime<Utc>,
    ) -> Result<Tracked, Box<dyn std::error::Error>> {
        let body = serde_json::json!({
            "DocumentIncarnation": 1,
            "Events": [{
                "EventId": id,
                "EventType": event_type,
                "EventStatus": status,
                "ResourceType": "VirtualMachine",
                "Resources": ["me"],
                "NotBefore": "",
            }],
        });
        let event = Document::from_json(&serde_json::to_vec(&body)?)?
            .events
            .pop()
            .ok_or("no event")?;
        Ok(Tracked {
            event,
            first_seen: seen,
            seen_started: false,
        })
    }

    /// The largest state a document lets the agent write: every event at [`MAX_EVENTS`] with
    /// strings past the core's `MAX_STORED_LEN`, each approved, the past approvals kept, the
    /// longest boot id, and two receivers notified of two transitions of each event.
    #[test]
    fn the_largest_state_the_agent_writes_is_one_it_reads_back()
    -> Result<(), Box<dyn std::error::Error>> {
        let long = |i: usize, what: &str| format!("{what}-{i:05}-{}", "x".repeat(1000));
        let seen = t(0) + chrono::TimeDelta::nanoseconds(123_456_789);
        let events = (0..MAX_EVENTS)
            .map(|i| tracked(&long(i, "id"), &long(i, "type"), &long(i, "status"), seen))
            .collect::<Result<Vec<Tracked>, _>>()?;
        let mut state = State::new();
        state.boot_id = Some("b".repeat(usize::try_from(BOOT_ID.max_bytes).unwrap_or(0)));
        state.clean_stop = Some(seen);
        state.observe(Some(u64::MAX), &events, Some("me"), seen);
        state.keep_span_ids(|_| "ffffffffffffffff".to_owned());
        state.expected_impact = Some(Impact {
            event_id: stored(&long(0, "id")).into_owned(),
            event_type: stored(&long(0, "type")).into_owned(),
            started_seen: seen,
        });
        let record = |i: usize| ApprovalRecord {
            event_type: stored(&long(i, "type")).into_owned(),
            at: seen,
            status: ApprovalStatus::Rejected,
            attempts: u32::MAX,
        };
        for i in 0..MAX_EVENTS + MAX_PAST_APPROVALS {
            state
                .approvals
                .insert(stored(&long(i, "id")).into_owned(), record(i));
        }
        for tracked in &events {
            for receiver in ["ops-slack-primary-receiver", "pagerduty-primary-receiver"] {
                for transition in ["scheduled", "started"] {
                    state.record_notification(tracked.event.id.as_str(), receiver, transition);
                }
            }
        }
        let bytes = state.to_bytes();
        let size = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
        eprintln!(
            "largest state: {size} bytes, read cap {}",
            STATE_FILE.max_bytes
        );
        assert!(size < STATE_FILE.max_bytes, "{size} bytes");
        assert_eq!(State::parse(&bytes)?, state);
        Ok(())
    }
}
