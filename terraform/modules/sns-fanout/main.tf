# One SNS topic fanned out to a queue per worker: each worker (warehouse, loyalty, ...) gets its
# own queue and DLQ from ../sqs-worker, subscribed to the topic, so every published event reaches
# every worker, and each worker's inbox applies it once. See ../../README.md.

locals {
  suffix     = var.fifo_topic ? ".fifo" : ""
  topic_name = "${var.name}${local.suffix}"

  with_subscription_dlq = { for k, s in var.subscribers : k => s if s.subscription_dlq }

  # Message sizes. The topic accepts SNS's default, 262144 bytes: the AWS provider's aws_sns_topic
  # has no argument for the topic's MaximumMessageSize, so the module leaves it alone. Each queue
  # must take what the topic delivers to it: with raw delivery the message as published; with the
  # envelope (raw_message_delivery = false) more: the envelope's fields, the attributes as JSON,
  # and the body JSON-escaped, a byte more for each quote or backslash. So an envelope queue
  # defaults to the SQS maximum. (var.subscribers' validation repeats 262144.)
  topic_maximum_message_size = 262144
  sqs_maximum_message_size   = 1048576
  queue_maximum_message_size = { for k, s in var.subscribers : k => coalesce(
    s.maximum_message_size,
    s.raw_message_delivery ? local.topic_maximum_message_size : local.sqs_maximum_message_size,
  ) }
}

resource "aws_sns_topic" "this" {
  name                        = local.topic_name
  fifo_topic                  = var.fifo_topic ? true : null
  content_based_deduplication = var.fifo_topic ? var.content_based_deduplication : null
  kms_master_key_id           = var.topic_kms_key_id

  tags = var.tags
}

module "queue" {
  source   = "../sqs-worker"
  for_each = var.subscribers

  name       = each.key
  fifo_queue = var.fifo_topic

  visibility_timeout_seconds       = each.value.visibility_timeout_seconds
  message_retention_seconds        = each.value.message_retention_seconds
  dlq_message_retention_seconds    = each.value.dlq_message_retention_seconds
  receive_wait_time_seconds        = each.value.receive_wait_time_seconds
  max_receive_count                = each.value.max_receive_count
  inbox_retention_seconds          = each.value.inbox_retention_seconds
  resolve_queue_by_name            = each.value.resolve_queue_by_name
  oldest_message_age_alarm_seconds = each.value.oldest_message_age_alarm_seconds
  maximum_message_size             = local.queue_maximum_message_size[each.key]

  create_alarms = var.create_alarms
  alarm_actions = var.alarm_actions
  ok_actions    = var.ok_actions
  tags          = var.tags
}

# Only this topic may send to a worker's queue: the service principal sns.amazonaws.com, and only
# on behalf of this topic (aws:SourceArn). This policy is what keeps anyone else from putting a
# forged notification in the queue; the worker does not verify SNS signatures.
resource "aws_sqs_queue_policy" "queue" {
  for_each = var.subscribers

  queue_url = module.queue[each.key].queue_url
  policy    = jsonencode(local.topic_may_send[each.key])
}

locals {
  topic_may_send = { for k, _ in var.subscribers : k => {
    Version = "2012-10-17"
    Statement = [{
      Sid       = "TopicSendsToQueue"
      Effect    = "Allow"
      Principal = { Service = "sns.amazonaws.com" }
      Action    = "sqs:SendMessage"
      Resource  = module.queue[k].queue_arn
      Condition = { ArnEquals = { "aws:SourceArn" = aws_sns_topic.this.arn } }
    }]
  } }
}

resource "aws_sns_topic_subscription" "this" {
  for_each = var.subscribers

  topic_arn = aws_sns_topic.this.arn
  protocol  = "sqs"
  endpoint  = module.queue[each.key].queue_arn

  raw_message_delivery = each.value.raw_message_delivery
  filter_policy        = each.value.filter_policy
  filter_policy_scope  = each.value.filter_policy == null ? null : each.value.filter_policy_scope

  # Messages SNS cannot deliver to the queue go to the subscription's own DLQ instead of being
  # dropped after SNS's retries.
  redrive_policy = each.value.subscription_dlq ? jsonencode({
    deadLetterTargetArn = aws_sqs_queue.subscription_dlq[each.key].arn
  }) : null

  # The queue must admit the topic before the first message is published to it.
  depends_on = [aws_sqs_queue_policy.queue, aws_sqs_queue_policy.subscription_dlq]
}

# The subscription's dead-letter queue: where SNS puts a message it could not deliver to the
# worker's queue. FIFO when the topic is (SNS requires it).
resource "aws_sqs_queue" "subscription_dlq" {
  for_each = local.with_subscription_dlq

  name                      = "${each.key}-sns-dlq${local.suffix}"
  fifo_queue                = var.fifo_topic
  message_retention_seconds = var.subscription_dlq_message_retention_seconds
  sqs_managed_sse_enabled   = true
  # The SQS maximum: it must take the messages the worker's queue refused as too large.
  max_message_size = local.sqs_maximum_message_size

  tags = var.tags
}

resource "aws_sqs_queue_policy" "subscription_dlq" {
  for_each = local.with_subscription_dlq

  queue_url = aws_sqs_queue.subscription_dlq[each.key].url
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Sid       = "TopicDeadLettersToQueue"
      Effect    = "Allow"
      Principal = { Service = "sns.amazonaws.com" }
      Action    = "sqs:SendMessage"
      Resource  = aws_sqs_queue.subscription_dlq[each.key].arn
      Condition = { ArnEquals = { "aws:SourceArn" = aws_sns_topic.this.arn } }
    }]
  })
}

resource "aws_cloudwatch_metric_alarm" "subscription_dlq_not_empty" {
  for_each = var.create_alarms ? local.with_subscription_dlq : {}

  alarm_name        = "${aws_sqs_queue.subscription_dlq[each.key].name}-not-empty"
  alarm_description = "SNS could not deliver a message of ${local.topic_name} to ${module.queue[each.key].queue_name} and put it in ${aws_sqs_queue.subscription_dlq[each.key].name}: check the queue, its policy and its key, then move the message to the queue."

  namespace   = "AWS/SQS"
  metric_name = "ApproximateNumberOfMessagesVisible"
  dimensions = {
    QueueName = aws_sqs_queue.subscription_dlq[each.key].name
  }
  statistic           = "Maximum"
  period              = 60
  evaluation_periods  = 1
  comparison_operator = "GreaterThanThreshold"
  threshold           = 0
  treat_missing_data  = "notBreaching"

  alarm_actions = var.alarm_actions
  ok_actions    = var.ok_actions
  tags          = var.tags
}
