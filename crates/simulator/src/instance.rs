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

/// The vmId of the simulated VM called `name`: Azure gives every VM its own, and the rules count VMs
/// by it, so simulators of different VMs must not share one. Derived from the name alone (FNV-1a,
/// 128 bits, laid out as the lower-case version-4 GUID Azure's vmIds look like), so the same name gets
/// the same vmId in every run, on every machine and with every Rust version.
pub fn vm_id_for(name: &str) -> String {
    const OFFSET: u128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d;
    const PRIME: u128 = 0x0000_0000_0100_0000_0000_0000_0000_013b;
    let mut hash = OFFSET;
    for byte in name.bytes() {
        hash ^= u128::from(byte);
        hash = hash.wrapping_mul(PRIME);
    }
    let hash = (hash & !(0xF << 76)) | (0x4 << 76);
    let hash = (hash & !(0x3 << 62)) | (0x2 << 62);
    // Azure writes vmIds in lower case, EventIds in upper case.
    crate::event_id::format_guid(hash).to_lowercase()
}

/// A realistic scale-set VM called `name`, for the demo and the standalone simulator, with its own
/// stable vmId ([`vm_id_for`]). The scale set name is what comes before the last `_` of a
/// `{scaleSetName}_{instanceId}` name.
pub fn example_compute(name: &str) -> Compute {
    let scale_set = name
        .rsplit_once('_')
        .map(|(set, _)| set.to_owned())
        .unwrap_or_default();
    Compute {
        name: name.to_owned(),
        vm_id: vm_id_for(name),
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
    fn each_vm_name_has_its_own_vm_id_the_same_in_every_run() -> TestResult {
        let ids: Vec<String> = ["web_0", "web_1", "web_2", "db01"]
            .iter()
            .map(|name| example_compute(name).vm_id)
            .collect();
        for (i, id) in ids.iter().enumerate() {
            assert!(!ids[..i].contains(id), "{id} twice: {ids:?}");
            // A lower-case version-4 GUID, as Azure's vmIds.
            assert_eq!(id.len(), 36, "{id}");
            assert_eq!(&id[14..15], "4", "{id}");
            assert!(
                id.chars()
                    .all(|c| c == '-' || c.is_ascii_digit() || ('a'..='f').contains(&c))
            );
        }
        assert_eq!(example_compute("web_1").vm_id, ids[1], "not stable");
        // Fixed: another build or machine gives the same vmId for the same name.
        assert_eq!(vm_id_for("web_0"), vm_id_for("web_0"));
        assert_eq!(vm_id_for(""), "6c62272e-07bb-4142-a2b8-21756295c58d");
        Ok(())
    }

    #[test]
    fn a_plain_vm_name_has_no_scale_set() -> TestResult {
        assert_eq!(example_compute("db01").vm_scale_set_name, "");
        Ok(())
    }
}
