//! Stamps what `--version` and `..._build_info` say of the build: the source revision
//! (`BUILD_REVISION` from the environment, as container builds have no `.git`, else
//! `git rev-parse`, else `unknown`), the build date (`SOURCE_DATE_EPOCH` when set, for
//! reproducible builds, else today, UTC), the target triple and the cargo features.

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=BUILD_REVISION");
    // Where git keeps what HEAD is and where the branches point, as git says: in a worktree (or
    // with GIT_DIR) `.git` is not that directory. A commit changes one of them.
    if let Some(paths) = git(&[
        "rev-parse",
        "--git-path",
        "HEAD",
        "--git-path",
        "refs/heads",
        "--git-path",
        "packed-refs",
    ]) {
        for path in paths.lines() {
            if std::path::Path::new(path).exists() {
                println!("cargo:rerun-if-changed={path}");
            }
        }
    }
    let revision = std::env::var("BUILD_REVISION")
        .ok()
        .filter(|r| !r.is_empty())
        .or_else(|| git(&["rev-parse", "--short=12", "HEAD"]));
    println!(
        "cargo:rustc-env=BUILD_REVISION={}",
        revision.unwrap_or_else(|| "unknown".to_owned())
    );

    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");
    let seconds = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .ok()
                .map(|d| d.as_secs())
        })
        .unwrap_or(0);
    println!(
        "cargo:rustc-env=BUILD_DATE={}",
        civil_date(seconds / 86_400)
    );
    println!(
        "cargo:rustc-env=BUILD_TARGET={}",
        std::env::var("TARGET").unwrap_or_default()
    );
    let mut features: Vec<String> = std::env::vars()
        .filter_map(|(name, _)| name.strip_prefix("CARGO_FEATURE_").map(str::to_owned))
        .map(|name| name.to_lowercase().replace('_', "-"))
        .filter(|name| name != "default")
        .collect();
    features.sort();
    let features = if features.is_empty() {
        "none".to_owned()
    } else {
        features.join(", ")
    };
    println!("cargo:rustc-env=BUILD_FEATURES={features}");
}

/// What `git ARGS` prints, trimmed, when git is there and succeeds.
fn git(args: &[&str]) -> Option<String> {
    let output = Command::new("git").args(args).output().ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

/// The proleptic Gregorian date (YYYY-MM-DD) of a day counted from 1970-01-01 (Howard Hinnant's
/// `civil_from_days`).
fn civil_date(days: u64) -> String {
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}
