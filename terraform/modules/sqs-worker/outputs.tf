output "queue_url" {
  description = "URL of the queue: the worker's QUEUE_URL."
  value       = aws_sqs_queue.this.url
}

output "queue_arn" {
  description = "ARN of the queue."
  value       = aws_sqs_queue.this.arn
}

output "queue_name" {
  description = "Name of the queue."
  value       = aws_sqs_queue.this.name
}

output "dlq_url" {
  description = "URL of the dead-letter queue (for inspection and redrive)."
  value       = aws_sqs_queue.dlq.url
}

output "dlq_arn" {
  description = "ARN of the dead-letter queue."
  value       = aws_sqs_queue.dlq.arn
}

output "dlq_name" {
  description = "Name of the dead-letter queue."
  value       = aws_sqs_queue.dlq.name
}

output "visibility_timeout_seconds" {
  description = "The queue's visibility timeout. The worker reads it at start (GetQueueAttributes) to pace its heartbeat."
  value       = aws_sqs_queue.this.visibility_timeout_seconds
}

output "maximum_message_size" {
  description = "The largest message, in bytes, the queue and its DLQ accept: what a producer may send (sqsinbox send reads the queue's MaximumMessageSize)."
  value       = aws_sqs_queue.this.max_message_size
}

output "message_retention_seconds" {
  description = "The queue's retention."
  value       = aws_sqs_queue.this.message_retention_seconds
}

output "dlq_message_retention_seconds" {
  description = "The DLQ's retention. The worker's inbox retention must be at least redelivery_horizon_seconds."
  value       = aws_sqs_queue.dlq.message_retention_seconds
}

output "redelivery_horizon_seconds" {
  description = "The longest time after which SQS can deliver a message again, the shortest inbox retention the worker accepts: on a standard queue the longer retention of the queue and the DLQ (a dead-lettered message keeps its original send time); on a FIFO queue their sum (its age restarts in the DLQ)."
  value       = var.fifo_queue ? aws_sqs_queue.this.message_retention_seconds + aws_sqs_queue.dlq.message_retention_seconds : max(aws_sqs_queue.this.message_retention_seconds, aws_sqs_queue.dlq.message_retention_seconds)
}

output "max_receive_count" {
  description = "Receives after which a message moves to the DLQ."
  value       = var.max_receive_count
}

output "consumer_policy_json" {
  description = "IAM policy (JSON) with exactly what a consumer needs; attach it to the worker's ECS task role or EC2 instance role."
  value = jsonencode({
    Version   = "2012-10-17"
    Statement = local.consumer_statements
  })
}

output "consumer_actions" {
  description = "The actions consumer_policy_json allows, by resource, for review."
  value = merge(
    { (aws_sqs_queue.this.arn) = local.consumer_sqs_actions, (aws_sqs_queue.dlq.arn) = local.consumer_dlq_actions },
    var.kms_key_arn == null ? {} : { (var.kms_key_arn) = local.consumer_kms_actions },
  )
}

output "alarm_arns" {
  description = "ARNs of the CloudWatch alarms (empty when create_alarms is false)."
  value       = concat(aws_cloudwatch_metric_alarm.oldest_message_age[*].arn, aws_cloudwatch_metric_alarm.dlq_not_empty[*].arn, aws_cloudwatch_metric_alarm.quiet_groups_oldest_message_age[*].arn)
}
