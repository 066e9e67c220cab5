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
