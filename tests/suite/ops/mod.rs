//! What on-call imports, read as the tests need it: the dashboards' PromQL, the alert rules, and the
//! agent binary running as a separate process.

#![allow(
    dead_code,
    reason = "each test binary uses a different part of the harness"
)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};

use serde_json::Value;

use crate::common::process::{AgentProcess, command};

pub type Error = Box<dyn std::error::Error>;

/// The prefix of every metric the agent exports.
pub const PREFIX: &str = "azure_scheduled_events_";

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Files in `dir` (relative to the repository) whose names end with `suffix`, sorted.
pub fn files(dir: &str, suffix: &str) -> Result<Vec<PathBuf>, Error> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(repo().join(dir))? {
        let path = entry?.path();
        if path.to_string_lossy().ends_with(suffix) {
            found.push(path);
        }
    }
    found.sort();
    Ok(found)
}

pub fn dashboards() -> Result<Vec<(String, Value)>, Error> {
    let mut all = Vec::new();
    for path in files("dashboards", ".json")? {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let json = serde_json::from_str(&std::fs::read_to_string(&path)?)
            .map_err(|e| format!("{name}: {e}"))?;
        all.push((name, json));
    }
    if all.is_empty() {
        return Err("no dashboards in dashboards/".into());
    }
    Ok(all)
}

/// Nothing listens on port 1 of loopback (binding it needs privileges no test has): a webhook
/// receiver or API server there is down.
pub const DOWN: &str = "http://127.0.0.1:1";

/// Writes `dir/kubeconfig`, naming an API server at [`DOWN`], and returns its path.
pub fn down_kubeconfig(dir: &Path) -> Result<PathBuf, Error> {
    let path = dir.join("kubeconfig");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: down\n  cluster:\n    server: {DOWN}\nusers:\n- name: agent\n  user:\n    token: t\ncontexts:\n- name: down\n  context:\n    cluster: down\n    user: agent\ncurrent-context: down\n"
        ),
    )?;
    Ok(path)
}

/// Rule files: alerts/*.yml except the unit tests (`*test*.yml`).
pub fn rule_files() -> Result<Vec<PathBuf>, Error> {
    let rules: Vec<PathBuf> = files("alerts", ".yml")?
        .into_iter()
        .filter(|p| !file_name(p).contains("test"))
        .collect();
    if rules.is_empty() {
        return Err("no rule files in alerts/".into());
    }
    Ok(rules)
}

pub fn rule_tests() -> Result<Vec<PathBuf>, Error> {
    Ok(files("alerts", ".yml")?
        .into_iter()
        .filter(|p| file_name(p).contains("test"))
        .collect())
}

pub fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// A program from the directory .ci/run installs tools in (`target/ci-tools/bin`), else from PATH.
pub fn tool(name: &str) -> PathBuf {
    let installed = repo().join("target/ci-tools/bin").join(name);
    if installed.exists() {
        installed
    } else {
        PathBuf::from(name)
    }
}

/// `helm template ARGS` run in the repository: the documents it renders, parsed (empty ones
/// left out).
pub fn helm_template(args: &[&str]) -> Result<Vec<Value>, Error> {
    let output = Command::new(tool("helm"))
        .arg("template")
        .args(args)
        .current_dir(repo())
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| {
            format!("helm is required (.ci/run installs it into target/ci-tools/bin): {e}")
        })?;
    if !output.status.success() {
        return Err(format!(
            "helm template {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        )
        .into());
    }
    let text = String::from_utf8(output.stdout)?;
    let mut objects = Vec::new();
    for document in serde_norway::Deserializer::from_str(&text) {
        let value = <Value as serde::Deserialize>::deserialize(document).map_err(|e| {
            format!("helm template {args:?} rendered YAML that does not parse: {e}")
        })?;
        if !value.is_null() {
            objects.push(value);
        }
    }
    Ok(objects)
}

/// The objects of `kind` among `objects`.
pub fn of_kind<'a>(objects: &'a [Value], kind: &str) -> Vec<&'a Value> {
    objects.iter().filter(|o| o["kind"] == kind).collect()
}

pub fn yaml(path: &Path) -> Result<Value, Error> {
    let text = std::fs::read_to_string(path)?;
    serde_norway::from_str(&text).map_err(|e| format!("{}: {e}", path.display()).into())
}

/// One alerting rule as written in a rule file.
#[derive(Debug, Clone)]
pub struct Alert {
    pub name: String,
    pub expr: String,
    pub rule: Value,
}

pub fn alerts() -> Result<Vec<Alert>, Error> {
    let mut all = Vec::new();
    for path in rule_files()? {
        all.extend(alerts_in(&path)?);
    }
    Ok(all)
}

