# A bucket for message payloads too large for SQS or SNS, offloaded to S3 the way AWS's extended
# client libraries do it: the message body is a pointer to an object
# (["software.amazon.payloadoffloading.PayloadS3Pointer",{"s3BucketName":...,"s3Key":...}], with
# the Number attribute ExtendedPayloadSize). The outbox relay and `sqsinbox send` write the
# objects under key_prefix; the worker reads them. See ../../README.md ("Large payloads (S3)").
#
# No reader deletes an object: under an SNS fan-out every subscriber's queue gets a pointer to the
# same object, and another subscriber may not have read it yet, or a message may still be
# redelivered or redriven. A lifecycle rule deletes the objects instead, once no message can point
# to them any more: the arithmetic below, checked at plan time.

locals {
  day_seconds = 86400

  # How long after its write an object must still be readable:
  #
  #   redelivery_horizon_seconds   the last moment SQS can deliver the message, or a DLQ holds
  #                                it for a redrive (sqs-worker: standard max(queue, DLQ), FIFO
  #                                queue + DLQ);
  # + queue_retention_seconds      with redrive_copies: a copy redriven from the DLQ near the end
  #                                of the horizon is a new message, deliverable for the queue's
  #                                retention again (one copy; each further copy restarts it);
  # + margin_days x 86400          the time between the put and the send, and room to spare.
  #
  # coalesce: with redrive_copies and no queue_retention_seconds the variable's validation fails;
  # this keeps the arithmetic from failing a second time.
  copy_seconds              = var.redrive_copies ? coalesce(var.queue_retention_seconds, 0) : 0
  margin_seconds            = var.margin_days * local.day_seconds
  required_lifetime_seconds = var.redelivery_horizon_seconds + local.copy_seconds + local.margin_seconds
  minimum_expiration_days   = ceil(local.required_lifetime_seconds / local.day_seconds)
  expiration_days           = coalesce(var.expiration_days, local.minimum_expiration_days)

  sse_kms = var.kms_key_arn != null

  # What the policies grant: the objects under the prefix, never the whole bucket.
  objects_arn = "${aws_s3_bucket.this.arn}/${var.key_prefix}*"
}

resource "aws_s3_bucket" "this" {
  bucket        = var.bucket_name
  bucket_prefix = var.bucket_name_prefix
  force_destroy = var.force_destroy

  tags = var.tags
}

# Encryption at rest: SSE-S3 by default; with a customer key SSE-KMS, with an S3 Bucket Key so
# that S3 asks KMS for a data key per bucket and period rather than per object.
resource "aws_s3_bucket_server_side_encryption_configuration" "this" {
  bucket = aws_s3_bucket.this.id

  rule {
    apply_server_side_encryption_by_default {
      sse_algorithm     = local.sse_kms ? "aws:kms" : "AES256"
      kms_master_key_id = var.kms_key_arn
    }
    bucket_key_enabled = local.sse_kms
  }
}

resource "aws_s3_bucket_public_access_block" "this" {
  bucket = aws_s3_bucket.this.id

  block_public_acls       = true
  block_public_policy     = true
  ignore_public_acls      = true
  restrict_public_buckets = true
}

# ACLs off: the bucket's account owns every object, whoever wrote it, and only policies grant.
resource "aws_s3_bucket_ownership_controls" "this" {
  bucket = aws_s3_bucket.this.id

  rule {
    object_ownership = "BucketOwnerEnforced"
  }
}

# Refuse every request that does not come over TLS.
resource "aws_s3_bucket_policy" "this" {
  bucket = aws_s3_bucket.this.id
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Sid       = "DenyInsecureTransport"
      Effect    = "Deny"
      Principal = "*"
      Action    = "s3:*"
      Resource  = [aws_s3_bucket.this.arn, "${aws_s3_bucket.this.arn}/*"]
      Condition = { Bool = { "aws:SecureTransport" = "false" } }
    }]
  })

  # S3 refuses a bucket policy and a public access block changed at the same time.
  depends_on = [aws_s3_bucket_public_access_block.this]
}

# Versioning stays off unless asked for (see var.versioning_enabled): an expiration on a
# versioned bucket only adds a delete marker and keeps the data. A new bucket is unversioned, so
# off means no resource at all; removing this resource later suspends versioning (a bucket never
# returns to unversioned), and the noncurrent rule below still clears the old versions.
resource "aws_s3_bucket_versioning" "this" {
  count = var.versioning_enabled ? 1 : 0

  bucket = aws_s3_bucket.this.id

  versioning_configuration {
    status = "Enabled"
  }
}

resource "aws_s3_bucket_lifecycle_configuration" "this" {
  bucket = aws_s3_bucket.this.id

  rule {
    id     = "expire-payloads"
    status = "Enabled"

    filter {
      prefix = var.key_prefix
    }

    # Counted from the object's last write; S3 rounds up to the next midnight UTC.
    expiration {
      days = local.expiration_days
    }

    # On a versioned (or once versioned) bucket, what the expiration turned into a noncurrent
    # version. Nothing to do on an unversioned bucket.
    noncurrent_version_expiration {
      noncurrent_days = var.noncurrent_version_expiration_days
    }

    abort_incomplete_multipart_upload {
      days_after_initiation = 1
    }
  }

  # On a versioned bucket, the delete markers left once their noncurrent versions are gone. S3
  # takes expired_object_delete_marker only in a rule without expiration days, hence a rule of
  # its own.
  rule {
    id     = "remove-expired-delete-markers"
    status = "Enabled"

    filter {
      prefix = var.key_prefix
    }

    expiration {
      expired_object_delete_marker = true
    }
  }

  # Versioning first, as the provider's documentation advises for a lifecycle configuration with
  # noncurrent-version rules.
  depends_on = [aws_s3_bucket_versioning.this]

  lifecycle {
    # The horizon arithmetic: an object deleted while a message still points to it makes that
    # message fail on every delivery and end in the DLQ unprocessed.
    precondition {
      condition     = local.expiration_days * local.day_seconds >= local.required_lifetime_seconds
      error_message = "expiration_days = ${local.expiration_days} (${local.expiration_days * local.day_seconds} s) would delete payloads that messages can still point to. Required: expiration_days x 86400 >= redelivery_horizon_seconds + (redrive_copies ? queue_retention_seconds : 0) + margin_days x 86400 = ${var.redelivery_horizon_seconds} + ${local.copy_seconds} + ${var.margin_days} x 86400 = ${local.required_lifetime_seconds} s, so expiration_days >= ${local.minimum_expiration_days}. Raise expiration_days (or leave it null for that minimum), or shorten the queues' retention."
    }
  }
}
