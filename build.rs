//! Stamps the source revision into `..._build_info`: `BUILD_REVISION` from the environment
//! (container builds, which have no `.git`), else `git rev-parse`, else `unknown`.

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=BUILD_REVISION");
    for path in [".git/HEAD", ".git/refs/heads"] {
        if std::path::Path::new(path).exists() {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    let revision = std::env::var("BUILD_REVISION")
        .ok()
        .filter(|r| !r.is_empty())
        .or_else(|| {
            let output = Command::new("git")
                .args(["rev-parse", "--short=12", "HEAD"])
                .output()
                .ok()?;
            output
                .status
                .success()
                .then(|| String::from_utf8_lossy(&output.stdout).trim().to_owned())
        });
    println!(
        "cargo:rustc-env=BUILD_REVISION={}",
        revision.unwrap_or_else(|| "unknown".to_owned())
    );
}
