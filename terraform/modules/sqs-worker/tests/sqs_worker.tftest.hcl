# Plan-level tests of the sqs-worker module. They run offline: the AWS provider is mocked, and
# the queues' ARNs and URLs are overridden so that assertions can compare them.
#
#   scripts/tf-test.sh   (or, with the tools set up: cd terraform/modules/sqs-worker && tofu test)

mock_provider "aws" {}

override_resource {
  target = aws_sqs_queue.this
  values = {
    arn = "arn:aws:sqs:us-east-1:123456789012:orders"
    url = "https://sqs.us-east-1.amazonaws.com/123456789012/orders"
  }
}

override_resource {
  target = aws_sqs_queue.dlq
  values = {
    arn = "arn:aws:sqs:us-east-1:123456789012:orders-dlq"
    url = "https://sqs.us-east-1.amazonaws.com/123456789012/orders-dlq"
  }
}

variables {
  name = "orders"
}

run "defaults" {
  command = plan

  assert {
    condition     = aws_sqs_queue.this.name == "orders" && aws_sqs_queue.dlq.name == "orders-dlq"
    error_message = "The queue and its DLQ must be named orders and orders-dlq."
  }

  assert {
    condition = jsondecode(aws_sqs_queue.this.redrive_policy) == {
      deadLetterTargetArn = "arn:aws:sqs:us-east-1:123456789012:orders-dlq"
      maxReceiveCount     = 5
    }
    error_message = "The redrive policy must target the DLQ with maxReceiveCount 5."
  }

  assert {
    condition = jsondecode(aws_sqs_queue_redrive_allow_policy.dlq.redrive_allow_policy) == {
      redrivePermission = "byQueue"
      sourceQueueArns   = ["arn:aws:sqs:us-east-1:123456789012:orders"]
    }
    error_message = "The DLQ must admit exactly its source queue."
  }

  assert {
    condition     = aws_sqs_queue_redrive_allow_policy.dlq.queue_url == "https://sqs.us-east-1.amazonaws.com/123456789012/orders-dlq"
    error_message = "The redrive-allow policy must be set on the DLQ."
  }

  assert {
    condition     = aws_sqs_queue.this.message_retention_seconds == 345600 && aws_sqs_queue.dlq.message_retention_seconds == 1209600
    error_message = "Default retention: 4 days on the queue, 14 days on the DLQ."
  }

  assert {
    condition     = aws_sqs_queue.dlq.message_retention_seconds > aws_sqs_queue.this.message_retention_seconds
    error_message = "The DLQ must keep messages longer than its source."
  }

  assert {
    condition     = aws_sqs_queue.this.visibility_timeout_seconds == 30 && aws_sqs_queue.this.receive_wait_time_seconds == 20
    error_message = "Defaults: 30 s visibility timeout, 20 s long poll."
  }

  assert {
    condition     = aws_sqs_queue.this.sqs_managed_sse_enabled == true && aws_sqs_queue.dlq.sqs_managed_sse_enabled == true
    error_message = "Both queues must use SSE-SQS by default."
  }

  assert {
    condition     = aws_sqs_queue.this.kms_master_key_id == null && aws_sqs_queue.dlq.kms_master_key_id == null
    error_message = "No KMS key by default."
  }

  assert {
    condition     = !aws_sqs_queue.this.fifo_queue && !aws_sqs_queue.dlq.fifo_queue
    error_message = "Standard queues by default."
  }

  assert {
    condition     = output.queue_url == "https://sqs.us-east-1.amazonaws.com/123456789012/orders" && output.dlq_arn == "arn:aws:sqs:us-east-1:123456789012:orders-dlq"
    error_message = "The outputs must carry the queues' URL and ARN."
  }

  assert {
    condition     = output.visibility_timeout_seconds == 30 && output.message_retention_seconds == 345600 && output.dlq_message_retention_seconds == 1209600
    error_message = "The outputs must carry the visibility timeout and the retentions."
  }

  assert {
    condition     = aws_sqs_queue.this.max_message_size == 262144 && aws_sqs_queue.dlq.max_message_size == 262144 && output.maximum_message_size == 262144
    error_message = "Default message size limit: 256 KiB (SQS's default) on the queue and its DLQ."
  }
}

