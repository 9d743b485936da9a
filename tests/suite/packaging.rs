//! What users install, checked as they would: the artefacts `scripts/dist.sh` leaves in
//! `target/dist` (.ci/run builds them once before the suite) — the tarball's binary against glibc
//! 2.28 and running, the .deb's fields and files and a real `dpkg` installing it into a scratch
//! root — and the Helm chart, linted and rendered by a real `helm`, its objects compared with what
//! the agent reads and with `alerts/` and `dashboards/`.

use crate::ops;

use std::process::Command;

use ops::Error;
use serde_json::Value;

use {
    crate::common::process::AgentProcess,
    crate::common::{self, Imds, THIS_VM, TempDir, wait},
    crate::otlp,
    azure_scheduled_events_simulator::Scenario,
    serde::Deserialize,
    serde_json::json,
    std::collections::{BTreeMap, BTreeSet},
    std::path::{Path, PathBuf},
    std::process::{Output, Stdio},
};

type TestResult = Result<(), Error>;

const NAME: &str = "azure-scheduled-events-exporter";
const VERSION: &str = env!("CARGO_PKG_VERSION");
const BIN: &str = env!("CARGO_BIN_EXE_azure-scheduled-events-exporter");
const CHART: &str = "deploy/helm/azure-scheduled-events-exporter";
const STATE_DIR: &str = "/var/lib/azure-scheduled-events-exporter";
/// The oldest glibc the release binary supports (RHEL 8, Ubuntu 20.04, Debian 10).
const OLDEST_GLIBC: (u32, u32) = (2, 28);

fn report(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

fn run(program: impl AsRef<std::ffi::OsStr>, args: &[&str]) -> Result<Output, Error> {
    let program = program.as_ref();
    Command::new(program)
        .args(args)
        .current_dir(ops::repo())
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{}: {e}", program.to_string_lossy()).into())
}

/// `program args`, which must succeed; its standard output.
fn ok(program: impl AsRef<std::ffi::OsStr>, args: &[&str]) -> Result<String, Error> {
    let output = run(&program, args)?;
    if !output.status.success() {
        return Err(format!(
            "{} {args:?}: {}\n{}",
            program.as_ref().to_string_lossy(),
            output.status,
            report(&output)
        )
        .into());
    }
    Ok(String::from_utf8(output.stdout)?)
}

/// `target/dist`, as `scripts/dist.sh` leaves it.
fn dist(file: &str) -> Result<PathBuf, Error> {
    let path = ops::repo().join("target/dist").join(file);
    if !path.exists() {
        return Err(format!(
            "{} is missing: run scripts/dist.sh first (.ci/run does)",
            path.display()
        )
        .into());
    }
    Ok(path)
}

fn tarball_name() -> String {
    format!("{NAME}-{VERSION}-x86_64-linux-gnu.tar.gz")
}

fn deb_name() -> String {
    format!("{NAME}_{VERSION}-1_amd64.deb")
}

/// The tarball, unpacked into a fresh directory: (directory, its single top-level folder).
fn unpacked_tarball() -> Result<(TempDir, PathBuf), Error> {
    let tarball = dist(&tarball_name())?;
    let dir = TempDir::new("tarball")?;
    ok(
        "tar",
        &[
            "-xzf",
            &tarball.to_string_lossy(),
            "-C",
            &dir.0.to_string_lossy(),
        ],
    )?;
    let top = dir.0.join(format!("{NAME}-{VERSION}-x86_64-linux-gnu"));
    Ok((dir, top))
}

/// Every `GLIBC_x.y[.z]` version the binary's dynamic symbols need.
fn glibc_versions(binary: &Path) -> Result<BTreeSet<(u32, u32, u32)>, Error> {
    let symbols = ok("objdump", &["-T", &binary.to_string_lossy()])
        .map_err(|e| format!("objdump (Debian package binutils) is required: {e}"))?;
    let mut versions = BTreeSet::new();
    for token in symbols.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.')) {
        let Some(version) = token.strip_prefix("GLIBC_") else {
            continue;
        };
        let parts: Vec<u32> = version
            .split('.')
            .map(str::parse)
            .collect::<Result<_, _>>()
            .map_err(|_| format!("a symbol needs glibc's private {token}"))?;
        let part = |i: usize| parts.get(i).copied().unwrap_or(0);
        versions.insert((part(0), part(1), part(2)));
    }
    Ok(versions)
}

#[test]
fn the_tarball_holds_the_binary_license_readme_unit_and_environment_file() -> TestResult {
    let listing = ok("tar", &["-tzvf", &dist(&tarball_name())?.to_string_lossy()])?;
    let top = format!("{NAME}-{VERSION}-x86_64-linux-gnu/");
    let mut files = BTreeSet::new();
    for line in listing.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(fields.get(1), Some(&"0/0"), "not owned by root: {line}");
        let path = fields.last().ok_or("empty line")?;
        assert!(path.starts_with(&top), "{path} is outside {top}");
        files.insert(path.trim_start_matches(&top).to_owned());
    }
    let expected: BTreeSet<String> = [
        "",
        NAME,
        "LICENSE",
        "README.md",
        &format!("{NAME}.service"),
        &format!("{NAME}.env"),
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    assert_eq!(files, expected);

    let (_dir, top) = unpacked_tarball()?;
    // The README with its links made absolute: the tarball holds none of the files it links to.
    assert_eq!(
        std::fs::read_to_string(top.join("README.md"))?,
        archive_readme()?,
        "the tarball's README is not scripts/archive-readme.sh's"
    );
    for (shipped, source) in [
        ("LICENSE", "LICENSE"),
        (
            &format!("{NAME}.service"),
            &format!("deploy/systemd/{NAME}.service"),
        ),
        (
            &format!("{NAME}.env"),
            &format!("deploy/systemd/{NAME}.default"),
        ),
    ] {
        assert_eq!(
            std::fs::read_to_string(top.join(shipped))?,
            std::fs::read_to_string(ops::repo().join(source))?,
            "{shipped} is not {source}"
        );
    }
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(top.join(NAME))?.permissions().mode();
    assert_eq!(mode & 0o777, 0o755, "binary mode {mode:o}");
    Ok(())
}

#[test]
fn the_release_binary_needs_nothing_newer_than_glibc_2_28() -> TestResult {
    let (_dir, top) = unpacked_tarball()?;
    let binary = top.join(NAME);
    let versions = glibc_versions(&binary)?;
    let newest = versions
        .last()
        .ok_or("no GLIBC_ symbol versions: not a glibc binary?")?;
    eprintln!(
        "newest glibc symbol version: {}.{}.{} ({} versions)",
        newest.0,
        newest.1,
        newest.2,
        versions.len()
    );
    assert!(
        (newest.0, newest.1) <= OLDEST_GLIBC,
        "needs GLIBC_{}.{}: {versions:?}",
        newest.0,
        newest.1
    );
    // The same check finds the newer symbols of a binary linked against this machine's glibc
    // (the test binary itself is built that way): it really reads versions.
    let host = glibc_versions(&std::env::current_exe()?)?;
    let host_newest = host
        .last()
        .ok_or("no symbol versions read from the test binary")?;
    assert!(
        (host_newest.0, host_newest.1) > OLDEST_GLIBC,
        "this machine's build needs only {host_newest:?}: the check cannot tell"
    );

    // Only glibc's own libraries: the .deb depends on libc6 alone.
    let dynamic = ok("objdump", &["-p", &binary.to_string_lossy()])?;
    let needed: BTreeSet<&str> = dynamic
        .lines()
        .filter_map(|l| l.trim().strip_prefix("NEEDED"))
        .map(str::trim)
        .collect();
    let allowed: BTreeSet<&str> = [
        "libc.so.6",
        "libm.so.6",
        "libpthread.so.0",
        "libdl.so.2",
        "librt.so.1",
        "ld-linux-x86-64.so.2",
    ]
    .into();
    assert!(
        !needed.is_empty() && needed.is_subset(&allowed),
        "NEEDED {needed:?}"
    );
    Ok(())
}

/// `--version` of a VM package: the version first, then where the binary came from: a real
/// revision, the build date, the target, and no Kubernetes client.
fn assert_vm_package_version(printed: &str) {
    let mut lines = printed.lines();
    assert_eq!(
        lines.next(),
        Some(format!("{NAME} {VERSION}").as_str()),
        "{printed}"
    );
    let revision = printed
        .lines()
        .find_map(|l| l.trim().strip_prefix("revision: "));
    assert!(
        revision.is_some_and(|r| r.len() == 12 && r.chars().all(|c| c.is_ascii_hexdigit())),
        "{printed}"
    );
    let date = printed
        .lines()
        .find_map(|l| l.trim().strip_prefix("build date: "));
    assert!(
        date.is_some_and(|d| chrono::NaiveDate::parse_from_str(d, "%Y-%m-%d").is_ok()),
        "{printed}"
    );
    assert!(
        printed.contains("\n  target: x86_64-unknown-linux-gnu\n"),
        "{printed}"
    );
    assert!(
        printed.trim_end().ends_with("\n  features: none"),
        "{printed}"
    );
}

#[test]
fn the_release_binary_prints_its_version_and_runs_the_demo() -> TestResult {
    let (_dir, top) = unpacked_tarball()?;
    let binary = top.join(NAME);
    assert_vm_package_version(&ok(&binary, &["--version"])?);

    let mut command = Command::new(&binary);
    command
        .args([
            "demo",
            "--log.format=json",
            "--web.listen-address=127.0.0.1:0",
        ])
        .env_clear()
        .stdin(Stdio::null());
    let mut agent = AgentProcess::spawn(command)?;
    let mut last = String::new();
    let metrics = wait("the release binary to read a document")
        .until_blocking(|| {
            let metrics = agent.metrics()?;
            if metrics.lines().any(|l| l == "azure_scheduled_events_up 1") {
                return Ok::<_, std::io::Error>(Some(metrics));
            }
            last = metrics;
            Ok(None)
        })
        .map_err(|e| format!("{e}:\n{last}"))?;
    assert!(
        metrics.contains(&format!("version=\"{VERSION}\"")),
        "build_info names another version"
    );
    assert!(agent.terminate()?.success());
    Ok(())
}

