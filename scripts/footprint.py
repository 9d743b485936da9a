#!/usr/bin/env python3
"""Where the binary's bytes and the agent's resident pages go, per crate.

    scripts/footprint.py BINARY [--pid PID]

BINARY must be built with symbols (`CARGO_PROFILE_RELEASE_STRIP=none`, every other setting as
the release profile: the loaded segments are then the same as the stripped binary's). Without
--pid, it prints the size of the symbols of each crate (`nm -S`). With --pid of that binary
running (as root, to read /proc/PID/pagemap), it also prints, per crate, the bytes of its code
and data on pages that are resident in that process, and the resident pages that no symbol
covers (unwind tables, read-only data without a symbol).

A symbol is given to the crate its demangled name starts with; a generic instantiation of the
standard library (`core::ptr::drop_in_place<tokio::...>`) is given to the standard library, as
are the few names that start with `<` and name no crate.
"""

import argparse
import bisect
import collections
import re
import struct
import subprocess
import sys

PAGE = 4096
STD = {"core", "alloc", "std", "std_detect", "panic_unwind", "compiler_builtins", "hashbrown_std"}


def crate_of(name):
    """The crate a demangled symbol belongs to."""
    name = name.strip()
    while name.startswith("<"):
        name = name[1:]
    match = re.match(r"([A-Za-z_][A-Za-z0-9_]*)::", name)
    if not match:
        if name.startswith("anon."):
            return "(constants, unnamed)"
        if name.startswith("ring_core_") or re.match(r"(ecp_nistz256|ge_|fe_|x25519|sc_)", name):
            return "ring (C, assembly)"
        return "(C and glue)"
    crate = match.group(1)
    return "std, core, alloc" if crate in STD else crate


def symbols(binary):
    """(address, size, crate) of every sized symbol, sorted by address."""
    out = subprocess.run(
        ["nm", "-C", "-S", "--defined-only", binary], check=True, capture_output=True, text=True
    ).stdout
    found = []
    for line in out.splitlines():
        parts = line.split(" ", 3)
        if len(parts) < 4:
            continue
        address, size, kind, name = parts
        if kind.lower() not in "trdb":
            continue
        found.append((int(address, 16), int(size, 16), crate_of(name)))
    found.sort()
    return found


def loaded(binary):
    """(file offset, virtual address, size) of each PT_LOAD segment, from readelf."""
    out = subprocess.run(["readelf", "-lW", binary], check=True, capture_output=True, text=True).stdout
    segments = []
    for line in out.splitlines():
        parts = line.split()
        if parts and parts[0] == "LOAD":
            segments.append((int(parts[1], 16), int(parts[2], 16), int(parts[5], 16)))
    return segments


def resident_pages(pid, binary):
    """Virtual addresses (as in the ELF file) of the binary's resident pages in process `pid`."""
    mappings = []
    with open(f"/proc/{pid}/maps") as maps:
        for line in maps:
            parts = line.split()
            if len(parts) >= 6 and parts[5].endswith(binary.split("/")[-1]):
                start, end = (int(x, 16) for x in parts[0].split("-"))
                mappings.append((start, end, int(parts[2], 16)))
    segments = loaded(binary)
    pages = set()
    with open(f"/proc/{pid}/pagemap", "rb") as pagemap:
        for start, end, offset in mappings:
            for page in range(start, end, PAGE):
                pagemap.seek(page // PAGE * 8)
                (entry,) = struct.unpack("<Q", pagemap.read(8))
                if not entry >> 63 & 1:
                    continue
                file_offset = offset + (page - start)
                for seg_offset, seg_vaddr, seg_size in segments:
                    if seg_offset <= file_offset < seg_offset + seg_size + PAGE:
                        pages.add((seg_vaddr + file_offset - seg_offset) // PAGE * PAGE)
                        break
    return pages


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("binary")
    parser.add_argument("--pid")
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()

    table = symbols(args.binary)
    by_crate = collections.Counter()
    for _, size, crate in table:
        by_crate[crate] += size
    resident = collections.Counter()
    uncovered = 0
    total_resident = 0
    if args.pid:
        pages = resident_pages(args.pid, args.binary)
        total_resident = len(pages) * PAGE
        starts = [address for address, _, _ in table]
        for page in sorted(pages):
            covered = 0
            i = max(0, bisect.bisect_right(starts, page) - 1)
            # Symbols overlapping [page, page + PAGE): walk back over long ones, then forward.
            while i > 0 and table[i - 1][0] + table[i - 1][1] > page:
                i -= 1
            while i < len(table) and table[i][0] < page + PAGE:
                address, size, crate = table[i]
                overlap = min(address + size, page + PAGE) - max(address, page)
                if overlap > 0:
                    resident[crate] += overlap
                    covered += overlap
                i += 1
            uncovered += max(0, PAGE - covered)

    total = sum(by_crate.values())
    print(f"{args.binary}: symbols {total / 1e6:.2f} MB in {len(by_crate)} crates")
    header = f"{'crate':<34} {'symbols KB':>11}"
    if args.pid:
        header += f" {'resident KiB':>13}"
    print(header)
    order = resident if args.pid else by_crate
    shown = [crate for crate, _ in order.most_common(args.top)]
    for crate in shown:
        line = f"{crate:<34} {by_crate[crate] / 1000:>11.0f}"
        if args.pid:
            line += f" {resident[crate] / 1024:>13.0f}"
        print(line)
    rest = [crate for crate in by_crate if crate not in shown]
    line = f"{f'{len(rest)} others':<34} {sum(by_crate[c] for c in rest) / 1000:>11.0f}"
    if args.pid:
        line += f" {sum(resident[c] for c in rest) / 1024:>13.0f}"
        print(line)
        print(f"{'(no symbol: unwind tables, data)':<34} {'':>11} {uncovered / 1024:>13.0f}")
        print(f"{'resident pages of the binary':<34} {'':>11} {total_resident / 1024:>13.0f}")
    else:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
