//! The OpenTelemetry Resource: which VM the spans come from.
//!
//! Built from instance metadata (read once, before the first poll) and the agent itself, then
//! `OTEL_RESOURCE_ATTRIBUTES`, then `OTEL_SERVICE_NAME`, each overriding what came before: the
//! operator's variables always win over what the agent works out. Names follow the OpenTelemetry
//! semantic conventions 1.43 (model/cloud and model/azure of open-telemetry/semantic-conventions:
//! `cloud.platform` `azure.vm`/`azure.aks`, `azure.resource_group.name`) and the collector's Azure
//! resource detector where the conventions have none (`azure.vm.*`, `azure.resourcegroup.name`).
//! `--otlp.semconv-compat=pre-1.43` sends the Resource as it was before, for one release.

use std::collections::BTreeMap;

use opentelemetry::{KeyValue, Value};
use opentelemetry_sdk::Resource;

use crate::azure::wire;
use crate::config::otlp::{DEFAULT_SERVICE_NAME, OtlpConfig, SemconvCompat};

/// What the agent knows about the VM it runs on.
#[derive(Debug, Clone, Copy, Default)]
pub struct VmIdentity<'a> {
    /// This VM's name in `Resources` (`--vm.name`, else `compute.name`).
    pub vm_name: Option<&'a str>,
    /// Instance metadata, once read.
    pub compute: Option<&'a wire::Compute>,
}

/// The resource attributes in precedence order, the last writer of a key winning.
pub fn attributes(config: &OtlpConfig, vm: VmIdentity<'_>) -> BTreeMap<String, Value> {
    let mut attributes: BTreeMap<String, Value> = BTreeMap::new();
    let mut set = |key: &str, value: &str| {
        if !value.is_empty() {
            attributes.insert(key.to_owned(), Value::from(value.to_owned()));
        }
    };
    set("service.name", DEFAULT_SERVICE_NAME);
    set("service.version", env!("CARGO_PKG_VERSION"));
    set("cloud.provider", "azure");
    if let Some(name) = vm.vm_name {
        set("service.instance.id", name);
    }
    if let Some(c) = vm.compute {
        let platform = platform(c);
        match config.semconv_compat {
            None => {
                set("cloud.platform", platform.name());
                set("azure.resource_group.name", &c.resource_group_name);
            }
            Some(SemconvCompat::Pre1_43) => set("cloud.platform", platform.pre_1_43_name()),
        }
        set("cloud.region", &c.location);
        set("cloud.availability_zone", &c.zone);
        set("cloud.account.id", &c.subscription_id);
        set("host.id", &c.vm_id);
        set("host.name", &c.name);
        set("host.type", &c.vm_size);
        set("azure.vm.name", &c.name);
        set("azure.vm.size", &c.vm_size);
        set("azure.vm.scaleset.name", &c.vm_scale_set_name);
        set("azure.resourcegroup.name", &c.resource_group_name);
        set("azure.vm.platform_fault_domain", &c.platform_fault_domain);
        set("azure.vm.platform_update_domain", &c.platform_update_domain);
        if vm.vm_name.is_none() {
            set("service.instance.id", &c.name);
        }
    }
    for (key, value) in &config.resource_attributes {
        attributes.insert(key.clone(), Value::from(value.clone()));
    }
    if let Some(name) = &config.service_name {
        attributes.insert("service.name".to_owned(), Value::from(name.clone()));
    }
    attributes
}

/// The Resource sent with every export.
pub fn resource(config: &OtlpConfig, vm: VmIdentity<'_>) -> Resource {
    let sdk = Resource::builder_empty()
        .with_detector(Box::new(
            opentelemetry_sdk::resource::TelemetryResourceDetector,
        ))
        .build();
    let mut kvs: Vec<KeyValue> = sdk
        .iter()
        .map(|(k, v)| KeyValue::new(k.clone(), v.clone()))
        .collect();
    kvs.extend(
        attributes(config, vm)
            .into_iter()
            .map(|(k, v)| KeyValue::new(k, v)),
    );
    Resource::builder_empty().with_attributes(kvs).build()
}

/// The `cloud.platform` of a VM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Platform {
    Vm,
    Aks,
}

impl Platform {
    /// As semantic conventions 1.43 name it.
    fn name(self) -> &'static str {
        match self {
            Platform::Vm => "azure.vm",
            Platform::Aks => "azure.aks",
        }
    }

    /// As the conventions named it before 1.43 (deprecated there, "renamed").
    fn pre_1_43_name(self) -> &'static str {
        match self {
            Platform::Vm => "azure_vm",
            Platform::Aks => "azure_aks",
        }
    }
}