#[test]
fn sha256sums_match_the_artefacts() -> TestResult {
    let sums = std::fs::read_to_string(dist("SHA256SUMS")?)?;
    let named: BTreeSet<&str> = sums
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        .map(|f| f.trim_start_matches('*'))
        .collect();
    let expected: BTreeSet<String> = [tarball_name(), deb_name()].into();
    assert_eq!(
        named,
        expected.iter().map(String::as_str).collect::<BTreeSet<_>>()
    );
    let check = Command::new("sha256sum")
        .args(["--check", "--strict", "SHA256SUMS"])
        .current_dir(ops::repo().join("target/dist"))
        .output()?;
    assert!(check.status.success(), "{}", report(&check));
    Ok(())
}

/// `dpkg-deb -f`: the control fields (continuation lines joined to their field).
fn control_fields(deb: &Path) -> Result<BTreeMap<String, String>, Error> {
    let text = ok("dpkg-deb", &["-f", &deb.to_string_lossy()])?;
    let mut fields: BTreeMap<String, String> = BTreeMap::new();
    let mut last = String::new();
    for line in text.lines() {
        if line.starts_with(' ') {
            if let Some(value) = fields.get_mut(&last) {
                value.push('\n');
                value.push_str(line);
            }
        } else if let Some((key, value)) = line.split_once(':') {
            last = key.to_owned();
            fields.insert(key.to_owned(), value.trim().to_owned());
        }
    }
    Ok(fields)
}

#[test]
fn the_deb_control_fields_name_the_package_version_architecture_and_glibc() -> TestResult {
    let deb = dist(&deb_name())?;
    let fields = control_fields(&deb)?;
    let field = |name: &str| fields.get(name).map(String::as_str).unwrap_or_default();
    assert_eq!(field("Package"), NAME);
    assert_eq!(field("Version"), format!("{VERSION}-1"));
    assert_eq!(field("Architecture"), "amd64");
    assert!(
        field("Depends").contains("libc6 (>= 2.28)"),
        "Depends: {}",
        field("Depends")
    );
    assert!(field("Maintainer").contains('<'), "Maintainer");
    assert!(field("Description").contains("Scheduled Events"));
    let size: u64 = field("Installed-Size").parse()?;
    let binary_kib = std::fs::metadata(unpacked_tarball()?.1.join(NAME))?.len() / 1024;
    assert!(
        size >= binary_kib,
        "Installed-Size {size} KiB < binary {binary_kib} KiB"
    );

    let control = TempDir::new("deb-control")?;
    ok(
        "dpkg-deb",
        &["-e", &deb.to_string_lossy(), &control.0.to_string_lossy()],
    )?;
    assert_eq!(
        std::fs::read_to_string(control.path("conffiles"))?.trim(),
        format!("/etc/default/{NAME}")
    );
    for script in ["postinst", "prerm", "postrm"] {
        let path = control.path(script);
        ok("sh", &["-n", &path.to_string_lossy()])?;
        let text = std::fs::read_to_string(&path)?;
        assert!(
            text.contains("DPKG_ROOT"),
            "{script} touches the running system when dpkg installs elsewhere"
        );
    }
    Ok(())
}

#[test]
fn the_deb_ships_the_binary_unit_defaults_and_license_owned_by_root() -> TestResult {
    let deb = dist(&deb_name())?;
    let listing = ok("dpkg-deb", &["-c", &deb.to_string_lossy()])?;
    let mut files = BTreeMap::new();
    for line in listing.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(fields.get(1), Some(&"root/root"), "{line}");
        let (Some(mode), Some(path)) = (fields.first(), fields.last()) else {
            continue;
        };
        if !mode.starts_with('d') {
            files.insert(path.trim_start_matches('.').to_owned(), mode.to_string());
        }
    }
    let expected: BTreeMap<String, String> = [
        (format!("/usr/bin/{NAME}"), "-rwxr-xr-x"),
        (format!("/lib/systemd/system/{NAME}.service"), "-rw-r--r--"),
        (format!("/etc/default/{NAME}"), "-rw-r--r--"),
        (format!("/usr/share/doc/{NAME}/copyright"), "-rw-r--r--"),
        (format!("/usr/share/doc/{NAME}/README.md"), "-rw-r--r--"),
    ]
    .into_iter()
    .map(|(p, m)| (p, m.to_owned()))
    .collect();
    assert_eq!(files, expected);
    Ok(())
}

/// An empty dpkg database under `root`.
fn scratch_root() -> Result<TempDir, Error> {
    let root = TempDir::new("dpkg-root")?;
    for dir in [
        "var/lib/dpkg/info",
        "var/lib/dpkg/updates",
        "var/lib/dpkg/triggers",
    ] {
        std::fs::create_dir_all(root.path(dir))?;
    }
    std::fs::write(root.path("var/lib/dpkg/status"), "")?;
    std::fs::write(root.path("var/lib/dpkg/available"), "")?;
    Ok(root)
}

fn dpkg(root: &TempDir, args: &[&str]) -> Result<String, Error> {
    let root_flag = format!("--root={}", root.0.display());
    let log = format!("--log={}", root.path("dpkg.log").display());
    let mut all = vec![
        root_flag.as_str(),
        log.as_str(),
        // The scratch root has no shell to chroot into; the scripts see DPKG_ROOT instead.
        "--force-script-chrootless",
        "--force-not-root",
        // libc6 is not in the scratch root's empty database.
        "--force-depends",
    ];
    all.extend_from_slice(args);
    ok("dpkg", &all)
}

#[test]
fn dpkg_installs_removes_and_purges_the_deb_in_a_scratch_root() -> TestResult {
    let deb = dist(&deb_name())?;
    let root = scratch_root()?;
    dpkg(&root, &["--install", &deb.to_string_lossy()])?;
    let status = dpkg(&root, &["--status", NAME])?;
    assert!(status.contains("Status: install ok installed"), "{status}");
    let listed = dpkg(&root, &["--listfiles", NAME])?;
    for file in [
        format!("/usr/bin/{NAME}"),
        format!("/lib/systemd/system/{NAME}.service"),
        format!("/etc/default/{NAME}"),
    ] {
        assert!(
            listed.lines().any(|l| l == file),
            "{file} not in:\n{listed}"
        );
        assert!(root.0.join(&file[1..]).is_file(), "{file} not installed");
    }

    let binary = root.path(&format!("usr/bin/{NAME}"));
    assert_vm_package_version(&ok(&binary, &["--version"])?);
    let unit = std::fs::read_to_string(root.path(&format!("lib/systemd/system/{NAME}.service")))?;
    let shipped =
        std::fs::read_to_string(ops::repo().join(format!("deploy/systemd/{NAME}.service")))?;
    assert_eq!(
        unit,
        shipped.replace(
            &format!("ExecStart=/usr/local/bin/{NAME}"),
            &format!("ExecStart=/usr/bin/{NAME}")
        ),
        "the packaged unit differs from deploy/systemd beyond ExecStart"
    );
    assert!(unit.contains(&format!("EnvironmentFile=-/etc/default/{NAME}")));
    assert!(unit.contains(&format!("StateDirectory={NAME}")));
    // The packaged unit verifies with its binary where the package puts it.
    let verify_unit = TempDir::new("deb-unit")?;
    let path = verify_unit.path(&format!("{NAME}.service"));
    std::fs::write(
        &path,
        unit.replace(
            &format!("ExecStart=/usr/bin/{NAME}"),
            &format!("ExecStart={}", binary.display()),
        ),
    )?;
    let verify = run("systemd-analyze", &["verify", &path.to_string_lossy()])?;
    assert!(
        verify.status.success() && report(&verify).trim().is_empty(),
        "systemd-analyze verify:\n{}",
        report(&verify)
    );

    // A user's settings and the agent's state survive a remove; a purge deletes both.
    let defaults = root.path(&format!("etc/default/{NAME}"));
    std::fs::write(&defaults, "AZURE_SCHEDULED_EVENTS_LOG_LEVEL=debug\n")?;
    let state = root.path(&format!("var/lib/private/{NAME}"));
    std::fs::create_dir_all(&state)?;
    std::fs::write(state.join("state.json"), "{}")?;
    std::os::unix::fs::symlink(
        format!("private/{NAME}"),
        root.path(&format!("var/lib/{NAME}")),
    )?;
    dpkg(&root, &["--remove", NAME])?;
    assert!(!binary.exists(), "remove left the binary");
    assert!(
        std::fs::read_to_string(&defaults)?.contains("LOG_LEVEL=debug"),
        "remove lost /etc/default"
    );
    assert!(state.join("state.json").exists(), "remove lost the state");
    dpkg(&root, &["--purge", NAME])?;
    assert!(!defaults.exists(), "purge left /etc/default/{NAME}");
    assert!(!state.exists(), "purge left the state directory");
    assert!(
        std::fs::symlink_metadata(root.path(&format!("var/lib/{NAME}"))).is_err(),
        "purge left the state directory's link"
    );
    Ok(())
}

// ---- Helm ----

fn helm(args: &[&str]) -> Result<Output, Error> {
    run(ops::tool("helm"), args).map_err(|e| {
        format!("helm is required (.ci/run installs it into target/ci-tools/bin): {e}").into()
    })
}

/// `helm template` of the chart as release `azure-scheduled-events-exporter` in namespace
/// `azure-scheduled-events`, parsed.
fn render(extra: &[&str]) -> Result<Vec<Value>, Error> {
    render_chart(CHART, extra)
}

fn render_chart(chart: &str, extra: &[&str]) -> Result<Vec<Value>, Error> {
    let mut args = vec![NAME, chart, "--namespace", "azure-scheduled-events"];
    args.extend_from_slice(extra);
    ops::helm_template(&args)
}

const ALL_ON: &[&str] = &[
    "--values",
    "deploy/helm/azure-scheduled-events-exporter/ci/all-on-values.yaml",
];

/// Every optional value on, and the Windows DaemonSet beside the Linux one.
const ALL_ON_WITH_WINDOWS: &[&str] = &[
    "--values",
    "deploy/helm/azure-scheduled-events-exporter/ci/all-on-values.yaml",
    "--set",
    "windows.enabled=true",
];

