#!/bin/bash
# Creates the SNS topic order-paid and subscribes the warehouse and loyalty queues to it (the
# fan-out: one OrderPaid published once reaches both workers, and each inbox applies it once).
# Runs after 10-create-queues.sh (LocalStack runs ready.d/ in name order), which made the queues.
#
# warehouse's subscription uses raw message delivery (the default of terraform/modules/sns-fanout);
# loyalty's does not, so its worker gets SNS envelopes and unwraps them (worker.Config.SNS). Each
# queue gets a policy that admits only this topic (aws:SourceArn), as on AWS.
#
# It is idempotent: CreateTopic and Subscribe with the same arguments return the existing ones.
# scripts/localstack-check.sh runs it with a stub `aws` and checks the topic, the subscriptions
# and the policies. Change both together.
set -euo pipefail

endpoint=${LOCALSTACK_ENDPOINT:-http://localhost:4566}
region=${AWS_DEFAULT_REGION:-us-east-1}
export AWS_ACCESS_KEY_ID=${AWS_ACCESS_KEY_ID:-test} AWS_SECRET_ACCESS_KEY=${AWS_SECRET_ACCESS_KEY:-test}

readonly topic=order-paid
# queue=raw message delivery (true or false)
subscribers=(warehouse=true loyalty=false)

aws_() { aws --endpoint-url "$endpoint" --region "$region" --output text "$@"; }

topic_arn=$(aws_ sns create-topic --name "$topic" --query TopicArn)

for sub in "${subscribers[@]}"; do
	name=${sub%%=*} raw=${sub#*=}
	url=$(aws_ sqs get-queue-url --queue-name "$name" --query QueueUrl)
	arn=$(aws_ sqs get-queue-attributes --queue-url "$url" --attribute-names QueueArn \
		--query Attributes.QueueArn)

	# Only the topic may send to the queue.
	policy="{\\\"Version\\\":\\\"2012-10-17\\\",\\\"Statement\\\":[{\\\"Sid\\\":\\\"TopicSendsToQueue\\\",\\\"Effect\\\":\\\"Allow\\\",\\\"Principal\\\":{\\\"Service\\\":\\\"sns.amazonaws.com\\\"},\\\"Action\\\":\\\"sqs:SendMessage\\\",\\\"Resource\\\":\\\"$arn\\\",\\\"Condition\\\":{\\\"ArnEquals\\\":{\\\"aws:SourceArn\\\":\\\"$topic_arn\\\"}}}]}"
	aws_ sqs set-queue-attributes --queue-url "$url" --attributes "{\"Policy\":\"$policy\"}"

	sub_arn=$(aws_ sns subscribe --topic-arn "$topic_arn" --protocol sqs --notification-endpoint "$arn" \
		--attributes "{\"RawMessageDelivery\":\"$raw\"}" --return-subscription-arn --query SubscriptionArn)
	echo "subscribed $name to $topic_arn (raw delivery $raw): $sub_arn"
done
