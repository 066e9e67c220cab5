#!/usr/bin/env bash
# tf-test.sh: format, validate and test the Terraform code under terraform/ with OpenTofu and
# the AWS provider, both built from the Go module proxy (no provider registry is reachable here).
#
#   scripts/tf-test.sh            build what is missing, then run fmt, validate and test, then apply
#                                 the sqs-worker module against fauxqs, consume, destroy (make tf-test)
#   scripts/tf-test.sh --cached   fmt, validate and test only, if both binaries are already cached, else
#                                 skip (make test; the apply takes about 6 minutes, most of it the
#                                 provider waiting out the queues' deletion)
#   scripts/tf-test.sh --apply-fauxqs  only the apply against fauxqs, consume, destroy
#   scripts/tf-test.sh --build    only build what is missing
#   scripts/tf-test.sh --env      print the environment that points a CLI at the cached tools
#   scripts/tf-test.sh --apply [ENDPOINT]
#                                 apply terraform/examples/localstack against a running LocalStack
#                                 (default http://127.0.0.1:4566), check the queue URL, destroy
#
# The binaries live outside the repository, in ${XDG_CACHE_HOME:-$HOME/.cache}/sqsinbox/tf:
#   bin/tofu-<version>                     OpenTofu
#   bin/terraform-provider-aws_<pseudo>    the AWS provider
#   mirror/<host>/hashicorp/aws/<label>/<os>_<arch>/terraform-provider-aws_v<label>
#                                          a filesystem mirror for registry.terraform.io and
#                                          registry.opentofu.org (hard links to the binary)
#   cli.tfrc                               the CLI config that points at the mirror
#   logs/                                  build logs
#
# A cold build on a 2-core machine: OpenTofu about 1 minute on a quiet machine (15 minutes measured
# beside the provider build and other work); the provider about 35 minutes on a quiet machine, and
# 1 h 55 min measured here under load (81 CPU-minutes, the link peaking at 9.3 GB of memory; it is
# built at the lowest CPU priority, one package at a time). Warm runs take about a minute.
#
# Environment:
#   TF_BIN   the CLI to use (default: the cached tofu). TF_BIN=terraform runs fmt and validate
#            with Terraform and the same mirror, and skips the tests: they assert values that
#            OpenTofu's mocks compute during plan and Terraform's do not.
set -euo pipefail

readonly TOFU_VERSION=v1.10.10
# A commit of hashicorp/terraform-provider-aws main, as `go list -m ...@main` resolved it. Its
# release tags are not Go module versions, so a pseudo-version is the only way to pin it.
readonly PROVIDER_MODULE=github.com/hashicorp/terraform-provider-aws
readonly PROVIDER_PSEUDO=v1.60.1-0.20260602190131-5f2286d6d836
# The version the mirror offers the provider under. The configurations ask for ">= 5.0".
readonly PROVIDER_LABEL=6.0.0
readonly COLD_MINUTES="35 minutes to 2 hours cold on 2 cores, 10 GB of memory"

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache=${XDG_CACHE_HOME:-$HOME/.cache}/sqsinbox/tf
platform=$(go env GOOS 2>/dev/null || uname -s | tr '[:upper:]' '[:lower:]')_$(go env GOARCH 2>/dev/null || echo amd64)
tofu_bin=$cache/bin/tofu-$TOFU_VERSION
provider_bin=$cache/bin/terraform-provider-aws_$PROVIDER_PSEUDO
cli_config=$cache/cli.tfrc

log() { printf 'tf-test: %s\n' "$*" >&2; }
die() { log "FAIL: $*"; exit 1; }

have_tools() { [[ -x $tofu_bin && -x $provider_bin ]]; }

build_tofu() {
	[[ -x $tofu_bin ]] && return 0
	command -v go >/dev/null || die "go is needed to build OpenTofu"
	log "building OpenTofu $TOFU_VERSION (about 1 minute cold); log: $cache/logs/tofu-build.log"
	local start dir src
	start=$(date +%s)
	dir=$(go mod download -json "github.com/opentofu/opentofu@$TOFU_VERSION" |
		python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])') ||
		die "go mod download github.com/opentofu/opentofu@$TOFU_VERSION"
	# go install refuses the module (it has replace directives), so build it as the main module
	# of a writable copy.
	src=$cache/src/opentofu-$TOFU_VERSION
	rm -rf "$src"
	mkdir -p "$cache/src"
	cp -R "$dir" "$src"
	chmod -R u+w "$src"
	# version.dev=no: report v1.10.10, not v1.10.10-dev (what the release build sets).
	(cd "$src" && nice -n 19 go build -trimpath -ldflags="-s -w -X github.com/opentofu/opentofu/version.dev=no" \
		-o "$tofu_bin.tmp" ./cmd/tofu) \
		>"$cache/logs/tofu-build.log" 2>&1 || die "OpenTofu build failed; see $cache/logs/tofu-build.log"
	mv "$tofu_bin.tmp" "$tofu_bin"
	rm -rf "$src"
	log "built OpenTofu in $(($(date +%s) - start)) s"
}

