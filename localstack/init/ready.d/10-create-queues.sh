#!/bin/bash
# Creates the example queues, each with its dead-letter queue, once LocalStack is ready.
# LocalStack runs every executable *.sh in /etc/localstack/init/ready.d/ in name order; the
# compose health check turns healthy when they all ran, and unhealthy if one failed.
#
# It uses the plain AWS CLI that the image ships, with an explicit endpoint (awslocal is
# deprecated). It is idempotent: CreateQueue with the same attributes returns the existing queue.
#
# scripts/localstack-check.sh runs this script with a stub `aws` and checks the queues and
# attributes against what the examples expect. Change both together.
set -euo pipefail

endpoint=${LOCALSTACK_ENDPOINT:-http://localhost:4566}
region=${AWS_DEFAULT_REGION:-us-east-1}
export AWS_ACCESS_KEY_ID=${AWS_ACCESS_KEY_ID:-test} AWS_SECRET_ACCESS_KEY=${AWS_SECRET_ACCESS_KEY:-test}

# The example queues (standard queues). Each NAME gets NAME-dlq.
queues=(warehouse loyalty payments payments-ledger)

# Source queues: 4 days' retention (the SQS default), 30 s visibility, 20 s long polls.
readonly retention_seconds=345600
readonly visibility_timeout_seconds=30
readonly receive_wait_seconds=20
readonly max_receive_count=5
# DLQs keep messages 14 days, longer than the source: on a standard queue a message's age in the
# DLQ counts from its original send.
readonly dlq_retention_seconds=1209600

sqs() { aws --endpoint-url "$endpoint" --region "$region" --output text sqs "$@"; }

for name in "${queues[@]}"; do
	dlq_url=$(sqs create-queue --queue-name "$name-dlq" --query QueueUrl \
		--attributes "{\"MessageRetentionPeriod\":\"$dlq_retention_seconds\"}")
	dlq_arn=$(sqs get-queue-attributes --queue-url "$dlq_url" --attribute-names QueueArn \
		--query Attributes.QueueArn)

	redrive="{\\\"deadLetterTargetArn\\\":\\\"$dlq_arn\\\",\\\"maxReceiveCount\\\":$max_receive_count}"
	url=$(sqs create-queue --queue-name "$name" --query QueueUrl --attributes "{
		\"MessageRetentionPeriod\":\"$retention_seconds\",
		\"VisibilityTimeout\":\"$visibility_timeout_seconds\",
		\"ReceiveMessageWaitTimeSeconds\":\"$receive_wait_seconds\",
		\"RedrivePolicy\":\"$redrive\"}")
	src_arn=$(sqs get-queue-attributes --queue-url "$url" --attribute-names QueueArn \
		--query Attributes.QueueArn)

	# Only this source queue may use the DLQ, and messages can be redriven back to it.
	allow="{\\\"redrivePermission\\\":\\\"byQueue\\\",\\\"sourceQueueArns\\\":[\\\"$src_arn\\\"]}"
	sqs set-queue-attributes --queue-url "$dlq_url" \
		--attributes "{\"RedriveAllowPolicy\":\"$allow\"}"

	echo "created $url (DLQ $dlq_url)"
done
