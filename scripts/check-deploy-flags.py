"""Every `--flag` a manifest passes to `cove` must appear in that subcommand's --help.

Usage: check-deploy-flags.py COVE_BINARY MANIFEST.yaml...  Exit 1 naming each unknown flag.
Container args are `[global flags...] SUBCOMMAND [flags...]`, as the manifests write them.
"""
import subprocess
import sys

import yaml


def flags_of(cove, *sub):
    out = subprocess.run([cove, *sub, "--help"], check=True, capture_output=True, text=True).stdout
    return {word.split("=")[0].rstrip(",") for word in out.split() if word.startswith("--")}


def main():
    cove, manifests = sys.argv[1], sys.argv[2:]
    global_flags = flags_of(cove)
    bad, checked = [], 0
    for path in manifests:
        for doc in yaml.safe_load_all(open(path)):
            spec = (doc or {}).get("spec", {}).get("template", {}).get("spec", {})
            for c in spec.get("containers", []):
                args = c.get("args", [])
                sub = next(a for a in args if not a.startswith("-"))
                known = global_flags | flags_of(cove, sub)
                for a in args:
                    if a.startswith("--"):
                        checked += 1
                        if a.split("=")[0] not in known:
                            bad.append(f"{path}: container {c['name']}: `cove {sub}` has no {a.split('=')[0]}")
    for line in bad:
        print(line, file=sys.stderr)
    if bad or checked == 0:
        sys.exit(1)
    print(f"check-deploy-flags: {checked} flags known")


main()
