#!/usr/bin/env bash
# A release of hookd for this machine's target, into dist/ (or $OUT):
#
#   hookd-VERSION-TARGET.tar.gz          hookd-VERSION-TARGET/{bin/hookd, hookd.toml (every
#                                        key at its default), LICENSE, README.md, hookd.cdx.json}
#   hookd-VERSION-TARGET.tar.gz.sha256   its SHA-256, as `sha256sum -c` reads it
#   hookd-VERSION-TARGET.cdx.json        the SBOM: CycloneDX 1.5 (cargo-cyclonedx), every crate
#                                        the binary is built from, with version and license
#
#   deploy/release.sh                    the `dist` profile (release, symbols stripped), --locked
#   PROFILE=dev OUT=DIR deploy/release.sh   a quick one: CI checks the script with it
#
# The tarball is reproducible from the same binary (sorted names, owner 0, mtime 0, gzip -n).
# cargo-cyclonedx is installed (pinned) when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
profile=${PROFILE:-dist}
out=${OUT:-dist}
if ! command -v cargo-cyclonedx >/dev/null; then
    # A debug build: it runs for seconds, and builds in half the time.
    cargo install --locked --quiet --debug cargo-cyclonedx@0.5.9
fi
cargo build --locked --profile "$profile" -p hookd --bin hookd
case "$profile" in
    dev) bin=target/debug/hookd ;;
    *) bin="target/$profile/hookd" ;;
esac
version=$("$bin" --version | awk '{ print $2 }')
target=$(rustc -vV | sed -n 's/^host: //p')
name="hookd-$version-$target"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/$name/bin" "$out"
cp "$bin" "$stage/$name/bin/hookd"
"$bin" config print-default > "$stage/$name/hookd.toml"
cp LICENSE README.md "$stage/$name/"
# The SBOM of the hookd package (its binary's dependencies, no build-time-only ones).
cargo cyclonedx --manifest-path server/Cargo.toml --format json --spec-version 1.5 \
    --no-build-deps --override-filename hookd.cdx -q
# Reproducible: its serial number is derived from the binary's SHA-256, its time is the
# commit's (SOURCE_DATE_EPOCH when set), instead of a random UUID and the time of the build.
python3 - server/hookd.cdx.json "$bin" <<'PY'
import datetime, hashlib, json, os, subprocess, sys
path, binary = sys.argv[1], sys.argv[2]
bom = json.load(open(path))
digest = hashlib.sha256(open(binary, "rb").read()).hexdigest()
bom["serialNumber"] = "urn:uuid:{}-{}-4{}-8{}-{}".format(
    digest[:8], digest[8:12], digest[13:16], digest[17:20], digest[20:32])
epoch = os.environ.get("SOURCE_DATE_EPOCH")
if epoch is None:
    try:
        epoch = subprocess.run(["git", "log", "-1", "--format=%ct"], capture_output=True,
                               text=True, check=True).stdout.strip() or None
    except (OSError, subprocess.CalledProcessError):
        epoch = None
if epoch is None:
    bom["metadata"].pop("timestamp", None)
else:
    bom["metadata"]["timestamp"] = datetime.datetime.fromtimestamp(
        int(epoch), datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
json.dump(bom, open(path, "w"), indent=2, sort_keys=True)
PY
mv server/hookd.cdx.json "$stage/$name/hookd.cdx.json"
# cargo-cyclonedx writes one beside every workspace member's Cargo.toml: keep only hookd's.
cargo metadata --no-deps --format-version 1 \
    | python3 -c 'import json, os, sys
for p in json.load(sys.stdin)["packages"]:
    f = os.path.join(os.path.dirname(p["manifest_path"]), "hookd.cdx.json")
    if os.path.exists(f):
        os.remove(f)'
cp "$stage/$name/hookd.cdx.json" "$out/$name.cdx.json"
tar -C "$stage" --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -cf - "$name" \
    | gzip -n -9 > "$out/$name.tar.gz"
(cd "$out" && sha256sum "$name.tar.gz" > "$name.tar.gz.sha256")
echo "$out/$name.tar.gz"
echo "$out/$name.tar.gz.sha256"
echo "$out/$name.cdx.json"