fn one<'a>(objects: &'a [Value], kind: &str) -> Result<&'a Value, Error> {
    match ops::of_kind(objects, kind).as_slice() {
        [object] => Ok(object),
        other => Err(format!("{} {kind} objects", other.len()).into()),
    }
}

fn chart_yaml() -> Result<Value, Error> {
    ops::yaml(&ops::repo().join(CHART).join("Chart.yaml"))
}

#[test]
fn helm_lints_the_chart_with_defaults_and_with_every_optional_value_on() -> TestResult {
    for extra in [&[][..], ALL_ON, ALL_ON_WITH_WINDOWS] {
        let mut args = vec!["lint", "--strict", CHART];
        args.extend_from_slice(extra);
        let output = helm(&args)?;
        assert!(
            output.status.success() && report(&output).contains("0 chart(s) failed"),
            "helm lint {extra:?}:\n{}",
            report(&output)
        );
    }
    // values.schema.json turns a mistyped value into an error naming it, before anything renders.
    let output = helm(&[
        "lint",
        "--strict",
        CHART,
        "--set",
        "podMonitor.apiVersion=monitoring.coreos.com/v2,port=metrics",
    ])?;
    assert!(!output.status.success(), "{}", report(&output));
    for named in ["/podMonitor/apiVersion", "/port"] {
        assert!(report(&output).contains(named), "{}", report(&output));
    }
    // The same helm refuses a broken copy of the chart: it is really linting.
    let broken = TempDir::new("chart")?;
    let copy = broken.path("chart");
    ok("cp", &["-rL", CHART, &copy.to_string_lossy()])?;
    std::fs::write(
        copy.join("templates/broken.yaml"),
        "kind: ConfigMap\nmetadata:\n  name: {{ .Values.no.such.value }}\n",
    )?;
    let output = helm(&["lint", "--strict", &copy.to_string_lossy()])?;
    assert!(!output.status.success(), "{}", report(&output));
    Ok(())
}

/// Objects of the values schema that are Kubernetes objects passed to the pod as written (checked
/// against the Kubernetes schemas by `rendered_manifests_are_valid_kubernetes_objects`), or Helm's own.
const PASSED_THROUGH: &[&str] = &[
    "/global",
    "/env/*",
    "/envFrom/*",
    "/extraVolumes/*",
    "/extraVolumeMounts/*",
    "/tolerations/*",
    "/affinity/nodeAffinity",
    "/affinity/podAffinity",
    "/affinity/podAntiAffinity",
];

/// Every object schema of values.schema.json with its place in the values (`/state/init`, `/probes/
/// httpHeaders/*` for the items of an array), `$ref`s followed.
fn schema_objects(
    root: &Value,
    node: &Value,
    at: &str,
    found: &mut Vec<(String, Value)>,
) -> Result<(), Error> {
    let node = match node["$ref"].as_str() {
        Some(reference) => {
            let pointer = reference
                .strip_prefix('#')
                .ok_or("a $ref outside the schema")?;
            root.pointer(pointer)
                .ok_or_else(|| format!("{at}: no {reference}"))?
        }
        None => node,
    };
    if node["type"] == "object" {
        found.push((at.to_owned(), node.clone()));
    }
    for (name, property) in node["properties"].as_object().into_iter().flatten() {
        schema_objects(root, property, &format!("{at}/{name}"), found)?;
    }
    if node["items"].is_object() {
        schema_objects(root, &node["items"], &format!("{at}/*"), found)?;
    }
    Ok(())
}

/// A plausible slip of the finger: the first property's name with its last two letters swapped.
fn misspelt(properties: &serde_json::Map<String, Value>) -> Option<String> {
    properties.keys().find_map(|name| {
        let mut letters: Vec<char> = name.chars().collect();
        let n = letters.len();
        (n >= 2).then_some(())?;
        letters.swap(n - 1, n - 2);
        let typo: String = letters.into_iter().collect();
        (!properties.contains_key(&typo)).then_some(typo)
    })
}

/// values.schema.json refuses unknown keys at every level, so a mistyped value (`--set
/// podMonitor.enabeld=true`) fails `helm template` naming it instead of silently rendering nothing.
#[test]
fn a_mistyped_value_at_any_level_fails_helm_template_and_is_named() -> TestResult {
    let schema: Value = serde_json::from_str(&std::fs::read_to_string(
        ops::repo().join(CHART).join("values.schema.json"),
    )?)?;
    let mut objects = Vec::new();
    schema_objects(&schema, &schema, "", &mut objects)?;
    let mut tried = Vec::new();
    for (at, object) in &objects {
        match (
            object["properties"].as_object(),
            &object["additionalProperties"],
        ) {
            (Some(properties), Value::Bool(false)) => {
                let typo = misspelt(properties).ok_or_else(|| format!("{at}: no property"))?;
                // `--set` syntax: a.b.c, and [0] for the first item of an array.
                let key = format!("{at}/{typo}")
                    .trim_start_matches('/')
                    .replace("/*", "[0]")
                    .replace('/', ".");
                let set = format!("{key}=x");
                let output = helm(&["template", NAME, CHART, "--set", &set])?;
                let text = report(&output);
                assert!(!output.status.success(), "--set {set} rendered:\n{text}");
                let place = format!("at '{}'", at.replace("/*", "/0"));
                assert!(
                    text.contains(&format!("'{typo}' not allowed")) && text.contains(&place),
                    "--set {set}: the error does not name {typo} at {place}:\n{text}"
                );
                tried.push(key);
            }
            (Some(_), other) => panic!("{at}: additionalProperties is {other}, not false"),
            // Maps of names (labels, flags) say what their values are; Kubernetes objects are
            // passed through and checked against the Kubernetes schemas.
            (None, additional) => assert!(
                additional.is_object() || PASSED_THROUGH.contains(&at.as_str()),
                "{at}: an object that accepts any key"
            ),
        }
    }
    eprintln!("refused: {}", tried.join(", "));
    // Each depth was tried: the top level, a block, and objects two and three levels down.
    for parent in [
        "",
        "podMonitor.",
        "state.init.",
        "state.init.resources.",
        "updateStrategy.rollingUpdate.",
        "probes.httpHeaders[0].",
    ] {
        assert!(
            tried
                .iter()
                .any(|t| t.strip_prefix(parent).is_some_and(|key| !key.contains('.'))),
            "no key tried directly under {parent:?}: {tried:?}"
        );
    }
    // Correctly spelt, the same values render.
    render(&[
        "--set",
        "podMonitor.enabled=true,state.init.resources.limits.cpu=1",
    ])?;
    Ok(())
}