run "consumer_policy_has_exactly_the_consumer_actions" {
  command = plan

  assert {
    condition     = length(jsondecode(output.consumer_policy_json).Statement) == 2
    error_message = "Without a customer key the policy has two statements: the queue, and the DLQ's retention."
  }

  assert {
    condition = jsondecode(output.consumer_policy_json).Statement[0] == {
      Sid    = "ConsumeQueue"
      Effect = "Allow"
      Action = [
        "sqs:ReceiveMessage",
        "sqs:DeleteMessage",
        "sqs:ChangeMessageVisibility",
        "sqs:GetQueueAttributes",
      ]
      Resource = "arn:aws:sqs:us-east-1:123456789012:orders"
    }
    error_message = "The consumer statement must allow exactly Receive, Delete, ChangeMessageVisibility and GetQueueAttributes on the queue."
  }

  assert {
    condition = jsondecode(output.consumer_policy_json).Statement[1] == {
      Sid      = "ReadDeadLetterQueueRetention"
      Effect   = "Allow"
      Action   = ["sqs:GetQueueUrl", "sqs:GetQueueAttributes"]
      Resource = "arn:aws:sqs:us-east-1:123456789012:orders-dlq"
    }
    error_message = "On the DLQ the consumer may only look it up and read its attributes (the worker checks its retention at start)."
  }

  assert {
    condition     = jsondecode(output.consumer_policy_json).Version == "2012-10-17"
    error_message = "The policy must use version 2012-10-17."
  }

  assert {
    condition     = !strcontains(output.consumer_policy_json, "*") && !strcontains(output.consumer_policy_json, "kms:") && !strcontains(output.consumer_policy_json, "sqs:SendMessage")
    error_message = "No wildcard, send or KMS action by default."
  }
}

run "resolve_queue_by_name_adds_get_queue_url" {
  command = plan

  variables {
    resolve_queue_by_name = true
  }

  assert {
    condition = jsondecode(output.consumer_policy_json).Statement[0].Action == [
      "sqs:ReceiveMessage",
      "sqs:DeleteMessage",
      "sqs:ChangeMessageVisibility",
      "sqs:GetQueueAttributes",
      "sqs:GetQueueUrl",
    ]
    error_message = "resolve_queue_by_name must add exactly sqs:GetQueueUrl."
  }
}

run "customer_key" {
  command = plan

  variables {
    kms_key_arn = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
  }

  assert {
    condition     = aws_sqs_queue.this.kms_master_key_id == var.kms_key_arn && aws_sqs_queue.dlq.kms_master_key_id == var.kms_key_arn
    error_message = "Both queues must use the customer key."
  }

  assert {
    condition     = aws_sqs_queue.this.kms_data_key_reuse_period_seconds == 300
    error_message = "The data key reuse period must default to 300 s."
  }

  assert {
    condition = jsondecode(output.consumer_policy_json).Statement[2] == {
      Sid      = "DecryptQueueMessages"
      Effect   = "Allow"
      Action   = ["kms:Decrypt"]
      Resource = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
    }
    error_message = "With a customer key the consumer needs exactly kms:Decrypt on that key."
  }

  assert {
    condition     = length(jsondecode(output.consumer_policy_json).Statement) == 3 && length(jsondecode(output.consumer_policy_json).Statement[0].Action) == 4
    error_message = "A customer key adds one statement and no SQS action."
  }
}