/// The alerting rules of one rule file.
pub fn alerts_in(path: &Path) -> Result<Vec<Alert>, Error> {
    let mut all = Vec::new();
    {
        let doc = yaml(path)?;
        for group in doc["groups"].as_array().into_iter().flatten() {
            for rule in group["rules"].as_array().into_iter().flatten() {
                if let Some(name) = rule["alert"].as_str() {
                    all.push(Alert {
                        name: name.to_owned(),
                        expr: rule["expr"].as_str().unwrap_or_default().to_owned(),
                        rule: rule.clone(),
                    });
                }
            }
        }
    }
    Ok(all)
}

/// Where a dashboard expression comes from, and how Grafana runs it.
#[derive(Debug, Clone)]
pub struct Query {
    pub dashboard: String,
    /// Panel title and refId, or the variable's name.
    pub place: String,
    pub expr: String,
    /// A template variable's query: `label_values(selector, label)` or `query_result(expr)`.
    pub variable: bool,
}

/// Every PromQL expression of a dashboard: panel targets (rows included), annotations and query
/// variables.
pub fn queries(dashboard: &str, json: &Value) -> Vec<Query> {
    let mut found = Vec::new();
    let mut panels: Vec<&Value> = json["panels"].as_array().into_iter().flatten().collect();
    while let Some(panel) = panels.pop() {
        panels.extend(panel["panels"].as_array().into_iter().flatten());
        for target in panel["targets"].as_array().into_iter().flatten() {
            if let Some(expr) = target["expr"].as_str() {
                found.push(Query {
                    dashboard: dashboard.to_owned(),
                    place: format!(
                        "panel {:?} target {}",
                        panel["title"].as_str().unwrap_or_default(),
                        target["refId"].as_str().unwrap_or_default()
                    ),
                    expr: expr.to_owned(),
                    variable: false,
                });
            }
        }
    }
    for annotation in json["annotations"]["list"].as_array().into_iter().flatten() {
        if let Some(expr) = annotation["target"]["expr"].as_str() {
            found.push(Query {
                dashboard: dashboard.to_owned(),
                place: format!(
                    "annotation {:?}",
                    annotation["name"].as_str().unwrap_or_default()
                ),
                expr: expr.to_owned(),
                variable: false,
            });
        }
    }
    for variable in json["templating"]["list"].as_array().into_iter().flatten() {
        if variable["type"] == "query" {
            found.push(Query {
                dashboard: dashboard.to_owned(),
                place: format!(
                    "variable ${}",
                    variable["name"].as_str().unwrap_or_default()
                ),
                expr: variable["query"].as_str().unwrap_or_default().to_owned(),
                variable: true,
            });
        }
    }
    found
}

/// The PromQL inside a Grafana variable query: `label_values(selector, label)` gives `selector`
/// and `label`, `query_result(expr)` gives `expr`.
pub fn variable_promql(query: &str) -> Option<(String, Option<String>)> {
    if let Some(inner) = query
        .strip_prefix("label_values(")
        .and_then(|q| q.strip_suffix(')'))
    {
        let (selector, label) = inner.rsplit_once(',')?;
        return Some((selector.trim().to_owned(), Some(label.trim().to_owned())));
    }
    let inner = query
        .strip_prefix("query_result(")
        .and_then(|q| q.strip_suffix(')'))?;
    Some((inner.to_owned(), None))
}

/// Replaces Grafana's variables with the values given, longest names first so `$__range` is not
/// mistaken for a shorter name. Capture references such as `$1` in `label_replace` are not
/// variables and stay. Fails when a `$name` is left that was not given.
pub fn substitute(expr: &str, values: &[(&str, &str)]) -> Result<String, String> {
    let mut values = values.to_vec();
    values.sort_by_key(|(name, _)| std::cmp::Reverse(name.len()));
    let mut out = expr.to_owned();
    for (name, value) in &values {
        out = out.replace(&format!("${{{name}}}"), value);
        out = out.replace(&format!("${name}"), value);
    }
    let leftover = out.match_indices('$').find(|(i, _)| {
        out[i + 1..]
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == '{')
    });
    match leftover {
        Some((i, _)) => Err(format!(
            "unknown variable at {:?} in {expr}",
            &out[i..out.len().min(i + 20)]
        )),
        None => Ok(out),
    }
}

/// Every `azure_scheduled_events_*` name in `text`.
pub fn metric_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(start) = rest.find(PREFIX) {
        let preceded_by_word = rest[..start]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':');
        let tail = &rest[start..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        if !preceded_by_word {
            names.insert(tail[..end].to_owned());
        }
        rest = &tail[end..];
    }
    names
}

