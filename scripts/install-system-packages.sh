#!/usr/bin/env bash
# Install the Debian packages listed in scripts/system-packages.txt that are missing.
# Needs root and apt-get; elsewhere it says what it could not install and exits 0,
# so the tests that need those packages skip with a visible reason.
set -euo pipefail
cd "$(dirname "$0")"
mapfile -t wanted < <(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' system-packages.txt)
missing=()
for package in "${wanted[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "install-system-packages: cannot install ${missing[*]} (needs root and apt-get); their tests will skip" >&2
    exit 0
fi
echo "install-system-packages: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null || true
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
    || echo "install-system-packages: apt-get failed for ${missing[*]}; their tests will skip" >&2
