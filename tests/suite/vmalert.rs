//! The alert rules on a second engine: Debian's `victoria-metrics` package (VictoriaMetrics 1.79
//! with vmalert) as a real remote ruler, fed the scenarios of the promtool unit tests
//! (alerts/*test*.yml), which must give the alerts promtool expects.
//!
//! Everything is read from the files as they are: each test file's `rule_files`,
//! `evaluation_interval`, `group_eval_order` and `tests` (`input_series`, and the `exp_alerts` of
//! every `alert_rule_test` at its `eval_time`). No alert, group or count is named here.
//!
//! How a scenario is replayed:
//! - Every scenario of a test file gets a slot of [`SLOT`] in one VictoriaMetrics on loopback,
//!   its time 0 at [`LEAD`] into the slot, so that no scenario sees another's data. Its input
//!   series (promtool's notation expanded: `a+bxn`, `_`, `_xn`, `stale` as Prometheus' staleness
//!   marker) are written with Prometheus' remote-write protocol, which carries staleness markers.
//!   A series that holds a time (its name ends in `_timestamp_seconds` or `_time_seconds`) is
//!   written in promtool's clock, which starts at 0: its values move with the scenario too.
//! - vmalert replays the rules over every slot (`-replay.timeFrom/-replay.timeTo`, one query per
//!   rule over all slots, so an alert's `for` runs across the whole scenario), writing its recording
//!   rules and `ALERTS` back into VictoriaMetrics over remote write. As promtool does, every
//!   group is evaluated at the test file's `evaluation_interval` and in its `group_eval_order`.
//! - The firing `ALERTS` samples at each `eval_time` (the last evaluation at or before it, as
//!   promtool takes it) are compared with `exp_alerts`: the same alert names with the same labels.
//!
//! Then the same without a `cluster` label (a plain VM fleet, one cluster per store): each
//! scenario once per `cluster` value its series carry, that cluster's series (and those without
//! one) with the label removed, and each expected alert of that cluster without it. A label value
//! that the rules join from the cluster (`east/vms/10.0.0.4:10188`) is expected without it
//! (`/vms/10.0.0.4:10188`). At every `eval_time` that expects alerts, vmalert in its normal mode
//! evaluates the alerting rules at that time of the replayed store (`-datasource.lookback`), so
//! that every description is rendered with the `query` template function as on a live ruler:
//! no rule may fail (a description that fails to render makes vmalert drop the alert), and some
//! alert must be active. Which alerts fire when is the replay's to judge: this pass starts a
//! second or so after the time it evaluates, which can move a window's edge.
//!
//! What cannot be replayed as promtool runs it, and how it is handled (docs/install.md, "Which
//! store evaluates the rules, and how late", says the same):
//! - vmalert 1.79's replay refuses the `query` template function (the replay stops), and
//!   annotations are not part of `ALERTS`: the replay runs the rules without their annotations;
//!   descriptions are rendered in the normal-mode pass instead (without `cluster`).
//! - A replay evaluates each rule over the whole range in one query, so a recording rule that
//!   reads its own earlier results (`last_over_time(itself[10m])`), or those of a rule after it in
//!   the evaluation order, would read nothing. The replay is run again, keeping those records
//!   from the pass before, until they no longer change (each pass carries their memory at least
//!   one evaluation further; today six passes). Such a record is then read at the same
//!   evaluation's time from the pass before, where promtool reads the previous evaluation's:
//!   a rule reading a record of a later group can see a change one evaluation early, and a
//!   record that keeps itself alive (a roll-up lasting while any of its VMs has the condition,
//!   `last_over_time(itself[450s])`) would be kept alive by its own result of the pass before at
//!   the same time: were an early pass to form it (before the held and gone records exist, every
//!   VM that is down counts), no later pass would end it. No scenario does so today. The cases
//!   that differ are listed, each with why, in [`REPLAY_ARTEFACTS`]; a listed case that agrees
//!   fails the test, as does any other difference. Listed are the cases where a scenario split by cluster sees the other cluster's
//!   VMs: without the label, two clusters' targets are the same series in one store, and such a
//!   record carries them across the gap between slots. (Reading only the previous evaluations, `offset` by one interval,
//!   is what a live vmalert does, but carries such a memory one evaluation per pass: the
//!   passes no longer settle within [`MAX_PASSES`].) A rule that reads its own previous
//!   evaluation to keep a value (not only to keep a series alive) would be computed wrongly
//!   at every evaluation; the rules keep no such value.
//! - A live vmalert marks a series stale when it leaves a rule's results; a replay does not, and
//!   VictoriaMetrics does not wait for a rule's results before the next rule reads them: a
//!   proxy between the two adds both (see [`replay_proxy`]).
//! - VictoriaMetrics looks back from a query's time by about one of the series' own sample
//!   intervals, not Prometheus' fixed 5 minutes: the store runs with
//!   `-search.minStalenessInterval=5m`, so that a series whose samples stop without a staleness
//!   marker (`_` in promtool's notation) lasts 5 minutes, as promtool has it.
//! - Annotations (`exp_annotations`) are not compared: vmalert's template functions are not
//!   Prometheus'; that they render at all is checked.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::common::{TempDir, wait};
use crate::notify::receiver::Receiver;
use crate::ops::{self, Error, Process, free_port};

type TestResult = Result<(), Error>;
/// An error that can cross threads (the replay proxy's tasks).
type SendError = Box<dyn std::error::Error + Send + Sync>;

/// The room each scenario has in the store: longer than any scenario plus the longest window a
/// rule reads, so that no scenario sees another's series.
const SLOT: i64 = 3 * 3600 * 1000;
/// Where a scenario's time 0 is within its slot: the quiet lead-in before it.
const LEAD: i64 = 45 * 60 * 1000;

/// Labels of one series, `__name__` included.
type Labels = BTreeMap<String, String>;

/// A sample of promtool's notation: a value, or Prometheus' staleness marker.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Sample {
    Value(f64),
    Stale,
}

/// Prometheus' staleness marker: a NaN with this bit pattern.
const STALE_NAN: u64 = 0x7ff0_0000_0000_0002;

#[derive(Debug, Clone)]
struct Series {
    labels: Labels,
    /// (milliseconds from the scenario's time 0, sample)
    samples: Vec<(i64, Sample)>,
}

#[derive(Debug, Clone)]
struct Case {
    eval_ms: i64,
    alertname: String,
    expected: BTreeSet<Labels>,
}

#[derive(Debug, Clone)]
struct Scenario {
    /// The test file and the scenario's name (and, without `cluster`, which cluster's series).
    name: String,
    series: Vec<Series>,
    cases: Vec<Case>,
}