#[test]
fn the_chart_runs_the_agent_on_every_node_non_root_with_a_read_only_root() -> TestResult {
    let objects = render(&[])?;
    // `helm test`'s hook is rendered too, but never installed: only `helm test` creates it.
    let (hooks, objects): (Vec<Value>, Vec<Value>) = objects
        .into_iter()
        .partition(|o| o["metadata"]["annotations"].get("helm.sh/hook").is_some());
    let kinds: BTreeSet<&str> = objects.iter().filter_map(|o| o["kind"].as_str()).collect();
    assert_eq!(
        kinds,
        ["DaemonSet", "ServiceAccount"].into(),
        "by default only the agent: the monitoring objects need their CRDs and are opt-in"
    );
    let hooks: Vec<(&str, &str)> = hooks
        .iter()
        .filter_map(|o| {
            Some((
                o["kind"].as_str()?,
                o["metadata"]["annotations"]["helm.sh/hook"].as_str()?,
            ))
        })
        .collect();
    assert_eq!(
        hooks,
        [("Pod", "test")],
        "the only hook is the check-config test"
    );
    let ds = one(&objects, "DaemonSet")?;
    let pod = &ds["spec"]["template"]["spec"];
    // The pod's own network, where pods reach IMDS on AKS by default.
    assert_eq!(pod["hostNetwork"], false, "host networking by default");
    assert!(pod.get("dnsPolicy").is_none(), "{}", pod["dnsPolicy"]);
    assert_eq!(pod["automountServiceAccountToken"], false);
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(pod["securityContext"]["runAsUser"], 65532);
    assert_eq!(pod["priorityClassName"], "system-node-critical");
    assert_eq!(pod["nodeSelector"], json!({"kubernetes.io/os": "linux"}));
    // A toleration with operator Exists and no key tolerates every taint, Spot pools' included.
    let tolerations = pod["tolerations"].as_array().ok_or("no tolerations")?;
    assert!(
        tolerations.iter().any(|t| t["operator"] == "Exists"
            && t.get("key").is_none()
            && t.get("effect").is_none()),
        "{tolerations:?}"
    );

    let containers = pod["containers"].as_array().ok_or("no containers")?;
    assert_eq!(containers.len(), 1);
    let agent = &containers[0];
    let security = &agent["securityContext"];
    assert_eq!(security["runAsNonRoot"], true);
    assert_eq!(security["allowPrivilegeEscalation"], false);
    assert_eq!(security["readOnlyRootFilesystem"], true);
    assert_eq!(security["capabilities"]["drop"], json!(["ALL"]));
    assert_eq!(agent["ports"][0]["containerPort"], 10188);
    assert!(agent["ports"][0].get("hostPort").is_none());

    // By default the state directory is the pod's (an emptyDir that fsGroup gives to the agent's
    // group): no hostPath and no init container running as root.
    let volumes = pod["volumes"].as_array().ok_or("no volumes")?;
    let state = volumes
        .iter()
        .find(|v| v["name"] == "state")
        .ok_or("no state volume")?;
    assert!(state.get("hostPath").is_none(), "{state}");
    assert!(state["emptyDir"].is_object(), "{state}");
    assert_eq!(agent["volumeMounts"][0]["mountPath"], STATE_DIR);
    assert!(pod.get("initContainers").is_none(), "{pod}");

    // With state.persistent the state directory is the node's, so the state file survives node
    // reboots; only the init container that hands it to the agent's user runs as root, with no
    // capability but CHOWN, and it is the agent's own image: the pod pulls nothing else.
    let persistent = render(&["--set", "state.persistent=true"])?;
    let pod = &one(&persistent, "DaemonSet")?["spec"]["template"]["spec"];
    let agent = &pod["containers"][0];
    let state = pod["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|v| v["name"] == "state")
        .ok_or("no state volume")?;
    assert_eq!(state["hostPath"]["path"], STATE_DIR);
    let init = pod["initContainers"]
        .as_array()
        .ok_or("no init container")?;
    assert_eq!(init.len(), 1);
    assert_eq!(init[0]["image"], agent["image"], "another image is pulled");
    assert!(init[0].get("command").is_none(), "the image's entrypoint");
    assert_eq!(
        init[0]["args"],
        json!(["prepare-state-dir", "--owner=65532:65532", STATE_DIR])
    );
    assert_eq!(
        init[0]["securityContext"]["capabilities"]["drop"],
        json!(["ALL"])
    );
    assert_eq!(
        init[0]["securityContext"]["capabilities"]["add"],
        json!(["CHOWN"])
    );
    assert_eq!(init[0]["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(
        init[0]["securityContext"]["allowPrivilegeEscalation"],
        false
    );
    // Clusters with AKS's IMDS restriction: the node's network, and cluster DNS still.
    let restricted = render(&["--set", "hostNetwork=true"])?;
    let pod = &one(&restricted, "DaemonSet")?["spec"]["template"]["spec"];
    assert_eq!(pod["hostNetwork"], true);
    assert_eq!(pod["dnsPolicy"], "ClusterFirstWithHostNet");

    let agent = &containers[0];
    let env = agent["env"].as_array().ok_or("no env")?;
    let variable = |name: &str| env.iter().position(|e| e["name"] == name);
    let state_file = env
        .iter()
        .find(|e| e["name"] == "AZURE_SCHEDULED_EVENTS_STATE_FILE")
        .ok_or("no state file variable")?;
    assert_eq!(state_file["value"], format!("{STATE_DIR}/state.json"));
    // The node's name from the downward API, in OTEL_RESOURCE_ATTRIBUTES: Kubernetes expands
    // $(K8S_NODE_NAME) only when that variable comes first.
    let node = variable("K8S_NODE_NAME").ok_or("no K8S_NODE_NAME")?;
    assert_eq!(
        env[node]["valueFrom"]["fieldRef"]["fieldPath"],
        "spec.nodeName"
    );
    let attributes = variable("OTEL_RESOURCE_ATTRIBUTES").ok_or("no OTEL_RESOURCE_ATTRIBUTES")?;
    assert!(node < attributes);
    let value = env[attributes]["value"].as_str().unwrap_or_default();
    assert!(
        value
            .split(',')
            .any(|kv| kv == "k8s.node.name=$(K8S_NODE_NAME)"),
        "{value}"
    );
    Ok(())
}

#[test]
fn windows_enabled_adds_a_hostprocess_daemonset_on_windows_nodes_beside_the_linux_one() -> TestResult
{
    // Off by default; the Linux DaemonSet keeps to Linux nodes even when nodeSelector says otherwise.
    let defaults = render(&[
        "--set-json",
        r#"nodeSelector={"kubernetes.io/os":"windows","pool":"a"}"#,
    ])?;
    let linux = one(&defaults, "DaemonSet")?;
    assert_eq!(
        linux["spec"]["template"]["spec"]["nodeSelector"],
        json!({"kubernetes.io/os": "linux", "pool": "a"})
    );

    let objects = render(&[
        "--set",
        "windows.enabled=true",
        "--set-json",
        r#"windows.nodeSelector={"kubernetes.azure.com/os-sku":"Windows2022"}"#,
        "--set",
        "flags.log\\.level=debug",
    ])?;
    let daemonsets = ops::of_kind(&objects, "DaemonSet");
    let [linux, windows] = daemonsets.as_slice() else {
        return Err(format!("{} DaemonSets rendered", daemonsets.len()).into());
    };
    let (linux, windows) = if windows["metadata"]["name"]
        .as_str()
        .is_some_and(|n| n.ends_with("-windows"))
    {
        (linux, windows)
    } else {
        (windows, linux)
    };
    let pod = &windows["spec"]["template"]["spec"];
    // A HostProcess pod: a process of the node, on the node's network, where IMDS answers.
    assert_eq!(pod["hostNetwork"], true);
    assert_eq!(
        pod["securityContext"]["windowsOptions"]["hostProcess"],
        true
    );
    // The least-privileged account HostProcess allows, its state file in its own profile.
    assert_eq!(
        pod["securityContext"]["windowsOptions"]["runAsUserName"],
        "NT AUTHORITY\\Local service"
    );
    assert_eq!(
        pod["nodeSelector"],
        json!({"kubernetes.io/os": "windows", "kubernetes.azure.com/os-sku": "Windows2022"})
    );
    // No Linux state directory, init container or user: the state file is the node's own.
    assert!(pod.get("initContainers").is_none() && pod.get("volumes").is_none());
    let container = &pod["containers"][0];
    let linux_container = &linux["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        container["image"], linux_container["image"],
        "one image index"
    );
    assert_eq!(container["args"], linux_container["args"], "the same flags");
    assert_eq!(container["args"], json!(["--log.level=debug"]));
    let env = container["env"].as_array().ok_or("no env")?;
    let state_file = |env: &[Value]| {
        env.iter()
            .find(|e| e["name"] == "AZURE_SCHEDULED_EVENTS_STATE_FILE")
            .map(|e| e["value"].clone())
    };
    assert_eq!(
        state_file(env),
        Some(json!(
            "C:\\Windows\\ServiceProfiles\\LocalService\\AppData\\Local\\azure-scheduled-events-exporter\\state.json"
        )),
        "{env:?}"
    );
    // SYSTEM, asked for, keeps the Windows default (%ProgramData%), as the Windows service does.
    for (account, expected) in [
        ("NT AUTHORITY\\SYSTEM", None),
        (
            "NT AUTHORITY\\NetworkService",
            Some(json!(
                "C:\\Windows\\ServiceProfiles\\NetworkService\\AppData\\Local\\azure-scheduled-events-exporter\\state.json"
            )),
        ),
    ] {
        let objects = render(&[
            "--set",
            "windows.enabled=true",
            "--set-json",
            &format!("windows.runAsUserName={}", json!(account)),
        ])?;
        let windows = ops::of_kind(&objects, "DaemonSet")
            .into_iter()
            .find(|d| {
                d["metadata"]["name"]
                    .as_str()
                    .is_some_and(|n| n.ends_with("-windows"))
            })
            .ok_or("no Windows DaemonSet")?;
        let pod = &windows["spec"]["template"]["spec"];
        assert_eq!(
            pod["securityContext"]["windowsOptions"]["runAsUserName"],
            account
        );
        let env = pod["containers"][0]["env"].as_array().ok_or("no env")?;
        assert_eq!(state_file(env), expected, "{account}");
    }
    assert!(env.iter().any(|e| e["name"] == "OTEL_RESOURCE_ATTRIBUTES"));
    // Its pods carry the chart's selector labels (the PodMonitor and the Service find them), and
    // its own selector never matches the Linux pods.
    let labels = &windows["spec"]["template"]["metadata"]["labels"];
    let selector = windows["spec"]["selector"]["matchLabels"]
        .as_object()
        .ok_or("no selector")?;
    for (key, value) in linux["spec"]["selector"]["matchLabels"]
        .as_object()
        .ok_or("no Linux selector")?
    {
        assert_eq!(&labels[key], value, "{key}");
    }
    assert!(selector.iter().all(|(k, v)| &labels[k] == v));
    let linux_labels = &linux["spec"]["template"]["metadata"]["labels"];
    assert!(
        selector.iter().any(|(k, v)| &linux_labels[k] != v),
        "the Windows selector matches the Linux pods"
    );
    // A value outside the Windows accounts is refused by values.schema.json.
    let output = helm(&[
        "template",
        NAME,
        CHART,
        "--set",
        "windows.enabled=true",
        "--set",
        "windows.runAsUserName=Administrator",
    ])?;
    assert!(
        !output.status.success() && report(&output).contains("runAsUserName"),
        "{}",
        report(&output)
    );
    Ok(())
}

#[test]
fn the_image_users_pull_is_named_once_in_the_chart_and_used_everywhere() -> TestResult {
    let values = ops::yaml(&ops::repo().join(CHART).join("values.yaml"))?;
    let repository = values["image"]["repository"]
        .as_str()
        .ok_or("no image.repository")?;
    let chart = chart_yaml()?;
    assert_eq!(chart["appVersion"], VERSION, "Chart.yaml appVersion");
    assert_eq!(chart["version"], VERSION, "Chart.yaml version");
    let image = format!("{repository}:{VERSION}");
    let objects = render(&[])?;
    assert_eq!(
        one(&objects, "DaemonSet")?["spec"]["template"]["spec"]["containers"][0]["image"],
        image
    );
    let plain = std::fs::read_to_string(ops::repo().join("deploy/kubernetes/daemonset.yaml"))?;
    assert!(
        plain.contains(&format!("image: {image}")),
        "deploy/kubernetes"
    );
    let kustomization =
        std::fs::read_to_string(ops::repo().join("deploy/kubernetes/kustomization.yaml"))?;
    assert!(
        kustomization.contains(&format!("- name: {repository}")),
        "kustomization.yaml's images: entry names another image"
    );
    for doc in ["README.md", "docs/install.md"] {
        let text = std::fs::read_to_string(ops::repo().join(doc))?;
        assert!(text.contains(&image), "{doc} does not name {image}");
    }
    // The Dockerfile's version argument and labels agree with the package.
    let dockerfile = std::fs::read_to_string(ops::repo().join("Dockerfile"))?;
    assert!(
        dockerfile.contains(&format!("\nARG VERSION={VERSION}\n")),
        "Dockerfile ARG VERSION"
    );
    for label in ["version", "revision", "source", "licenses"] {
        assert!(
            dockerfile.contains(&format!("org.opencontainers.image.{label}=")),
            "OCI label {label}"
        );
    }
    assert!(
        dockerfile.contains("ARG TARGETARCH"),
        "multi-platform builds"
    );

    // Only the agent's image, in every container of the chart and of the plain manifests: nothing
    // from Docker Hub or any other registry the cluster may refuse.
    let images = |objects: &[Value]| -> BTreeSet<String> {
        objects
            .iter()
            .flat_map(|o| {
                let pod = &o["spec"]["template"]["spec"];
                ["initContainers", "containers"]
                    .into_iter()
                    .flat_map(|list| pod[list].as_array().cloned().unwrap_or_default())
            })
            .map(|c| c["image"].as_str().unwrap_or("(none)").to_owned())
            .collect()
    };
    assert_eq!(images(&objects), [image.clone()].into());
    let mut plain_objects = Vec::new();
    for document in serde_norway::Deserializer::from_str(&plain) {
        plain_objects.push(Value::deserialize(document)?);
    }
    assert_eq!(
        images(&plain_objects),
        [image.clone()].into(),
        "deploy/kubernetes"
    );

    // The all-on values' digest wins over the tag, in every container.
    let objects = render(ALL_ON)?;
    let all_on = images(&objects);
    assert_eq!(all_on.len(), 1, "{all_on:?}");
    let image = all_on.first().cloned().unwrap_or_default();
    assert!(
        image.starts_with("registry.example.com/mirror/azure-scheduled-events-exporter@sha256:"),
        "{image}"
    );
    Ok(())
}

/// Flags the chart passes are ones the agent has, and booleans are passed in the agent's one style.
#[test]
fn the_chart_passes_flags_and_variables_the_agent_reads() -> TestResult {
    let objects = render(ALL_ON)?;
    let ds = one(&objects, "DaemonSet")?;
    let container = &ds["spec"]["template"]["spec"]["containers"][0];
    let args: Vec<&str> = container["args"]
        .as_array()
        .ok_or("no args")?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(
        args,
        [
            "--approve=false",
            "--approve.dry-run",
            "--log.level=debug",
            "--report.neighbours",
            "--web.telemetry-path=/custom-metrics",
            "--imds.timeout=3s"
        ],
        "true is a bare flag, false is --flag=false (a flag on by default can be turned off)"
    );
    let help = String::from_utf8(Command::new(BIN).arg("--help").output()?.stdout)?;
    for arg in &args {
        let flag = arg.split('=').next().unwrap_or_default();
        let known = help.match_indices(flag).any(|(at, _)| {
            !help[at + flag.len()..]
                .starts_with(|c: char| c.is_ascii_alphanumeric() || c == '-' || c == '.')
        });
        assert!(known, "the agent has no {flag}");
    }
    // The agent accepts them together (a bad flag exits 64 at once).
    let mut command = common::process::command(&["demo", "--log.format=json"]);
    command.args(&args).arg("--web.listen-address=127.0.0.1:0");
    let mut agent = AgentProcess::spawn(command)?;
    agent.next_line_where(|l| l["message"] == "IMDS reachable")?;
    assert!(agent.terminate()?.success());

    let env = container["env"].as_array().ok_or("no env")?;
    for variable in env.iter().filter_map(|e| e["name"].as_str()) {
        if variable.starts_with("AZURE_SCHEDULED_EVENTS_") {
            assert!(
                help.contains(&format!("[env: {variable}=")),
                "the agent does not read {variable}"
            );
        }
    }
    let listen = env
        .iter()
        .find(|e| e["name"] == "AZURE_SCHEDULED_EVENTS_WEB_LISTEN_ADDRESS")
        .ok_or("no listen address")?;
    assert_eq!(listen["value"], ":10190");
    assert_eq!(container["ports"][0]["containerPort"], 10190);
    // With a PodMonitor and a ServiceMonitor on, no scrape annotations (a second scrape job would
    // see every agent twice); the monitors scrape the custom port and path.
    let annotations = &ds["spec"]["template"]["metadata"]["annotations"];
    for key in [
        "prometheus.io/scrape",
        "prometheus.io/port",
        "prometheus.io/path",
    ] {
        assert!(annotations.get(key).is_none(), "{key} with a PodMonitor on");
    }
    let pod_monitor = one(&objects, "PodMonitor")?;
    assert_eq!(
        pod_monitor["spec"]["podMetricsEndpoints"][0]["path"],
        "/custom-metrics"
    );
    assert_eq!(
        pod_monitor["spec"]["podMetricsEndpoints"][0]["port"],
        "metrics"
    );
    let attributes = env
        .iter()
        .find(|e| e["name"] == "OTEL_RESOURCE_ATTRIBUTES")
        .and_then(|e| e["value"].as_str())
        .ok_or("no OTEL_RESOURCE_ATTRIBUTES")?;
    assert!(
        attributes.ends_with(",deployment.environment.name=prod,k8s.cluster.name=aks%20west"),
        "{attributes}"
    );
    Ok(())
}

/// With TLS and basic auth in `--web.config.file`, the probes as the chart renders them (`probes.scheme`
/// and `probes.httpHeaders`) are answered 200 by the agent, where the same requests without the header
/// get 401: the kubelet would restart the pod forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_charts_probes_pass_an_agent_with_tls_and_basic_auth() -> TestResult {
    let objects = render(ALL_ON)?;
    let container = &one(&objects, "DaemonSet")?["spec"]["template"]["spec"]["containers"][0];
    let dir = TempDir::new("probes")?;
    let ca = common::pki::Ca::new("probe-ca")?;
    ca.server("agent", &["127.0.0.1"])?
        .write(&dir.0, "server")?;
    // The password of the all-on values' Authorization header (probe:probe-password).
    let hash = bcrypt::hash("probe-password", 4)?;
    std::fs::write(
        dir.path("web.yml"),
        format!(
            "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\nbasic_auth_users:\n  probe: {hash}\n"
        ),
    )?;
    let flag = format!("--web.config.file={}", dir.path("web.yml").display());
    let imds = Imds::start().await?;
    let agent = common::Agent::start(&imds, &[&flag]).await?;
    let address = agent.base.trim_start_matches("http://").to_owned();
    // As the kubelet probes: HTTPS without verifying the certificate.
    let kubelet = reqwest::Client::builder()
        .no_proxy()
        .use_rustls_tls()
        .danger_accept_invalid_certs(true)
        .build()?;
    for probe in ["livenessProbe", "readinessProbe"] {
        let get = &container[probe]["httpGet"];
        let scheme = get["scheme"].as_str().ok_or("no scheme")?;
        assert_eq!(scheme, "HTTPS", "{probe}");
        let path = get["path"].as_str().ok_or("no path")?;
        let url = format!("https://{address}{path}");
        let bare = kubelet.get(&url).send().await?.status().as_u16();
        assert_eq!(bare, 401, "{probe} without its header");
        let headers = get["httpHeaders"].as_array().ok_or("no httpHeaders")?;
        let mut request = kubelet.get(&url);
        for header in headers {
            let name = header["name"].as_str().ok_or("a header without a name")?;
            let value = header["value"].as_str().ok_or("a header without a value")?;
            request = request.header(name, value);
        }
        let mut status = 0;
        wait(&format!("{probe} {url} to answer 200"))
            .until(async || {
                let request = request
                    .try_clone()
                    .ok_or("a request that cannot be sent again")?;
                status = request
                    .send()
                    .await
                    .map_err(|e| e.to_string())?
                    .status()
                    .as_u16();
                Ok::<_, String>(status == 200)
            })
            .await
            .map_err(|e| format!("{e}: {status}"))?;
    }
    agent.stop().await?;
    Ok(())
}

#[test]
fn the_kubernetes_output_gets_exactly_its_rights_and_only_when_enabled() -> TestResult {
    let off = render(&[])?;
    assert!(
        ops::of_kind(&off, "ClusterRole").is_empty(),
        "no rights by default"
    );
    assert!(ops::of_kind(&off, "ClusterRoleBinding").is_empty());

    let objects = render(ALL_ON)?;
    let role = one(&objects, "ClusterRole")?;
    assert_eq!(
        role["rules"],
        json!([
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "watch", "patch"]},
            {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]},
            {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create"]},
        ]),
        "nodes get/watch/patch, nodes/status patch, events create: nothing more without a drain"
    );
    let binding = one(&objects, "ClusterRoleBinding")?;
    let account = one(&objects, "ServiceAccount")?;
    assert_eq!(binding["roleRef"]["name"], role["metadata"]["name"]);
    assert_eq!(
        binding["subjects"],
        json!([{
            "kind": "ServiceAccount",
            "name": account["metadata"]["name"],
            "namespace": "azure-scheduled-events",
        }])
    );
    let pod = &one(&objects, "DaemonSet")?["spec"]["template"]["spec"];
    assert_eq!(
        pod["automountServiceAccountToken"], true,
        "the client needs the token"
    );
    assert_eq!(account["automountServiceAccountToken"], true);
    let env = pod["containers"][0]["env"].as_array().ok_or("no env")?;
    let node = env
        .iter()
        .find(|e| e["name"] == "AZURE_SCHEDULED_EVENTS_KUBERNETES_NODE_NAME")
        .ok_or("no node name")?;
    assert_eq!(node["valueFrom"]["fieldRef"]["fieldPath"], "spec.nodeName");
    let taint = env
        .iter()
        .find(|e| e["name"] == "AZURE_SCHEDULED_EVENTS_KUBERNETES_TAINT_EVENTS")
        .ok_or("no taint events")?;
    assert_eq!(taint["value"], "Reboot,Redeploy,Preempt,Terminate");
    Ok(())
}

