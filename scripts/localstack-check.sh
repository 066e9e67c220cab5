#!/usr/bin/env bash
# localstack-check.sh: a static check of localstack/ for machines without Docker (part of make test).
#
#   scripts/localstack-check.sh              check localstack/, then prove that every rule can fail
#   scripts/localstack-check.sh --dir DIR    check DIR only (a copy of localstack/)
#
# The rules:
#   - docker-compose.yml parses as YAML; every image is pinned by an exact version tag (never
#     latest; LocalStack by its full X.Y.Z); every published port binds to 127.0.0.1; every
#     service has a health check; LocalStack enables SQS message retention, waits for its init
#     scripts in its health check, and mounts init/ready.d; PostgreSQL matches the documented
#     DATABASE_URL.
#   - every init script is executable, has a shebang, passes `bash -n` and shellcheck (when
#     installed), and uses the plain AWS CLI with an endpoint, not awslocal.
#   - running the init scripts against a stub `aws` creates exactly the example queues, with the
#     attributes the examples expect (EXPECTED below), and the SNS topic with one subscription per
#     fan-out queue (TOPIC below): raw delivery as listed, and a queue policy that admits only the
#     topic (aws:SourceArn).
# Needs bash and python3 with PyYAML; shellcheck is optional. No network, no Docker.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
self=$repo/scripts/localstack-check.sh
# SHELLCHECK names the shellcheck command (tests of this script set it to a missing one).
shellcheck=${SHELLCHECK:-shellcheck}