/// One promtool test file, read.
#[derive(Debug)]
struct TestFile {
    path: PathBuf,
    rule_files: Vec<PathBuf>,
    interval_ms: i64,
    group_order: Vec<String>,
    scenarios: Vec<Scenario>,
}

/// A promtool duration (`1m`, `30s`, `1h30m`, `500ms`) in milliseconds.
fn duration_ms(text: &str) -> Result<i64, Error> {
    let mut total = 0i64;
    let mut number = String::new();
    let mut chars = text.trim().chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() {
            number.push(c);
            continue;
        }
        let n: i64 = number
            .parse()
            .map_err(|_| format!("bad duration {text:?}"))?;
        number.clear();
        let unit = match c {
            'm' if chars.peek() == Some(&'s') => {
                chars.next();
                1
            }
            's' => 1000,
            'm' => 60_000,
            'h' => 3_600_000,
            'd' => 86_400_000,
            'w' => 7 * 86_400_000,
            'y' => 365 * 86_400_000,
            _ => return Err(format!("bad duration {text:?}").into()),
        };
        total += n * unit;
    }
    if !number.is_empty() {
        return Err(format!("bad duration {text:?} (no unit)").into());
    }
    Ok(total)
}

/// `name{label="value", ...}` as labels.
fn parse_selector(text: &str) -> Result<Labels, Error> {
    let text = text.trim();
    let (name, rest) = match text.find('{') {
        Some(i) => (&text[..i], &text[i..]),
        None => (text, ""),
    };
    let mut labels = Labels::new();
    if !name.trim().is_empty() {
        labels.insert("__name__".to_owned(), name.trim().to_owned());
    }
    let Some(body) = rest.strip_prefix('{') else {
        return Ok(labels);
    };
    let body = body
        .strip_suffix('}')
        .ok_or_else(|| format!("series {text:?}: no closing brace"))?;
    let mut chars = body.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace() || *c == ',') {
            chars.next();
        }
        if chars.peek().is_none() {
            break;
        }
        let key: String =
            std::iter::from_fn(|| chars.next_if(|c| *c != '=' && *c != ' ')).collect();
        while chars.next_if(|c| *c == ' ').is_some() {}
        if chars.next() != Some('=') || chars.next() != Some('"') {
            return Err(format!("series {text:?}: label {key:?} is not key=\"value\"").into());
        }
        let mut value = String::new();
        loop {
            match chars.next() {
                Some('"') => break,
                Some('\\') => match chars.next() {
                    Some('n') => value.push('\n'),
                    Some(c) => value.push(c),
                    None => return Err(format!("series {text:?}: dangling escape").into()),
                },
                Some(c) => value.push(c),
                None => return Err(format!("series {text:?}: unterminated value").into()),
            }
        }
        labels.insert(key.trim().to_owned(), value);
    }
    Ok(labels)
}

fn parse_number(text: &str) -> Result<f64, Error> {
    match text {
        "Inf" | "+Inf" => Ok(f64::INFINITY),
        "-Inf" => Ok(f64::NEG_INFINITY),
        "NaN" => Ok(f64::NAN),
        _ => text
            .parse()
            .map_err(|_| format!("bad sample value {text:?}").into()),
    }
}

/// promtool's expanding notation: `a+bxn` and `a-bxn` (n further samples), `axn` (a, n+1
/// times), `_` (no sample), `_xn` (n of them), `stale`; `None` is a missing sample.
fn expand(values: &str) -> Result<Vec<Option<Sample>>, Error> {
    let mut out = Vec::new();
    for item in values.split_whitespace() {
        if item == "_" {
            out.push(None);
        } else if item == "stale" {
            out.push(Some(Sample::Stale));
        } else if let Some(n) = item.strip_prefix("_x") {
            let n: usize = n.parse().map_err(|_| format!("bad item {item:?}"))?;
            out.extend(std::iter::repeat_n(None, n));
        } else if let Some((head, n)) = item.rsplit_once('x') {
            let n: usize = n.parse().map_err(|_| format!("bad item {item:?}"))?;
            // The operator: a + or - after the first character that is not an exponent's sign.
            let bytes = head.as_bytes();
            let op = (1..bytes.len()).find(|&i| {
                (bytes[i] == b'+' || bytes[i] == b'-') && !matches!(bytes[i - 1], b'e' | b'E')
            });
            let (start, step) = match op {
                Some(i) => {
                    let step = parse_number(&head[i + 1..])?;
                    (
                        parse_number(&head[..i])?,
                        if bytes[i] == b'-' { -step } else { step },
                    )
                }
                None => (parse_number(head)?, 0.0),
            };
            for k in 0..=n {
                out.push(Some(Sample::Value(start + step * k as f64)));
            }
        } else {
            out.push(Some(Sample::Value(parse_number(item)?)));
        }
    }
    Ok(out)
}