#[test]
fn the_chart_scrapes_with_the_prometheus_operator_or_azure_managed_prometheus() -> TestResult {
    let objects = render(ALL_ON)?;
    let ds = one(&objects, "DaemonSet")?;
    let pod_labels = &ds["spec"]["template"]["metadata"]["labels"];
    let selected = |selector: &Value| {
        selector
            .as_object()
            .is_some_and(|s| !s.is_empty() && s.iter().all(|(k, v)| &pod_labels[k] == v))
    };
    let pod_monitor = one(&objects, "PodMonitor")?;
    assert_eq!(pod_monitor["apiVersion"], "azmonitoring.coreos.com/v1");
    assert!(selected(&pod_monitor["spec"]["selector"]["matchLabels"]));
    let endpoint = &pod_monitor["spec"]["podMetricsEndpoints"][0];
    assert_eq!(endpoint["port"], "metrics");
    assert_eq!(endpoint["path"], "/custom-metrics");
    assert_eq!(
        pod_monitor["metadata"]["labels"]["release"],
        "kube-prometheus-stack"
    );
    // An agent with TLS and basic auth is scraped over HTTPS with the Secret's credentials.
    let credentials = json!({
        "username": {"name": "exporter-scrape", "key": "username"},
        "password": {"name": "exporter-scrape", "key": "password"},
    });
    assert_eq!(endpoint["scheme"], "https");
    assert_eq!(
        endpoint["tlsConfig"],
        json!({"ca": {"secret": {"name": "exporter-scrape", "key": "ca.crt"}}, "serverName": NAME})
    );
    assert_eq!(endpoint["basicAuth"], credentials);

    let service = one(&objects, "Service")?;
    assert!(selected(&service["spec"]["selector"]));
    assert_eq!(service["spec"]["clusterIP"], "None");
    let service_monitor = one(&objects, "ServiceMonitor")?;
    assert_eq!(service_monitor["apiVersion"], "monitoring.coreos.com/v1");
    let service_labels = &service["metadata"]["labels"];
    let matches = service_monitor["spec"]["selector"]["matchLabels"]
        .as_object()
        .ok_or("no ServiceMonitor selector")?;
    assert!(matches.iter().all(|(k, v)| &service_labels[k] == v));
    let endpoint = &service_monitor["spec"]["endpoints"][0];
    assert_eq!(endpoint["port"], "metrics");
    assert_eq!(endpoint["scheme"], "https");
    assert_eq!(endpoint["tlsConfig"], json!({"insecureSkipVerify": true}));
    assert_eq!(endpoint["basicAuth"], credentials);
    // By default plain HTTP, as the agent serves without --web.config.file.
    let defaults = render(&[
        "--set",
        "podMonitor.enabled=true,serviceMonitor.enabled=true",
    ])?;
    for (kind, endpoints) in [
        ("PodMonitor", "podMetricsEndpoints"),
        ("ServiceMonitor", "endpoints"),
    ] {
        let endpoint = &one(&defaults, kind)?["spec"][endpoints][0];
        for key in ["scheme", "tlsConfig", "basicAuth"] {
            assert!(endpoint.get(key).is_none(), "{kind}: {key} by default");
        }
    }

    let namespace = one(&objects, "Namespace")?;
    assert_eq!(namespace["metadata"]["name"], "azure-scheduled-events");
    assert_eq!(
        namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"],
        "privileged"
    );
    Ok(())
}

