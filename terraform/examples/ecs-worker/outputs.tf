output "queue_url" {
  description = "The worker's QUEUE_URL."
  value       = module.queue.queue_url
}

output "dlq_url" {
  description = "The DLQ, for inspection and redrive."
  value       = module.queue.dlq_url
}

output "task_role_arn" {
  description = "The task role holding the consumer policy."
  value       = aws_iam_role.task.arn
}

output "task_definition_arn" {
  description = "The worker's task definition."
  value       = aws_ecs_task_definition.worker.arn
}

output "autoscaling_policy_arn" {
  description = "The target tracking policy on the backlog per task (its alarms are named after it)."
  value       = aws_appautoscaling_policy.backlog_per_task.arn
}

output "payload_bucket_name" {
  description = "The payload bucket (null without payload_bucket): the producers' s3payload.WriterConfig.Bucket."
  value       = var.payload_bucket ? module.payload_bucket[0].bucket_name : null
}

output "payload_writer_policy_json" {
  description = "The IAM policy producers need to offload payloads to the bucket (null without payload_bucket)."
  value       = var.payload_bucket ? module.payload_bucket[0].writer_policy_json : null
}
