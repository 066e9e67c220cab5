# The queue a worker consumes, its dead-letter queue, the alarms that say it is in trouble, and
# the IAM policy a consumer needs. See README.md.

locals {
  suffix   = var.fifo_queue ? ".fifo" : ""
  name     = "${var.name}${local.suffix}"
  dlq_name = "${coalesce(var.dlq_name, "${var.name}-dlq")}${local.suffix}"

  # SSE-SQS unless a customer key is given; SQS rejects both at once.
  sse_sqs = var.kms_key_arn == null
}

resource "aws_sqs_queue" "dlq" {
  name       = local.dlq_name
  fifo_queue = var.fifo_queue

  message_retention_seconds = var.dlq_message_retention_seconds
  # The queue's limit: a message the queue accepted must fit in its DLQ (and a redrive moves it
  # back).
  max_message_size = var.maximum_message_size

  sqs_managed_sse_enabled           = local.sse_sqs ? true : null
  kms_master_key_id                 = var.kms_key_arn
  kms_data_key_reuse_period_seconds = local.sse_sqs ? null : var.kms_data_key_reuse_period_seconds

  tags = var.tags
}

resource "aws_sqs_queue" "this" {
  name       = local.name
  fifo_queue = var.fifo_queue

  visibility_timeout_seconds = var.visibility_timeout_seconds
  message_retention_seconds  = var.message_retention_seconds
  receive_wait_time_seconds  = var.receive_wait_time_seconds
  max_message_size           = var.maximum_message_size

  redrive_policy = jsonencode({
    deadLetterTargetArn = aws_sqs_queue.dlq.arn
    maxReceiveCount     = var.max_receive_count
  })

  sqs_managed_sse_enabled           = local.sse_sqs ? true : null
  kms_master_key_id                 = var.kms_key_arn
  kms_data_key_reuse_period_seconds = local.sse_sqs ? null : var.kms_data_key_reuse_period_seconds

  tags = var.tags

  lifecycle {
    # Also enforced by the variable's validation; kept here so the rule holds whatever the
    # inputs' origin. Standard queues only: a FIFO message's age restarts in the DLQ.
    precondition {
      condition     = var.fifo_queue || var.dlq_message_retention_seconds > var.message_retention_seconds
      error_message = "The DLQ's retention must be longer than the queue's: on a standard queue a message's age in the DLQ counts from its original send."
    }
  }
}

# Only this queue may dead-letter into the DLQ, and a redrive (StartMessageMoveTask) can move
# messages back to it. A separate resource: the DLQ cannot name the queue's ARN in its own
# arguments without a cycle.
resource "aws_sqs_queue_redrive_allow_policy" "dlq" {
  queue_url = aws_sqs_queue.dlq.url

  redrive_allow_policy = jsonencode({
    redrivePermission = "byQueue"
    sourceQueueArns   = [aws_sqs_queue.this.arn]
  })
}
