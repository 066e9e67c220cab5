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
  description = "ARN of the ECS cluster to run the service in (arn:aws:ecs:REGION:ACCOUNT:cluster/NAME). Turn Container Insights on for it (its containerInsights setting, enabled or enhanced): the autoscaling policy divides the queue's backlog by Container Insights' RunningTaskCount, and without it the service does not scale."
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
  description = "Number of worker tasks when the service is created; from then on autoscaling sets it, between min_tasks and max_tasks (the service ignores later changes of this value). Any number is safe: the inbox serialises duplicates across tasks. Default: 2."
  type        = number
  default     = 2

  validation {
    # An empty range is min_tasks' error; report only that one.
    condition     = var.min_tasks > var.max_tasks || (var.desired_count >= var.min_tasks && var.desired_count <= var.max_tasks)
    error_message = "desired_count must be from min_tasks to max_tasks: autoscaling would move it into that range at once."
  }
}

variable "run_migrations" {
  description = "Run `<worker_command> migrate` in each task before the worker starts: a non-essential container named migrate, with the worker's image and DATABASE_URL, which the worker container depends on (condition SUCCESS). The worker refuses to start on an unmigrated database. Migrating again is a no-op, and tasks starting together take turns (an advisory lock). Turn it off when something else runs the migrations before a deploy (a pipeline step, or a one-off task: aws ecs run-task with the command overridden to migrate). Default: true."
  type        = bool
  default     = true
}

variable "min_tasks" {
  description = "Fewest worker tasks autoscaling leaves running. At least 1: the policy divides the backlog by the running tasks, which has no value at zero, so it could not scale out from zero. Default: 1."
  type        = number
  default     = 1

  validation {
    condition     = var.min_tasks >= 1 && floor(var.min_tasks) == var.min_tasks
    error_message = "min_tasks must be a whole number of at least 1: the backlog per task has no value at zero tasks, so target tracking could not scale out from zero."
  }

  validation {
    condition     = var.min_tasks <= var.max_tasks
    error_message = "min_tasks must not be greater than max_tasks."
  }
}

variable "concurrency" {
  description = "Handler calls each task runs at once (the worker container's CONCURRENCY, worker.Config.Concurrency): for the inbox handler each is a transaction on a PostgreSQL connection of its own, and the task's pool holds concurrency + 2 connections. Default: 10."
  type        = number
  default     = 10

  validation {
    condition     = var.concurrency >= 1 && floor(var.concurrency) == var.concurrency
    error_message = "concurrency must be a whole number of at least 1."
  }
}

variable "max_per_group" {
  description = "Most handler calls the messages of one MessageGroupId may hold at once in a task (the worker container's MAX_PER_GROUP, worker.Config.MaxPerGroup): on a fair queue, where the group id names a tenant, it keeps one tenant's backlog from taking every runner. 0 means no cap. Default: 0."
  type        = number
  default     = 0

  validation {
    condition     = var.max_per_group >= 0 && floor(var.max_per_group) == var.max_per_group
    error_message = "max_per_group must be a whole number, 0 (no cap) or more."
  }
}

variable "shutdown_timeout_seconds" {
  description = "Seconds the worker lets running handlers finish after SIGTERM before it cancels them (the worker container's SHUTDOWN_TIMEOUT, worker.Config.ShutdownTimeout). It then takes up to 5 s more to roll back and release what it holds, so this plus 5 must be under stop_timeout_seconds. Default: 20."
  type        = number
  default     = 20

  validation {
    condition     = var.shutdown_timeout_seconds >= 1 && floor(var.shutdown_timeout_seconds) == var.shutdown_timeout_seconds
    error_message = "shutdown_timeout_seconds must be a whole number of at least 1."
  }

  validation {
    condition     = var.shutdown_timeout_seconds + 5 < var.stop_timeout_seconds
    error_message = "shutdown_timeout_seconds plus 5 s (the hard stop: cancel, roll back, release) must be under stop_timeout_seconds, or ECS kills the worker mid-stop."
  }
}

variable "max_tasks" {
  description = "Most worker tasks autoscaling starts. Each task may open as many PostgreSQL connections as its pool holds (concurrency + 2, 12 by default): keep max_tasks times that under the server's max_connections. Default: 10."
  type        = number
  default     = 10

  validation {
    condition     = var.max_tasks >= 1 && floor(var.max_tasks) == var.max_tasks
    error_message = "max_tasks must be a whole number of at least 1."
  }
}

variable "target_messages_per_task" {
  description = "The autoscaling target: visible messages in the queue per running task. Choose it as the messages per second one task processes (from a load test of your handler) times the longest queueing delay you accept, in seconds. For example (illustrative numbers): 40 messages/s x 120 s = 4800. No default: it depends on your handler."
  type        = number

  validation {
    condition     = var.target_messages_per_task > 0
    error_message = "target_messages_per_task must be positive: a task's rate (messages/s) times the acceptable queueing delay (s)."
  }
}

variable "scale_out_cooldown_seconds" {
  description = "Seconds after a scale-out before the policy scales out again. A Fargate task takes about a minute to start and the queue's metrics come once a minute, so a shorter wait mostly re-reads a backlog the new tasks have not touched yet. Default: 60."
  type        = number
  default     = 60

  validation {
    condition     = var.scale_out_cooldown_seconds >= 0 && floor(var.scale_out_cooldown_seconds) == var.scale_out_cooldown_seconds
    error_message = "scale_out_cooldown_seconds must be a whole number of seconds, 0 or more."
  }
}

variable "scale_in_cooldown_seconds" {
  description = "Seconds after a scale-in before the policy scales in again. Scale in slowly: a stopping task finishes its in-flight messages first (up to stop_timeout_seconds), and a backlog that returns soon after would need new tasks again. Default: 300."
  type        = number
  default     = 300

  validation {
    condition     = var.scale_in_cooldown_seconds >= 0 && floor(var.scale_in_cooldown_seconds) == var.scale_in_cooldown_seconds
    error_message = "scale_in_cooldown_seconds must be a whole number of seconds, 0 or more."
  }
}

variable "inbox_retention_seconds" {
  description = "The inbox retention the worker runs with (inbox.Config.Retention), in seconds, for plan to check: it fails if this is shorter than the queue's redelivery horizon. Default: 1209600 (14 days, this example's horizon: a standard queue whose DLQ keeps messages 14 days); the inbox's own default is 28 days."
  type        = number
  default     = 1209600
}

variable "payload_bucket" {
  description = "Create a bucket for payloads offloaded to S3 (../../modules/payload-bucket, with a lifecycle rule fitted to this queue's redelivery horizon), attach its reader policy to the task role, and give the worker its name in SQSINBOX_PAYLOAD_BUCKETS. Its name starts with \"<name>-payloads-\" (so name must then be at most 27 characters). Producers need the output payload_writer_policy_json. Default: false."
  type        = bool
  default     = false
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
