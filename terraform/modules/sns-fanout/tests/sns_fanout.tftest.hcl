# Plan-level tests of the sns-fanout module. They run offline: the AWS provider is mocked, and the
# topic's ARN is overridden so that assertions can compare it.
#
#   scripts/tf-test.sh   (or, with the tools set up: cd terraform/modules/sns-fanout && tofu test)

mock_provider "aws" {}

override_resource {
  target = aws_sns_topic.this
  values = {
    arn = "arn:aws:sns:us-east-1:123456789012:orders"
  }
}

# Distinct ARNs for the worker queues, their DLQs and the subscription DLQs, so that a policy or
# a subscription that points at the wrong kind of queue fails (the mock provider gives every
# aws_sqs_queue the same made-up ARN). Overrides cannot name one instance of a for_each, so all
# worker queues share one ARN; each assertion also checks the instance it reads (module.queue[k]).
override_resource {
  target = module.queue.aws_sqs_queue.this
  values = {
    arn = "arn:aws:sqs:us-east-1:123456789012:worker-queue"
    url = "https://sqs.us-east-1.amazonaws.com/123456789012/worker-queue"
  }
}

override_resource {
  target = module.queue.aws_sqs_queue.dlq
  values = {
    arn = "arn:aws:sqs:us-east-1:123456789012:worker-dlq"
    url = "https://sqs.us-east-1.amazonaws.com/123456789012/worker-dlq"
  }
}

override_resource {
  target = aws_sqs_queue.subscription_dlq
  values = {
    arn = "arn:aws:sqs:us-east-1:123456789012:subscription-dlq"
    url = "https://sqs.us-east-1.amazonaws.com/123456789012/subscription-dlq"
  }
}

variables {
  name = "orders"
  subscribers = {
    warehouse = {}
    loyalty   = { raw_message_delivery = false }
  }
}

run "defaults" {
  command = plan

  assert {
    condition     = aws_sns_topic.this.name == "orders" && aws_sns_topic.this.fifo_topic != true
    error_message = "A standard topic named orders by default."
  }

  assert {
    condition     = module.queue["warehouse"].queue_name == "warehouse" && module.queue["loyalty"].queue_name == "loyalty"
    error_message = "Each subscriber gets a queue of its own name, from the sqs-worker module."
  }

  assert {
    condition     = module.queue["warehouse"].dlq_name == "warehouse-dlq" && module.queue["warehouse"].max_receive_count == 5
    error_message = "Each queue has the sqs-worker module's DLQ and redrive policy."
  }

  assert {
    condition     = aws_sns_topic_subscription.this["warehouse"].raw_message_delivery == true
    error_message = "Raw message delivery is on by default."
  }

  assert {
    condition     = aws_sns_topic_subscription.this["loyalty"].raw_message_delivery == false
    error_message = "raw_message_delivery = false must reach the subscription."
  }

  assert {
    condition = alltrue([for k in ["warehouse", "loyalty"] :
      aws_sns_topic_subscription.this[k].protocol == "sqs" &&
      aws_sns_topic_subscription.this[k].topic_arn == "arn:aws:sns:us-east-1:123456789012:orders" &&
      aws_sns_topic_subscription.this[k].endpoint == module.queue[k].queue_arn &&
    module.queue[k].queue_arn == "arn:aws:sqs:us-east-1:123456789012:worker-queue"])
    error_message = "Each subscription must deliver the topic to its own queue over the sqs protocol."
  }

  assert {
    condition     = aws_sns_topic_subscription.this["warehouse"].filter_policy == null
    error_message = "No filter policy by default: every queue gets every message."
  }

  assert {
    condition     = output.topic_arn == "arn:aws:sns:us-east-1:123456789012:orders"
    error_message = "topic_arn must be the topic's ARN."
  }

  assert {
    condition     = output.queues["warehouse"].queue_url == "https://sqs.us-east-1.amazonaws.com/123456789012/worker-queue" && output.queues["loyalty"].raw_message_delivery == false
    error_message = "queues must carry each worker's QUEUE_URL and how its subscription delivers."
  }

  assert {
    condition     = output.queues["warehouse"].message_retention_seconds == 345600 && output.queues["warehouse"].redelivery_horizon_seconds == 1209600
    error_message = "queues must carry each queue's retention and redelivery horizon (what the payload-bucket module needs)."
  }
}