#[test]
fn the_prometheus_rule_holds_exactly_the_rules_of_alerts() -> TestResult {
    let mut expected = Vec::new();
    for path in ops::rule_files()? {
        let groups = ops::yaml(&path)?["groups"].clone();
        expected.extend(
            groups
                .as_array()
                .ok_or_else(|| format!("{}: no groups", path.display()))?
                .iter()
                .cloned(),
        );
    }
    assert!(!expected.is_empty());
    let objects = render(ALL_ON)?;
    let rule = one(&objects, "PrometheusRule")?;
    assert_eq!(rule["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(
        rule["metadata"]["labels"]["release"],
        "kube-prometheus-stack"
    );
    let rendered = rule["spec"]["groups"].as_array().ok_or("no groups")?;
    assert_eq!(rendered.len(), expected.len(), "group count");
    for (rendered, expected) in rendered.iter().zip(&expected) {
        assert_eq!(
            rendered, expected,
            "group {} differs from alerts/",
            expected["name"]
        );
    }
    // No group of the promtool unit tests.
    let tests = ops::rule_tests()?;
    assert!(!tests.is_empty(), "alerts/ has no unit tests to leave out");
    Ok(())
}

#[test]
fn the_dashboard_config_maps_hold_exactly_the_files_of_dashboards() -> TestResult {
    let objects = render(ALL_ON)?;
    let maps: Vec<&Value> = ops::of_kind(&objects, "ConfigMap")
        .into_iter()
        .filter(|m| m["metadata"]["labels"]["grafana_dashboard"] == "1")
        .collect();
    let files = ops::files("dashboards", ".json")?;
    assert!(!files.is_empty());
    assert_eq!(maps.len(), files.len(), "one ConfigMap per dashboard");
    for file in files {
        let name = ops::file_name(&file);
        let map = maps
            .iter()
            .find(|m| m["data"].get(&name).is_some())
            .ok_or_else(|| format!("no ConfigMap holds {name}"))?;
        let shipped = map["data"][&name].as_str().unwrap_or_default();
        let source = std::fs::read_to_string(&file)?;
        let first_difference = shipped
            .bytes()
            .zip(source.bytes())
            .position(|(a, b)| a != b)
            .unwrap_or(shipped.len().min(source.len()));
        assert!(
            shipped == source,
            "{name} differs from dashboards/ at byte {first_difference} ({} bytes, file {})",
            shipped.len(),
            source.len()
        );
        assert_eq!(map["metadata"]["namespace"], "monitoring");
        assert_eq!(map["metadata"]["annotations"]["grafana_folder"], "Azure");
        let data: BTreeSet<&String> = map["data"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, _)| k)
            .collect();
        assert_eq!(data.len(), 1, "{name}: one dashboard per ConfigMap");
    }
    Ok(())
}

#[test]
fn the_plain_manifests_are_the_charts_rendering() -> TestResult {
    let helm_dir = ops::tool("helm")
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let path = format!(
        "{}:{}",
        helm_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let output = Command::new("bash")
        .args(["scripts/render-manifests.sh", "--check"])
        .current_dir(ops::repo())
        .env("PATH", path)
        .output()?;
    assert!(output.status.success(), "{}", report(&output));
    Ok(())
}

/// The variables the chart sets, with `$(NAME)` expanded as the kubelet does and the downward API
/// answered for a pod on `node`.
fn daemonset_environment(node: &str) -> Result<Vec<(String, String)>, Error> {
    let objects = render(&[])?;
    let env = one(&objects, "DaemonSet")?["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .ok_or("no env")?
        .clone();
    let mut set: Vec<(String, String)> = Vec::new();
    for variable in env {
        let name = variable["name"]
            .as_str()
            .ok_or("a variable without a name")?;
        let value = match variable["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
            Some("spec.nodeName") => node.to_owned(),
            Some("metadata.name") => "exporter-x7k2p".to_owned(),
            Some("metadata.namespace") => "azure-scheduled-events".to_owned(),
            Some(other) => return Err(format!("{name}: unexpected field {other}").into()),
            None => {
                let mut value = variable["value"].as_str().unwrap_or_default().to_owned();
                for (earlier, earlier_value) in &set {
                    value = value.replace(&format!("$({earlier})"), earlier_value);
                }
                value
            }
        };
        set.push((name.to_owned(), value));
    }
    Ok(set)
}

/// The release binary, with the environment the chart gives it, exports spans whose Resource names
/// the Kubernetes node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_of_the_released_binary_in_the_chart_name_the_node() -> TestResult {
    let node = "aks-spot-12345678-vmss000003";
    let environment = daemonset_environment(node)?;
    let (_dir, top) = unpacked_tarball()?;
    let receiver = otlp::Receiver::start().await?;
    let imds = Imds::start().await?;
    imds.sim.load_scenario(Scenario::parse(&format!(
        "events:\n  - {{ type: Reboot, resources: [{THIS_VM}], notice: 10m }}\n"
    ))?);
    let mut command = Command::new(top.join(NAME));
    command
        .env_clear()
        .stdin(Stdio::null())
        .envs(environment.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        // What the chart sets stays; the test's own address, IMDS and collector come on top.
        .args([
            format!("--imds.url={}", imds.url()),
            "--web.listen-address=127.0.0.1:0".to_owned(),
            "--poll.interval=50ms".to_owned(),
            "--state.file=".to_owned(),
            format!("--otlp.endpoint={}", receiver.http_url()),
        ]);
    let agent = AgentProcess::spawn(command)?;
    let spans = receiver
        .wait_for("a span of the Reboot", |spans| !spans.is_empty())
        .await?;
    drop(agent);
    let resource = &spans[0].resource;
    assert_eq!(
        resource.get("k8s.node.name").map(String::as_str),
        Some(node),
        "{resource:?}"
    );
    assert_eq!(
        resource.get("k8s.namespace.name").map(String::as_str),
        Some("azure-scheduled-events")
    );
    assert_eq!(
        resource.get("k8s.pod.name").map(String::as_str),
        Some("exporter-x7k2p")
    );
    Ok(())
}

/// `helm package` resolves the links to alerts/ and dashboards/: the archive renders the same.
#[test]
fn the_packaged_chart_carries_the_rules_and_dashboards_themselves() -> TestResult {
    let out = TempDir::new("helm-package")?;
    let output = helm(&["package", CHART, "--destination", &out.0.to_string_lossy()])?;
    assert!(output.status.success(), "{}", report(&output));
    let archive = out.path(&format!("{NAME}-{VERSION}.tgz"));
    let listing = ok("tar", &["-tzf", &archive.to_string_lossy()])?;
    let packaged: BTreeSet<&str> = listing.lines().collect();
    for rules in ops::rule_files()? {
        let name = format!("{NAME}/files/alerts/{}", ops::file_name(&rules));
        assert!(packaged.contains(name.as_str()), "{name} not packaged");
    }
    assert!(
        !packaged
            .iter()
            .any(|p| p.contains("/files/alerts/") && p.contains("test")),
        "the promtool unit tests are packaged: {packaged:?}"
    );
    assert_eq!(
        render_chart(&archive.to_string_lossy(), ALL_ON)?,
        render(ALL_ON)?
    );
    Ok(())
}

// ---- Kubernetes schemas ----

/// Custom resources of the Prometheus Operator, which the Kubernetes OpenAPI schemas do not
/// describe: not validated here (their CRDs are the operator's; the tests above check their fields).
const CUSTOM_KINDS: &[&str] = &["PodMonitor", "ServiceMonitor", "PrometheusRule"];

/// kubernetes-validate (PyPI) from the directory .ci/run installs it in, else from PATH.
fn kubernetes_validate(args: &[&str]) -> Result<Output, Error> {
    run(ops::tool("kubernetes-validate"), args).map_err(|e| {
        format!(
            "kubernetes-validate is required (`pip install kubernetes-validate`; .ci/run installs it into target/ci-tools): {e}"
        )
        .into()
    })
}

/// The oldest Kubernetes the chart supports (Chart.yaml's kubeVersion, `>=1.25.0-0`) and the
/// newest kubernetes-validate has schemas for (its default version).
fn supported_kubernetes_versions() -> Result<(String, String), Error> {
    let constraint = chart_yaml()?["kubeVersion"]
        .as_str()
        .ok_or("no kubeVersion in Chart.yaml")?
        .to_owned();
    let oldest = constraint
        .strip_prefix(">=")
        .map(|v| v.trim_end_matches("-0").to_owned())
        .filter(|v| v.split('.').count() == 3 && !v.contains([',', ' ']))
        .ok_or_else(|| format!("kubeVersion {constraint:?} is not a single lower bound"))?;
    let help = report(&kubernetes_validate(&["--help"])?);
    let newest = help
        .split("Defaults to")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .map(|v| v.trim_end_matches('.').to_owned())
        .ok_or_else(|| format!("no default version in kubernetes-validate --help:\n{help}"))?;
    Ok((oldest, newest))
}

/// `objects` (built-in kinds only) as one YAML file, checked by `kubernetes-validate --strict`
/// (unknown fields are errors) against Kubernetes `version`; the objects it passed.
fn validate_objects(objects: &[&Value], version: &str, what: &str) -> Result<usize, Error> {
    let dir = TempDir::new("kubernetes-validate")?;
    let file = dir.path("objects.yaml");
    let mut text = String::new();
    for object in objects {
        text.push_str("---\n");
        text.push_str(&serde_norway::to_string(object)?);
    }
    std::fs::write(&file, text)?;
    let output = kubernetes_validate(&["--strict", "-k", version, &file.to_string_lossy()])?;
    let out = report(&output);
    assert!(
        output.status.success(),
        "{what} against Kubernetes {version}:\n{out}"
    );
    Ok(out
        .lines()
        .filter(|l| l.contains(" passed for resource "))
        .count())
}

/// The objects of a rendering, split into built-in kinds (to validate) and the operator's custom
/// resources (skipped, named).
fn built_in<'a>(objects: &'a [Value], what: &str) -> Vec<&'a Value> {
    let (custom, built_in): (Vec<&Value>, Vec<&Value>) = objects
        .iter()
        .partition(|o| CUSTOM_KINDS.contains(&o["kind"].as_str().unwrap_or_default()));
    for object in custom {
        eprintln!(
            "{what}: {} {} skipped (a custom resource; not in the Kubernetes schemas)",
            object["apiVersion"].as_str().unwrap_or_default(),
            object["kind"].as_str().unwrap_or_default()
        );
    }
    built_in
}