fn read_test_file(path: &Path) -> Result<TestFile, Error> {
    let doc = ops::yaml(path)?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let file = ops::file_name(path);
    let rule_files = doc["rule_files"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(|f| dir.join(f))
        .collect::<Vec<_>>();
    if rule_files.is_empty() {
        return Err(format!("{file}: no rule_files").into());
    }
    let interval_ms = duration_ms(doc["evaluation_interval"].as_str().unwrap_or("1m"))?;
    let group_order = doc["group_eval_order"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect();
    let mut scenarios = Vec::new();
    for (index, test) in doc["tests"].as_array().into_iter().flatten().enumerate() {
        let name = format!(
            "{file}: {:?}",
            test["name"]
                .as_str()
                .map(str::to_owned)
                .unwrap_or_else(|| format!("test {index}"))
        );
        let step_ms = match test["interval"].as_str() {
            Some(i) => duration_ms(i)?,
            None => interval_ms,
        };
        for key in ["external_labels", "external_url"] {
            if !test[key].is_null() {
                return Err(format!("{name}: `{key}` is not replayed by this test").into());
            }
        }
        let mut series = Vec::new();
        for input in test["input_series"].as_array().into_iter().flatten() {
            let labels = parse_selector(input["series"].as_str().unwrap_or_default())?;
            let values = match &input["values"] {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                other => return Err(format!("{name}: values {other}").into()),
            };
            let samples = expand(&values)?
                .into_iter()
                .enumerate()
                .filter_map(|(i, s)| s.map(|s| (i as i64 * step_ms, s)))
                .collect();
            series.push(Series { labels, samples });
        }
        let mut cases = Vec::new();
        for case in test["alert_rule_test"].as_array().into_iter().flatten() {
            let alertname = case["alertname"].as_str().unwrap_or_default().to_owned();
            let eval = case["eval_time"].as_str().unwrap_or("0s");
            let mut expected = BTreeSet::new();
            for alert in case["exp_alerts"].as_array().into_iter().flatten() {
                let mut labels = Labels::new();
                for (k, v) in alert["exp_labels"].as_object().into_iter().flatten() {
                    let v = match v {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    labels.insert(k.clone(), v);
                }
                expected.insert(labels);
            }
            cases.push(Case {
                eval_ms: duration_ms(eval)?,
                alertname,
                expected,
            });
        }
        scenarios.push(Scenario {
            name,
            series,
            cases,
        });
    }
    Ok(TestFile {
        path: path.to_owned(),
        rule_files,
        interval_ms,
        group_order,
        scenarios,
    })
}

/// The scenario once per `cluster` value of its series, that cluster's series and those without
/// one, with the label removed from series and expected alerts alike.
fn without_cluster(scenario: &Scenario) -> Vec<Scenario> {
    let clusters: BTreeSet<String> = scenario
        .series
        .iter()
        .filter_map(|s| s.labels.get("cluster").cloned())
        .collect();
    if clusters.is_empty() {
        return vec![scenario.clone()];
    }
    clusters
        .iter()
        .map(|cluster| {
            let ours = |labels: &Labels| labels.get("cluster").is_none_or(|c| c == cluster);
            let strip = |labels: &Labels| -> Labels {
                labels
                    .iter()
                    .filter(|(k, _)| *k != "cluster")
                    .map(|(k, v)| {
                        let v = match v.strip_prefix(&format!("{cluster}/")) {
                            Some(rest) => format!("/{rest}"),
                            None => v.clone(),
                        };
                        (k.clone(), v)
                    })
                    .collect()
            };
            Scenario {
                name: format!("{} (cluster {cluster:?}, label removed)", scenario.name),
                series: scenario
                    .series
                    .iter()
                    .filter(|s| ours(&s.labels))
                    .map(|s| Series {
                        labels: s
                            .labels
                            .iter()
                            .filter(|(k, _)| *k != "cluster")
                            .map(|(k, v)| (k.clone(), v.clone()))
                            .collect(),
                        samples: s.samples.clone(),
                    })
                    .collect(),
                cases: scenario
                    .cases
                    .iter()
                    .map(|case| Case {
                        eval_ms: case.eval_ms,
                        alertname: case.alertname.clone(),
                        expected: case
                            .expected
                            .iter()
                            .filter(|l| ours(l))
                            .map(strip)
                            .collect(),
                    })
                    .collect(),
            }
        })
        .collect()
}

/// The rule files of a test file as one file for vmalert: the groups in `group_eval_order`
/// (the others after them, in file order), each evaluated at `interval`; without annotations
/// for the replay (`annotations: false`), only the alerting rules for the normal-mode pass.
fn ruler_file(test: &TestFile, interval: &str, replay: bool) -> Result<String, Error> {
    let mut groups = Vec::new();
    for rules in &test.rule_files {
        for group in ops::yaml(rules)?["groups"].as_array().into_iter().flatten() {
            groups.push(group.clone());
        }
    }
    let rank = |group: &Value| {
        let name = group["name"].as_str().unwrap_or_default();
        test.group_order
            .iter()
            .position(|g| g == name)
            .unwrap_or(usize::MAX)
    };
    groups.sort_by_key(rank);
    for group in &mut groups {
        group["interval"] = json!(interval);
        let Some(rules) = group["rules"].as_array_mut() else {
            continue;
        };
        if replay {
            for rule in rules.iter_mut() {
                if let Some(rule) = rule.as_object_mut() {
                    rule.remove("annotations");
                }
            }
        } else {
            rules.retain(|r| r["alert"].is_string());
        }
    }
    groups.retain(|g| g["rules"].as_array().is_some_and(|r| !r.is_empty()));
    Ok(serde_norway::to_string(&json!({ "groups": groups }))?)
}

// Prometheus' remote-write protocol (protobuf, snappy-compressed), which VictoriaMetrics accepts
// on /api/v1/write; the only way in for a staleness marker.
#[derive(Clone, PartialEq, prost::Message)]
struct WriteRequest {
    #[prost(message, repeated, tag = "1")]
    timeseries: Vec<TimeSeries>,
}
#[derive(Clone, PartialEq, prost::Message)]
struct TimeSeries {
    #[prost(message, repeated, tag = "1")]
    labels: Vec<Label>,
    #[prost(message, repeated, tag = "2")]
    samples: Vec<WireSample>,
}
#[derive(Clone, PartialEq, prost::Message)]
struct Label {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(string, tag = "2")]
    value: String,
}
#[derive(Clone, PartialEq, prost::Message)]
struct WireSample {
    #[prost(double, tag = "1")]
    value: f64,
    #[prost(int64, tag = "2")]
    timestamp: i64,
}

/// A snappy block made of literals only: valid snappy, uncompressed.
fn snappy_literals(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() + data.len() / 65536 * 3 + 10);
    let mut n = data.len();
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(byte);
            break;
        }
        out.push(byte | 0x80);
    }
    for chunk in data.chunks(65536) {
        let len = chunk.len() - 1;
        if len < 60 {
            out.push((len as u8) << 2);
        } else if len < 256 {
            out.push(60 << 2);
            out.push(len as u8);
        } else {
            out.push(61 << 2);
            out.extend_from_slice(&(len as u16).to_le_bytes());
        }
        out.extend_from_slice(chunk);
    }
    out
}

/// A VictoriaMetrics of its own on loopback, stopped when dropped.
struct Store {
    _process: Process,
    url: String,
    http: reqwest::Client,
    _dir: TempDir,
}

impl Store {
    async fn start(name: &str) -> Result<Self, Error> {
        let dir = TempDir::new(name)?;
        let port = free_port()?;
        let log = std::fs::File::create(dir.path("victoria-metrics.log"))?;
        let process = Process::spawn(
            "victoria-metrics",
            Command::new("victoria-metrics")
                .arg(format!("-storageDataPath={}", dir.path("data").display()))
                .arg(format!("-httpListenAddr=127.0.0.1:{port}"))
                // Scenarios are written weeks in the past; nothing is dropped for its age.
                .arg("-retentionPeriod=100y")
                // Backfilled data: no cached query results, no hidden recent samples.
                .arg("-search.disableCache")
                .arg("-search.latencyOffset=0s")
                // A series whose samples stop without a staleness marker (`_` in promtool's
                // notation) lasts 5 minutes, as in Prometheus, not one sample interval.
                .arg("-search.minStalenessInterval=5m")
                // A replay's query covers every slot at once.
                .arg("-search.maxPointsPerTimeseries=10000000")
                .stdin(Stdio::null())
                .stdout(log.try_clone()?)
                .stderr(log),
        )
        .map_err(|e| format!("{e} (Debian package victoria-metrics; .ci/run installs it)"))?;
        let store = Self {
            _process: process,
            url: format!("http://127.0.0.1:{port}"),
            http: reqwest::Client::new(),
            _dir: dir,
        };
        let health = format!("{}/health", store.url);
        wait("VictoriaMetrics to answer /health")
            .retrying_errors()
            .until(async || -> Result<bool, reqwest::Error> {
                Ok(store.http.get(&health).send().await?.status().is_success())
            })
            .await?;
        Ok(store)
    }