run "queue_policy_admits_only_the_topic" {
  command = plan

  assert {
    condition = alltrue([for k in ["warehouse", "loyalty"] : jsondecode(aws_sqs_queue_policy.queue[k].policy) == {
      Version = "2012-10-17"
      Statement = [{
        Sid       = "TopicSendsToQueue"
        Effect    = "Allow"
        Principal = { Service = "sns.amazonaws.com" }
        Action    = "sqs:SendMessage"
        Resource  = module.queue[k].queue_arn
        Condition = { ArnEquals = { "aws:SourceArn" = "arn:aws:sns:us-east-1:123456789012:orders" } }
      }]
    } && module.queue[k].queue_arn == "arn:aws:sqs:us-east-1:123456789012:worker-queue"])
    error_message = "Each queue's policy must let SNS send to it only on behalf of this topic (aws:SourceArn), and allow nothing else."
  }

  assert {
    condition     = aws_sqs_queue_policy.queue["loyalty"].queue_url == "https://sqs.us-east-1.amazonaws.com/123456789012/worker-queue"
    error_message = "The policy must be set on the worker's queue."
  }

  assert {
    condition     = !strcontains(aws_sqs_queue_policy.queue["warehouse"].policy, "\"*\"")
    error_message = "No wildcard principal, action or resource."
  }
}

run "subscription_redrive_policy" {
  command = plan

  assert {
    condition = alltrue([for k in ["warehouse", "loyalty"] :
    jsondecode(aws_sns_topic_subscription.this[k].redrive_policy) == { deadLetterTargetArn = "arn:aws:sqs:us-east-1:123456789012:subscription-dlq" }])
    error_message = "Each subscription must dead-letter what SNS cannot deliver to its own subscription DLQ."
  }

  assert {
    condition     = aws_sqs_queue.subscription_dlq["warehouse"].name == "warehouse-sns-dlq" && aws_sqs_queue.subscription_dlq["warehouse"].message_retention_seconds == 1209600
    error_message = "The subscription DLQ is <name>-sns-dlq and keeps messages 14 days."
  }

  assert {
    condition     = aws_sqs_queue_policy.subscription_dlq["warehouse"].queue_url == "https://sqs.us-east-1.amazonaws.com/123456789012/subscription-dlq"
    error_message = "The subscription DLQ's policy must be set on it, not on the worker's DLQ."
  }

  assert {
    condition = jsondecode(aws_sqs_queue_policy.subscription_dlq["loyalty"].policy).Statement[0] == {
      Sid       = "TopicDeadLettersToQueue"
      Effect    = "Allow"
      Principal = { Service = "sns.amazonaws.com" }
      Action    = "sqs:SendMessage"
      Resource  = "arn:aws:sqs:us-east-1:123456789012:subscription-dlq"
      Condition = { ArnEquals = { "aws:SourceArn" = "arn:aws:sns:us-east-1:123456789012:orders" } }
    }
    error_message = "The subscription DLQ must admit this topic only."
  }

  assert {
    condition     = length(aws_cloudwatch_metric_alarm.subscription_dlq_not_empty) == 2 && aws_cloudwatch_metric_alarm.subscription_dlq_not_empty["warehouse"].dimensions.QueueName == "warehouse-sns-dlq"
    error_message = "Each subscription DLQ has an alarm on any message in it."
  }

  assert {
    condition     = length(output.alarm_arns) == 6
    error_message = "Two alarms per worker queue and one per subscription DLQ."
  }
}

run "subscription_dlq_off" {
  command = plan

  variables {
    subscribers = {
      warehouse = { subscription_dlq = false }
    }
  }

  assert {
    condition     = aws_sns_topic_subscription.this["warehouse"].redrive_policy == null && length(aws_sqs_queue.subscription_dlq) == 0 && length(aws_cloudwatch_metric_alarm.subscription_dlq_not_empty) == 0
    error_message = "subscription_dlq = false leaves out the subscription's redrive policy, its DLQ and its alarm."
  }

  assert {
    condition     = output.queues["warehouse"].subscription_dlq_url == null
    error_message = "queues says there is no subscription DLQ."
  }
}

run "fifo" {
  command = plan

  variables {
    fifo_topic                  = true
    content_based_deduplication = true
  }

  assert {
    condition     = aws_sns_topic.this.name == "orders.fifo" && aws_sns_topic.this.fifo_topic == true && aws_sns_topic.this.content_based_deduplication == true
    error_message = "A FIFO topic is named orders.fifo."
  }

  assert {
    condition     = module.queue["warehouse"].queue_name == "warehouse.fifo" && module.queue["warehouse"].dlq_name == "warehouse-dlq.fifo"
    error_message = "A FIFO topic delivers only to FIFO queues: the worker queues and their DLQs must be FIFO."
  }

  assert {
    condition     = aws_sqs_queue.subscription_dlq["loyalty"].name == "loyalty-sns-dlq.fifo" && aws_sqs_queue.subscription_dlq["loyalty"].fifo_queue == true
    error_message = "A FIFO subscription's DLQ must be a FIFO queue."
  }

  assert {
    condition     = aws_sns_topic_subscription.this["warehouse"].raw_message_delivery == true
    error_message = "Raw delivery stays on for FIFO topics."
  }
}

run "filter_policy" {
  command = plan

  variables {
    subscribers = {
      warehouse = {}
      refunds   = { filter_policy = "{\"type\":[\"OrderRefunded\"]}", filter_policy_scope = "MessageBody" }
    }
  }

  assert {
    condition     = jsondecode(aws_sns_topic_subscription.this["refunds"].filter_policy) == { type = ["OrderRefunded"] } && aws_sns_topic_subscription.this["refunds"].filter_policy_scope == "MessageBody"
    error_message = "The filter policy and its scope must reach the subscription."
  }
}

