variable "name" {
  description = "Name of the queue the worker consumes. The DLQ is named \"<name>-dlq\" unless dlq_name is set. For a FIFO queue (fifo_queue = true) leave off the \".fifo\" suffix: the module adds it."
  type        = string

  validation {
    condition     = can(regex("^[A-Za-z0-9_-]{1,75}$", var.name))
    error_message = "name must be 1 to 75 characters of A-Z, a-z, 0-9, - and _ (SQS allows 80, and the module adds \".fifo\" to FIFO queues)."
  }
}

variable "dlq_name" {
  description = "Name of the dead-letter queue. Default: \"<name>-dlq\"."
  type        = string
  default     = null

  validation {
    condition     = var.dlq_name == null || can(regex("^[A-Za-z0-9_-]{1,75}$", var.dlq_name))
    error_message = "dlq_name must be 1 to 75 characters of A-Z, a-z, 0-9, - and _."
  }
}

variable "fifo_queue" {
  description = "Create a FIFO queue (and a FIFO DLQ) instead of a standard queue."
  type        = bool
  default     = false
}

variable "visibility_timeout_seconds" {
  description = "How long a received message stays invisible to other consumers, in seconds (SQS: 0 to 43200). Set it above the worker's typical handler time; the worker extends it for slow handlers. Default: 30."
  type        = number
  default     = 30

  validation {
    condition     = var.visibility_timeout_seconds >= 0 && var.visibility_timeout_seconds <= 43200 && floor(var.visibility_timeout_seconds) == var.visibility_timeout_seconds
    error_message = "visibility_timeout_seconds must be a whole number from 0 to 43200 (12 hours)."
  }
}

variable "message_retention_seconds" {
  description = "How long the queue keeps a message, in seconds (SQS: 60 to 1209600). It is part of the queue's redelivery horizon (output redelivery_horizon_seconds), which the worker's inbox retention must be at least. Default: 345600 (4 days)."
  type        = number
  default     = 345600

  validation {
    condition     = var.message_retention_seconds >= 60 && var.message_retention_seconds <= 1209600 && floor(var.message_retention_seconds) == var.message_retention_seconds
    error_message = "message_retention_seconds must be a whole number from 60 to 1209600 (14 days)."
  }
}

variable "dlq_message_retention_seconds" {
  description = "How long the DLQ keeps a message, in seconds. On a standard queue it must be longer than message_retention_seconds: a message's age in the DLQ counts from its original send, so an equal retention could expire a message the moment it is dead-lettered. On a FIFO queue a message's age restarts when it moves to the DLQ, so any retention works, and the redelivery horizon is the sum of the two. Default: 1209600 (14 days, the SQS maximum)."
  type        = number
  default     = 1209600

  validation {
    condition     = var.dlq_message_retention_seconds >= 60 && var.dlq_message_retention_seconds <= 1209600 && floor(var.dlq_message_retention_seconds) == var.dlq_message_retention_seconds
    error_message = "dlq_message_retention_seconds must be a whole number from 60 to 1209600 (14 days)."
  }

  validation {
    condition     = var.fifo_queue || var.dlq_message_retention_seconds > var.message_retention_seconds
    error_message = "dlq_message_retention_seconds must be longer than message_retention_seconds: on a standard queue a message's age in the DLQ counts from its original send."
  }
}

variable "receive_wait_time_seconds" {
  description = "Long-poll wait of ReceiveMessage calls that do not set their own, in seconds (SQS: 0 to 20). Default: 20."
  type        = number
  default     = 20

  validation {
    condition     = var.receive_wait_time_seconds >= 0 && var.receive_wait_time_seconds <= 20 && floor(var.receive_wait_time_seconds) == var.receive_wait_time_seconds
    error_message = "receive_wait_time_seconds must be a whole number from 0 to 20."
  }
}

variable "maximum_message_size" {
  description = "The largest message the queue accepts, in bytes (SQS: 1024 to 1048576, 1 MiB; SQS's default is 262144, 256 KiB). The DLQ gets the same limit: it must take every message the queue took. The limit covers the body and its message attributes. A queue subscribed to an SNS topic without raw delivery receives the published message wrapped in an SNS envelope, which is larger than what was published: see ../sns-fanout. Default: 262144."
  type        = number
  default     = 262144

  validation {
    condition     = var.maximum_message_size >= 1024 && var.maximum_message_size <= 1048576 && floor(var.maximum_message_size) == var.maximum_message_size
    error_message = "maximum_message_size must be a whole number of bytes from 1024 to 1048576 (1 MiB, the SQS maximum)."
  }
}

variable "max_receive_count" {
  description = "Receives after which SQS moves a message to the DLQ (the redrive policy's maxReceiveCount; SQS: 1 to 1000). The inbox worker needs at least 3: a consumer frozen while it holds an event's claim keeps it until the database ends its session, and the event needs one delivery to that consumer, one blocked retry and one that runs; the worker refuses to start below 3. Default: 5."
  type        = number
  default     = 5

  validation {
    condition     = var.max_receive_count >= 3 && var.max_receive_count <= 1000 && floor(var.max_receive_count) == var.max_receive_count
    error_message = "max_receive_count must be a whole number from 3 to 1000 (SQS accepts 1, but the inbox worker refuses fewer than 3 receives: an event held by a frozen consumer would be dead-lettered unapplied)."
  }
}