run "alarms" {
  command = plan

  variables {
    alarm_actions = ["arn:aws:sns:us-east-1:123456789012:oncall"]
  }

  assert {
    condition     = length(aws_cloudwatch_metric_alarm.oldest_message_age) == 1 && length(aws_cloudwatch_metric_alarm.dlq_not_empty) == 1
    error_message = "Both alarms must be created by default."
  }

  assert {
    condition = (
      aws_cloudwatch_metric_alarm.oldest_message_age[0].namespace == "AWS/SQS" &&
      aws_cloudwatch_metric_alarm.oldest_message_age[0].metric_name == "ApproximateAgeOfOldestMessage" &&
      aws_cloudwatch_metric_alarm.oldest_message_age[0].dimensions == tomap({ QueueName = "orders" }) &&
      aws_cloudwatch_metric_alarm.oldest_message_age[0].comparison_operator == "GreaterThanThreshold" &&
      aws_cloudwatch_metric_alarm.oldest_message_age[0].threshold == 900 &&
      aws_cloudwatch_metric_alarm.oldest_message_age[0].treat_missing_data == "notBreaching"
    )
    error_message = "The age alarm must watch the queue's ApproximateAgeOfOldestMessage above 900 s, missing data not breaching."
  }

  assert {
    condition = (
      aws_cloudwatch_metric_alarm.dlq_not_empty[0].namespace == "AWS/SQS" &&
      aws_cloudwatch_metric_alarm.dlq_not_empty[0].metric_name == "ApproximateNumberOfMessagesVisible" &&
      aws_cloudwatch_metric_alarm.dlq_not_empty[0].dimensions == tomap({ QueueName = "orders-dlq" }) &&
      aws_cloudwatch_metric_alarm.dlq_not_empty[0].comparison_operator == "GreaterThanThreshold" &&
      aws_cloudwatch_metric_alarm.dlq_not_empty[0].threshold == 0 &&
      aws_cloudwatch_metric_alarm.dlq_not_empty[0].treat_missing_data == "notBreaching"
    )
    error_message = "The DLQ alarm must fire on any visible message in the DLQ, missing data not breaching."
  }

  assert {
    condition = (
      aws_cloudwatch_metric_alarm.oldest_message_age[0].alarm_actions == toset(["arn:aws:sns:us-east-1:123456789012:oncall"]) &&
      aws_cloudwatch_metric_alarm.dlq_not_empty[0].alarm_actions == toset(["arn:aws:sns:us-east-1:123456789012:oncall"])
    )
    error_message = "alarm_actions must reach both alarms."
  }
}

run "quiet_groups_alarm_off_by_default" {
  command = plan

  assert {
    condition     = length(aws_cloudwatch_metric_alarm.quiet_groups_oldest_message_age) == 0
    error_message = "The quiet groups' age alarm must be off unless quiet_groups_age_alarm_seconds is set."
  }
}

run "quiet_groups_alarm" {
  command = plan

  variables {
    quiet_groups_age_alarm_seconds = 120
    alarm_actions                  = ["arn:aws:sns:us-east-1:123456789012:oncall"]
  }

  assert {
    condition = (
      length(aws_cloudwatch_metric_alarm.quiet_groups_oldest_message_age) == 1 &&
      aws_cloudwatch_metric_alarm.quiet_groups_oldest_message_age[0].namespace == "AWS/SQS" &&
      aws_cloudwatch_metric_alarm.quiet_groups_oldest_message_age[0].metric_name == "ApproximateAgeOfOldestMessageInQuietGroups" &&
      aws_cloudwatch_metric_alarm.quiet_groups_oldest_message_age[0].dimensions == tomap({ QueueName = "orders" }) &&
      aws_cloudwatch_metric_alarm.quiet_groups_oldest_message_age[0].comparison_operator == "GreaterThanThreshold" &&
      aws_cloudwatch_metric_alarm.quiet_groups_oldest_message_age[0].threshold == 120 &&
      aws_cloudwatch_metric_alarm.quiet_groups_oldest_message_age[0].treat_missing_data == "notBreaching" &&
      aws_cloudwatch_metric_alarm.quiet_groups_oldest_message_age[0].alarm_actions == toset(["arn:aws:sns:us-east-1:123456789012:oncall"])
    )
    error_message = "quiet_groups_age_alarm_seconds must create an alarm on the queue's ApproximateAgeOfOldestMessageInQuietGroups above it, missing data not breaching, to alarm_actions."
  }
}

run "quiet_groups_alarm_longer_than_retention_fails" {
  command = plan

  variables {
    quiet_groups_age_alarm_seconds = 2000000
  }

  expect_failures = [var.quiet_groups_age_alarm_seconds]
}