/// Every built-in object of the chart (defaults, and every option on) and of deploy/kubernetes
/// is valid against the OpenAPI schemas of the oldest and the newest Kubernetes the chart
/// supports, offline, with unknown fields refused.
#[test]
fn rendered_manifests_are_valid_kubernetes_objects() -> TestResult {
    let (oldest, newest) = supported_kubernetes_versions()?;
    let defaults = render(&[])?;
    let all_on = render(ALL_ON)?;
    let with_windows = render(ALL_ON_WITH_WINDOWS)?;
    let mut plain = Vec::new();
    for file in ["daemonset.yaml", "podmonitor.yaml"] {
        let text = std::fs::read_to_string(ops::repo().join("deploy/kubernetes").join(file))?;
        for document in serde_norway::Deserializer::from_str(&text) {
            plain.push(Value::deserialize(document)?);
        }
    }
    let renderings = [
        ("chart defaults", &defaults),
        ("chart, every option on", &all_on),
        ("chart, every option on and windows.enabled", &with_windows),
        ("deploy/kubernetes", &plain),
    ];
    for version in [&oldest, &newest] {
        for (what, objects) in renderings {
            let objects = built_in(objects, what);
            assert!(
                objects.iter().any(|o| o["kind"] == "DaemonSet"),
                "{what}: no DaemonSet"
            );
            let passed = validate_objects(&objects, version, what)?;
            eprintln!("{what}: {passed} objects valid against Kubernetes {version}");
            assert_eq!(
                passed,
                objects.len(),
                "{what}: not every object was checked"
            );
        }
    }
    // Every custom resource the chart can render was skipped by name, nothing else.
    let kinds: BTreeSet<&str> = all_on.iter().filter_map(|o| o["kind"].as_str()).collect();
    for kind in CUSTOM_KINDS {
        assert!(kinds.contains(kind), "the all-on values render no {kind}");
    }

    // The same check refuses a DaemonSet with a mistyped field: it really validates.
    let mut broken = one(&defaults, "DaemonSet")?.clone();
    broken["spec"]["template"]["spec"]["hostNetwrok"] = json!(true);
    let dir = TempDir::new("kubernetes-validate-broken")?;
    let file = dir.path("broken.yaml");
    std::fs::write(&file, serde_norway::to_string(&broken)?)?;
    let output = kubernetes_validate(&["--strict", "-k", &oldest, &file.to_string_lossy()])?;
    assert!(
        !output.status.success() && report(&output).contains("hostNetwrok"),
        "{}",
        report(&output)
    );
    Ok(())
}

/// The VM packages are built without the Kubernetes output: the tarball's binary names no
/// `--kubernetes.*` flag and refuses them, flag or variable, with one line and exit 64 instead of
/// ignoring a setting that could do nothing.
#[test]
fn the_vm_packages_binary_has_no_kubernetes_output_and_refuses_its_settings() -> TestResult {
    let (_dir, top) = unpacked_tarball()?;
    let binary = top.join(NAME);
    let help = ok(&binary, &["--help"])?;
    assert!(!help.contains("kubernetes"), "{help}");
    let size = std::fs::metadata(&binary)?.len();
    eprintln!("VM package binary: {size} bytes");
    let refused = |flag: Option<&str>, variable: Option<(&str, &str)>| -> Result<Output, Error> {
        let mut command = Command::new(&binary);
        command.env_clear().stdin(Stdio::null()).args([
            "--imds.url=http://127.0.0.1:9",
            "--web.listen-address=127.0.0.1:0",
        ]);
        command.args(flag);
        command.envs(variable);
        Ok(command.output()?)
    };
    for (flag, variable) in [
        (
            Some("--kubernetes.node-name=aks-pool-12345678-vmss000000"),
            None,
        ),
        (Some("--kubernetes.taint-events=Reboot"), None),
        (
            None,
            Some((
                "AZURE_SCHEDULED_EVENTS_KUBERNETES_NODE_NAME",
                "aks-pool-12345678-vmss000000",
            )),
        ),
    ] {
        let output = refused(flag, variable)?;
        let text = report(&output);
        assert_eq!(
            output.status.code(),
            Some(64),
            "{flag:?} {variable:?}: {text}"
        );
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(
            text.contains("--kubernetes.") && text.contains("cargo feature `kubernetes`"),
            "{text}"
        );
    }
    // The build the test suite runs (default features) has the output and its flags.
    let full = String::from_utf8(Command::new(BIN).arg("--help").output()?.stdout)?;
    assert!(full.contains("--kubernetes.node-name"));
    Ok(())
}

// ---- The archives' README ----

/// README.md as the archives ship it: `scripts/archive-readme.sh`'s output.
fn archive_readme() -> Result<String, Error> {
    let output = Command::new("bash")
        .arg("scripts/archive-readme.sh")
        .current_dir(ops::repo())
        .output()?;
    if !output.status.success() {
        return Err(format!(
            "archive-readme.sh: {}",
            String::from_utf8_lossy(&output.stderr)
        )
        .into());
    }
    Ok(String::from_utf8(output.stdout)?)
}

/// The README the tarball, the .deb and the Windows zip ship links only to the web: each link to a
/// file of the repository points at that file at the release's tag (Cargo.toml's repository and
/// version), and that file exists here, so the link resolves once the tag is pushed; nothing else of
/// the README changes.
#[test]
fn the_archives_readme_links_resolve_outside_the_repository() -> TestResult {
    let source = std::fs::read_to_string(ops::repo().join("README.md"))?;
    let shipped = archive_readme()?;
    let repository = env!("CARGO_PKG_REPOSITORY");
    let version = env!("CARGO_PKG_VERSION");
    let at_tag = |kind: &str| format!("{repository}/{kind}/v{version}/");
    let targets = |text: &str| -> Vec<String> {
        text.split("](")
            .skip(1)
            .filter_map(|rest| rest.split(')').next().map(str::to_owned))
            .collect()
    };
    let before = targets(&source);
    let after = targets(&shipped);
    assert_eq!(before.len(), after.len(), "links were lost or added");
    let mut rewritten = 0;
    for (link, shipped_link) in before.iter().zip(&after) {
        if link.starts_with("http") || link.starts_with('#') {
            assert_eq!(link, shipped_link, "a web link changed");
            continue;
        }
        let path = link.split('#').next().unwrap_or_default();
        assert!(
            ops::repo().join(path).exists(),
            "README links to {path}, which is not in the repository"
        );
        let kind = if path.ends_with('/') { "tree" } else { "blob" };
        assert_eq!(shipped_link, &format!("{}{link}", at_tag(kind)));
        rewritten += 1;
    }
    assert!(rewritten >= 10, "only {rewritten} links rewritten");
    // Outside the links the text is the same.
    let strip = |text: &str, links: &[String]| {
        links.iter().fold(text.to_owned(), |t, l| {
            t.replacen(&format!("]({l})"), "]()", 1)
        })
    };
    assert_eq!(strip(&source, &before), strip(&shipped, &after));
    Ok(())
}

// ---- One install story ----

/// The published chart, as every install command names it.
const PUBLISHED_CHART: &str =
    "oci://ghcr.io/azure-scheduled-events-exporter/charts/azure-scheduled-events-exporter";

/// The pages users install from: the README, docs/, the chart's README and the examples.
fn install_pages() -> Result<Vec<(String, String)>, Error> {
    let mut pages = Vec::new();
    let mut paths = vec![
        ops::repo().join("README.md"),
        ops::repo().join(CHART).join("README.md"),
    ];
    paths.extend(ops::files("docs", ".md")?);
    paths.extend(ops::files("examples", ".yaml")?);
    paths.extend(ops::files("examples", ".yml")?);
    paths.extend(ops::files("examples/azure-monitor", ".yaml")?);
    paths.extend(ops::files("deploy/kubernetes", ".yaml")?);
    for path in paths {
        let text = std::fs::read_to_string(&path)?;
        let name = path
            .strip_prefix(ops::repo())
            .unwrap_or(&path)
            .display()
            .to_string();
        pages.push((name, text));
    }
    Ok(pages)
}

