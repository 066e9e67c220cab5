variable "name" {
  description = "Name of the SNS topic the events are published to. For a FIFO topic (fifo_topic = true) leave off the \".fifo\" suffix: the module adds it."
  type        = string

  validation {
    condition     = can(regex("^[A-Za-z0-9_-]{1,251}$", var.name))
    error_message = "name must be 1 to 251 characters of A-Z, a-z, 0-9, - and _ (SNS allows 256, and the module adds \".fifo\" to FIFO topics)."
  }
}

variable "fifo_topic" {
  description = "Create a FIFO topic, and FIFO queues for its subscribers (SNS delivers a FIFO topic only to FIFO queues). Publishers must then set a message group id. Default: false."
  type        = bool
  default     = false
}

variable "content_based_deduplication" {
  description = "FIFO topics only: derive the deduplication id from the message body when the publisher gives none. The inbox deduplicates by event id in any case. Default: false."
  type        = bool
  default     = false

  validation {
    condition     = var.fifo_topic || !var.content_based_deduplication
    error_message = "content_based_deduplication applies to FIFO topics only (fifo_topic = true)."
  }
}

variable "topic_kms_key_id" {
  description = "KMS key (id, ARN or alias) for server-side encryption of the topic, such as \"alias/aws/sns\". Default: null (not encrypted at rest in SNS; the queues are encrypted either way). A customer key must let sns.amazonaws.com use it, and publishers need kms:GenerateDataKey and kms:Decrypt on it."
  type        = string
  default     = null
}

variable "subscribers" {
  description = <<-EOT
    One entry per worker, keyed by the worker's name: the module creates a queue of that name with
    its DLQ through ../sqs-worker, and subscribes it to the topic. Every field is optional:

    - raw_message_delivery (default true): the queue gets the published body and message
      attributes as they were published. With false, SNS wraps each message in a JSON envelope
      (Type, MessageId, TopicArn, Message, MessageAttributes, Timestamp, signature fields); the
      sqsinbox worker unwraps it (worker.Config.SNS, SNSAuto by default) and the handler sees the
      same body and attributes, plus the SNS metadata in Message.SNS. Raw delivery keeps messages
      smaller, and readable by consumers that do not unwrap.
    - filter_policy (JSON) and filter_policy_scope ("MessageAttributes", the default, or
      "MessageBody"): which messages this queue gets.
    - subscription_dlq (default true): a dead-letter queue for the subscription itself
      (<name>-sns-dlq), where SNS puts messages it could not deliver to the queue (the queue was
      deleted, or its policy or key refused SNS). It is not the worker's DLQ, which holds
      messages the worker received and failed.
    - the queue's settings, passed to ../sqs-worker: visibility_timeout_seconds,
      message_retention_seconds, dlq_message_retention_seconds, receive_wait_time_seconds,
      max_receive_count, inbox_retention_seconds, resolve_queue_by_name,
      oldest_message_age_alarm_seconds (see that module for their defaults and rules).
    - maximum_message_size: the largest message the queue (and its DLQ) accepts, in bytes (1024
      to 1048576). It must take whatever the topic delivers. The topic accepts 262144 bytes
      (SNS's default: the AWS provider's aws_sns_topic has no argument to change it), so with
      raw delivery it must be at least 262144 (the default). With raw_message_delivery = false
      SNS delivers an envelope, larger than what was published: its fields, the attributes as
      JSON, and the body JSON-escaped (a byte more for each quote or backslash). It must then be
      at least 262144 + 4096, and the default is 1048576, the SQS maximum.
  EOT
  type = map(object({
    raw_message_delivery             = optional(bool, true)
    filter_policy                    = optional(string)
    filter_policy_scope              = optional(string, "MessageAttributes")
    subscription_dlq                 = optional(bool, true)
    visibility_timeout_seconds       = optional(number, 30)
    message_retention_seconds        = optional(number, 345600)
    dlq_message_retention_seconds    = optional(number, 1209600)
    receive_wait_time_seconds        = optional(number, 20)
    max_receive_count                = optional(number, 5)
    inbox_retention_seconds          = optional(number)
    resolve_queue_by_name            = optional(bool, false)
    oldest_message_age_alarm_seconds = optional(number, 900)
    maximum_message_size             = optional(number)
  }))

  validation {
    condition     = length(var.subscribers) > 0
    error_message = "subscribers must name at least one worker: a topic without subscriptions drops every message."
  }

  validation {
    condition     = alltrue([for k in keys(var.subscribers) : can(regex("^[A-Za-z0-9_-]{1,67}$", k))])
    error_message = "Each subscriber's name must be 1 to 67 characters of A-Z, a-z, 0-9, - and _ (it names the queue, its DLQ and its subscription DLQ, \"<name>-sns-dlq\", with \".fifo\" on FIFO topics)."
  }

  validation {
    condition     = alltrue([for s in values(var.subscribers) : contains(["MessageAttributes", "MessageBody"], s.filter_policy_scope)])
    error_message = "filter_policy_scope must be MessageAttributes or MessageBody."
  }

  validation {
    condition     = alltrue([for s in values(var.subscribers) : s.filter_policy == null || can(jsondecode(s.filter_policy))])
    error_message = "filter_policy must be a JSON object (jsonencode it)."
  }

  validation {
    condition     = alltrue([for s in values(var.subscribers) : s.maximum_message_size == null || try(s.maximum_message_size >= 1024 && s.maximum_message_size <= 1048576 && floor(s.maximum_message_size) == s.maximum_message_size, false)])
    error_message = "maximum_message_size must be a whole number of bytes from 1024 to 1048576 (1 MiB, the SQS maximum)."
  }

  # The queue must take whatever the topic delivers to it. 262144: the topic's limit (SNS's
  # default; local.topic_maximum_message_size in main.tf). 4096: room for the SNS envelope's
  # fields (type, ids, topic ARN, subject, timestamp, signature, certificate and unsubscribe
  # URLs) and the attributes as JSON. A floor, not a guarantee: the body's JSON escaping adds
  # one byte per quote or backslash.
  validation {
    condition     = alltrue([for s in values(var.subscribers) : s.maximum_message_size == null || try(s.maximum_message_size >= (s.raw_message_delivery ? 262144 : 262144 + 4096), false)])
    error_message = "maximum_message_size is smaller than what the topic delivers: the topic accepts 262144 bytes, so a queue with raw delivery needs at least 262144, and one with the SNS envelope (raw_message_delivery = false) at least 262144 + 4096 = 266240 for the envelope's fields (the body's JSON escaping adds more: leave it at its default, 1048576). SNS does not retry a message its queue refuses: it goes to the subscription DLQ, or is lost without one."
  }
}

variable "subscription_dlq_message_retention_seconds" {
  description = "How long a subscription DLQ keeps a message SNS could not deliver, in seconds (60 to 1209600). Default: 1209600 (14 days, the SQS maximum)."
  type        = number
  default     = 1209600

  validation {
    condition     = var.subscription_dlq_message_retention_seconds >= 60 && var.subscription_dlq_message_retention_seconds <= 1209600
    error_message = "subscription_dlq_message_retention_seconds must be from 60 to 1209600 (14 days)."
  }
}

variable "create_alarms" {
  description = "Create the CloudWatch alarms: each worker queue's (see ../sqs-worker), and any message in a subscription DLQ. Default: true."
  type        = bool
  default     = true
}

variable "alarm_actions" {
  description = "ARNs to notify when an alarm fires. Default: none."
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