run "alarms_off" {
  command = plan

  variables {
    create_alarms = false
  }

  assert {
    condition     = length(aws_cloudwatch_metric_alarm.oldest_message_age) == 0 && length(aws_cloudwatch_metric_alarm.dlq_not_empty) == 0 && length(output.alarm_arns) == 0
    error_message = "create_alarms = false must create no alarm."
  }
}

run "inputs_reach_the_queues" {
  command = plan

  variables {
    max_receive_count             = 10
    visibility_timeout_seconds    = 120
    receive_wait_time_seconds     = 10
    message_retention_seconds     = 86400
    dlq_message_retention_seconds = 604800
    dlq_name                      = "orders-dead"
    inbox_retention_seconds       = 604800 # exactly the horizon: accepted
  }

  assert {
    condition     = jsondecode(aws_sqs_queue.this.redrive_policy).maxReceiveCount == 10
    error_message = "max_receive_count must reach the redrive policy."
  }

  assert {
    condition     = aws_sqs_queue.this.visibility_timeout_seconds == 120 && aws_sqs_queue.this.receive_wait_time_seconds == 10
    error_message = "The timeouts must reach the queue."
  }

  assert {
    condition     = aws_sqs_queue.this.message_retention_seconds == 86400 && aws_sqs_queue.dlq.message_retention_seconds == 604800
    error_message = "The retentions must reach the queues."
  }

  assert {
    condition     = aws_sqs_queue.dlq.name == "orders-dead"
    error_message = "dlq_name must name the DLQ."
  }
}

# The message size limit: up to 1 MiB, the same on the DLQ (it must take what the queue took).

run "maximum_message_size_of_1_MiB_reaches_both_queues" {
  command = plan

  variables {
    maximum_message_size = 1048576
  }

  assert {
    condition     = aws_sqs_queue.this.max_message_size == 1048576
    error_message = "maximum_message_size must reach the queue."
  }

  assert {
    condition     = aws_sqs_queue.dlq.max_message_size == aws_sqs_queue.this.max_message_size
    error_message = "The DLQ must accept every message the queue accepted: the same limit."
  }

  assert {
    condition     = output.maximum_message_size == 1048576
    error_message = "The output must carry the limit."
  }
}

run "maximum_message_size_below_1_KiB_fails" {
  command = plan

  variables {
    maximum_message_size = 1023
  }

  expect_failures = [var.maximum_message_size]
}

run "maximum_message_size_over_1_MiB_fails" {
  command = plan

  variables {
    maximum_message_size = 1048577
  }

  expect_failures = [var.maximum_message_size]
}

run "fifo" {
  command = plan

  variables {
    fifo_queue = true
  }

  assert {
    condition     = aws_sqs_queue.this.name == "orders.fifo" && aws_sqs_queue.dlq.name == "orders-dlq.fifo"
    error_message = "FIFO queues must get the .fifo suffix."
  }

  assert {
    condition     = aws_sqs_queue.this.fifo_queue && aws_sqs_queue.dlq.fifo_queue
    error_message = "A FIFO queue needs a FIFO DLQ."
  }
}

# The retention rule: the inbox must remember an event as long as SQS can deliver it again, that
# is, on a standard queue, the longer retention of the queue and its DLQ (messages can be
# redriven back).

run "inbox_retention_equal_to_the_horizon_is_accepted" {
  command = plan

  variables {
    message_retention_seconds     = 345600
    dlq_message_retention_seconds = 1209600
    inbox_retention_seconds       = 1209600
  }

  assert {
    condition     = output.redelivery_horizon_seconds == 1209600 && output.redelivery_horizon_seconds <= var.inbox_retention_seconds
    error_message = "An inbox retention equal to the DLQ's retention must be accepted."
  }
}

run "inbox_retention_shorter_than_the_queue_fails" {
  command = plan

  variables {
    inbox_retention_seconds = 86400
  }

  expect_failures = [var.inbox_retention_seconds]
}

run "inbox_retention_between_queue_and_dlq_fails" {
  command = plan

  variables {
    message_retention_seconds     = 345600
    dlq_message_retention_seconds = 1209600
    inbox_retention_seconds       = 345600
  }

  expect_failures = [var.inbox_retention_seconds]
}

