//! The Azure Monitor rule groups (deploy/azure-monitor/prometheus-rule-groups.json, the ARM
//! template that docs/install.md deploys) against Microsoft's own published definition of
//! `Microsoft.AlertsManagement/prometheusRuleGroups` 2023-03-01, vendored from
//! azure-rest-api-specs in tests/fixtures/azure-rest-api-specs (its README names the commit and
//! the licence).
//!
//! The template's ARM expressions (`[parameters('interval')]`, `[if(empty(...), ...)]`) are
//! resolved as Resource Manager resolves them before the resource provider sees the request,
//! once with every optional parameter empty and once with every one set. Each resource's
//! `properties` is then validated with Python's `jsonschema` (installed by .ci/run into
//! target/ci-tools) against the definition `PrometheusRuleGroupProperties`, and the two limits
//! that the definition states in words are checked as it states them: the interval "between 1
//! and 15 minutes", the severity "between 0 and 4".
//!
//! What the published definition does not carry is not checked here: it has no `maxItems` on a
//! group's rules and no `maxLength` on an annotation. The service refuses a group of more than 20
//! rules ("'Rules Count' must be between 1 and 20") and caps annotations, but those limits are
//! only in Microsoft's prose documentation (docs/install.md, "Which store evaluates the rules, and
//! how late", lists them with their source).

use std::io::Write as _;
use std::process::{Command, Stdio};

use serde_json::{Map, Value, json};

use crate::ops::{self, Error};

type TestResult = Result<(), Error>;

const SCHEMA: &str = "tests/fixtures/azure-rest-api-specs/PrometheusRuleGroups.json";
const TEMPLATE: &str = "deploy/azure-monitor/prometheus-rule-groups.json";

/// One ARM template expression (without its brackets), parsed and evaluated.
struct Expression<'a> {
    text: &'a [u8],
    at: usize,
    parameters: &'a Map<String, Value>,
}

impl Expression<'_> {
    fn error(&self, what: &str) -> Error {
        format!(
            "ARM expression {:?} at {}: {what}",
            String::from_utf8_lossy(self.text),
            self.at
        )
        .into()
    }

    fn skip_spaces(&mut self) {
        while self.text.get(self.at).is_some_and(u8::is_ascii_whitespace) {
            self.at += 1;
        }
    }

    fn eat(&mut self, byte: u8) -> bool {
        self.skip_spaces();
        if self.text.get(self.at) == Some(&byte) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn value(&mut self) -> Result<Value, Error> {
        self.skip_spaces();
        match self.text.get(self.at) {
            Some(b'\'') => {
                self.at += 1;
                let mut s = Vec::new();
                loop {
                    match self.text.get(self.at) {
                        Some(b'\'') if self.text.get(self.at + 1) == Some(&b'\'') => {
                            s.push(b'\'');
                            self.at += 2;
                        }
                        Some(b'\'') => {
                            self.at += 1;
                            break;
                        }
                        Some(c) => {
                            s.push(*c);
                            self.at += 1;
                        }
                        None => return Err(self.error("unterminated string")),
                    }
                }
                Ok(Value::String(String::from_utf8(s)?))
            }
            Some(c) if c.is_ascii_digit() => {
                let start = self.at;
                while self.text.get(self.at).is_some_and(u8::is_ascii_digit) {
                    self.at += 1;
                }
                let digits = std::str::from_utf8(&self.text[start..self.at])?;
                Ok(json!(digits.parse::<i64>()?))
            }
            Some(c) if c.is_ascii_alphabetic() => self.call(),
            _ => Err(self.error("expected a value")),
        }
    }

    fn call(&mut self) -> Result<Value, Error> {
        let start = self.at;
        while self
            .text
            .get(self.at)
            .is_some_and(|c| c.is_ascii_alphanumeric())
        {
            self.at += 1;
        }
        let name = String::from_utf8(self.text[start..self.at].to_vec())?;
        if !self.eat(b'(') {
            return Err(self.error("expected ("));
        }
        let mut args = Vec::new();
        if !self.eat(b')') {
            loop {
                args.push(self.value()?);
                if self.eat(b')') {
                    break;
                }
                if !self.eat(b',') {
                    return Err(self.error("expected , or )"));
                }
            }
        }
        let arg = |i: usize| args.get(i).cloned().unwrap_or(Value::Null);
        let mut result = match name.as_str() {
            "parameters" => {
                let key = arg(0);
                self.parameters
                    .get(key.as_str().unwrap_or_default())
                    .cloned()
                    .ok_or_else(|| self.error(&format!("no parameter {key}")))?
            }
            "concat" => Value::String(
                args.iter()
                    .map(|a| {
                        a.as_str()
                            .map(str::to_owned)
                            .unwrap_or_else(|| a.to_string())
                    })
                    .collect(),
            ),
            "if" => {
                if arg(0) == Value::Bool(true) {
                    arg(1)
                } else {
                    arg(2)
                }
            }
            "empty" => Value::Bool(match arg(0) {
                Value::Null => true,
                Value::String(s) => s.is_empty(),
                Value::Array(a) => a.is_empty(),
                Value::Object(o) => o.is_empty(),
                _ => false,
            }),
            "null" => Value::Null,
            "createArray" => Value::Array(args.clone()),
            "createObject" => Value::Object(
                args.chunks(2)
                    .map(|kv| {
                        (
                            kv[0].as_str().unwrap_or_default().to_owned(),
                            kv.get(1).cloned().unwrap_or(Value::Null),
                        )
                    })
                    .collect(),
            ),
            "resourceGroup" => json!({ "location": "westeurope", "name": "rg" }),
            other => return Err(self.error(&format!("function {other} is not known here"))),
        };
        while self.eat(b'.') {
            let start = self.at;
            while self
                .text
                .get(self.at)
                .is_some_and(|c| c.is_ascii_alphanumeric())
            {
                self.at += 1;
            }
            let property = std::str::from_utf8(&self.text[start..self.at])?;
            result = result[property].clone();
        }
        Ok(result)
    }
}

