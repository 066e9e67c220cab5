#!/usr/bin/env bash
# examples-copy-check.sh: every example folder must build on its own once copied out of the
# repository, with a go.mod that requires this module and nothing but the public packages.
# Each folder is copied, without its tests (they use the repository's harness), into a temporary
# directory with a go.mod of its own (the module replaced by this checkout, the repository's
# go.sum reused so no download is needed), and built with `go build ./...`.
# Then README.md's "Using it from your own module" lines run as a user would: in a new module
# outside the repository holding the README's first worker, with the clone they name (../sqsinbox)
# a link to this checkout, every line after the `git clone` as written.
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

# README's lines, between the from-a-clone marker and the end of its block.
lines=$(awk '/<!-- from-a-clone:/{f=1; next} f && /^```sh/{next} f && /^```/{exit} f' "$repo/README.md")
if ! grep -q '^git clone .* \.\./sqsinbox$' <<<"$lines" || ! grep -q 'replace=github.com/sqsinbox/sqsinbox=\.\./sqsinbox' <<<"$lines"; then
	echo "examples-copy-check: FAIL: README.md's from-a-clone block has no 'git clone ... ../sqsinbox' and replace line:" >&2
	echo "$lines" >&2
	exit 1
fi
user=$tmp/user/myworker
mkdir -p "$user"
ln -s "$repo" "$tmp/user/sqsinbox"
cp -R "$repo/examples/firstworker/main.go" "$repo/examples/firstworker/migrations" "$user/"
(cd "$user" && go mod init example.com/myworker >/dev/null 2>&1)
while IFS= read -r line; do
	case $line in
	'' | 'git clone '*) continue ;; # the clone is the link made above
	esac
	if ! (cd "$user" && bash -c "$line" >"$tmp/user.err" 2>&1); then
		echo "examples-copy-check: FAIL: README.md's line \`$line\` in a module outside the repository:" >&2
		cat "$tmp/user.err" >&2
		exit 1
	fi
done <<<"$lines"
if ! (cd "$user" && go vet ./... >"$tmp/user.err" 2>&1); then
	echo "examples-copy-check: FAIL: the module built from README.md's lines does not vet:" >&2
	cat "$tmp/user.err" >&2
	exit 1
fi
echo "examples-copy-check: a module outside the repository builds the first worker with README.md's replace lines"
