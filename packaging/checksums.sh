#!/usr/bin/env bash
# SHA-256 checksums of release files, as `sha256sum --check` reads them.
#
#   packaging/checksums.sh DIR      writes DIR/SHA256SUMS for every other file in DIR
#
# Whoever downloads checks with `sha256sum --check --ignore-missing SHA256SUMS`
# (macOS: `shasum -a 256 --check --ignore-missing SHA256SUMS`).
set -euo pipefail
[ $# -eq 1 ] && [ -d "$1" ] || { echo "usage: packaging/checksums.sh DIR" >&2; exit 2; }
cd "$1"
export LC_ALL=C  # one order everywhere
files=()
for file in *; do
    [ -f "$file" ] && [ "$file" != SHA256SUMS ] && files+=("$file")
done
((${#files[@]})) || { echo "checksums.sh: no files in $1" >&2; exit 1; }
if command -v sha256sum >/dev/null; then sum=(sha256sum); else sum=(shasum -a 256); fi
"${sum[@]}" "${files[@]}" > SHA256SUMS.new
mv SHA256SUMS.new SHA256SUMS
cat SHA256SUMS
