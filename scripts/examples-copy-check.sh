#!/usr/bin/env bash
# examples-copy-check.sh: every example folder must build on its own once copied out of the
# repository, with a go.mod that requires this module and nothing but the public packages.
# Each folder is copied, without its tests (they use the repository's harness), into a temporary
# directory with a go.mod of its own (the module replaced by this checkout, the repository's
# go.sum reused so no download is needed), and built with `go build ./...`.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
gover=$(sed -n 's/^go //p' "$repo/go.mod")
n=0
for dir in "$repo"/examples/*/; do
	name=$(basename "$dir")
	dst=$tmp/$name
	cp -R "$dir" "$dst"
	find "$dst" -name '*_test.go' -delete
	cat >"$dst/go.mod" <<MOD
module example.com/$name

go $gover

require github.com/sqsinbox/sqsinbox v0.0.0

replace github.com/sqsinbox/sqsinbox => $repo
MOD
	cp "$repo/go.sum" "$dst/go.sum"
	if ! (cd "$dst" && GOFLAGS=-mod=mod go build ./... 2>"$tmp/$name.err"); then
		echo "examples-copy-check: FAIL: examples/$name does not build once copied out:" >&2
		cat "$tmp/$name.err" >&2
		exit 1
	fi
	n=$((n + 1))
done
echo "examples-copy-check: $n example folders build once copied out of the repository"