/// Every command of a page, its continuation lines (`\` at the end) joined, a YAML comment's `#`
/// and a Markdown list's indentation left out.
fn commands(text: &str) -> Vec<String> {
    let mut commands = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let line = line.trim_start().trim_start_matches('#').trim();
        current.push_str(line.trim_end_matches('\\'));
        current.push(' ');
        if !line.ends_with('\\') {
            commands.push(std::mem::take(&mut current));
        }
    }
    commands
}

/// Every way in that the docs give installs the published chart (`oci://ghcr.io/...`, at a version)
/// and the published image, never a checkout's chart directory, a file of a checkout or an image
/// of a registry of one's own: a user with only the release's artefacts can follow each.
#[test]
fn every_install_path_in_the_docs_uses_the_published_chart_and_image() -> TestResult {
    let mut installs = 0;
    for (page, text) in install_pages()? {
        assert!(
            !text.contains("myregistry"),
            "{page} names a registry of one's own as if it were the image to use"
        );
        for command in commands(&text) {
            let words: Vec<&str> = command.split_whitespace().collect();
            for (at, pair) in words.windows(3).enumerate() {
                let helm = pair[0].trim_start_matches('`') == "helm"
                    && ["install", "upgrade", "template"].contains(&pair[1]);
                let ours = words[at + 2..]
                    .iter()
                    .take(3)
                    .any(|w| *w == NAME || *w == "...");
                if helm && ours && !words[at + 2..].starts_with(&["..."]) {
                    assert!(
                        !command.contains("deploy/helm/"),
                        "{page}: a checkout's chart: {command}"
                    );
                    assert!(
                        command.contains(PUBLISHED_CHART) && command.contains("--version "),
                        "{page}: not the published chart at a version: {command}"
                    );
                    installs += 1;
                }
            }
            let kubectl = words
                .windows(2)
                .any(|w| w[0] == "kubectl" && ["apply", "create"].contains(&w[1]));
            if kubectl {
                for (flag, file) in words.windows(2).map(|w| (w[0], w[1].trim_matches('"'))) {
                    if ["-f", "-k"].contains(&flag) && file != "-" && !file.starts_with('$') {
                        assert!(
                            file.starts_with("https://"),
                            "{page}: kubectl {flag} a file of a checkout: {command}"
                        );
                    }
                }
            }
        }
    }
    assert!(installs >= 8, "only {installs} helm installs found");
    Ok(())
}

#[cfg(feature = "external-tools")]
/// The `--set` flags of the first code block of `text` that sets `marker`, in order.
fn set_flags(text: &str, marker: &str) -> Result<Vec<String>, Error> {
    let block = text
        .split("```")
        .find(|b| b.contains(marker) && b.contains("helm install"))
        .ok_or_else(|| format!("no helm install that sets {marker}"))?;
    let words: Vec<&str> = block.split_whitespace().collect();
    Ok(words
        .windows(2)
        .filter(|w| w[0] == "--set")
        .map(|w| w[1].to_owned())
        .collect())
}

#[cfg(feature = "external-tools")]
/// An install from the published chart alone (OCI: no repository files) reaches
/// kube-prometheus-stack's values: the chart's README (`helm show readme`) and docs/install.md give
/// them as `--set` flags, which render exactly what examples/helm-kube-prometheus-stack.yaml
/// renders; and the README is what `helm show readme` of the packaged chart prints.
#[test]
fn the_kube_prometheus_stack_values_reach_an_oci_install_as_the_readmes_set_flags() -> TestResult {
    let readme = std::fs::read_to_string(ops::repo().join(CHART).join("README.md"))?;
    let install = std::fs::read_to_string(ops::repo().join("docs/install.md"))?;
    let marker = "podMonitor.labels.release=kube-prometheus-stack";
    let flags = set_flags(&readme, marker)?;
    assert_eq!(
        flags,
        set_flags(&install, marker)?,
        "docs/install.md and the chart's README differ"
    );
    let mut args: Vec<&str> = Vec::new();
    for flag in &flags {
        args.extend(["--set", flag.as_str()]);
    }
    let from_flags = render(&args)?;
    let from_file = render(&["-f", "examples/helm-kube-prometheus-stack.yaml"])?;
    assert_eq!(from_flags.len(), from_file.len());
    for (a, b) in from_flags.iter().zip(&from_file) {
        assert_eq!(a, b, "{} {}", a["kind"], a["metadata"]["name"]);
    }
    let kinds: BTreeSet<&str> = from_flags
        .iter()
        .filter_map(|o| o["kind"].as_str())
        .collect();
    for kind in ["PodMonitor", "PrometheusRule", "ConfigMap"] {
        assert!(kinds.contains(kind), "no {kind}");
    }

    // The packaged chart shows this README.
    let dir = TempDir::new("chart-package")?;
    let out = dir.path("out");
    ok(
        ops::tool("helm"),
        &["package", CHART, "--destination", &out.to_string_lossy()],
    )?;
    let archive = out.join(format!("{NAME}-{VERSION}.tgz"));
    let shown = ok(
        ops::tool("helm"),
        &["show", "readme", &archive.to_string_lossy()],
    )?;
    assert_eq!(shown.trim(), readme.trim());
    Ok(())
}

#[cfg(feature = "external-tools")]
/// Azure Monitor's node-level scrape step adds the agent's job to a ConfigMap a cluster may already
/// have: the job users add is the one the example ConfigMap holds, promtool accepts a configuration
/// with it after another job (as the collector sees it, $NODE_NAME filled in), and the step creates
/// the ConfigMap with `kubectl create` (which refuses to replace one) or edits it, never `apply`s
/// it. One scrape interval everywhere: the job's, the monitors' and the README's 15 s.
#[test]
fn the_azure_monitor_scrape_step_adds_its_job_to_an_existing_configuration() -> TestResult {
    let map = ops::yaml(
        &ops::repo().join("examples/azure-monitor/ama-metrics-prometheus-config-node.yaml"),
    )?;
    assert_eq!(
        map["metadata"]["name"],
        "ama-metrics-prometheus-config-node"
    );
    let config: Value = serde_norway::from_str(
        map["data"]["prometheus-config"]
            .as_str()
            .ok_or("no prometheus-config")?,
    )?;
    let fragment = ops::yaml(&ops::repo().join("examples/azure-monitor/scrape-job-node.yaml"))?;
    assert_eq!(
        config["scrape_configs"], fragment,
        "the job to add differs from the ConfigMap's"
    );
    let job = &fragment[0];
    assert_eq!(job["scrape_interval"], "15s");

    // An existing node-level configuration (another job), with the agent's job added to it.
    let existing = json!({"scrape_configs": [{
        "job_name": "ama-logs-daemonset",
        "kubernetes_sd_configs": [{"role": "pod"}],
        "relabel_configs": [{"source_labels": ["__meta_kubernetes_pod_node_name"], "action": "keep", "regex": "$NODE_NAME"}],
    }]});
    let mut merged = existing.clone();
    merged["scrape_configs"]
        .as_array_mut()
        .ok_or("scrape_configs")?
        .push(job.clone());
    // Debian's promtool is built without Kubernetes discovery: it checks the rest of each job (the
    // relabelling, the interval) with the discovery as a static target.
    let mut checked = merged.clone();
    for job in checked["scrape_configs"]
        .as_array_mut()
        .into_iter()
        .flatten()
    {
        let discovery = job
            .as_object_mut()
            .and_then(|j| j.remove("kubernetes_sd_configs"))
            .ok_or("a job without kubernetes_sd_configs")?;
        assert_eq!(discovery[0]["role"], "pod");
        job["static_configs"] = json!([{"targets": ["10.224.0.4:10188"]}]);
    }
    let text = serde_norway::to_string(&checked)?
        .replace("$NODE_NAME", "aks-nodepool1-12345678-vmss000000");
    let dir = TempDir::new("ama-node-config")?;
    let file = dir.path("prometheus.yml");
    std::fs::write(&file, text)?;
    let output = run("promtool", &["check", "config", &file.to_string_lossy()])
        .map_err(|e| format!("promtool is required (Debian package prometheus): {e}"))?;
    assert!(output.status.success(), "{}", report(&output));
    let jobs: Vec<&Value> = merged["scrape_configs"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|j| &j["job_name"])
        .collect();
    assert_eq!(
        jobs,
        [
            &json!("ama-logs-daemonset"),
            &json!("azure-scheduled-events")
        ]
    );

    // The documented step never applies the whole ConfigMap over an existing one.
    let install = std::fs::read_to_string(ops::repo().join("docs/install.md"))?;
    for command in commands(&install) {
        if command.contains("ama-metrics-prometheus-config-node") && command.contains("kubectl") {
            assert!(
                !command.contains(" apply ") && !command.contains(" replace "),
                "docs/install.md replaces the ConfigMap: {command}"
            );
        }
    }
    assert!(
        install.contains("kubectl create -f \"$BASE/ama-metrics-prometheus-config-node.yaml\"")
    );
    assert!(
        install
            .contains("kubectl -n kube-system edit configmap ama-metrics-prometheus-config-node")
    );

    // One interval: the chart's monitors, the README's advice and this job.
    let values = ops::yaml(&ops::repo().join(CHART).join("values.yaml"))?;
    assert_eq!(values["podMonitor"]["interval"], "15s");
    assert_eq!(values["serviceMonitor"]["interval"], "15s");
    let readme = std::fs::read_to_string(ops::repo().join("README.md"))?;
    assert!(
        readme.contains("every 15 s or faster"),
        "the README's scrape interval"
    );
    for (page, text) in install_pages()? {
        for line in text.lines() {
            let line = line.trim();
            if let Some(interval) = line.strip_prefix("scrape_interval:") {
                let interval = interval.trim();
                assert!(
                    ["15s", "10s", "5s", "1s"].contains(&interval),
                    "{page}: a scrape interval of {interval}, slower than the 15 s a Spot eviction needs"
                );
            }
        }
    }
    Ok(())
}