/// An AKS node (its scale set lives in the `MC_` node resource group and is named
/// `aks-<pool>-...`), else a plain VM. Instance metadata has no field that says so.
fn platform(compute: &wire::Compute) -> Platform {
    let node_group = compute
        .resource_group_name
        .get(..3)
        .is_some_and(|p| p.eq_ignore_ascii_case("mc_"));
    let aks_pool = compute
        .vm_scale_set_name
        .get(..4)
        .is_some_and(|p| p.eq_ignore_ascii_case("aks-"));
    if node_group && aks_pool {
        Platform::Aks
    } else {
        Platform::Vm
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::otlp::{EnvSource, OtlpArgs};
    use std::collections::HashMap;

    fn config(env: &[(&'static str, &'static str)]) -> OtlpConfig {
        config_with(OtlpArgs::default(), env)
    }

    fn config_with(args: OtlpArgs, env: &[(&'static str, &'static str)]) -> OtlpConfig {
        let mut env: HashMap<&str, &str> = env.iter().copied().collect();
        env.insert("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318");
        assert!(env.var("OTEL_EXPORTER_OTLP_ENDPOINT").is_some());
        match args.resolve(&env) {
            Ok(Some(config)) => config,
            other => panic!("{other:?}"),
        }
    }

    fn compute() -> wire::Compute {
        wire::Compute {
            name: "cass-vmss_3".into(),
            vm_id: "02aab8a4-74ef-476e-8182-f6d2ba4166a6".into(),
            location: "westeurope".into(),
            zone: "2".into(),
            vm_scale_set_name: "cass-vmss".into(),
            resource_group_name: "db-rg".into(),
            subscription_id: "8d10da13-8125-4ba9-a717-bf7490507b3d".into(),
            platform_fault_domain: "1".into(),
            platform_update_domain: "4".into(),
            vm_size: "Standard_E8s_v5".into(),
            priority: "Regular".into(),
        }
    }

    fn text(attributes: &BTreeMap<String, Value>, key: &str) -> Option<String> {
        attributes.get(key).map(|v| v.as_str().into_owned())
    }

    #[test]
    fn instance_metadata_describes_the_vm() {
        let compute = compute();
        let attributes = attributes(
            &config(&[]),
            VmIdentity {
                vm_name: Some("cass-vmss_3"),
                compute: Some(&compute),
            },
        );
        for (key, value) in [
            ("service.name", "azure-scheduled-events-exporter"),
            ("service.version", env!("CARGO_PKG_VERSION")),
            ("service.instance.id", "cass-vmss_3"),
            ("cloud.provider", "azure"),
            ("cloud.platform", "azure.vm"),
            ("cloud.region", "westeurope"),
            ("cloud.availability_zone", "2"),
            ("cloud.account.id", "8d10da13-8125-4ba9-a717-bf7490507b3d"),
            ("host.id", "02aab8a4-74ef-476e-8182-f6d2ba4166a6"),
            ("host.name", "cass-vmss_3"),
            ("host.type", "Standard_E8s_v5"),
            ("azure.vm.scaleset.name", "cass-vmss"),
            ("azure.resource_group.name", "db-rg"),
            ("azure.resourcegroup.name", "db-rg"),
            ("azure.vm.platform_fault_domain", "1"),
            ("azure.vm.platform_update_domain", "4"),
        ] {
            assert_eq!(text(&attributes, key).as_deref(), Some(value), "{key}");
        }
    }

    #[test]
    fn the_compatibility_switch_sends_the_names_from_before_1_43() {
        let compute = compute();
        let args = OtlpArgs {
            semconv_compat: Some(SemconvCompat::Pre1_43),
            ..OtlpArgs::default()
        };
        let attributes = attributes(
            &config_with(args, &[]),
            VmIdentity {
                vm_name: None,
                compute: Some(&compute),
            },
        );
        assert_eq!(
            text(&attributes, "cloud.platform").as_deref(),
            Some("azure_vm")
        );
        assert!(!attributes.contains_key("azure.resource_group.name"));
        assert_eq!(
            text(&attributes, "azure.resourcegroup.name").as_deref(),
            Some("db-rg")
        );
    }

    #[test]
    fn empty_metadata_fields_are_left_out() {
        let compute = wire::Compute {
            zone: String::new(),
            vm_scale_set_name: String::new(),
            ..compute()
        };
        let attributes = attributes(
            &config(&[]),
            VmIdentity {
                vm_name: None,
                compute: Some(&compute),
            },
        );
        assert!(!attributes.contains_key("cloud.availability_zone"));
        assert!(!attributes.contains_key("azure.vm.scaleset.name"));
        assert_eq!(
            text(&attributes, "service.instance.id").as_deref(),
            Some("cass-vmss_3")
        );
    }

    #[test]
    fn otel_resource_attributes_override_metadata_and_otel_service_name_overrides_both() {
        let compute = compute();
        let attributes = attributes(
            &config(&[
                (
                    "OTEL_RESOURCE_ATTRIBUTES",
                    "cloud.region=override,service.name=from-attributes,deployment.environment.name=prod",
                ),
                ("OTEL_SERVICE_NAME", "from-service-name"),
            ]),
            VmIdentity {
                vm_name: Some("cass-vmss_3"),
                compute: Some(&compute),
            },
        );
        assert_eq!(
            text(&attributes, "cloud.region").as_deref(),
            Some("override")
        );
        assert_eq!(
            text(&attributes, "service.name").as_deref(),
            Some("from-service-name")
        );
        assert_eq!(
            text(&attributes, "deployment.environment.name").as_deref(),
            Some("prod")
        );
        assert_eq!(
            text(&attributes, "host.id").as_deref(),
            Some("02aab8a4-74ef-476e-8182-f6d2ba4166a6")
        );
    }

    #[test]
    fn an_aks_node_is_told_from_a_plain_vm() {
        let node = wire::Compute {
            resource_group_name: "MC_prod-rg_prod-aks_westeurope".into(),
            vm_scale_set_name: "aks-nodepool1-12345678-vmss".into(),
            ..compute()
        };
        assert_eq!(platform(&node).name(), "azure.aks");
        assert_eq!(platform(&node).pre_1_43_name(), "azure_aks");
        assert_eq!(platform(&compute()).name(), "azure.vm");
        assert_eq!(platform(&compute()).pre_1_43_name(), "azure_vm");
    }

    #[test]
    fn the_exported_resource_carries_the_sdk_and_our_attributes() {
        let resource = resource(&config(&[]), VmIdentity::default());
        let get = |k: &'static str| resource.get(&opentelemetry::Key::from_static_str(k));
        assert_eq!(get("cloud.provider"), Some(Value::from("azure")));
        assert_eq!(get("telemetry.sdk.language"), Some(Value::from("rust")));
    }
}
