# Two alarms a worker's operators want from day one. Both treat missing data as OK: an idle or
# empty queue publishes no datapoints for some metrics, and that is not an incident.

resource "aws_cloudwatch_metric_alarm" "oldest_message_age" {
  count = var.create_alarms ? 1 : 0

  alarm_name        = "${local.name}-oldest-message-age"
  alarm_description = "The oldest message in ${local.name} is older than ${var.oldest_message_age_alarm_seconds} s: the workers are behind, stopped, or a message keeps failing before it reaches the DLQ."

  namespace   = "AWS/SQS"
  metric_name = "ApproximateAgeOfOldestMessage"
  dimensions = {
    QueueName = aws_sqs_queue.this.name
  }
  statistic           = "Maximum"
  period              = 60
  evaluation_periods  = 5
  datapoints_to_alarm = 5
  comparison_operator = "GreaterThanThreshold"
  threshold           = var.oldest_message_age_alarm_seconds
  treat_missing_data  = "notBreaching"

  alarm_actions = var.alarm_actions
  ok_actions    = var.ok_actions
  tags          = var.tags
}

resource "aws_cloudwatch_metric_alarm" "dlq_not_empty" {
  count = var.create_alarms ? 1 : 0

  alarm_name        = "${local.dlq_name}-not-empty"
  alarm_description = "${local.dlq_name} holds at least one message: a message failed ${var.max_receive_count} times in ${local.name}. Inspect it, fix the cause, then redrive it."

  namespace   = "AWS/SQS"
  metric_name = "ApproximateNumberOfMessagesVisible"
  dimensions = {
    QueueName = aws_sqs_queue.dlq.name
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

# A fair queue (a standard queue whose producers set MessageGroupId, one per tenant) publishes
# the age of its oldest message outside the noisy groups: the dwell of the tenants that are not
# flooding the queue. CloudWatch has no per-tenant dimension for SQS, so this is the alarm that
# says "the quiet tenants are waiting" while one tenant's backlog is expected. Off unless
# quiet_groups_age_alarm_seconds is set.
resource "aws_cloudwatch_metric_alarm" "quiet_groups_oldest_message_age" {
  count = var.create_alarms && var.quiet_groups_age_alarm_seconds != null ? 1 : 0

  alarm_name        = "${local.name}-quiet-groups-oldest-message-age"
  alarm_description = "The oldest message of the quiet message groups (tenants) in ${local.name} is older than ${coalesce(var.quiet_groups_age_alarm_seconds, 0)} s: tenants other than the noisy ones are waiting."

  namespace   = "AWS/SQS"
  metric_name = "ApproximateAgeOfOldestMessageInQuietGroups"
  dimensions = {
    QueueName = aws_sqs_queue.this.name
  }
  statistic           = "Maximum"
  period              = 60
  evaluation_periods  = 5
  datapoints_to_alarm = 5
  comparison_operator = "GreaterThanThreshold"
  threshold           = var.quiet_groups_age_alarm_seconds
  treat_missing_data  = "notBreaching"

  alarm_actions = var.alarm_actions
  ok_actions    = var.ok_actions
  tags          = var.tags
}
