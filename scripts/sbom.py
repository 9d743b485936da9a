#!/usr/bin/env python3
"""Writes the SBOM of one release build: a CycloneDX 1.5 JSON document listing the crates compiled into
the binary, with their versions, licences, the SHA-256 that Cargo.lock records for each, and who depends
on whom.

    scripts/sbom.py --target x86_64-unknown-linux-gnu --no-default-features --output FILE
    scripts/sbom.py --target x86_64-unknown-linux-gnu --target aarch64-unknown-linux-gnu --output FILE

The crates are `cargo tree`'s for the same targets and features as the build (normal dependencies, no
build scripts' or dev-dependencies, no proc-macros: only what ends up in the binary), so the Kubernetes
client appears only in the builds that have it. scripts/dist.sh and scripts/dist-windows.sh write one
beside each artefact; the release workflow writes the image's (both architectures). The document is
dated at SOURCE_DATE_EPOCH (the commit, as the archives are) and its serial number derives from what it
describes, so the same commit gives the same bytes. Python's standard library and cargo only.
"""

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import time
import uuid

CRATES_IO = "registry+https://github.com/rust-lang/crates.io-index"


def cargo():
    return os.environ.get("CARGO", "cargo")


def package():
    """The agent's package (the workspace's root): name, version, licence, repository, description."""
    out = subprocess.run(
        [cargo(), "metadata", "--locked", "--no-deps", "--format-version", "1"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    metadata = json.loads(out)
    root = os.path.join(metadata["workspace_root"], "Cargo.toml")
    packages = [p for p in metadata["packages"] if p["manifest_path"] == root]
    if len(packages) != 1:
        sys.exit(f"sbom.py: no package in the workspace's root manifest {root}")
    return packages[0]


def lock_checksums(path):
    """(name, version) -> the SHA-256 of the .crate file, as Cargo.lock records it for crates.io's crates."""
    sums, entry = {}, {}

    def flush():
        if entry.get("source") == CRATES_IO and "checksum" in entry:
            sums[(entry["name"], entry["version"])] = entry["checksum"]

    with open(path, encoding="utf-8") as lock:
        for line in lock:
            line = line.strip()
            if line == "[[package]]":
                flush()
                entry = {}
                continue
            match = re.fullmatch(r'(name|version|source|checksum) = "([^"]*)"', line)
            if match:
                entry[match.group(1)] = match.group(2)
    flush()
    return sums


def tree(targets, no_default_features):
    """cargo tree's crates and edges: ({(name, version): (license, repository)}, {(parent, child)})."""
    command = [cargo(), "tree", "--locked", "--edges", "normal,no-proc-macro", "--prefix", "depth"]
    command += ["--format", "{p}|{l}|{r}"]
    for target in targets:
        command += ["--target", target]
    if no_default_features:
        command.append("--no-default-features")
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    crates, edges, path = {}, set(), []
    for line in out.splitlines():
        match = re.fullmatch(r"(\d+)(.*?)( \(\*\))?", line)
        if not match or not match.group(2):
            continue
        depth = int(match.group(1))
        spec, license, repository = (match.group(2).split("|") + ["", ""])[:3]
        words = spec.split()
        if len(words) < 2 or not words[1].startswith("v"):
            sys.exit(f"sbom.py: cannot read cargo tree's line {line!r}")
        crate = (words[0], words[1][1:])
        crates.setdefault(crate, (license.strip(), repository.strip()))
        del path[depth:]
        if path:
            edges.add((path[-1], crate))
        path.append(crate)
    if not crates:
        sys.exit("sbom.py: cargo tree listed no crate")
    return crates, edges


def purl(name, version):
    return f"pkg:cargo/{name}@{version}"


def licenses(expression):
    # Old manifests write "MIT/Apache-2.0", meaning either.
    expression = re.sub(r"\s*/\s*", " OR ", expression)
    return [{"expression": expression}] if expression else []


def component(kind, name, version, license, repository, checksum=None):
    entry = {
        "type": kind,
        "bom-ref": purl(name, version),
        "name": name,
        "version": version,
        "purl": purl(name, version),
    }
    if licenses(license):
        entry["licenses"] = licenses(license)
    if checksum:
        entry["hashes"] = [{"alg": "SHA-256", "content": checksum}]
    if repository:
        entry["externalReferences"] = [{"type": "vcs", "url": repository}]
    return entry


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", action="append", required=True, help="a Rust target triple (repeatable)")
    parser.add_argument("--no-default-features", action="store_true", help="as the build was made")
    parser.add_argument("--output", required=True, help="the CycloneDX JSON file to write")
    args = parser.parse_args()
    output = os.path.abspath(args.output)

    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    own = package()
    name, version = own["name"], own["version"]
    sums = lock_checksums("Cargo.lock")
    crates, edges = tree(args.target, args.no_default_features)
    root = (name, version)
    if root not in crates:
        sys.exit(f"sbom.py: cargo tree does not start at {name} {version}")

    features = "none" if args.no_default_features else "default"
    with open("Cargo.lock", "rb") as lock:
        lock_digest = hashlib.sha256(lock.read()).hexdigest()
    identity = "|".join([own.get("repository") or name, version, *sorted(args.target), features, lock_digest])
    epoch = int(os.environ.get("SOURCE_DATE_EPOCH") or time.time())

    application = component("application", name, version, own.get("license") or "", own.get("repository") or "")
    if own.get("description"):
        application["description"] = own["description"]
    bom = {
        "$schema": "http://cyclonedx.org/schema/bom-1.5.schema.json",
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "serialNumber": f"urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, identity)}",
        "version": 1,
        "metadata": {
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch)),
            "component": application,
            "properties": [
                {"name": "cargo:target", "value": target} for target in sorted(args.target)
            ]
            + [{"name": "cargo:features", "value": features}],
        },
        "components": [
            component("library", crate, crate_version, license, repository, sums.get((crate, crate_version)))
            for (crate, crate_version), (license, repository) in sorted(crates.items())
            if (crate, crate_version) != root
        ],
        "dependencies": [
            {
                "ref": purl(*crate),
                "dependsOn": sorted({purl(*child) for parent, child in edges if parent == crate}),
            }
            for crate in sorted(crates)
        ],
    }
    os.makedirs(os.path.dirname(output), exist_ok=True)
    with open(output, "w", encoding="utf-8") as file:
        json.dump(bom, file, indent=2, sort_keys=False)
        file.write("\n")
    print(f"== {args.output}: {len(bom['components'])} crates, {' '.join(sorted(args.target))}, features: {features}")


if __name__ == "__main__":
    main()