# check DIR: exit status 0 if DIR passes every rule; otherwise the violations go to stderr.
check() {
	local dir=$1 tmp script rc=0 PY
	[[ -f $dir/docker-compose.yml ]] || { echo "FAIL: $dir/docker-compose.yml is missing" >&2; return 1; }
	# The first python3 with PyYAML: the one on PATH, else Debian's (where apt-get install
	# python3-yaml puts it).
	for PY in python3 /usr/bin/python3; do
		"$PY" -c 'import yaml' 2>/dev/null && break
		PY=
	done
	[ -n "$PY" ] || { echo "FAIL: python3 with PyYAML is needed (apt-get install python3-yaml)" >&2; return 1; }
	tmp=$(mktemp -d "${TMPDIR:-/tmp}/localstack-check.XXXXXX")
	# shellcheck disable=SC2064 # expand now: tmp is local
	trap "rm -rf '$tmp'" RETURN

	# Syntax and lint of every init script, before anything runs it.
	while IFS= read -r script; do
		bash -n "$script" 2>&1 | sed 's/^/FAIL: bash -n: /' >&2 || true
		bash -n "$script" 2>/dev/null || rc=1
		if [[ ${LOCALSTACK_CHECK_SHELLCHECK:-1} == 1 ]]; then
			if command -v "$shellcheck" >/dev/null; then
				"$shellcheck" -s bash "$script" >&2 || { echo "FAIL: shellcheck: $script" >&2; rc=1; }
			else
				echo "localstack-check: shellcheck not installed: skipped the lint of $script" >&2
			fi
		fi
	done < <(find "$dir/init" -type f -name '*.sh' 2>/dev/null | sort)

	# A stub aws CLI that records each call (NUL-separated arguments, then RS) and answers what the init
	# scripts ask: a queue URL for create-queue and get-queue-url, a queue ARN for
	# get-queue-attributes, a topic ARN for create-topic, a subscription ARN for subscribe.
	mkdir -p "$tmp/bin"
	cat >"$tmp/bin/aws" <<-'STUB'
		#!/usr/bin/env bash
		printf '%s\0' "$@" $'\x1e' >>"$AWS_STUB_LOG"
		region=${AWS_DEFAULT_REGION:-us-east-1} name= query= op=
		while (($#)); do
			case $1 in
			--region) region=${2-} && shift ;;
			--queue-name) name=${2-} && shift ;;
			--queue-url) name=${2%/} && name=${name##*/} && shift ;;
			--name) name=${2-} && shift ;;
			--topic-arn) name=${2##*:} && shift ;;
			--query) query=${2-} && shift ;;
			create-queue | get-queue-url | get-queue-attributes | create-topic | subscribe) op=$1 ;;
			esac
			shift
		done
		url=http://localhost:4566/000000000000/$name arn=arn:aws:sqs:$region:000000000000:$name
		topic=arn:aws:sns:$region:000000000000:$name
		case $op in
		create-queue | get-queue-url) if [[ -n $query ]]; then echo "$url"; else echo "{\"QueueUrl\": \"$url\"}"; fi ;;
		get-queue-attributes) if [[ -n $query ]]; then echo "$arn"; else echo "{\"Attributes\": {\"QueueArn\": \"$arn\"}}"; fi ;;
		create-topic) if [[ -n $query ]]; then echo "$topic"; else echo "{\"TopicArn\": \"$topic\"}"; fi ;;
		subscribe) if [[ -n $query ]]; then echo "$topic:sub-$RANDOM"; else echo "{\"SubscriptionArn\": \"$topic:sub-$RANDOM\"}"; fi ;;
		esac
	STUB
	chmod +x "$tmp/bin/aws"

	"$PY" - "$dir" "$tmp" <<-'PY' || rc=1
		import json, os, re, stat, subprocess, sys
		import yaml

		# What the examples expect (examples/ read QUEUE_URL; DATABASE_URL as documented).
		EXPECTED = {"warehouse": "warehouse-dlq", "loyalty": "loyalty-dlq", "payments": "payments-dlq", "payments-ledger": "payments-ledger-dlq"}
		# The fan-out: the topic, and each queue subscribed to it with its raw delivery setting.
		TOPIC = "order-paid"
		SUBSCRIBERS = {"warehouse": "true", "loyalty": "false"}
		SOURCE = {"MessageRetentionPeriod": 345600, "VisibilityTimeout": 30, "ReceiveMessageWaitTimeSeconds": 20}
		DLQ = {"MessageRetentionPeriod": 1209600}
		MAX_RECEIVE_COUNT = 5
		LOCALSTACK_IMAGE = "localstack/localstack:4.14.0"
		PG = {"POSTGRES_USER": "sqsinbox", "POSTGRES_PASSWORD": "sqsinbox", "POSTGRES_DB": "sqsinbox"}
		PG_PORT = "127.0.0.1:5433:5432"

		d, tmp = os.path.abspath(sys.argv[1]), sys.argv[2]
		errors = []
		def fail(msg):
		    errors.append(msg)

		def env_of(svc):
		    env = svc.get("environment") or {}
		    if isinstance(env, list):
		        env = dict(e.split("=", 1) if "=" in e else (e, None) for e in env)
		    return {k: (None if v is None else str(v)) for k, v in env.items()}

		def finish():
		    for e in errors:
		        print("FAIL: " + e, file=sys.stderr)
		    sys.exit(1 if errors else 0)

		try:
		    with open(os.path.join(d, "docker-compose.yml")) as f:
		        compose = yaml.safe_load(f)
		except yaml.YAMLError as e:
		    fail("docker-compose.yml does not parse as YAML: %s" % e)
		    finish()
		if not isinstance(compose, dict) or not isinstance(compose.get("services"), dict) or not compose["services"]:
		    fail("docker-compose.yml has no services mapping")
		    finish()
		services = compose["services"]

		for name, svc in services.items():
		    image = str(svc.get("image", ""))
		    m = re.fullmatch(r"([^@]+?)(?::([^:/@]+))?(@sha256:[0-9a-f]{64})?", image)
		    tag = m.group(2) if m else None
		    if not image:
		        fail("service %s: no image" % name)
		    elif "@sha256:" not in image and (tag is None or not re.fullmatch(r"\d+(\.\d+)*(-[0-9A-Za-z.]+)?", tag)):
		        fail("service %s: image %r is not pinned by an exact version tag" % (name, image))
		    if svc.get("network_mode") == "host":
		        fail("service %s: network_mode host publishes every port on every interface" % name)
		    for p in svc.get("ports") or []:
		        if isinstance(p, dict):
		            if p.get("host_ip") != "127.0.0.1":
		                fail("service %s: port %r does not bind to 127.0.0.1 (host_ip)" % (name, p))
		        elif not str(p).startswith("127.0.0.1:") or str(p).count(":") != 2:
		            fail("service %s: port %r does not bind to 127.0.0.1 (write 127.0.0.1:HOST:CONTAINER)" % (name, p))
		    hc = svc.get("healthcheck")
		    if not isinstance(hc, dict) or hc.get("disable") or not hc.get("test"):
		        fail("service %s: no health check" % name)

		ls = [s for s in services.values() if str(s.get("image", "")).startswith("localstack/")]
		if len(ls) != 1:
		    fail("expected one LocalStack service, found %d" % len(ls))
		    finish()
		ls = ls[0]
		if ls.get("image") != LOCALSTACK_IMAGE:
		    fail("LocalStack image is %r, want %r (the last one that starts without an auth token)" % (ls.get("image"), LOCALSTACK_IMAGE))
		env = env_of(ls)
		if env.get("SQS_ENABLE_MESSAGE_RETENTION_PERIOD") != "1":
		    fail("LocalStack: SQS_ENABLE_MESSAGE_RETENTION_PERIOD is not 1 (LocalStack would ignore MessageRetentionPeriod)")
		svcs = [s.strip() for s in (env.get("SERVICES") or "").split(",") if s.strip()]
		for needed in ("sqs", "sns"):
		    if needed not in svcs:
		        fail("LocalStack: SERVICES %r does not include %s (it must list only what is used)" % (env.get("SERVICES"), needed))
		if "/_localstack/init/ready" not in json.dumps((ls.get("healthcheck") or {}).get("test")):
		    fail("LocalStack: the health check does not wait for the init scripts (/_localstack/init/ready)")
		ready = None
		for v in ls.get("volumes") or []:
		    src, _, rest = str(v if not isinstance(v, dict) else "%s:%s" % (v.get("source"), v.get("target"))).partition(":")
		    if rest.split(":")[0].rstrip("/") == "/etc/localstack/init/ready.d":
		        ready = os.path.normpath(os.path.join(d, src))
		if not ready or not os.path.isdir(ready):
		    fail("LocalStack: no host directory mounted on /etc/localstack/init/ready.d")
		    finish()

		pg = [s for s in services.values() if str(s.get("image", "")).startswith("postgres:")]
		if len(pg) != 1:
		    fail("expected one PostgreSQL service, found %d" % len(pg))
		else:
		    pgenv = env_of(pg[0])
		    for k, v in PG.items():
		        if pgenv.get(k) != v:
		            fail("PostgreSQL: %s is %r, but the documented DATABASE_URL needs %r" % (k, pgenv.get(k), v))
		    if PG_PORT not in [str(p) for p in pg[0].get("ports") or []]:
		        fail("PostgreSQL: port %s is not published (the documented DATABASE_URL uses it)" % PG_PORT)
		    if "pg_isready" not in json.dumps((pg[0].get("healthcheck") or {}).get("test")):
		        fail("PostgreSQL: the health check does not use pg_isready")

		scripts = sorted(os.path.join(ready, f) for f in os.listdir(ready) if f.endswith((".sh", ".py")))
		if not scripts:
		    fail("no init script in %s" % ready)
		for s in scripts:
		    text = open(s).read()
		    if not os.stat(s).st_mode & stat.S_IXUSR:
		        fail("%s is not executable (LocalStack skips it)" % s)
		    if not text.startswith("#!"):
		        fail("%s has no shebang (LocalStack skips it)" % s)
		    if re.search(r"\bawslocal\b", re.sub(r"#.*", "", text)):
		        fail("%s uses awslocal (deprecated): use aws --endpoint-url" % s)
		if errors:
		    finish()

		# Run the init scripts, in LocalStack's order, against the stub.
		log = os.path.join(tmp, "calls.log")
		open(log, "w").close()
		run_env = {"PATH": os.path.join(tmp, "bin") + ":" + os.environ["PATH"], "HOME": tmp,
		           "AWS_STUB_LOG": log, "AWS_DEFAULT_REGION": "us-east-1"}
		for s in scripts:
		    try:
		        r = subprocess.run([s], env=run_env, cwd=tmp, capture_output=True, text=True, timeout=60)
		    except (OSError, subprocess.TimeoutExpired) as e:
		        fail("%s did not run: %s" % (s, e))
		        finish()
		    if r.returncode != 0:
		        fail("%s exited with %d against the stub aws: %s" % (s, r.returncode, r.stderr.strip()[-500:]))
		        finish()

		queues, order, topics, subs = {}, [], [], []
		for call in open(log, "rb").read().decode().split("\x1e\0"):
		    args = call.split("\0")[:-1]
		    if not args:
		        continue
		    opt = lambda n: args[args.index(n) + 1] if n in args and args.index(n) + 1 < len(args) else None
		    if not (opt("--endpoint-url") or "").startswith("http://localhost:4566"):
		        fail("aws %s: no --endpoint-url http://localhost:4566" % " ".join(args[:6]))
		    if "sns" in args:
		        if "create-topic" in args:
		            topics.append(opt("--name"))
		        elif "subscribe" in args:
		            try:
		                sattrs = json.loads(opt("--attributes") or "{}")
		            except ValueError:
		                fail("aws sns subscribe: --attributes is not JSON: %r" % opt("--attributes"))
		                sattrs = {}
		            subs.append({"topic": opt("--topic-arn") or "", "protocol": opt("--protocol"),
		                         "endpoint": opt("--notification-endpoint") or "", "attrs": sattrs,
		                         "after": set(queues)})
		        continue
		    if "sqs" not in args:
		        continue
		    attrs = {}
		    if opt("--attributes") is not None:
		        try:
		            attrs = json.loads(opt("--attributes"))
		        except ValueError:
		            fail("aws sqs: --attributes is not JSON: %r" % opt("--attributes"))
		    if "create-queue" in args:
		        name = opt("--queue-name")
		        if name in queues:
		            fail("queue %s is created twice" % name)
		        queues[name] = dict(attrs)
		        order.append(name)
		    elif "set-queue-attributes" in args:
		        name = (opt("--queue-url") or "").rstrip("/").split("/")[-1]
		        if name not in queues:
		            fail("set-queue-attributes on %s before it was created" % name)
		        queues.setdefault(name, {}).update(attrs)

		def num(v):
		    try:
		        return int(v)
		    except (TypeError, ValueError):
		        return None

		want = set(EXPECTED) | set(EXPECTED.values())
		if set(queues) != want:
		    fail("the init scripts create queues %s, the examples expect %s" % (sorted(queues), sorted(want)))
		for src, dlq in EXPECTED.items():
		    if src not in queues or dlq not in queues:
		        continue
		    a, b = queues[src], queues[dlq]
		    for k, v in SOURCE.items():
		        if num(a.get(k)) != v:
		            fail("queue %s: %s is %r, want %d" % (src, k, a.get(k), v))
		    for k, v in DLQ.items():
		        if num(b.get(k)) != v:
		            fail("queue %s: %s is %r, want %d" % (dlq, k, b.get(k), v))
		    if not (num(b.get("MessageRetentionPeriod")) or 0) > (num(a.get("MessageRetentionPeriod")) or 0):
		        fail("queue %s: the DLQ's retention must be longer than the source's" % dlq)
		    if order.index(dlq) > order.index(src):
		        fail("queue %s is created before its DLQ %s" % (src, dlq))
		    try:
		        rp = json.loads(a.get("RedrivePolicy") or "")
		    except ValueError:
		        fail("queue %s: RedrivePolicy is missing or not JSON: %r" % (src, a.get("RedrivePolicy")))
		        continue
		    if not str(rp.get("deadLetterTargetArn", "")).endswith(":" + dlq):
		        fail("queue %s: the redrive target is %r, want the ARN of %s" % (src, rp.get("deadLetterTargetArn"), dlq))
		    if num(rp.get("maxReceiveCount")) != MAX_RECEIVE_COUNT:
		        fail("queue %s: maxReceiveCount is %r, want %d" % (src, rp.get("maxReceiveCount"), MAX_RECEIVE_COUNT))
		    if b.get("RedriveAllowPolicy"):
		        allow = json.loads(b["RedriveAllowPolicy"])
		        if allow.get("redrivePermission") == "byQueue" and not any(
		                str(x).endswith(":" + src) for x in allow.get("sourceQueueArns", [])):
		            fail("queue %s: its RedriveAllowPolicy does not allow %s" % (dlq, src))

		# The fan-out.
		if topics != [TOPIC]:
		    fail("the init scripts create topics %s, want [%r]" % (topics, TOPIC))
		topic_arn = "arn:aws:sns:us-east-1:000000000000:" + TOPIC
		got = {}
		for sub in subs:
		    name = sub["endpoint"].split(":")[-1]
		    if sub["topic"] != topic_arn or sub["protocol"] != "sqs" or not sub["endpoint"].startswith("arn:aws:sqs:"):
		        fail("subscription %r: want protocol sqs from %s to a queue ARN" % (sub, topic_arn))
		        continue
		    if name in got:
		        fail("queue %s is subscribed twice" % name)
		    if name not in sub["after"]:
		        fail("queue %s is subscribed before it was created" % name)
		    got[name] = sub["attrs"].get("RawMessageDelivery", "false")
		if sorted(got) != sorted(SUBSCRIBERS):
		    fail("the init scripts subscribe queues %s to %s, want %s" % (sorted(got), TOPIC, sorted(SUBSCRIBERS)))
		for name, raw in SUBSCRIBERS.items():
		    if name in got and got[name] != raw:
		        fail("queue %s: RawMessageDelivery is %r, want %r" % (name, got[name], raw))
		    try:
		        policy = json.loads(queues.get(name, {}).get("Policy") or "")
		        st = policy["Statement"]
		    except (ValueError, KeyError, TypeError):
		        fail("queue %s: no queue policy (SNS may not send to it on AWS)" % name)
		        continue
		    want = [{"Sid": "TopicSendsToQueue", "Effect": "Allow", "Principal": {"Service": "sns.amazonaws.com"},
		             "Action": "sqs:SendMessage", "Resource": "arn:aws:sqs:us-east-1:000000000000:" + name,
		             "Condition": {"ArnEquals": {"aws:SourceArn": topic_arn}}}]
		    if st != want:
		        fail("queue %s: the policy %s does not admit exactly the topic by aws:SourceArn" % (name, json.dumps(st)))
		finish()
	PY
	return "$rc"
}