variable "kms_key_arn" {
  description = "ARN of a customer-managed KMS key for server-side encryption of both queues. Default: null, which uses SQS-managed encryption (SSE-SQS) and needs no KMS permission. With a key, the consumer policy also allows kms:Decrypt on it, and producers need kms:GenerateDataKey and kms:Decrypt."
  type        = string
  default     = null

  validation {
    condition     = var.kms_key_arn == null || can(regex("^arn:aws[a-z-]*:kms:[a-z0-9-]+:[0-9]{12}:key/[A-Za-z0-9-]+$", var.kms_key_arn))
    error_message = "kms_key_arn must be the ARN of a KMS key (arn:aws:kms:REGION:ACCOUNT:key/ID), not an alias: IAM grants kms:Decrypt on key ARNs."
  }
}

variable "kms_data_key_reuse_period_seconds" {
  description = "How long SQS reuses a data key before calling KMS again, in seconds (60 to 86400). Only with kms_key_arn. Default: 300."
  type        = number
  default     = 300

  validation {
    condition     = var.kms_data_key_reuse_period_seconds >= 60 && var.kms_data_key_reuse_period_seconds <= 86400
    error_message = "kms_data_key_reuse_period_seconds must be from 60 to 86400."
  }
}

variable "resolve_queue_by_name" {
  description = "Set to true if the worker is given the queue's name and looks up its URL (GetQueueUrl) instead of being given the URL. Adds sqs:GetQueueUrl to the consumer policy. Default: false."
  type        = bool
  default     = false
}

variable "inbox_retention_seconds" {
  description = "The worker's inbox retention, in seconds, if you want plan to check it. The inbox must remember a processed event for as long as SQS can deliver it again (redelivery_horizon_seconds): on a standard queue the longer of the queue's and the DLQ's retention (a message can be redriven back from the DLQ, and its age counts from the original send); on a FIFO queue their sum (the age restarts in the DLQ). The worker reads both retentions at start and refuses a shorter inbox retention; this makes plan fail first. Default: null (not checked; the inbox's default retention is 28 days, enough for any queue)."
  type        = number
  default     = null

  validation {
    condition     = var.inbox_retention_seconds == null || try(var.inbox_retention_seconds >= (var.fifo_queue ? var.message_retention_seconds + var.dlq_message_retention_seconds : max(var.message_retention_seconds, var.dlq_message_retention_seconds)), false)
    error_message = "inbox_retention_seconds is shorter than the queue's redelivery horizon (standard: the longer of message_retention_seconds and dlq_message_retention_seconds; FIFO: their sum): the inbox would forget events that SQS can still deliver again, and the redelivery would run its handler twice. The worker refuses to start with it. Raise the inbox retention (its default is 28 days) or lower the queues' retention."
  }
}

variable "create_alarms" {
  description = "Create the CloudWatch alarms (oldest message age, and any message in the DLQ). Turn off where CloudWatch is not available (local emulators). Default: true."
  type        = bool
  default     = true
}

variable "oldest_message_age_alarm_seconds" {
  description = "Alarm when the oldest message in the queue is older than this, in seconds: the workers are not keeping up, or a message keeps failing. Default: 900 (15 minutes)."
  type        = number
  default     = 900

  validation {
    condition     = var.oldest_message_age_alarm_seconds > 0 && var.oldest_message_age_alarm_seconds < var.message_retention_seconds
    error_message = "oldest_message_age_alarm_seconds must be positive and shorter than message_retention_seconds (older messages are gone)."
  }
}

variable "quiet_groups_age_alarm_seconds" {
  description = "For a fair queue (a standard queue whose producers set MessageGroupId per tenant): alarm when the oldest message outside the noisy groups (CloudWatch's ApproximateAgeOfOldestMessageInQuietGroups) is older than this, in seconds. null means no such alarm. Default: null."
  type        = number
  default     = null

  validation {
    condition     = var.quiet_groups_age_alarm_seconds == null || try(var.quiet_groups_age_alarm_seconds > 0 && var.quiet_groups_age_alarm_seconds < var.message_retention_seconds, false)
    error_message = "quiet_groups_age_alarm_seconds must be null, or positive and shorter than message_retention_seconds (older messages are gone)."
  }
}

variable "alarm_actions" {
  description = "ARNs to notify (SNS topics, for example) when an alarm fires. Default: none."
  type        = list(string)
  default     = []
}

variable "ok_actions" {
  description = "ARNs to notify when an alarm returns to OK. Default: none."
  type        = list(string)
  default     = []
}

variable "tags" {
  description = "Tags for every resource the module creates."
  type        = map(string)
  default     = {}
}