/// `value` with every ARM expression string resolved and every property that resolves to null
/// left out (as Resource Manager sends the request).
fn resolve(value: &Value, parameters: &Map<String, Value>) -> Result<Value, Error> {
    Ok(match value {
        Value::String(s) if s.starts_with('[') && !s.starts_with("[[") && s.ends_with(']') => {
            let mut expression = Expression {
                text: &s.as_bytes()[1..s.len() - 1],
                at: 0,
                parameters,
            };
            let result = expression.value()?;
            expression.skip_spaces();
            if expression.at != expression.text.len() {
                return Err(expression.error("trailing text"));
            }
            result
        }
        Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|v| resolve(v, parameters))
                .collect::<Result<_, _>>()?,
        ),
        Value::Object(map) => {
            let mut out = Map::new();
            for (k, v) in map {
                let v = resolve(v, parameters)?;
                if !v.is_null() {
                    out.insert(k.clone(), v);
                }
            }
            Value::Object(out)
        }
        other => other.clone(),
    })
}

/// The template's parameters: their defaults, overridden by `given`.
fn parameters(template: &Value, given: &Value) -> Result<Map<String, Value>, Error> {
    let mut values = Map::new();
    for (name, declared) in template["parameters"].as_object().into_iter().flatten() {
        if let Some(value) = given.get(name) {
            values.insert(name.clone(), value.clone());
        } else if let Some(default) = declared.get("defaultValue") {
            let default = resolve(default, &values)?;
            values.insert(name.clone(), default);
        } else {
            return Err(format!("{TEMPLATE}: parameter {name} has no value in this test").into());
        }
    }
    Ok(values)
}

/// Minutes of an ISO 8601 duration of the kind the template uses (`PT1M`, `PT1H30M`, `PT90S`).
fn iso_minutes(text: &str) -> Option<f64> {
    let rest = text.strip_prefix("PT")?;
    let (mut total, mut number) = (0.0, String::new());
    for c in rest.chars() {
        if c.is_ascii_digit() || c == '.' {
            number.push(c);
            continue;
        }
        let n: f64 = number.parse().ok()?;
        number.clear();
        total += match c {
            'H' => n * 60.0,
            'M' => n,
            'S' => n / 60.0,
            _ => return None,
        };
    }
    number.is_empty().then_some(total)
}

/// The two numbers of "between A and B" in a definition's description.
fn between(description: &str) -> Option<(f64, f64)> {
    let rest = &description[description.find("between ")? + "between ".len()..];
    let mut words = rest.split_whitespace();
    let low = words.next()?.parse().ok()?;
    (words.next()? == "and").then_some(())?;
    let high = words
        .next()?
        .trim_end_matches(|c: char| !c.is_ascii_digit())
        .parse()
        .ok()?;
    Some((low, high))
}

/// The errors Python's `jsonschema` finds in each group's `properties` (`{"name", "properties"}`)
/// by the definition `PrometheusRuleGroupProperties` of `schema`, one line each.
fn validate(schema: &Value, groups: &[Value]) -> Result<Vec<String>, Error> {
    let script = r##"
import json, sys
import jsonschema
document = json.load(sys.stdin)
validator = jsonschema.Draft4Validator({
    "$ref": "#/definitions/PrometheusRuleGroupProperties",
    "definitions": document["schema"]["definitions"],
})
for group in document["groups"]:
    for error in validator.iter_errors(group["properties"]):
        where = "/".join(str(p) for p in error.absolute_path)
        print(f"{group['name']}: at /{where}: {error.message[:300]}")
"##;
    let python = ops::tool("python3");
    let mut child = Command::new(&python)
        .args(["-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            format!(
                "{} is required, with the jsonschema package (.ci/run installs both into target/ci-tools): {e}",
                python.display()
            )
        })?;
    if let Some(mut stdin) = child.stdin.take() {
        let input = json!({ "schema": schema, "groups": groups });
        stdin.write_all(serde_json::to_string(&input)?.as_bytes())?;
    }
    let output = child.wait_with_output()?;
    if !output.status.success() {
        return Err(format!(
            "jsonschema did not run ({} needs the jsonschema package; .ci/run installs it into target/ci-tools):\n{}",
            python.display(),
            String::from_utf8_lossy(&output.stderr)
        )
        .into());
    }
    Ok(String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(str::to_owned)
        .collect())
}