# self_test proves that each rule fails: it breaks a copy of localstack/ one way at a time and
# expects check to fail with the right message.
self_test() {
	local tmp n=0 failed=0 out
	tmp=$(mktemp -d "${TMPDIR:-/tmp}/localstack-selftest.XXXXXX")
	# shellcheck disable=SC2064
	trap "rm -rf '$tmp'" RETURN
	local compose=docker-compose.yml init=init/ready.d/10-create-queues.sh topic=init/ready.d/20-create-topic.sh
	# name | file to edit | sed script ("" for a custom edit below) | expected message
	local cases=(
		"image latest|$compose|s#localstack/localstack:4.14.0#localstack/localstack:latest#|not pinned by an exact version tag"
		"image untagged|$compose|s#image: postgres:15#image: postgres#|not pinned by an exact version tag"
		"floating LocalStack tag|$compose|s#localstack/localstack:4.14.0#localstack/localstack:4#|want 'localstack/localstack:4.14.0'"
		"port on every interface|$compose|s#\"127.0.0.1:5433:5432\"#\"5433:5432\"#|does not bind to 127.0.0.1"
		"port on 0.0.0.0|$compose|s#127.0.0.1:4566:4566#0.0.0.0:4566:4566#|does not bind to 127.0.0.1"
		"no retention flag|$compose|/SQS_ENABLE_MESSAGE_RETENTION_PERIOD/d|SQS_ENABLE_MESSAGE_RETENTION_PERIOD is not 1"
		"no init wait|$compose|s#/_localstack/init/ready#/_localstack/health#|does not wait for the init scripts"
		"no postgres health check|$compose|/pg_isready/d|service postgres: no health check"
		"postgres user|$compose|s#POSTGRES_USER: sqsinbox#POSTGRES_USER: postgres#|POSTGRES_USER"
		"invalid YAML|$compose|1i services: [|does not parse as YAML"
		"init syntax error|$init|\$a if then|bash -n"
		"init runtime failure|$init|/^set -euo pipefail/a exit 3|exited with 3"
		"awslocal|$init|s#aws --endpoint-url \"\$endpoint\"#awslocal#|uses awslocal"
		"missing queue|$init|s#queues=(warehouse loyalty payments payments-ledger)#queues=(warehouse loyalty payments)#|the examples expect"
		"extra queue|$init|s#queues=(warehouse loyalty payments payments-ledger)#queues=(warehouse loyalty payments payments-ledger orders)#|the examples expect"
		"source retention|$init|s#retention_seconds=345600#retention_seconds=86400#|MessageRetentionPeriod is '86400'"
		"visibility|$init|s#visibility_timeout_seconds=30#visibility_timeout_seconds=60#|VisibilityTimeout is '60'"
		"long poll|$init|s#receive_wait_seconds=20#receive_wait_seconds=0#|ReceiveMessageWaitTimeSeconds is '0'"
		"max receive count|$init|s#max_receive_count=5#max_receive_count=3#|maxReceiveCount is 3"
		"DLQ retention|$init|s#dlq_retention_seconds=1209600#dlq_retention_seconds=345600#|retention must be longer"
		"no redrive|$init|s#^\([[:space:]]*redrive=\).*#\1\"\"#|RedrivePolicy is missing"
		"not executable|$init||is not executable"
		"no sns service|$compose|s#SERVICES: sqs,sns,cloudwatch#SERVICES: sqs,cloudwatch#|does not include sns"
		"no topic|$topic|s#^readonly topic=order-paid#readonly topic=orders#|want ['order-paid']"
		"missing subscription|$topic|s#subscribers=(warehouse=true loyalty=false)#subscribers=(warehouse=true)#|want ['loyalty', 'warehouse']"
		"raw delivery|$topic|s#subscribers=(warehouse=true loyalty=false)#subscribers=(warehouse=false loyalty=false)#|RawMessageDelivery is 'false', want 'true'"
		"no queue policy|$topic|/ sqs set-queue-attributes /d|no queue policy"
		"policy without source|$topic|s#aws:SourceArn#aws:SourceAccount#|does not admit exactly the topic"
	)
	if command -v "$shellcheck" >/dev/null; then
		cases+=("shellcheck finding|$init|\$a echo \$1|shellcheck")
	fi

	cp -R "$repo/localstack" "$tmp/pristine"
	if ! out=$(LOCALSTACK_CHECK_SHELLCHECK=0 check "$tmp/pristine" 2>&1); then
		echo "$out" >&2
		echo "localstack-check: FAIL: self-test: the unmodified copy does not pass" >&2
		return 1
	fi
	local c name file edit want
	for c in "${cases[@]}"; do
		IFS='|' read -r name file edit want <<<"$c"
		n=$((n + 1))
		rm -rf "$tmp/case"
		cp -R "$tmp/pristine" "$tmp/case"
		if [[ -n $edit ]]; then
			sed -i -e "$edit" "$tmp/case/$file"
			cmp -s "$tmp/pristine/$file" "$tmp/case/$file" && {
				echo "localstack-check: FAIL: self-test case '$name': the edit changed nothing" >&2
				failed=$((failed + 1))
				continue
			}
		else
			chmod -x "$tmp/case/$file"
		fi
		local sc=0
		[[ $name == shellcheck* ]] && sc=1
		if out=$(LOCALSTACK_CHECK_SHELLCHECK=$sc check "$tmp/case" 2>&1); then
			echo "localstack-check: FAIL: self-test case '$name': the broken copy passed" >&2
			failed=$((failed + 1))
		elif [[ $out != *"$want"* ]]; then
			echo "localstack-check: FAIL: self-test case '$name': want a message with '$want', got:" >&2
			printf '    %s\n' "${out//$'\n'/$'\n'    }" >&2
			failed=$((failed + 1))
		fi
	done
	((failed == 0)) || return 1
	echo "localstack-check: self-test ok: $n broken copies each failed with the expected message"
}

case ${1:-} in
--dir)
	check "${2:?usage: $0 --dir DIR}"
	;;
"")
	if ! check "$repo/localstack"; then
		echo "localstack-check: FAIL: localstack/ breaks the rules above" >&2
		exit 1
	fi
	echo "localstack-check: ok: localstack/docker-compose.yml and its init scripts"
	self_test
	;;
*)
	sed -n '2,5p' "$self" >&2
	exit 2
	;;
esac
