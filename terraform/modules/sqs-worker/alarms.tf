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
