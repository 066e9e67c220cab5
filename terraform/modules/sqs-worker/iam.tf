# The least a consumer needs, as a policy document to attach to an ECS task role or an EC2
# instance profile. Built with jsonencode rather than the aws_iam_policy_document data source, so
# the module makes no API call for it and tests can read it.

locals {
  consumer_sqs_actions = concat(
    [
      "sqs:ReceiveMessage",
      "sqs:DeleteMessage",
      "sqs:ChangeMessageVisibility",
      # The worker reads VisibilityTimeout, MessageRetentionPeriod and RedrivePolicy at start.
      "sqs:GetQueueAttributes",
    ],
    var.resolve_queue_by_name ? ["sqs:GetQueueUrl"] : [],
  )

  # Receiving from a queue encrypted with a customer key needs kms:Decrypt on that key. SSE-SQS
  # needs nothing.
  consumer_kms_actions = var.kms_key_arn == null ? [] : ["kms:Decrypt"]

  # At start the worker follows the queue's redrive policy to the DLQ (GetQueueUrl, then
  # GetQueueAttributes) and checks the inbox retention against the DLQ's retention too.
  consumer_dlq_actions = ["sqs:GetQueueUrl", "sqs:GetQueueAttributes"]

  consumer_statements = concat(
    [
      {
        Sid      = "ConsumeQueue"
        Effect   = "Allow"
        Action   = local.consumer_sqs_actions
        Resource = aws_sqs_queue.this.arn
      },
      {
        Sid      = "ReadDeadLetterQueueRetention"
        Effect   = "Allow"
        Action   = local.consumer_dlq_actions
        Resource = aws_sqs_queue.dlq.arn
      },
    ],
    var.kms_key_arn == null ? [] : [
      {
        Sid      = "DecryptQueueMessages"
        Effect   = "Allow"
        Action   = local.consumer_kms_actions
        Resource = var.kms_key_arn
      },
    ],
  )
}
