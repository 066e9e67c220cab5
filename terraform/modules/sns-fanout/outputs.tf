output "topic_arn" {
  description = "ARN of the topic: what producers publish to (sqsinbox send --topic-arn)."
  value       = aws_sns_topic.this.arn
}

output "topic_name" {
  description = "Name of the topic."
  value       = aws_sns_topic.this.name
}

output "queues" {
  description = "Per worker: its queue_url (the worker's QUEUE_URL), queue_arn, dlq_url, dlq_arn, redelivery_horizon_seconds (the shortest inbox retention the worker accepts), message_retention_seconds (the queue's; with redelivery_horizon_seconds, what ../payload-bucket needs), maximum_message_size (what the queue accepts), the subscription's ARN and whether it delivers raw, and the subscription DLQ's URL (null without one)."
  value = { for k, _ in var.subscribers : k => {
    queue_url                  = module.queue[k].queue_url
    queue_arn                  = module.queue[k].queue_arn
    dlq_url                    = module.queue[k].dlq_url
    dlq_arn                    = module.queue[k].dlq_arn
    redelivery_horizon_seconds = module.queue[k].redelivery_horizon_seconds
    message_retention_seconds  = module.queue[k].message_retention_seconds
    maximum_message_size       = module.queue[k].maximum_message_size
    subscription_arn           = aws_sns_topic_subscription.this[k].arn
    raw_message_delivery       = aws_sns_topic_subscription.this[k].raw_message_delivery
    subscription_dlq_url       = try(aws_sqs_queue.subscription_dlq[k].url, null)
  } }
}

output "consumer_policy_json" {
  description = "Per worker, the IAM policy (JSON) its consumer needs, from ../sqs-worker: attach each to that worker's task or instance role. Consuming a subscribed queue needs no SNS permission."
  value       = { for k, _ in var.subscribers : k => module.queue[k].consumer_policy_json }
}

output "publisher_policy_json" {
  description = "IAM policy (JSON) for producers: sns:Publish on this topic only (PublishBatch is authorised by sns:Publish), plus kms:GenerateDataKey and kms:Decrypt when topic_kms_key_id is a customer key's ARN."
  value = jsonencode({
    Version = "2012-10-17"
    Statement = concat(
      [{
        Sid      = "PublishToTopic"
        Effect   = "Allow"
        Action   = "sns:Publish"
        Resource = aws_sns_topic.this.arn
      }],
      # A customer key given by its ARN. (IAM cannot grant on an alias or a bare key id; the AWS
      # managed alias/aws/sns needs no grant within the account.)
      !can(regex("^arn:aws[a-z-]*:kms:[a-z0-9-]+:[0-9]{12}:key/", var.topic_kms_key_id)) ? [] : [{
        Sid      = "EncryptForTopic"
        Effect   = "Allow"
        Action   = ["kms:GenerateDataKey", "kms:Decrypt"]
        Resource = var.topic_kms_key_id
      }],
    )
  })
}

output "alarm_arns" {
  description = "ARNs of every alarm: the workers' queues' and the subscription DLQs' (empty when create_alarms is false)."
  value = concat(
    flatten([for k, _ in var.subscribers : module.queue[k].alarm_arns]),
    [for a in aws_cloudwatch_metric_alarm.subscription_dlq_not_empty : a.arn],
  )
}