build_provider() {
	[[ -x $provider_bin ]] && return 0
	command -v go >/dev/null || die "go is needed to build the AWS provider"
	log "building the AWS provider $PROVIDER_PSEUDO ($COLD_MINUTES; about 6 GB of Go build cache)"
	log "log: $cache/logs/provider-build.log"
	local start gobin
	start=$(date +%s)
	gobin=$cache/gobin
	rm -rf "$gobin"
	mkdir -p "$gobin"
	# Lowest priority, one package at a time: other work on the machine keeps its CPU.
	GOBIN=$gobin GOFLAGS="${GOFLAGS:-} -p=1" nice -n 19 \
		go install -trimpath -ldflags="-s -w" "$PROVIDER_MODULE@$PROVIDER_PSEUDO" \
		>"$cache/logs/provider-build.log" 2>&1 || die "provider build failed; see $cache/logs/provider-build.log"
	mv "$gobin/terraform-provider-aws" "$provider_bin"
	rmdir "$gobin"
	log "built the AWS provider in $(($(date +%s) - start)) s"
}

# write_mirror lays the provider out as a filesystem mirror for both registry hosts and writes the
# CLI config. It is cheap, so it runs every time.
write_mirror() {
	local host dir
	for host in registry.terraform.io registry.opentofu.org; do
		dir=$cache/mirror/$host/hashicorp/aws/$PROVIDER_LABEL/$platform
		mkdir -p "$dir"
		if ! [[ $dir/terraform-provider-aws_v$PROVIDER_LABEL -ef $provider_bin ]]; then
			rm -f "$dir/terraform-provider-aws_v$PROVIDER_LABEL"
			ln "$provider_bin" "$dir/terraform-provider-aws_v$PROVIDER_LABEL" 2>/dev/null ||
				cp "$provider_bin" "$dir/terraform-provider-aws_v$PROVIDER_LABEL"
		fi
	done
	cat >"$cli_config.tmp" <<-EOF
		provider_installation {
		  filesystem_mirror {
		    path    = "$cache/mirror"
		    include = ["registry.terraform.io/hashicorp/aws", "registry.opentofu.org/hashicorp/aws"]
		  }
		  direct {
		    exclude = ["registry.terraform.io/hashicorp/aws", "registry.opentofu.org/hashicorp/aws"]
		  }
		}
	EOF
	mv "$cli_config.tmp" "$cli_config"
}

# copy_config copies terraform/ to DIR without what a local init or apply left there.
copy_config() {
	cp -R "$repo/terraform/." "$1/"
	find "$1" \( -name .terraform -o -name .terraform.lock.hcl -o -name '*.tfstate*' \) -prune -exec rm -rf {} +
}

run_tests() {
	local tf=${TF_BIN:-$tofu_bin} work root n_roots=0 start
	start=$(date +%s)
	export TF_CLI_CONFIG_FILE=$cli_config TF_IN_AUTOMATION=1 CHECKPOINT_DISABLE=1
	# No real AWS: the tests use mock providers, and validate needs no credentials.
	export AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_REGION=us-east-1
	unset AWS_PROFILE TF_PLUGIN_CACHE_DIR
	local version
	version=$("$tf" version | head -n1)
	log "using $version"

	log "fmt -check -recursive terraform/"
	"$tf" fmt -check -recursive -diff "$repo/terraform" || die "terraform/ is not formatted: run terraform fmt -recursive terraform"

	# Work on a copy: init writes .terraform/ and a lock file next to the configuration, and the lock
	# file would record the hash of a locally built provider.
	work=$(mktemp -d "${TMPDIR:-/tmp}/sqsinbox-tf.XXXXXX")
	# shellcheck disable=SC2064 # expand now: work is local
	trap "rm -rf '$work'" EXIT
	copy_config "$work"

	while IFS= read -r root; do
		n_roots=$((n_roots + 1))
		log "init + validate ${root#"$work"/}"
		(cd "$root" && "$tf" init -backend=false -input=false -no-color >init.log 2>&1) ||
			{ cat "$root/init.log" >&2; die "init failed in ${root#"$work"/}"; }
		(cd "$root" && "$tf" validate -no-color) || die "validate failed in ${root#"$work"/}"
		if ! compgen -G "$root/tests/*.tftest.hcl" >/dev/null && ! compgen -G "$root/*.tftest.hcl" >/dev/null; then
			continue
		elif [[ $version == Terraform* ]]; then
			# The tests assert computed values at plan time. OpenTofu's mocks compute them during
			# plan; Terraform's only with override_during = plan, which OpenTofu rejects.
			log "skipped the tests of ${root#"$work"/}: they are written for OpenTofu's mocks"
		else
			log "test ${root#"$work"/}"
			(cd "$root" && "$tf" test -no-color) || die "tests failed in ${root#"$work"/}"
		fi
	done < <(find "$work/modules" "$work/examples" -mindepth 1 -maxdepth 1 -type d | sort)
	((n_roots > 0)) || die "no module or example found under terraform/"
	log "ok: $n_roots configurations formatted, valid and tested in $(($(date +%s) - start)) s"
}