# FIFO: a message's age restarts when it moves to the DLQ, so the horizon is the sum of the two
# retentions, and the DLQ's may be shorter than the queue's.

run "fifo_horizon_is_the_sum" {
  command = plan

  variables {
    fifo_queue                    = true
    message_retention_seconds     = 345600
    dlq_message_retention_seconds = 1209600
    inbox_retention_seconds       = 2419200 # 28 days, the inbox's default
  }

  assert {
    condition     = output.redelivery_horizon_seconds == 345600 + 1209600
    error_message = "A FIFO queue's redelivery horizon must be its retention plus its DLQ's."
  }
}

run "fifo_inbox_retention_of_the_dlq_alone_fails" {
  command = plan

  variables {
    fifo_queue                    = true
    message_retention_seconds     = 345600
    dlq_message_retention_seconds = 1209600
    inbox_retention_seconds       = 1209600 # enough on a standard queue, not on FIFO
  }

  expect_failures = [var.inbox_retention_seconds]
}

run "fifo_dlq_retention_may_be_shorter" {
  command = plan

  variables {
    fifo_queue                    = true
    message_retention_seconds     = 1209600
    dlq_message_retention_seconds = 345600
  }

  assert {
    condition     = output.redelivery_horizon_seconds == 1209600 + 345600
    error_message = "A FIFO DLQ shorter than its queue must be accepted, with the sum as the horizon."
  }
}

run "max_receive_count_under_three_fails" {
  command = plan

  variables {
    max_receive_count = 2
  }

  expect_failures = [var.max_receive_count]
}

run "dlq_retention_equal_to_the_queue_fails" {
  command = plan

  variables {
    message_retention_seconds     = 345600
    dlq_message_retention_seconds = 345600
  }

  expect_failures = [var.dlq_message_retention_seconds]
}

run "queue_retention_of_14_days_leaves_the_dlq_no_room" {
  command = plan

  variables {
    message_retention_seconds = 1209600
  }

  expect_failures = [var.dlq_message_retention_seconds]
}

# Inputs outside what SQS accepts fail at plan, not at apply.

run "visibility_timeout_over_12_hours_fails" {
  command = plan

  variables {
    visibility_timeout_seconds = 43201
  }

  expect_failures = [var.visibility_timeout_seconds]
}

run "negative_visibility_timeout_fails" {
  command = plan

  variables {
    visibility_timeout_seconds = -1
  }

  expect_failures = [var.visibility_timeout_seconds]
}

run "retention_under_a_minute_fails" {
  command = plan

  variables {
    message_retention_seconds = 59
  }

  expect_failures = [var.message_retention_seconds]
}

run "dlq_retention_over_14_days_fails" {
  command = plan

  variables {
    dlq_message_retention_seconds = 1209601
  }

  expect_failures = [var.dlq_message_retention_seconds]
}

run "long_poll_over_20_seconds_fails" {
  command = plan

  variables {
    receive_wait_time_seconds = 21
  }

  expect_failures = [var.receive_wait_time_seconds]
}

run "max_receive_count_zero_fails" {
  command = plan

  variables {
    max_receive_count = 0
  }

  expect_failures = [var.max_receive_count]
}

run "max_receive_count_over_1000_fails" {
  command = plan

  variables {
    max_receive_count = 1001
  }

  expect_failures = [var.max_receive_count]
}

run "kms_alias_fails" {
  command = plan

  variables {
    kms_key_arn = "arn:aws:kms:us-east-1:123456789012:alias/orders"
  }

  expect_failures = [var.kms_key_arn]
}

run "queue_name_with_fifo_suffix_fails" {
  command = plan

  variables {
    name = "orders.fifo"
  }

  expect_failures = [var.name]
}

run "age_alarm_beyond_retention_fails" {
  command = plan

  variables {
    message_retention_seconds        = 600
    oldest_message_age_alarm_seconds = 600
  }

  expect_failures = [var.oldest_message_age_alarm_seconds]
}
