//! The state file on disk: read once at start, written atomically, only when what it holds changed.
//!
//! A write goes to a temporary file in the same directory, which is flushed to disk, renamed over
//! the old file, and the directory flushed too, so a crash at any instant leaves either the old
//! file or the new one, never a mix. Nothing here is fatal: a missing file starts fresh; a
//! corrupt file, or one from a newer version, is logged, renamed aside (`<file>.corrupt`,
//! `<file>.newer`) and replaced; a file that cannot be written leaves the agent working from
//! memory, logged once, with `..._state_up` at 0.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::config::file_input::{self, FileInputError};
use crate::core::state::{LoadError, State};

/// What happened when the state file was opened, for one log line at start.
#[derive(Debug)]
pub enum Opened {
    /// No file yet (or state is kept in memory only).
    Fresh,
    Loaded,
    /// Not usable: set aside at `aside` (if that worked) and replaced by a fresh state.
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
    healthy: bool,
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
            healthy: true,
        };
        match file_input::read(path, file_input::STATE_FILE) {
            Err(error) if error.is_not_found() => (store(State::new(), None), Opened::Fresh),
            // Writing over a device or a FIFO would replace it: state stays in memory.
            Err(error @ FileInputError::NotRegular(_)) => {
                let mut opened = Self::in_memory();
                opened.healthy = false;
                (
                    opened,
                    Opened::Replaced {
                        error: LoadError::Input(error),
                        aside: None,
                    },
                )
            }
            Err(error @ FileInputError::TooLarge { .. }) => {
                let aside = sibling(path, "corrupt");
                let aside = fs::rename(path, &aside).ok().map(|()| aside);
                (
                    store(State::new(), None),
                    Opened::Replaced {
                        error: LoadError::Input(error),
                        aside,
                    },
                )
            }
            Err(error) => {
                let mut opened = store(State::new(), None);
                opened.healthy = false;
                (
                    opened,
                    Opened::Replaced {
                        error: LoadError::Input(error),
                        aside: None,
                    },
                )
            }
            Ok(bytes) => match State::parse(&bytes) {
                Ok(state) => (store(state.clone(), Some(state)), Opened::Loaded),
                Err(error) => {
                    let suffix = match error {
                        LoadError::Newer(_) => "newer",
                        _ => "corrupt",
                    };
                    let aside = sibling(path, suffix);
                    let aside = fs::rename(path, &aside).ok().map(|()| aside);
                    (store(State::new(), None), Opened::Replaced { error, aside })
                }
            },
        }
    }

    /// What [`StateStore::open`] would find at `path`, without creating, moving or writing
    /// anything (for `check-config`): the state, `None` when there is no file yet, or why the
    /// agent would set the file aside and start fresh.
    pub fn inspect(path: &Path) -> Result<Option<State>, LoadError> {
        match file_input::read(path, file_input::STATE_FILE) {
            Err(error) if error.is_not_found() => Ok(None),
            Err(error) => Err(LoadError::Input(error)),
            Ok(bytes) => State::parse(&bytes).map(Some),
        }
    }

    fn in_memory() -> Self {
        Self {
            path: None,
            state: State::new(),
            written: None,
            healthy: true,
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
        self.healthy
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
        match write_atomically(&path, &self.state.to_bytes()) {
            Ok(()) => {
                if !self.healthy {
                    tracing::info!(state_file = %path.display(), "state file written again");
                }
                self.healthy = true;
                self.written = Some(self.state.clone());
            }
            Err(error) => {
                if self.healthy {
                    tracing::warn!(
                        state_file = %path.display(),
                        %error,
                        "cannot write the state file: keeping state in memory, so approvals and reboot classification do not survive a restart"
                    );
                }
                self.healthy = false;
            }
        }
    }
}

/// Creates `dir` and its missing parents, readable and writable by their owner only (0700 on Unix).
pub fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
}

/// `<file>.<suffix>` next to `path`.
fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".");
    name.push(suffix);
    path.with_file_name(name)
}

/// Temp file in the same directory, fsync, rename over `path`, fsync the directory.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_owned(),
        _ => PathBuf::from("."),
    };
    let temp = sibling(path, "tmp");
    let result = (|| {
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&temp)?;
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
