//! Instance metadata as the simulator serves it (`/metadata/instance`): the VM's `compute`
//! section, a plausible `network` section, and a ready-made example VM for the demo.

use serde_json::{Value, json};

use azure_scheduled_events_protocol::wire::Compute;

/// The whole `/metadata/instance` body: `compute` carries the given [`Compute`] (plus a few
/// fields every real VM reports), `network` one NIC with a private address.
pub fn instance_document(compute: &Compute) -> Result<Value, serde_json::Error> {
    Ok(json!({
        "compute": compute_section(compute)?,
        "network": network_section(),
    }))
}

/// `/metadata/instance/compute`.
pub fn compute_section(compute: &Compute) -> Result<Value, serde_json::Error> {
    let mut section = serde_json::to_value(compute)?;
    if let Value::Object(fields) = &mut section {
        for (key, value) in [
            ("azEnvironment", "AzurePublicCloud"),
            ("osType", "Linux"),
            ("provider", "Microsoft.Compute"),
        ] {
            fields
                .entry(key)
                .or_insert_with(|| Value::String(value.to_owned()));
        }
    }
    Ok(section)
}

/// `/metadata/instance/network`.
pub fn network_section() -> Value {
    json!({
        "interface": [{
            "ipv4": {
                "ipAddress": [{"privateIpAddress": "10.1.0.4", "publicIpAddress": ""}],
                "subnet": [{"address": "10.1.0.0", "prefix": "24"}]
            },
            "ipv6": {"ipAddress": []},
            "macAddress": "6045BDA5F3C1"
        }]
    })
}

/// A realistic scale-set VM called `name`, for the demo and the standalone simulator. The scale
/// set name is what comes before the last `_` of a `{scaleSetName}_{instanceId}` name.
pub fn example_compute(name: &str) -> Compute {
    let scale_set = name
        .rsplit_once('_')
        .map(|(set, _)| set.to_owned())
        .unwrap_or_default();
    Compute {
        name: name.to_owned(),
        vm_id: "02aab8a4-74ef-476e-8182-f6d2ba4166a6".to_owned(),
        location: "westeurope".to_owned(),
        zone: "1".to_owned(),
        vm_scale_set_name: scale_set,
        resource_group_name: "demo-rg".to_owned(),
        subscription_id: "8d10da13-8125-4ba9-a717-bf7490507b3d".to_owned(),
        platform_fault_domain: "0".to_owned(),
        platform_update_domain: "0".to_owned(),
        vm_size: "Standard_D2s_v5".to_owned(),
        priority: "Regular".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type TestResult = Result<(), Box<dyn std::error::Error>>;
    use azure_scheduled_events_protocol::wire::InstanceMetadata;

    #[test]
    fn the_instance_document_reads_back_as_the_compute_it_was_given() -> TestResult {
        let compute = example_compute("web_3");
        assert_eq!(compute.vm_scale_set_name, "web");
        let body = serde_json::to_vec(&instance_document(&compute)?)?;
        let read: InstanceMetadata = serde_json::from_slice(&body)?;
        assert_eq!(read.compute, compute);
        Ok(())
    }

    #[test]
    fn a_plain_vm_name_has_no_scale_set() -> TestResult {
        assert_eq!(example_compute("db01").vm_scale_set_name, "");
        Ok(())
    }
}