#[test]
fn every_azure_rule_group_is_valid_by_microsofts_published_definition() -> TestResult {
    let schema: Value = serde_json::from_str(&std::fs::read_to_string(ops::repo().join(SCHEMA))?)?;
    let template: Value =
        serde_json::from_str(&std::fs::read_to_string(ops::repo().join(TEMPLATE))?)?;
    let definitions = &schema["definitions"];
    let interval_limits = between(
        definitions["PrometheusRuleGroupProperties"]["properties"]["interval"]["description"]
            .as_str()
            .unwrap_or_default(),
    )
    .ok_or("the definition no longer states the interval's range in words")?;
    let severity_limits = between(
        definitions["PrometheusRule"]["properties"]["severity"]["description"]
            .as_str()
            .unwrap_or_default(),
    )
    .ok_or("the definition no longer states the severity's range in words")?;

    let workspace = "/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/rg/providers/microsoft.monitor/accounts/amw";
    let deployments = [
        json!({ "azureMonitorWorkspaceId": workspace }),
        json!({
            "azureMonitorWorkspaceId": workspace,
            "clusterName": "aks-east",
            "clusterResourceId": "/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/rg/providers/Microsoft.ContainerService/managedClusters/aks-east",
            "criticalActionGroupId": "/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/rg/providers/microsoft.insights/actionGroups/page",
            "warningActionGroupId": "/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/rg/providers/microsoft.insights/actionGroups/warn",
            "infoActionGroupId": "/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/rg/providers/microsoft.insights/actionGroups/info",
            "ruleGroupPrefix": "fleet-",
        }),
    ];
    let mut groups = Vec::new();
    let mut problems = Vec::new();
    for given in &deployments {
        let values = parameters(&template, given)?;
        for resource in template["resources"].as_array().into_iter().flatten() {
            if resource["type"] != "Microsoft.AlertsManagement/prometheusRuleGroups" {
                continue;
            }
            let resource = resolve(resource, &values)?;
            let name = format!(
                "{} ({})",
                resource["name"].as_str().unwrap_or_default(),
                if given.get("clusterName").is_some() {
                    "every parameter set"
                } else {
                    "defaults"
                }
            );
            if resource["apiVersion"] != schema["info"]["version"] {
                problems.push(format!(
                    "{name}: apiVersion {} is not the vendored definition's {}",
                    resource["apiVersion"], schema["info"]["version"]
                ));
            }
            let properties = &resource["properties"];
            match properties["interval"].as_str().map(|i| (i, iso_minutes(i))) {
                Some((_, Some(m))) if m >= interval_limits.0 && m <= interval_limits.1 => {}
                Some((i, _)) => problems.push(format!(
                    "{name}: interval {i} is not between {} and {} minutes",
                    interval_limits.0, interval_limits.1
                )),
                None => {}
            }
            for rule in properties["rules"].as_array().into_iter().flatten() {
                if let Some(severity) = rule["severity"].as_f64()
                    && !(severity_limits.0..=severity_limits.1).contains(&severity)
                {
                    problems.push(format!(
                        "{name}: rule {} has severity {severity}",
                        rule["alert"]
                    ));
                }
            }
            groups.push(json!({ "name": name, "properties": properties }));
        }
    }
    assert!(
        groups.len() >= 2,
        "{TEMPLATE}: no prometheusRuleGroups resources"
    );

    problems.extend(validate(&schema, &groups)?);
    assert!(
        problems.is_empty(),
        "{TEMPLATE} against Microsoft's definition ({SCHEMA}):\n{}",
        problems.join("\n")
    );
    Ok(())
}

#[test]
fn the_schema_check_refuses_a_group_microsofts_definition_refuses() -> TestResult {
    // The validator itself: a rule without its expression, a severity of the wrong type.
    let schema: Value = serde_json::from_str(&std::fs::read_to_string(ops::repo().join(SCHEMA))?)?;
    let bad = json!({
        "scopes": ["/subscriptions/x"],
        "rules": [{ "alert": "NoExpression", "severity": "high" }],
    });
    let errors = validate(&schema, &[json!({ "name": "bad", "properties": bad })])?;
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert_eq!(iso_minutes("PT1H30M"), Some(90.0));
    assert_eq!(iso_minutes("PT30S"), Some(0.5));
    assert_eq!(
        between("Should be between 1 and 15 minutes"),
        Some((1.0, 15.0))
    );
    assert_eq!(between("Must be between 0 and 4."), Some((0.0, 4.0)));
    Ok(())
}