    async fn write(&self, series: &[(Labels, Vec<(i64, Sample)>)]) -> TestResult {
        for batch in series.chunks(500) {
            let request = WriteRequest {
                timeseries: batch
                    .iter()
                    .map(|(labels, samples)| TimeSeries {
                        labels: labels
                            .iter()
                            .map(|(name, value)| Label {
                                name: name.clone(),
                                value: value.clone(),
                            })
                            .collect(),
                        samples: samples
                            .iter()
                            .map(|(timestamp, sample)| WireSample {
                                value: match sample {
                                    Sample::Value(v) => *v,
                                    Sample::Stale => f64::from_bits(STALE_NAN),
                                },
                                timestamp: *timestamp,
                            })
                            .collect(),
                    })
                    .collect(),
            };
            let body = snappy_literals(&prost::Message::encode_to_vec(&request));
            let response = self
                .http
                .post(format!("{}/api/v1/write", self.url))
                .header("Content-Encoding", "snappy")
                .header("Content-Type", "application/x-protobuf")
                .header("X-Prometheus-Remote-Write-Version", "0.1.0")
                .body(body)
                .send()
                .await?;
            if !response.status().is_success() {
                return Err(format!(
                    "remote write: {} {}",
                    response.status(),
                    response.text().await?
                )
                .into());
            }
        }
        self.flush().await
    }

    /// Makes what was written searchable at once.
    async fn flush(&self) -> TestResult {
        self.http
            .get(format!("{}/internal/force_flush", self.url))
            .send()
            .await?
            .error_for_status()?;
        Ok(())
    }

    /// Every sample of the series matching `selector` in [start, end] (milliseconds):
    /// (timestamp, labels) of each.
    async fn export(
        &self,
        selector: &str,
        start: i64,
        end: i64,
    ) -> Result<Vec<(i64, Labels)>, Error> {
        self.flush().await?;
        let text = self
            .http
            .post(format!("{}/api/v1/export", self.url))
            .form(&[
                ("match[]", selector.to_owned()),
                ("start", (start / 1000).to_string()),
                ("end", (end / 1000).to_string()),
            ])
            .send()
            .await?
            .error_for_status()?
            .text()
            .await?;
        let mut samples = Vec::new();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let row: Value = serde_json::from_str(line)?;
            let labels: Labels = row["metric"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                .collect();
            for t in row["timestamps"].as_array().into_iter().flatten() {
                samples.push((t.as_i64().unwrap_or_default(), labels.clone()));
            }
        }
        Ok(samples)
    }
}

/// Snappy's block format, decoded (vmalert compresses its remote write with it).
fn unsnappy(data: &[u8]) -> Result<Vec<u8>, String> {
    let short = || "snappy: truncated block".to_owned();
    let mut i = 0;
    let (mut length, mut shift) = (0usize, 0);
    loop {
        let byte = *data.get(i).ok_or_else(short)?;
        i += 1;
        length |= usize::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            break;
        }
        shift += 7;
    }
    let mut out: Vec<u8> = Vec::with_capacity(length);
    let le = |bytes: &[u8]| {
        bytes
            .iter()
            .rev()
            .fold(0usize, |n, b| n << 8 | usize::from(*b))
    };
    while i < data.len() {
        let tag = data[i];
        i += 1;
        let (len, offset) = match tag & 3 {
            0 => {
                let mut len = usize::from(tag >> 2);
                if len >= 60 {
                    let extra = len - 59;
                    len = le(data.get(i..i + extra).ok_or_else(short)?);
                    i += extra;
                }
                let literal = data.get(i..i + len + 1).ok_or_else(short)?;
                out.extend_from_slice(literal);
                i += len + 1;
                continue;
            }
            1 => {
                let low = usize::from(*data.get(i).ok_or_else(short)?);
                i += 1;
                (
                    4 + usize::from((tag >> 2) & 7),
                    usize::from(tag >> 5) << 8 | low,
                )
            }
            2 => {
                let offset = le(data.get(i..i + 2).ok_or_else(short)?);
                i += 2;
                (1 + usize::from(tag >> 2), offset)
            }
            _ => {
                let offset = le(data.get(i..i + 4).ok_or_else(short)?);
                i += 4;
                (1 + usize::from(tag >> 2), offset)
            }
        };
        if offset == 0 || offset > out.len() {
            return Err("snappy: copy before the start".to_owned());
        }
        for _ in 0..len {
            out.push(out[out.len() - offset]);
        }
    }
    Ok(out)
}

/// What the replay proxy knows and has seen.
#[derive(Debug, Default)]
struct ProxyState {
    /// Each recording rule's expression, and the series it records.
    records: BTreeMap<String, String>,
    /// The recording rules whose results some rule reads at or before their own place in the
    /// evaluation order: their previous evaluations are read, so their results are kept from one
    /// pass to the next.
    memory: BTreeSet<String>,
    /// Which pass this is (1 for the first).
    pass: usize,
    /// The record whose results the next query must wait for, and how many series it has.
    pending: Option<(String, usize)>,
    /// Series of each record received since its query.
    received: BTreeMap<String, usize>,
    /// Where the first slot starts, and the last evaluation each slot's scenario looks at:
    /// results after it are not written, so that no memory reaches past its scenario.
    start: i64,
    horizons: Vec<i64>,
}

/// The rules as vmalert evaluates them, in order: (record or alert name, expression, is a record).
fn rules_in_order(text: &str) -> Result<Vec<(String, String, bool)>, Error> {
    let doc: Value = serde_norway::from_str(text)?;
    let mut rules = Vec::new();
    for group in doc["groups"].as_array().into_iter().flatten() {
        for rule in group["rules"].as_array().into_iter().flatten() {
            let expr = rule["expr"].as_str().unwrap_or_default().to_owned();
            if let Some(record) = rule["record"].as_str() {
                rules.push((record.to_owned(), expr, true));
            } else if let Some(alert) = rule["alert"].as_str() {
                rules.push((alert.to_owned(), expr, false));
            }
        }
    }
    Ok(rules)
}