/// The sample names an exposition can be queried by: each `# TYPE` family, with `_bucket`,
/// `_sum` and `_count` for histograms and summaries.
pub fn exported_names(exposition: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in exposition.lines() {
        let mut words = line.split_whitespace();
        if words.next() != Some("#") || words.next() != Some("TYPE") {
            continue;
        }
        let (Some(name), Some(kind)) = (words.next(), words.next()) else {
            continue;
        };
        names.insert(name.to_owned());
        if kind == "histogram" || kind == "summary" {
            for suffix in ["_bucket", "_sum", "_count"] {
                names.insert(format!("{name}{suffix}"));
            }
        }
    }
    names
}

/// `program` with `args` in the repository, its success and its output; `package` names the
/// Debian package to install when it is missing.
pub fn run(program: &str, args: &[&str], package: &str) -> Result<(bool, String), Error> {
    let output = Command::new(program)
        .args(args)
        .current_dir(repo())
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| {
            format!("{program} is required (Debian package {package}; .ci/run installs it): {e}")
        })?;
    Ok((
        output.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ),
    ))
}

/// A free TCP port on 127.0.0.1 (bound, read and released: another process may take it, which
/// the caller notices when its server fails to start).
pub fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// A temporary directory removed on drop.
/// A child process killed and reaped on drop.
pub struct Process {
    pub child: Child,
    pub name: String,
}

impl Process {
    pub fn spawn(name: &str, command: &mut Command) -> Result<Self, Error> {
        let child = command
            .spawn()
            .map_err(|e| format!("cannot start {name}: {e}"))?;
        Ok(Self {
            child,
            name: name.to_owned(),
        })
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A server on a free loopback port, started by `command(port)`, ready once `GET /-/ready` answers
/// 200; tried on another port if the first was taken in between.
pub async fn serve(
    what: &str,
    command: impl Fn(u16) -> Command,
    http: &reqwest::Client,
) -> Result<(Process, String), Error> {
    let mut last = String::new();
    for _ in 0..3 {
        let port = free_port()?;
        let mut cmd = command(port);
        cmd.stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped());
        let mut process = Process::spawn(what, &mut cmd)?;
        let base = format!("http://127.0.0.1:{port}");
        let ready = format!("{base}/-/ready");
        let result = crate::common::wait(&format!("{what} to be ready"))
            .within(std::time::Duration::from_secs(30))
            .until(async || {
                if let Some(status) = process.child.try_wait().ok().flatten() {
                    return Err(format!("{what} exited: {status}"));
                }
                Ok(http
                    .get(&ready)
                    .send()
                    .await
                    .is_ok_and(|r| r.status().is_success()))
            })
            .await;
        match result {
            Ok(()) => return Ok((process, base)),
            Err(e) => {
                process.kill();
                let mut stderr = String::new();
                if let Some(mut pipe) = process.child.stderr.take() {
                    use std::io::Read;
                    let _ = pipe.read_to_string(&mut stderr);
                }
                last = format!("{e}\n{stderr}");
            }
        }
    }
    Err(format!("{what} did not start: {last}").into())
}

/// A Prometheus server on loopback with `config`, keeping its data in `data` (its base URL).
pub async fn serve_prometheus(
    config: &Path,
    data: &Path,
    http: &reqwest::Client,
) -> Result<(Process, String), Error> {
    serve(
        "Prometheus",
        |port| {
            let mut c = Command::new("prometheus");
            c.arg(format!("--config.file={}", config.display()))
                .arg(format!("--storage.tsdb.path={}", data.display()))
                .arg(format!("--web.listen-address=127.0.0.1:{port}"))
                .arg("--log.level=warn")
                .env_clear();
            c
        },
        http,
    )
    .await
    .map_err(|e| {
        format!("{e} (Prometheus is required: Debian package prometheus; .ci/run installs it)")
            .into()
    })
}

/// Starts the agent binary (clean environment, no inherited proxies) as VM `name` with `args`,
/// plus a free loopback port unless they give `--web.listen-address`, and waits for its
/// `starting` line.
pub fn start_agent(name: &str, args: &[String]) -> Result<AgentProcess, Error> {
    let mut args: Vec<&str> = args.iter().map(String::as_str).collect();
    if !args.iter().any(|a| a.starts_with("--web.listen-address")) {
        args.push("--web.listen-address=127.0.0.1:0");
    }
    AgentProcess::spawn(command(&args)).map_err(|e| format!("{name}: {e}").into())
}
