//! Reading this machine's boot identity, for the core's
//! [`azure_scheduled_events_core::boot::classify`]: Linux's `/proc/sys/kernel/random/boot_id`, a
//! random id the kernel draws at each boot (the path is a flag, so tests present another boot
//! without touching the machine); on Windows, which has no such id, the time it booted, now less
//! the tick count (`GetTickCount64`).

use std::path::Path;

#[cfg(windows)]
use azure_scheduled_events_core::boot;

use crate::config::file_input;

/// When Windows booted: now less the time since boot (`GetTickCount64`).
#[cfg(windows)]
fn windows_boot_id() -> Option<String> {
    let uptime = uptime_lib::get().ok()?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?;
    now.checked_sub(uptime).map(boot::boot_time_id)
}

/// The current boot id, trimmed; `None` if it cannot be read or is empty. On Windows an empty
/// path (the default) asks Windows when it booted instead.
pub fn read_boot_id(path: &Path) -> Option<String> {
    #[cfg(windows)]
    if path.as_os_str().is_empty() {
        return windows_boot_id();
    }
    let text = file_input::read_to_string(path, file_input::BOOT_ID).ok()?;
    let id = text.trim();
    (!id.is_empty() && id.len() <= 128).then(|| id.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boot_ids_are_read_trimmed_and_an_unreadable_one_is_none() {
        let dir = std::env::temp_dir().join(format!("boot-id-test-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let file = dir.join("boot_id");
        let _ = std::fs::write(&file, "6f1c2a1e-8a3b-4c4d-9e5f-0a1b2c3d4e5f\n");
        assert_eq!(
            read_boot_id(&file).as_deref(),
            Some("6f1c2a1e-8a3b-4c4d-9e5f-0a1b2c3d4e5f")
        );
        let _ = std::fs::write(&file, " \n");
        assert_eq!(read_boot_id(&file), None);
        assert_eq!(read_boot_id(&dir.join("missing")), None);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