/// Whether `expr` reads the series `name` (the whole name, not a longer one).
fn reads(expr: &str, name: &str) -> bool {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    expr.match_indices(name).any(|(i, _)| {
        !expr[..i].chars().next_back().is_some_and(word)
            && !expr[i + name.len()..].chars().next().is_some_and(word)
    })
}

/// Between vmalert and VictoriaMetrics during a replay, doing what a replay does not and a live
/// vmalert does, so that the rules read what they would read live:
/// - a query waits until the series that the previous recording rule's query found are all
///   written and searchable (`force_flush`), so a rule reads the results of the rules before it
///   (vmalert's `-replay.rulesDelay` is a fixed pause, short of this on a busy machine);
/// - a staleness marker is added one evaluation after each run of a written series' samples (a
///   live vmalert marks a series stale when it leaves a rule's results, as Prometheus does);
/// - from the second pass on, a record kept from the previous pass (see
///   [`ProxyState::memory`]) is deleted once its own query has read it, before its new results
///   are written.
///
/// Runs until the test's runtime ends.
async fn replay_proxy(
    store: &str,
    interval_ms: i64,
    state: std::sync::Arc<std::sync::Mutex<ProxyState>>,
) -> Result<String, Error> {
    use http_body_util::{BodyExt, Full};
    use hyper::{Request, Response, StatusCode, body::Incoming};
    use std::sync::{Arc, Mutex, PoisonError};

    type Shared = Arc<Mutex<ProxyState>>;
    fn lock(state: &Shared) -> std::sync::MutexGuard<'_, ProxyState> {
        state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    async fn delete(store: &str, http: &reqwest::Client, name: &str) -> Result<(), SendError> {
        http.post(format!("{store}/api/v1/admin/tsdb/delete_series"))
            .form(&[("match[]", format!("{{__name__={name:?}}}"))])
            .send()
            .await?
            .error_for_status()?;
        Ok(())
    }

    async fn write(
        store: &str,
        http: &reqwest::Client,
        body: &[u8],
        interval_ms: i64,
        state: &Shared,
    ) -> Result<(), SendError> {
        let mut request: WriteRequest = prost::Message::decode(unsnappy(body)?.as_slice())?;
        let (start, horizons) = {
            let state = lock(state);
            (state.start, state.horizons.clone())
        };
        let mut names = Vec::new();
        for series in &mut request.timeseries {
            series.samples.retain(|s| {
                let slot = usize::try_from((s.timestamp - start) / SLOT).unwrap_or(usize::MAX);
                horizons.get(slot).is_some_and(|h| s.timestamp <= *h)
            });
            if let Some(name) = series.labels.iter().find(|l| l.name == "__name__") {
                names.push(name.value.clone());
            }
            series.samples.sort_by_key(|s| s.timestamp);
            let mut markers = Vec::new();
            for (i, sample) in series.samples.iter().enumerate() {
                let next = sample.timestamp + interval_ms;
                if series
                    .samples
                    .get(i + 1)
                    .is_none_or(|n| n.timestamp != next)
                {
                    markers.push(WireSample {
                        value: f64::from_bits(STALE_NAN),
                        timestamp: next,
                    });
                }
            }
            series.samples.extend(markers);
            series.samples.sort_by_key(|s| s.timestamp);
        }
        let body = snappy_literals(&prost::Message::encode_to_vec(&request));
        http.post(format!("{store}/api/v1/write"))
            .header("Content-Encoding", "snappy")
            .header("Content-Type", "application/x-protobuf")
            .header("X-Prometheus-Remote-Write-Version", "0.1.0")
            .body(body)
            .send()
            .await?
            .error_for_status()?;
        http.get(format!("{store}/internal/force_flush"))
            .send()
            .await?
            .error_for_status()?;
        let mut state = lock(state);
        for name in names {
            *state.received.entry(name).or_default() += 1;
        }
        Ok(())
    }

    async fn query(
        store: &str,
        http: &reqwest::Client,
        path_and_query: &str,
        body: bytes::Bytes,
        state: &Shared,
    ) -> Result<String, SendError> {
        let waiting = lock(state).pending.clone();
        if let Some((record, count)) = waiting {
            let state = state.clone();
            tokio::task::spawn_blocking(move || {
                wait(&format!("the {count} series of {record} to be written"))
                    .within(Duration::from_secs(120))
                    .until_blocking(|| {
                        lock(&state).received.get(&record).copied().unwrap_or(0) >= count
                    })
            })
            .await??;
        }
        let answer = http
            .post(format!("{store}{path_and_query}"))
            .header("Content-Type", "application/x-www-form-urlencoded")
            .body(body.clone())
            .send()
            .await?
            .error_for_status()?
            .text()
            .await?;
        let form: Vec<(String, String)> = form_urlencoded::parse(
            path_and_query
                .split_once('?')
                .map(|(_, q)| q.as_bytes())
                .unwrap_or_default(),
        )
        .chain(form_urlencoded::parse(&body))
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
        let expr = form
            .iter()
            .find(|(k, _)| k == "query")
            .map(|(_, v)| v.clone())
            .unwrap_or_default();
        let found: Value = serde_json::from_str(&answer)?;
        let count = found["data"]["result"].as_array().map_or(0, Vec::len);
        let (record, forget) = {
            let mut state = lock(state);
            let record = state.records.get(&expr).cloned();
            if let Some(record) = &record {
                state.pending = Some((record.clone(), count));
                state.received.insert(record.clone(), 0);
            }
            let forget = record
                .as_ref()
                .is_some_and(|r| state.pass > 1 && state.memory.contains(r));
            (record, forget)
        };
        if let (Some(record), true) = (record, forget) {
            delete(store, http, &record).await?;
        }
        Ok(answer)
    }

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    let store = store.to_owned();
    let http = reqwest::Client::new();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (store, http, state) = (store.clone(), http.clone(), state.clone());
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                    let (store, http, state) = (store.clone(), http.clone(), state.clone());
                    async move {
                        let path = request
                            .uri()
                            .path_and_query()
                            .map(|p| p.as_str().to_owned())
                            .unwrap_or_default();
                        let body = request.into_body().collect().await?.to_bytes();
                        let outcome = if path.starts_with("/api/v1/write") {
                            write(&store, &http, &body, interval_ms, &state)
                                .await
                                .map(|()| (StatusCode::NO_CONTENT, String::new()))
                        } else {
                            query(&store, &http, &path, body, &state)
                                .await
                                .map(|answer| (StatusCode::OK, answer))
                        };
                        let (status, text) =
                            outcome.unwrap_or_else(|e| (StatusCode::BAD_GATEWAY, e.to_string()));
                        let mut response = Response::new(Full::new(bytes::Bytes::from(text)));
                        *response.status_mut() = status;
                        Ok::<_, hyper::Error>(response)
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok(url)
}

fn rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_default()
}

