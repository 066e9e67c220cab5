variable "region" {
  description = "AWS region."
  type        = string
  default     = "us-east-1"
}

variable "name" {
  description = "Name of the worker, its queue and its ECS service."
  type        = string
  default     = "warehouse"
}

variable "image" {
  description = "Container image of the worker (for example the warehouse example, built and pushed to ECR)."
  type        = string
}

variable "database_url_secret_arn" {
  description = "ARN of a Secrets Manager secret whose value is the worker's DATABASE_URL. Passed as a secret, never as plain environment."
  type        = string
}

variable "cluster_arn" {
  description = "ARN of the ECS cluster to run the service in."
  type        = string
}

variable "subnet_ids" {
  description = "Private subnets for the tasks (they need a route to SQS, PostgreSQL and ECR: a NAT gateway or VPC endpoints)."
  type        = list(string)
}

variable "security_group_ids" {
  description = "Security groups for the tasks (egress to PostgreSQL and HTTPS)."
  type        = list(string)
}

variable "desired_count" {
  description = "Number of worker tasks. Any number is safe: the inbox serialises duplicates across tasks."
  type        = number
  default     = 2
}

variable "inbox_retention_seconds" {
  description = "The inbox retention the worker runs with (inbox.Config.Retention), in seconds, for plan to check: it fails if this is shorter than the queue's redelivery horizon. Default: 1209600 (14 days, this example's horizon: a standard queue whose DLQ keeps messages 14 days); the inbox's own default is 28 days."
  type        = number
  default     = 1209600
}

variable "stop_timeout_seconds" {
  description = "Seconds ECS waits after SIGTERM before SIGKILL (the container's stopTimeout; Fargate allows at most 120). The worker stops receiving at SIGTERM, lets in-flight handlers finish for its ShutdownTimeout (default 20 s), then cancels them and releases what it holds (up to 5 s more): this must be longer than the sum."
  type        = number
  default     = 120

  validation {
    condition     = var.stop_timeout_seconds >= 30 && var.stop_timeout_seconds <= 120
    error_message = "stop_timeout_seconds must be from 30 (above the worker's default 20 s shutdown timeout plus 5 s to cancel and release) to 120 (the Fargate maximum)."
  }
}

variable "alarm_actions" {
  description = "ARNs (SNS topics) to notify when the queue's alarms fire."
  type        = list(string)
  default     = []
}

variable "worker_command" {
  description = "The worker binary's path in the image; the container health check runs `<worker_command> healthcheck` (the examples built on workerapp have that subcommand), which asks the worker's /livez at HEALTH_ADDR. Default: /worker."
  type        = string
  default     = "/worker"
}
