variable "bucket_name" {
  description = "Name of the bucket. Give it or bucket_name_prefix, not both. 3 to 63 characters of a-z, 0-9 and -, starting and ending with a letter or digit. No dots: the bucket is reached over TLS only, and a dotted name does not match S3's certificate in virtual-hosted-style requests."
  type        = string
  default     = null

  validation {
    condition     = var.bucket_name == null || can(regex("^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$", var.bucket_name))
    error_message = "bucket_name must be 3 to 63 characters of a-z, 0-9 and -, starting and ending with a letter or digit (no dots: TLS-only access)."
  }

  validation {
    condition     = (var.bucket_name == null) != (var.bucket_name_prefix == null)
    error_message = "Give exactly one of bucket_name and bucket_name_prefix."
  }
}

variable "bucket_name_prefix" {
  description = "Prefix of a bucket name that S3 completes with a unique suffix (the provider's bucket_prefix), for example \"orders-payloads-\". Give it or bucket_name, not both. At most 37 characters of a-z, 0-9 and -, starting with a letter or digit."
  type        = string
  default     = null

  validation {
    condition     = var.bucket_name_prefix == null || can(regex("^[a-z0-9][a-z0-9-]{0,36}$", var.bucket_name_prefix))
    error_message = "bucket_name_prefix must be 1 to 37 characters of a-z, 0-9 and -, starting with a letter or digit (S3 adds a 26-character suffix; no dots: TLS-only access)."
  }
}

variable "force_destroy" {
  description = "Let terraform destroy delete the bucket with the payloads still in it. Default: false (destroy fails while the bucket holds objects)."
  type        = bool
  default     = false
}

variable "key_prefix" {
  description = "The object key prefix the writers put payloads under: s3payload.WriterConfig.Prefix of the outbox relay and `sqsinbox send` (their default, \"sqsinbox/\"). The lifecycle rule expires objects under it, and the reader and writer policies name only it. Not starting with /, at most 256 characters, and without *, ? or $ (IAM would read them as wildcards or policy variables)."
  type        = string
  default     = "sqsinbox/"

  validation {
    condition     = length(var.key_prefix) >= 1 && length(var.key_prefix) <= 256 && !startswith(var.key_prefix, "/") && !can(regex("[*?$]", var.key_prefix))
    error_message = "key_prefix must be 1 to 256 characters, not starting with / and without *, ? or $ (the writers' s3payload.WriterConfig.Prefix; default \"sqsinbox/\")."
  }
}

variable "kms_key_arn" {
  description = "ARN of a customer-managed KMS key to encrypt the payloads with (SSE-KMS, with an S3 Bucket Key to cut KMS requests). Default: null, which uses SSE-S3 (AES256) and needs no KMS permission. With a key, reader_policy_json also allows kms:Decrypt and writer_policy_json kms:GenerateDataKey on it; the key's policy must let the account's IAM grant them."
  type        = string
  default     = null

  validation {
    condition     = var.kms_key_arn == null || can(regex("^arn:aws[a-z-]*:kms:[a-z0-9-]+:[0-9]{12}:key/[A-Za-z0-9-]+$", var.kms_key_arn))
    error_message = "kms_key_arn must be the ARN of a KMS key (arn:aws:kms:REGION:ACCOUNT:key/ID), not an alias: IAM grants on key ARNs."
  }
}

variable "versioning_enabled" {
  description = "Turn on versioning. Default: false, and better left so: a lifecycle expiration on a versioned bucket does not delete an object, it adds a delete marker and keeps the data as a noncurrent version. The payloads are written once and never updated, so versions buy nothing. If you turn it on, noncurrent versions expire noncurrent_version_expiration_days after they became noncurrent (that rule is always in the lifecycle configuration: on an unversioned bucket it has nothing to do, and it still cleans up if versioning is later suspended)."
  type        = bool
  default     = false
}

variable "noncurrent_version_expiration_days" {
  description = "Days after which a noncurrent version (what the expiration leaves behind on a versioned bucket, or an overwritten payload) is deleted for good. Default: 1."
  type        = number
  default     = 1

  validation {
    condition     = var.noncurrent_version_expiration_days >= 1 && floor(var.noncurrent_version_expiration_days) == var.noncurrent_version_expiration_days
    error_message = "noncurrent_version_expiration_days must be a whole number of days, at least 1."
  }
}