/// Where the first slot starts: 40 days ago, on a whole slot (and so on every interval).
fn first_slot() -> i64 {
    let now = chrono::Utc::now().timestamp_millis();
    (now - 40 * 86_400_000) / SLOT * SLOT
}

/// How many passes a replay may take before its kept records settle.
const MAX_PASSES: usize = 12;

/// A replay of `scenarios` (from `test`) through vmalert into a fresh VictoriaMetrics: the
/// store, where the first slot starts, and the directory with vmalert's output.
///
/// A replay evaluates each rule over the whole range in one query, so a rule that reads its own
/// earlier results, or those of a rule after it in the evaluation order, would read nothing.
/// The replay is therefore run again, keeping those records from the pass before, until they
/// no longer change (at most [`MAX_PASSES`]): each pass carries their memory at least one
/// evaluation further. Every other result is deleted between passes.
async fn replay(
    test: &TestFile,
    scenarios: &[Scenario],
    name: &str,
) -> Result<(Store, i64, TempDir), Error> {
    let store = Store::start(name).await?;
    let start = first_slot();
    let mut series = Vec::new();
    for (slot, scenario) in scenarios.iter().enumerate() {
        let zero = start + slot as i64 * SLOT + LEAD;
        for s in &scenario.series {
            // A series that holds a time (`_timestamp_seconds`, `_time_seconds`: Prometheus'
            // naming convention) is written in promtool's clock, which starts at 0: it moves
            // with its scenario.
            let name = s
                .labels
                .get("__name__")
                .map(String::as_str)
                .unwrap_or_default();
            let offset = if name.ends_with("_timestamp_seconds") || name.ends_with("_time_seconds")
            {
                zero as f64 / 1000.0
            } else {
                0.0
            };
            let samples = s
                .samples
                .iter()
                .map(|(t, v)| {
                    let v = match v {
                        Sample::Value(v) => Sample::Value(v + offset),
                        Sample::Stale => Sample::Stale,
                    };
                    (zero + t, v)
                })
                .collect();
            series.push((s.labels.clone(), samples));
        }
    }
    store.write(&series).await?;

    let dir = TempDir::new(&format!("{name}-vmalert"))?;
    if test.interval_ms % 1000 != 0 || test.interval_ms == 0 {
        return Err(format!(
            "{}: evaluation_interval of {} ms is not whole seconds",
            test.path.display(),
            test.interval_ms
        )
        .into());
    }
    let interval = format!("{}s", test.interval_ms / 1000);
    let text = ruler_file(test, &interval, true)?;
    let rules = dir.path("rules.yml");
    std::fs::write(&rules, &text)?;

    let order = rules_in_order(&text)?;
    let state = std::sync::Arc::new(std::sync::Mutex::new(ProxyState::default()));
    {
        let mut state = state.lock().map_err(|e| e.to_string())?;
        state.start = start;
        state.horizons = scenarios
            .iter()
            .enumerate()
            .map(|(slot, scenario)| {
                let last = scenario.cases.iter().map(|c| c.eval_ms).max().unwrap_or(0);
                start + slot as i64 * SLOT + LEAD + last / test.interval_ms * test.interval_ms
            })
            .collect();
        for (i, (name, expr, _)) in order.iter().enumerate() {
            for (later, _, is_record) in &order[i..] {
                if *is_record && reads(expr, later) {
                    state.memory.insert(later.clone());
                }
            }
            if order[i].2 {
                state.records.insert(expr.clone(), name.clone());
            }
        }
    }
    let memory: Vec<String> = state
        .lock()
        .map_err(|e| e.to_string())?
        .memory
        .iter()
        .cloned()
        .collect();
    let forgotten: Vec<String> = order
        .iter()
        .filter(|(name, _, is_record)| *is_record && !memory.contains(name))
        .map(|(name, _, _)| name.clone())
        .chain(["ALERTS".to_owned(), "ALERTS_FOR_STATE".to_owned()])
        .collect();
    let proxy = replay_proxy(&store.url, test.interval_ms, state.clone()).await?;
    let end = start + scenarios.len() as i64 * SLOT - test.interval_ms;
    let points = (end - start) / test.interval_ms + 1;
    let memory_selector = format!("{{__name__=~\"{}\"}}", memory.join("|"));
    let mut last = None;
    for pass in 1..=MAX_PASSES {
        state.lock().map_err(|e| e.to_string())?.pass = pass;
        if pass > 1 {
            for name in &forgotten {
                store
                    .http
                    .post(format!("{}/api/v1/admin/tsdb/delete_series", store.url))
                    .form(&[("match[]", format!("{{__name__={name:?}}}"))])
                    .send()
                    .await?
                    .error_for_status()?;
            }
        }
        let output = tokio::process::Command::new("vmalert")
            .arg(format!("-rule={}", rules.display()))
            .arg(format!("-datasource.url={proxy}"))
            .arg(format!("-remoteWrite.url={proxy}"))
            .arg(format!("-replay.timeFrom={}", rfc3339(start)))
            .arg(format!("-replay.timeTo={}", rfc3339(end)))
            // One query per rule over every slot: an alert's `for` runs across its scenario, and
            // a kept record is read whole before it is replaced.
            .arg(format!("-replay.maxDatapointsPerQuery={}", points + 1))
            .arg("-replay.rulesDelay=0s")
            .arg("-replay.ruleRetryAttempts=1")
            .arg("-remoteWrite.flushInterval=50ms")
            .arg("-remoteWrite.maxBatchSize=100000")
            .arg("-replay.disableProgressBar")
            .arg(format!("-datasource.queryStep={interval}"))
            .arg("-disableAlertgroupLabel")
            .stdin(Stdio::null())
            .output()
            .await
            .map_err(|e| {
                format!(
                    "vmalert is required (Debian package victoria-metrics; .ci/run installs it): {e}"
                )
            })?;
        let log = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        std::fs::write(dir.path(&format!("replay-{pass}.log")), &log)?;
        if !output.status.success() || !log.contains("replay finished") {
            return Err(format!("vmalert's replay of {name} (pass {pass}) failed:\n{log}").into());
        }
        if memory.is_empty() {
            return Ok((store, start, dir));
        }
        let mut kept = store.export(&memory_selector, start, end + SLOT).await?;
        kept.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        if last.as_ref() == Some(&kept) {
            return Ok((store, start, dir));
        }
        last = Some(kept);
    }
    Err(format!(
        "{name}: the records kept between passes ({memory:?}) still change after {MAX_PASSES} passes"
    )
    .into())
}

