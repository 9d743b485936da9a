//! Every file the operator names (the state and boot id files, the web config and the files it
//! names, the approval policy, the notification receivers and theirs, the kubeconfig, the
//! `OTEL_EXPORTER_OTLP_*CERTIFICATE` and `_CLIENT_KEY` files) is read here, one way: a regular
//! file only, and never more than its kind's cap. A path pointing at `/dev/zero` would otherwise
//! fill memory, and one at a FIFO would hang startup with no word; both are refused at once with
//! a reason. What a refusal does (exit 64, in-memory state, traces off) is the caller's to decide.

use std::fmt;
use std::fs::File;
use std::io::Read;
use std::path::Path;

/// What kind of file is read, and the most it may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    /// The kind of file, as the error names it.
    pub what: &'static str,
    /// Bytes; one more is an error.
    pub max_bytes: u64,
}

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;

/// `--state.file`: a few hundred bytes per tracked event or approval.
pub const STATE_FILE: Limit = Limit {
    what: "state file",
    max_bytes: 4 * MIB,
};
/// A state file over [`STATE_FILE`]'s cap, which only an older agent wrote (it wrote without
/// one): read once under this larger cap for the approvals it names, then replaced.
pub const OVERSIZED_STATE_FILE: Limit = Limit {
    what: "state file",
    max_bytes: 16 * MIB,
};
/// `--state.boot-id-file`: a UUID and a newline.
pub const BOOT_ID: Limit = Limit {
    what: "boot id file",
    max_bytes: 4 * KIB,
};
/// `--web.config.file` and the certificate, key and client CA files it names.
pub const WEB_CONFIG: Limit = Limit {
    what: "web config file",
    max_bytes: MIB,
};
/// `--approve.policy-file`.
pub const APPROVAL_POLICY: Limit = Limit {
    what: "approval policy file",
    max_bytes: MIB,
};
/// `--notify.config-file` and the template, CA and header files its receivers name.
pub const NOTIFY_RECEIVERS: Limit = Limit {
    what: "notification receivers file",
    max_bytes: MIB,
};
/// `--kubernetes.kubeconfig` or `KUBECONFIG`: certificates may be embedded.
pub const KUBECONFIG: Limit = Limit {
    what: "kubeconfig",
    max_bytes: 4 * MIB,
};
/// `OTEL_EXPORTER_OTLP_CERTIFICATE`, `_CLIENT_CERTIFICATE`, `_CLIENT_KEY` (and `_TRACES_` forms).
pub const OTLP_PEM: Limit = Limit {
    what: "OTLP certificate or key file",
    max_bytes: MIB,
};

/// Why a file was not read.
#[derive(Debug, thiserror::Error)]
pub enum FileInputError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("not a regular file ({0}), so it is not read")]
    NotRegular(FileType),
    #[error("larger than {max} bytes, the most a {what} may hold")]
    TooLarge { what: &'static str, max: u64 },
}

impl FileInputError {
    /// Whether the file does not exist (some callers treat that as "start fresh").
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::Io(e) if e.kind() == std::io::ErrorKind::NotFound)
    }
}

/// The kind of a path that is not a regular file, for the error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileType {
    Directory,
    Fifo,
    Device,
    Socket,
    Other,
}

impl fmt::Display for FileType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Directory => "a directory",
            Self::Fifo => "a FIFO",
            Self::Device => "a device",
            Self::Socket => "a socket",
            Self::Other => "not a plain file",
        })
    }
}

fn check_type(file_type: std::fs::FileType) -> Result<(), FileInputError> {
    if file_type.is_file() {
        return Ok(());
    }
    let kind = if file_type.is_dir() {
        FileType::Directory
    } else {
        special(file_type)
    };
    Err(FileInputError::NotRegular(kind))
}