run "settings_reach_the_queues" {
  command = plan

  variables {
    subscribers = {
      warehouse = { visibility_timeout_seconds = 120, max_receive_count = 8, inbox_retention_seconds = 2419200, resolve_queue_by_name = true }
    }
    create_alarms = false
  }

  assert {
    condition     = module.queue["warehouse"].visibility_timeout_seconds == 120 && module.queue["warehouse"].max_receive_count == 8
    error_message = "A subscriber's queue settings must reach the sqs-worker module."
  }

  assert {
    condition     = strcontains(output.consumer_policy_json["warehouse"], "sqs:GetQueueUrl")
    error_message = "resolve_queue_by_name must reach the consumer policy."
  }

  assert {
    condition     = length(output.alarm_arns) == 0
    error_message = "create_alarms = false leaves out every alarm."
  }
}

run "publisher_policy" {
  command = plan

  assert {
    condition = jsondecode(output.publisher_policy_json) == {
      Version   = "2012-10-17"
      Statement = [{ Sid = "PublishToTopic", Effect = "Allow", Action = "sns:Publish", Resource = "arn:aws:sns:us-east-1:123456789012:orders" }]
    }
    error_message = "Producers may publish to this topic and do nothing else."
  }
}

run "publisher_policy_with_a_customer_key" {
  command = plan

  variables {
    topic_kms_key_id = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
  }

  assert {
    condition     = aws_sns_topic.this.kms_master_key_id == "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
    error_message = "The key must encrypt the topic."
  }

  assert {
    condition = jsondecode(output.publisher_policy_json).Statement[1] == {
      Sid      = "EncryptForTopic"
      Effect   = "Allow"
      Action   = ["kms:GenerateDataKey", "kms:Decrypt"]
      Resource = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
    }
    error_message = "Producers need kms:GenerateDataKey and kms:Decrypt on a customer key."
  }
}

# Message sizes: each queue takes whatever the topic (262144 bytes, SNS's default) delivers to it.

run "queue_size_follows_the_delivery" {
  command = plan

  assert {
    condition     = module.queue["warehouse"].maximum_message_size == 262144 && output.queues["warehouse"].maximum_message_size == 262144
    error_message = "With raw delivery the queue takes what the topic accepts: 262144 bytes."
  }

  assert {
    condition     = module.queue["loyalty"].maximum_message_size == 1048576 && output.queues["loyalty"].maximum_message_size == 1048576
    error_message = "With the SNS envelope the queue defaults to 1 MiB: the envelope of a 262144-byte message is larger than 262144 bytes."
  }

  assert {
    condition     = alltrue([for k in ["warehouse", "loyalty"] : aws_sqs_queue.subscription_dlq[k].max_message_size == 1048576])
    error_message = "A subscription DLQ takes 1 MiB, so that a message its queue refused as too large lands there."
  }
}

run "maximum_message_size_reaches_the_queues" {
  command = plan

  variables {
    subscribers = {
      warehouse = { maximum_message_size = 1048576 }
      loyalty   = { raw_message_delivery = false, maximum_message_size = 266240 }
    }
  }

  assert {
    condition     = module.queue["warehouse"].maximum_message_size == 1048576 && module.queue["loyalty"].maximum_message_size == 266240
    error_message = "A subscriber's maximum_message_size must reach its queue (and, through sqs-worker, its DLQ)."
  }
}

run "raw_queue_smaller_than_the_topic_fails" {
  command = plan

  variables {
    subscribers = { warehouse = { maximum_message_size = 65536 } }
  }

  expect_failures = [var.subscribers]
}

run "envelope_queue_without_room_for_the_envelope_fails" {
  command = plan

  variables {
    subscribers = { loyalty = { raw_message_delivery = false, maximum_message_size = 262144 } }
  }

  expect_failures = [var.subscribers]
}

run "queue_over_1_MiB_fails" {
  command = plan

  variables {
    subscribers = { warehouse = { maximum_message_size = 1048577 } }
  }

  expect_failures = [var.subscribers]
}

run "no_subscribers_fails" {
  command = plan

  variables {
    subscribers = {}
  }

  expect_failures = [var.subscribers]
}

run "bad_filter_scope_fails" {
  command = plan

  variables {
    subscribers = { warehouse = { filter_policy = "{}", filter_policy_scope = "Body" } }
  }

  expect_failures = [var.subscribers]
}

run "content_dedup_on_a_standard_topic_fails" {
  command = plan

  variables {
    content_based_deduplication = true
  }

  expect_failures = [var.content_based_deduplication]
}

run "long_subscriber_name_fails" {
  command = plan

  variables {
    subscribers = { "a-subscriber-name-that-is-far-too-long-for-its-queue-names-with-suffixes" = {} }
  }

  expect_failures = [var.subscribers]
}