/// What vmalert's replay fired that promtool's expectations do not say, and the reverse: one
/// line per case that differs.
async fn compare(
    store: &Store,
    start: i64,
    test: &TestFile,
    scenarios: &[Scenario],
) -> Result<Vec<String>, Error> {
    let end = start + scenarios.len() as i64 * SLOT;
    let mut firing: BTreeMap<i64, Vec<Labels>> = BTreeMap::new();
    for (t, mut labels) in store
        .export(r#"ALERTS{alertstate="firing"}"#, start, end)
        .await?
    {
        labels.remove("__name__");
        labels.remove("alertstate");
        firing.entry(t).or_default().push(labels);
    }
    let mut differences = Vec::new();
    for (slot, scenario) in scenarios.iter().enumerate() {
        let zero = start + slot as i64 * SLOT + LEAD;
        for case in &scenario.cases {
            // promtool takes the alerts of the last evaluation at or before eval_time.
            let at = zero + case.eval_ms / test.interval_ms * test.interval_ms;
            let got: BTreeSet<Labels> = firing
                .get(&at)
                .into_iter()
                .flatten()
                .filter(|l| l.get("alertname") == Some(&case.alertname))
                .map(|l| {
                    let mut l = l.clone();
                    l.remove("alertname");
                    l
                })
                .collect();
            if got != case.expected {
                let mut line = format!(
                    "{} at {}s, {}:",
                    scenario.name,
                    case.eval_ms / 1000,
                    case.alertname
                );
                for missing in case.expected.difference(&got) {
                    let _ = write!(line, "\n    expected, not fired: {missing:?}");
                }
                for extra in got.difference(&case.expected) {
                    let _ = write!(line, "\n    fired, not expected: {extra:?}");
                }
                differences.push(line);
            }
        }
    }
    Ok(differences)
}

/// Why a scenario split by cluster sees another cluster's VMs.
const SLOTS_SHARE_SERIES: &str = "without the cluster label, aks1's and aks2's scrape targets are \
    the same series in one store, and a record that keeps itself alive carries aks1's VMs across \
    the gap between their slots into aks2's";

/// The cases where this replay cannot reproduce what a live ruler does, each with why: the
/// heading `compare` prints for it (file, scenario, time, alert). A listed case must still differ,
/// so that the list cannot outlive what it explains: one that agrees with promtool fails the test,
/// as does any difference not listed. docs/install.md ("Which store evaluates the rules, and how
/// late") names them too.
const REPLAY_ARTEFACTS: &[(&str, &str)] = &[
    (
        r#"azure-scheduled-events.test.yml: "IMDS unreachable from a whole cluster" (cluster "aks2", label removed) at 540s, AzureImdsUnreachable"#,
        SLOTS_SHARE_SERIES,
    ),
    (
        r#"azure-scheduled-events.test.yml: "IMDS unreachable from a whole cluster" (cluster "aks2", label removed) at 960s, AzureImdsUnreachable"#,
        SLOTS_SHARE_SERIES,
    ),
    (
        r#"azure-scheduled-events-azure-monitor.test.yml: "IMDS unreachable from a whole cluster" (cluster "aks2", label removed) at 540s, AzureImdsUnreachable"#,
        SLOTS_SHARE_SERIES,
    ),
    (
        r#"azure-scheduled-events-azure-monitor.test.yml: "IMDS unreachable from a whole cluster" (cluster "aks2", label removed) at 960s, AzureImdsUnreachable"#,
        SLOTS_SHARE_SERIES,
    ),
];

/// The differences of one run (of `test`, with or without `cluster`) that [`REPLAY_ARTEFACTS`]
/// does not explain, and each listed case of that run that no longer differs.
fn unexplained(test: &TestFile, without_cluster: bool, differences: Vec<String>) -> Vec<String> {
    let file = test
        .path
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    let heading = |d: &str| {
        d.lines()
            .next()
            .unwrap_or_default()
            .trim_end_matches(':')
            .to_owned()
    };
    let listed: Vec<&(&str, &str)> = REPLAY_ARTEFACTS
        .iter()
        .filter(|(case, _)| {
            case.starts_with(&format!("{file}:"))
                && case.contains("label removed") == without_cluster
        })
        .collect();
    let headings: BTreeSet<String> = differences.iter().map(|d| heading(d)).collect();
    let mut left: Vec<String> = differences
        .into_iter()
        .filter(|d| !listed.iter().any(|(case, _)| *case == heading(d)))
        .collect();
    for (case, why) in listed {
        if !headings.contains(*case) {
            left.push(format!(
                "{case}: agrees with promtool now, but REPLAY_ARTEFACTS lists it ({why}): remove it"
            ));
        }
    }
    left
}

fn report(test: &TestFile, differences: &[String], cases: usize) -> String {
    format!(
        "{}: vmalert differs from promtool's expectations in {} of {cases} cases:\n{}",
        test.path.display(),
        differences.len(),
        differences.join("\n")
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vmalert_replaying_every_rule_test_scenario_fires_what_promtool_expects() -> TestResult {
    let tests = ops::rule_tests()?;
    assert!(!tests.is_empty(), "no rule unit tests (alerts/*test*.yml)");
    let mut failures = Vec::new();
    for path in tests {
        let test = read_test_file(&path)?;
        let cases: usize = test.scenarios.iter().map(|s| s.cases.len()).sum();
        assert!(cases > 0, "{}: no alert_rule_test", path.display());
        let (store, start, _dir) = replay(&test, &test.scenarios, "vmalert-replay").await?;
        let differences = unexplained(
            &test,
            false,
            compare(&store, start, &test, &test.scenarios).await?,
        );
        if !differences.is_empty() {
            failures.push(report(&test, &differences, cases));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    Ok(())
}

/// vmalert in its normal mode, evaluating the alerting rules of `test` once at `at`
/// (milliseconds) of the replayed `store`: the alerts it holds active (name and labels) and
/// every failure it met, from its rules' state and its log.
async fn evaluate_at(
    store: &Store,
    rules: &Path,
    notifier: &Receiver,
    at: i64,
    interval: &str,
    dir: &TempDir,
) -> Result<(BTreeSet<Labels>, Vec<String>), Error> {
    let port = free_port()?;
    let log_path = dir.path(&format!("vmalert-{at}.log"));
    let log = std::fs::File::create(&log_path)?;
    let lookback_ms = chrono::Utc::now().timestamp_millis() - at;
    let mut vmalert = Process::spawn(
        "vmalert",
        Command::new("vmalert")
            .arg(format!("-rule={}", rules.display()))
            .arg(format!("-datasource.url={}", store.url))
            .arg(format!("-datasource.lookback={lookback_ms}ms"))
            .arg("-datasource.queryTimeAlignment=false")
            .arg(format!("-datasource.queryStep={interval}"))
            .arg(format!("-notifier.url={}", notifier.url("")))
            .arg(format!("-httpListenAddr=127.0.0.1:{port}"))
            .arg("-disableAlertgroupLabel")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log),
    )?;
    let http = reqwest::Client::new();
    let base = format!("http://127.0.0.1:{port}");
    // Every rule evaluated at least once.
    let groups = wait("vmalert's first evaluation of every rule")
        .within(Duration::from_secs(60))
        .until(async || -> Result<Option<Value>, Error> {
            if let Ok(Some(status)) = vmalert.child.try_wait() {
                let log = std::fs::read_to_string(&log_path).unwrap_or_default();
                return Err(format!("vmalert exited ({status}):\n{log}").into());
            }
            // Not listening yet: not yet.
            let Ok(answer) = http.get(format!("{base}/api/v1/rules")).send().await else {
                return Ok(None);
            };
            let rules: Value = answer.error_for_status()?.text().await?.parse()?;
            let groups = rules["data"]["groups"].clone();
            let all_evaluated = groups.as_array().is_some_and(|g| !g.is_empty())
                && groups
                    .as_array()
                    .into_iter()
                    .flatten()
                    .flat_map(|g| g["rules"].as_array().into_iter().flatten())
                    .all(|r| {
                        r["lastEvaluation"]
                            .as_str()
                            .is_some_and(|t| !t.starts_with("0001"))
                    });
            Ok(all_evaluated.then_some(groups))
        })
        .await?;
    let mut failures = Vec::new();
    for rule in groups
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_array().into_iter().flatten())
    {
        if let Some(error) = rule["lastError"].as_str().filter(|e| !e.is_empty()) {
            failures.push(format!(
                "{}: {error}",
                rule["name"].as_str().unwrap_or_default()
            ));
        }
    }
    let alerts: Value = http
        .get(format!("{base}/api/v1/alerts"))
        .send()
        .await?
        .error_for_status()?
        .text()
        .await?
        .parse()?;
    let active = alerts["data"]["alerts"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|a| {
            a["labels"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                .collect::<Labels>()
        })
        .collect();
    for line in std::fs::read_to_string(&log_path)?.lines() {
        if line.contains("\terror\t")
            && (line.contains("template") || line.contains("failed to execute"))
        {
            failures.push(line.to_owned());
        }
    }
    Ok((active, failures))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vmalert_fires_the_same_alerts_without_a_cluster_label_and_renders_every_description()
-> TestResult {
    let tests = ops::rule_tests()?;
    assert!(!tests.is_empty(), "no rule unit tests (alerts/*test*.yml)");
    let notifier = Receiver::start().await?;
    let mut failures = Vec::new();
    for path in tests {
        let test = read_test_file(&path)?;
        let scenarios: Vec<Scenario> = test.scenarios.iter().flat_map(without_cluster).collect();
        let cases: usize = scenarios.iter().map(|s| s.cases.len()).sum();
        let (store, start, dir) = replay(&test, &scenarios, "vmalert-no-cluster").await?;
        let differences = unexplained(
            &test,
            true,
            compare(&store, start, &test, &scenarios).await?,
        );
        if !differences.is_empty() {
            failures.push(report(&test, &differences, cases));
        }

        // Every description rendered where the alerts are expected, as a live vmalert does.
        let interval = format!("{}s", test.interval_ms / 1000);
        let rules = dir.path("alerting-rules.yml");
        // Evaluated every second, so that every group's first evaluation comes within a second
        // of the start (vmalert spreads groups' starts over their interval); each query still
        // looks back by the test's interval (`-datasource.queryStep`).
        std::fs::write(&rules, ruler_file(&test, "1s", false)?)?;
        let mut rendered = 0;
        let mut active_total = 0;
        for (slot, scenario) in scenarios.iter().enumerate() {
            let zero = start + slot as i64 * SLOT + LEAD;
            let times: BTreeSet<i64> = scenario
                .cases
                .iter()
                .filter(|c| !c.expected.is_empty())
                .map(|c| c.eval_ms / test.interval_ms * test.interval_ms)
                .collect();
            for t in times {
                let (active, errors) =
                    evaluate_at(&store, &rules, &notifier, zero + t, &interval, &dir).await?;
                rendered += 1;
                let problems: Vec<String> = errors
                    .into_iter()
                    .map(|e| format!("failed: {}", e.chars().take(400).collect::<String>()))
                    .collect();
                // Which alerts fire at that time is the replay's to judge: this pass starts a
                // second or so after the time it evaluates, which can move a window's edge.
                active_total += active.len();
                if !problems.is_empty() {
                    failures.push(format!(
                        "{} at {}s, vmalert's normal mode:\n    {}",
                        scenario.name,
                        t / 1000,
                        problems.join("\n    ")
                    ));
                }
            }
        }
        assert!(
            rendered > 0,
            "{}: no alert expected anywhere",
            path.display()
        );
        assert!(
            active_total > 0,
            "{}: vmalert's normal mode found no alert at any time that expects one: it rendered nothing",
            path.display()
        );
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    Ok(())
}

#[test]
fn promtools_expanding_notation_is_read_as_promtool_reads_it() -> TestResult {
    let values = |s: &str| -> Result<Vec<Option<f64>>, Error> {
        Ok(expand(s)?
            .into_iter()
            .map(|s| match s {
                Some(Sample::Value(v)) => Some(v),
                Some(Sample::Stale) => Some(-0.5),
                None => None,
            })
            .collect())
    };
    assert_eq!(
        values("-2+4x3")?,
        [Some(-2.0), Some(2.0), Some(6.0), Some(10.0)]
    );
    assert_eq!(
        values("1-2x4")?,
        [Some(1.0), Some(-1.0), Some(-3.0), Some(-5.0), Some(-7.0)]
    );
    assert_eq!(
        values("1x2 _x3 stale _")?,
        [
            Some(1.0),
            Some(1.0),
            Some(1.0),
            None,
            None,
            None,
            Some(-0.5),
            None
        ]
    );
    assert_eq!(values("1e-3+1e-3x1")?, [Some(0.001), Some(0.002)]);
    assert!(expand("1y2").is_err());
    let labels = parse_selector(r#"up{cluster="east",job="vms", instance="a\"b"}"#)?;
    assert_eq!(labels["__name__"], "up");
    assert_eq!(labels["instance"], "a\"b");
    assert_eq!(labels.len(), 4);
    assert_eq!(duration_ms("1m30s")?, 90_000);
    assert_eq!(duration_ms("500ms")?, 500);
    Ok(())
}