#[cfg(unix)]
fn special(file_type: std::fs::FileType) -> FileType {
    use std::os::unix::fs::FileTypeExt;
    if file_type.is_fifo() {
        FileType::Fifo
    } else if file_type.is_char_device() || file_type.is_block_device() {
        FileType::Device
    } else if file_type.is_socket() {
        FileType::Socket
    } else {
        FileType::Other
    }
}

#[cfg(not(unix))]
fn special(_: std::fs::FileType) -> FileType {
    FileType::Other
}

/// Opens `path` if it is a regular file within `limit`. The type is checked before opening
/// (opening a FIFO for reading blocks until a writer comes) and again on the open file, in case
/// the path was swapped in between.
fn open(path: &Path, limit: Limit) -> Result<File, FileInputError> {
    check_type(std::fs::metadata(path)?.file_type())?;
    let file = File::open(path)?;
    let metadata = file.metadata()?;
    check_type(metadata.file_type())?;
    if metadata.len() > limit.max_bytes {
        return Err(too_large(limit));
    }
    Ok(file)
}

fn too_large(limit: Limit) -> FileInputError {
    FileInputError::TooLarge {
        what: limit.what,
        max: limit.max_bytes,
    }
}

/// Checks that `path` is a regular file within `limit`, for a library that reads it itself.
pub fn check(path: &Path, limit: Limit) -> Result<(), FileInputError> {
    open(path, limit).map(drop)
}

/// The bytes of `path`: a regular file of at most `limit.max_bytes`. At most one byte more than
/// the cap is ever read, even if the file grows while it is read.
pub fn read(path: &Path, limit: Limit) -> Result<Vec<u8>, FileInputError> {
    let file = open(path, limit)?;
    let mut bytes = Vec::new();
    file.take(limit.max_bytes.saturating_add(1))
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit.max_bytes {
        return Err(too_large(limit));
    }
    Ok(bytes)
}

/// [`read`] as UTF-8 text.
pub fn read_to_string(path: &Path, limit: Limit) -> Result<String, FileInputError> {
    String::from_utf8(read(path, limit)?).map_err(|_| {
        FileInputError::Io(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "stream did not contain valid UTF-8",
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh directory of its own under the system's temporary directory.
    fn temp_dir(name: &str) -> std::io::Result<std::path::PathBuf> {
        let dir = std::env::temp_dir().join(format!("file-input-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        Ok(dir)
    }

    const SMALL: Limit = Limit {
        what: "test file",
        max_bytes: 8,
    };

    #[test]
    fn a_file_within_its_cap_is_read_whole() -> Result<(), Box<dyn std::error::Error>> {
        let dir = temp_dir("whole")?;
        let path = dir.join("f");
        std::fs::write(&path, b"12345678")?;
        assert_eq!(read(&path, SMALL)?, b"12345678");
        Ok(())
    }

    #[test]
    fn a_file_over_its_cap_is_refused_by_size() -> Result<(), Box<dyn std::error::Error>> {
        let dir = temp_dir("size")?;
        let path = dir.join("f");
        std::fs::write(&path, b"123456789")?;
        let error = read(&path, SMALL).err().ok_or("read")?;
        assert_eq!(
            error.to_string(),
            "larger than 8 bytes, the most a test file may hold"
        );
        Ok(())
    }

    #[test]
    fn a_directory_is_refused_by_kind() -> Result<(), Box<dyn std::error::Error>> {
        let dir = temp_dir("kind")?;
        let error = read(&dir, SMALL).err().ok_or("read")?;
        assert!(matches!(
            error,
            FileInputError::NotRegular(FileType::Directory)
        ));
        Ok(())
    }

    #[cfg(unix)]
    #[test]
    fn a_device_is_refused_without_reading_it() {
        let error = read(Path::new("/dev/zero"), SMALL).err();
        assert!(matches!(
            error,
            Some(FileInputError::NotRegular(FileType::Device))
        ));
    }

    #[test]
    fn a_missing_file_says_so() {
        let error = read(Path::new("/nonexistent/file"), SMALL).err();
        assert!(error.is_some_and(|e| e.is_not_found()));
    }
}