# The lifecycle arithmetic. A payload must outlive every delivery of every message that points
# to it: see main.tf and ../../README.md ("Large payloads (S3)").

variable "redelivery_horizon_seconds" {
  description = "The longest time after its send at which SQS can still deliver a message (or a DLQ still holds it for a redrive): the sqs-worker module's output redelivery_horizon_seconds (standard queue: the longer retention of the queue and its DLQ; FIFO: their sum). For several queues reading the same bucket (an SNS fan-out), the largest of their horizons."
  type        = number

  validation {
    condition     = var.redelivery_horizon_seconds > 0 && floor(var.redelivery_horizon_seconds) == var.redelivery_horizon_seconds
    error_message = "redelivery_horizon_seconds must be a whole number of seconds above 0 (the sqs-worker module's output redelivery_horizon_seconds)."
  }
}

variable "redrive_copies" {
  description = "Messages may be redriven from the DLQ as copies (`sqsinbox redrive --mode copy`, or --mode auto where the server has no move task): a copy is a new message, so its retention in the source queue starts again when it is sent, up to the end of the horizon. The required lifetime then adds queue_retention_seconds once: the rule covers one copy of a message. Default: true."
  type        = bool
  default     = true
}

variable "queue_retention_seconds" {
  description = "The retention (message_retention_seconds) of the queue copies are sent back to: the sqs-worker module's output message_retention_seconds. For several queues, the longest. Required when redrive_copies is true."
  type        = number
  default     = null

  validation {
    condition     = !var.redrive_copies || var.queue_retention_seconds != null
    error_message = "queue_retention_seconds is required when redrive_copies is true: a copy redriven from the DLQ is a new message, and can be delivered up to the queue's retention after the copy (pass the sqs-worker module's output message_retention_seconds, or set redrive_copies = false)."
  }

  validation {
    condition     = var.queue_retention_seconds == null || try(var.queue_retention_seconds >= 60 && var.queue_retention_seconds <= 1209600 && floor(var.queue_retention_seconds) == var.queue_retention_seconds, false)
    error_message = "queue_retention_seconds must be a whole number from 60 to 1209600 (14 days): an SQS retention."
  }

  validation {
    condition     = var.queue_retention_seconds == null || try(var.queue_retention_seconds <= var.redelivery_horizon_seconds, false)
    error_message = "queue_retention_seconds is longer than redelivery_horizon_seconds, which includes the queue's retention: are the two swapped?"
  }
}

variable "margin_days" {
  description = "Days added to the required lifetime: the time between a writer's put and its send, and room for clock and schedule. (S3 rounds an expiration up to the next midnight UTC and deletes some time after that, which only lengthens an object's life.) Default: 1."
  type        = number
  default     = 1

  validation {
    condition     = var.margin_days >= 0 && floor(var.margin_days) == var.margin_days
    error_message = "margin_days must be a whole number of days, 0 or more."
  }
}

variable "expiration_days" {
  description = "Days after its last write at which a payload object is deleted. Plan fails unless expiration_days x 86400 >= redelivery_horizon_seconds + (redrive_copies ? queue_retention_seconds : 0) + margin_days x 86400. Default: null, that minimum (output minimum_expiration_days), which follows the queues' retention when it changes."
  type        = number
  default     = null

  validation {
    condition     = var.expiration_days == null || try(var.expiration_days >= 1 && floor(var.expiration_days) == var.expiration_days, false)
    error_message = "expiration_days must be a whole number of days, at least 1 (or null: the minimum the horizon requires)."
  }
}

variable "reader_role_names" {
  description = "Names of IAM roles (the workers' ECS task roles, for example) to give reader_policy_json as an inline policy. Default: none; attach the output yourself."
  type        = list(string)
  default     = []
}

variable "writer_role_names" {
  description = "Names of IAM roles (the outbox relay's, or whoever runs `sqsinbox send`) to give writer_policy_json as an inline policy. Default: none; attach the output yourself."
  type        = list(string)
  default     = []
}

variable "tags" {
  description = "Tags for the bucket."
  type        = map(string)
  default     = {}
}