# apply_fauxqs applies the sqs-worker module for real against fauxqs, runs the warehouse worker on
# the queue it made, and destroys it (harness/tfapply, a Go test under the build tag tfapply: it
# starts fauxqs and PostgreSQL itself). TF_APPLY=0 skips it.
apply_fauxqs() {
	[[ ${TF_APPLY:-1} == 0 ]] && { log "apply against fauxqs skipped (TF_APPLY=0)"; return 0; }
	[[ $(TF_BIN=${TF_BIN:-$tofu_bin} "${TF_BIN:-$tofu_bin}" version | head -n1) == OpenTofu* ]] ||
		{ log "apply against fauxqs: OpenTofu only"; return 0; }
	local start
	start=$(date +%s)
	log "apply terraform/examples/localstack against fauxqs, consume, destroy (harness/tfapply)"
	(cd "$repo" && TF_BIN=${TF_BIN:-$tofu_bin} TF_CLI_CONFIG_FILE=$cli_config \
		go test -tags tfapply -count=1 -timeout 15m -v ./harness/tfapply/ 2>&1 | grep -E '^(---|ok|FAIL|PASS)|apply_test.go') ||
		die "apply against fauxqs failed"
	log "ok: applied, consumed and destroyed in $(($(date +%s) - start)) s"
}

# apply_local applies terraform/examples/localstack against a local endpoint, checks that the
# apply gave a queue URL, and destroys everything again (also after a failure).
apply_local() {
	local endpoint=$1 tf=${TF_BIN:-$tofu_bin} work dir url rc=0
	export TF_CLI_CONFIG_FILE=$cli_config TF_IN_AUTOMATION=1 CHECKPOINT_DISABLE=1
	work=$(mktemp -d "${TMPDIR:-/tmp}/sqsinbox-tf-apply.XXXXXX")
	# shellcheck disable=SC2064
	trap "rm -rf '$work'" EXIT
	copy_config "$work"
	dir=$work/examples/localstack
	local vars=(-var "endpoint=$endpoint" -var "create_alarms=${TF_APPLY_ALARMS:-true}")
	(cd "$dir" && "$tf" init -backend=false -input=false -no-color >init.log 2>&1) || { cat "$dir/init.log" >&2; die "init failed"; }
	log "apply against $endpoint"
	if (cd "$dir" && "$tf" apply -auto-approve -input=false -no-color "${vars[@]}"); then
		url=$(cd "$dir" && "$tf" output -raw queue_url)
		log "created $url"
		[[ -n $url ]] || { log "FAIL: no queue_url output"; rc=1; }
	else
		log "FAIL: apply against $endpoint"
		rc=1
	fi
	log "destroy"
	(cd "$dir" && "$tf" destroy -auto-approve -input=false -no-color "${vars[@]}") || { log "FAIL: destroy"; rc=1; }
	return "$rc"
}

mode=${1:-full}
mkdir -p "$cache/bin" "$cache/logs"
case $mode in
--cached)
	if ! have_tools; then
		echo "tf-test: skipped: run make tf-test to build OpenTofu and the AWS provider ($COLD_MINUTES), cached in $cache"
		exit 0
	fi
	write_mirror
	run_tests
	;;
--apply-fauxqs)
	have_tools || die "tools not built yet: run scripts/tf-test.sh --build"
	write_mirror
	apply_fauxqs
	;;
--build | full | --full)
	# One build at a time per cache, even when make runs twice.
	exec 9>"$cache/.lock"
	flock 9 2>/dev/null || true
	build_tofu
	build_provider
	write_mirror
	[[ $mode == --build ]] || { run_tests && apply_fauxqs; }
	;;
--apply)
	have_tools || die "tools not built yet: run scripts/tf-test.sh --build"
	write_mirror
	apply_local "${2:-http://127.0.0.1:4566}"
	;;
--env)
	have_tools || die "tools not built yet: run scripts/tf-test.sh --build"
	write_mirror
	printf 'export TF_CLI_CONFIG_FILE=%q\nalias tofu=%q\n' "$cli_config" "$tofu_bin"
	;;
*)
	sed -n '2,11p' "$0" >&2
	exit 2
	;;
esac
