# Plan-level tests of the payload-bucket module. They run offline: the AWS provider is mocked, and
# the bucket's ARN is overridden so that assertions can compare the policies.
#
#   scripts/tf-test.sh   (or, with the tools set up: cd terraform/modules/payload-bucket && tofu test)

mock_provider "aws" {}

override_resource {
  target = aws_s3_bucket.this
  values = {
    id  = "orders-payloads"
    arn = "arn:aws:s3:::orders-payloads"
  }
}

# The README's worked example: a standard queue keeping messages 4 days, its DLQ 14 days (the
# sqs-worker module's defaults), so a horizon of 14 days.
variables {
  bucket_name                = "orders-payloads"
  redelivery_horizon_seconds = 1209600
  queue_retention_seconds    = 345600
}

run "defaults" {
  command = plan

  assert {
    condition     = aws_s3_bucket.this.bucket == "orders-payloads" && output.bucket_name == "orders-payloads" && output.bucket_arn == "arn:aws:s3:::orders-payloads"
    error_message = "The bucket must be named bucket_name, and the outputs must carry its name and ARN."
  }

  assert {
    condition     = aws_s3_bucket.this.force_destroy == false
    error_message = "force_destroy must be off by default: destroy must not delete payloads."
  }

  assert {
    condition = (
      one(aws_s3_bucket_server_side_encryption_configuration.this.rule).apply_server_side_encryption_by_default[0].sse_algorithm == "AES256" &&
      one(aws_s3_bucket_server_side_encryption_configuration.this.rule).apply_server_side_encryption_by_default[0].kms_master_key_id == null &&
      one(aws_s3_bucket_server_side_encryption_configuration.this.rule).bucket_key_enabled == false
    )
    error_message = "SSE-S3 (AES256) by default, without a key."
  }

  assert {
    condition = (
      aws_s3_bucket_public_access_block.this.block_public_acls == true &&
      aws_s3_bucket_public_access_block.this.block_public_policy == true &&
      aws_s3_bucket_public_access_block.this.ignore_public_acls == true &&
      aws_s3_bucket_public_access_block.this.restrict_public_buckets == true
    )
    error_message = "All four public access block settings must be on."
  }

  assert {
    condition     = aws_s3_bucket_ownership_controls.this.rule[0].object_ownership == "BucketOwnerEnforced"
    error_message = "ACLs must be off (BucketOwnerEnforced)."
  }

  assert {
    condition = jsondecode(aws_s3_bucket_policy.this.policy) == {
      Version = "2012-10-17"
      Statement = [{
        Sid       = "DenyInsecureTransport"
        Effect    = "Deny"
        Principal = "*"
        Action    = "s3:*"
        Resource  = ["arn:aws:s3:::orders-payloads", "arn:aws:s3:::orders-payloads/*"]
        Condition = { Bool = { "aws:SecureTransport" = "false" } }
      }]
    }
    error_message = "The bucket policy must deny every request without TLS, on the bucket and its objects, and allow nothing."
  }

  assert {
    condition     = length(aws_s3_bucket_versioning.this) == 0
    error_message = "Versioning must be off by default: an expiration on a versioned bucket only adds delete markers."
  }

  assert {
    condition     = length(aws_iam_role_policy.reader) == 0 && length(aws_iam_role_policy.writer) == 0
    error_message = "No role policy unless roles are named."
  }
}

run "lifecycle_rule_expires_the_prefix" {
  command = plan

  assert {
    condition     = length(aws_s3_bucket_lifecycle_configuration.this.rule) == 2
    error_message = "Two rules: the expiration, and the removal of expired delete markers."
  }

  assert {
    condition = (
      aws_s3_bucket_lifecycle_configuration.this.rule[0].id == "expire-payloads" &&
      aws_s3_bucket_lifecycle_configuration.this.rule[0].status == "Enabled" &&
      aws_s3_bucket_lifecycle_configuration.this.rule[0].filter[0].prefix == "sqsinbox/"
    )
    error_message = "The expiration rule must be enabled and apply to the writers' default prefix, sqsinbox/."
  }

  assert {
    condition     = aws_s3_bucket_lifecycle_configuration.this.rule[0].expiration[0].days == 19
    error_message = "Default expiration: the minimum, 14 + 4 + 1 = 19 days (horizon, one redriven copy's queue retention, margin)."
  }

  assert {
    condition     = aws_s3_bucket_lifecycle_configuration.this.rule[0].abort_incomplete_multipart_upload[0].days_after_initiation == 1
    error_message = "Incomplete multipart uploads must be aborted after 1 day."
  }

  assert {
    condition     = aws_s3_bucket_lifecycle_configuration.this.rule[0].noncurrent_version_expiration[0].noncurrent_days == 1
    error_message = "Noncurrent versions must expire after 1 day by default."
  }

  assert {
    condition = (
      aws_s3_bucket_lifecycle_configuration.this.rule[1].status == "Enabled" &&
      aws_s3_bucket_lifecycle_configuration.this.rule[1].filter[0].prefix == "sqsinbox/" &&
      aws_s3_bucket_lifecycle_configuration.this.rule[1].expiration[0].expired_object_delete_marker == true
    )
    error_message = "The second rule must remove expired delete markers under the prefix."
  }

  assert {
    condition     = output.minimum_expiration_days == 19 && output.expiration_days == 19 && output.required_lifetime_seconds == 1209600 + 345600 + 86400
    error_message = "The outputs must carry the arithmetic: 1209600 + 345600 + 86400 s, 19 days."
  }
}

run "reader_and_writer_policies_name_only_the_prefix" {
  command = plan

  assert {
    condition = jsondecode(output.reader_policy_json) == {
      Version = "2012-10-17"
      Statement = [{
        Sid      = "ReadPayloads"
        Effect   = "Allow"
        Action   = ["s3:GetObject"]
        Resource = "arn:aws:s3:::orders-payloads/sqsinbox/*"
      }]
    }
    error_message = "The reader may only get the objects under the prefix."
  }

  assert {
    condition = jsondecode(output.writer_policy_json) == {
      Version = "2012-10-17"
      Statement = [{
        Sid      = "WritePayloads"
        Effect   = "Allow"
        Action   = ["s3:PutObject"]
        Resource = "arn:aws:s3:::orders-payloads/sqsinbox/*"
      }]
    }
    error_message = "The writer may only put objects under the prefix."
  }

  assert {
    condition = alltrue([for p in [output.reader_policy_json, output.writer_policy_json] :
    !strcontains(p, "Delete") && !strcontains(p, "List") && !strcontains(p, "kms:") && !strcontains(p, "\"*\"")])
    error_message = "No delete, no list, no KMS action and no bare wildcard by default."
  }

  assert {
    condition     = output.objects_arn == "arn:aws:s3:::orders-payloads/sqsinbox/*" && output.key_prefix == "sqsinbox/"
    error_message = "objects_arn must be the bucket's ARN, /, the prefix and *."
  }
}

run "key_prefix_reaches_the_rule_and_the_policies" {
  command = plan

  variables {
    key_prefix = "payloads/orders/"
  }

  assert {
    condition = (
      aws_s3_bucket_lifecycle_configuration.this.rule[0].filter[0].prefix == "payloads/orders/" &&
      aws_s3_bucket_lifecycle_configuration.this.rule[1].filter[0].prefix == "payloads/orders/"
    )
    error_message = "key_prefix must reach both lifecycle rules."
  }

  assert {
    condition = (
      jsondecode(output.reader_policy_json).Statement[0].Resource == "arn:aws:s3:::orders-payloads/payloads/orders/*" &&
      jsondecode(output.writer_policy_json).Statement[0].Resource == "arn:aws:s3:::orders-payloads/payloads/orders/*"
    )
    error_message = "key_prefix must reach both policies."
  }
}

# The horizon arithmetic: expiration_days x 86400 >= redelivery_horizon_seconds
# + (redrive_copies ? queue_retention_seconds : 0) + margin_days x 86400.

run "expiration_of_exactly_the_minimum_is_accepted" {
  command = plan

  variables {
    expiration_days = 19
  }

  assert {
    condition     = aws_s3_bucket_lifecycle_configuration.this.rule[0].expiration[0].days == 19
    error_message = "expiration_days must reach the rule."
  }
}

run "longer_expiration_is_accepted" {
  command = plan

  variables {
    expiration_days = 30
  }

  assert {
    condition     = aws_s3_bucket_lifecycle_configuration.this.rule[0].expiration[0].days == 30 && output.minimum_expiration_days == 19
    error_message = "A longer expiration must reach the rule; the minimum stays 19."
  }
}

run "expiration_a_day_short_fails" {
  command = plan

  variables {
    expiration_days = 18
  }

  expect_failures = [aws_s3_bucket_lifecycle_configuration.this]
}

run "expiration_of_the_horizon_alone_fails_with_copies" {
  command = plan

  variables {
    expiration_days = 15 # 14 + 1: enough without copies, not with
  }

  expect_failures = [aws_s3_bucket_lifecycle_configuration.this]
}

run "without_copies_the_queue_retention_is_not_added" {
  command = plan

  variables {
    redrive_copies          = false
    queue_retention_seconds = null
    expiration_days         = 15
  }

  assert {
    condition     = output.minimum_expiration_days == 15 && output.required_lifetime_seconds == 1209600 + 86400
    error_message = "Without copies the minimum is the horizon plus the margin: 14 + 1 = 15 days."
  }
}

run "without_copies_the_horizon_alone_fails" {
  command = plan

  variables {
    redrive_copies  = false
    expiration_days = 14
  }

  expect_failures = [aws_s3_bucket_lifecycle_configuration.this]
}

run "fifo_horizon_is_the_sum" {
  command = plan

  variables {
    redelivery_horizon_seconds = 345600 + 1209600 # FIFO: queue + DLQ, 18 days
  }

  assert {
    condition     = output.minimum_expiration_days == 23 && aws_s3_bucket_lifecycle_configuration.this.rule[0].expiration[0].days == 23
    error_message = "A FIFO queue's horizon of 18 days, a copy's 4 and the margin's 1 make 23 days."
  }
}

run "a_partial_day_rounds_up" {
  command = plan

  variables {
    redelivery_horizon_seconds = 1209601
  }

  assert {
    condition     = output.minimum_expiration_days == 20
    error_message = "One second past 19 days must need 20."
  }
}

run "margin_days_reach_the_arithmetic" {
  command = plan

  variables {
    margin_days = 0
  }

  assert {
    condition     = output.minimum_expiration_days == 18
    error_message = "Without margin: 14 + 4 = 18 days."
  }
}

run "copies_need_the_queue_retention" {
  command = plan

  variables {
    queue_retention_seconds = null
  }

  expect_failures = [var.queue_retention_seconds]
}

run "queue_retention_longer_than_the_horizon_fails" {
  command = plan

  variables {
    redelivery_horizon_seconds = 345600
    queue_retention_seconds    = 1209600
  }

  expect_failures = [var.queue_retention_seconds]
}

run "expiration_of_zero_days_fails" {
  command = plan

  variables {
    expiration_days = 0
  }

  expect_failures = [var.expiration_days]
}

run "negative_margin_fails" {
  command = plan

  variables {
    margin_days = -1
  }

  expect_failures = [var.margin_days]
}

# Encryption with a customer key.

run "customer_key" {
  command = plan

  variables {
    kms_key_arn = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
  }

  assert {
    condition = (
      one(aws_s3_bucket_server_side_encryption_configuration.this.rule).apply_server_side_encryption_by_default[0].sse_algorithm == "aws:kms" &&
      one(aws_s3_bucket_server_side_encryption_configuration.this.rule).apply_server_side_encryption_by_default[0].kms_master_key_id == var.kms_key_arn &&
      one(aws_s3_bucket_server_side_encryption_configuration.this.rule).bucket_key_enabled == true
    )
    error_message = "A customer key must switch to aws:kms with that key and a bucket key."
  }

  assert {
    condition = jsondecode(output.reader_policy_json).Statement == [
      {
        Sid      = "ReadPayloads"
        Effect   = "Allow"
        Action   = ["s3:GetObject"]
        Resource = "arn:aws:s3:::orders-payloads/sqsinbox/*"
      },
      {
        Sid      = "DecryptPayloads"
        Effect   = "Allow"
        Action   = ["kms:Decrypt"]
        Resource = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
      },
    ]
    error_message = "With a customer key the reader needs exactly kms:Decrypt on it, besides the objects."
  }

  assert {
    condition = jsondecode(output.writer_policy_json).Statement == [
      {
        Sid      = "WritePayloads"
        Effect   = "Allow"
        Action   = ["s3:PutObject"]
        Resource = "arn:aws:s3:::orders-payloads/sqsinbox/*"
      },
      {
        Sid      = "EncryptPayloads"
        Effect   = "Allow"
        Action   = ["kms:GenerateDataKey"]
        Resource = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
      },
    ]
    error_message = "With a customer key the writer needs exactly kms:GenerateDataKey on it, besides the objects."
  }
}

run "kms_alias_fails" {
  command = plan

  variables {
    kms_key_arn = "arn:aws:kms:us-east-1:123456789012:alias/payloads"
  }

  expect_failures = [var.kms_key_arn]
}

run "versioning_on" {
  command = plan

  variables {
    versioning_enabled                 = true
    noncurrent_version_expiration_days = 2
  }

  assert {
    condition     = length(aws_s3_bucket_versioning.this) == 1 && aws_s3_bucket_versioning.this[0].versioning_configuration[0].status == "Enabled"
    error_message = "versioning_enabled must turn versioning on."
  }

  assert {
    condition     = aws_s3_bucket_lifecycle_configuration.this.rule[0].noncurrent_version_expiration[0].noncurrent_days == 2
    error_message = "noncurrent_version_expiration_days must reach the rule."
  }
}

run "roles_get_the_policies_inline" {
  command = plan

  variables {
    reader_role_names = ["warehouse-worker-task", "loyalty-worker-task"]
    writer_role_names = ["orders-relay-task"]
  }

  assert {
    condition = (
      [for p in aws_iam_role_policy.reader : p.role] == ["warehouse-worker-task", "loyalty-worker-task"] &&
      alltrue([for p in aws_iam_role_policy.reader : p.policy == output.reader_policy_json && p.name == "orders-payloads-payload-reader"])
    )
    error_message = "Each reader role must get the reader policy, named after the bucket."
  }

  assert {
    condition = (
      [for p in aws_iam_role_policy.writer : p.role] == ["orders-relay-task"] &&
      aws_iam_role_policy.writer[0].policy == output.writer_policy_json &&
      aws_iam_role_policy.writer[0].name == "orders-payloads-payload-writer"
    )
    error_message = "Each writer role must get the writer policy, named after the bucket."
  }
}

# Names.

run "bucket_name_prefix" {
  command = plan

  variables {
    bucket_name        = null
    bucket_name_prefix = "orders-payloads-"
  }

  assert {
    condition     = aws_s3_bucket.this.bucket_prefix == "orders-payloads-"
    error_message = "bucket_name_prefix must reach the bucket's bucket_prefix."
  }
}

run "both_names_fail" {
  command = plan

  variables {
    bucket_name_prefix = "orders-payloads-"
  }

  expect_failures = [var.bucket_name]
}

run "no_name_fails" {
  command = plan

  variables {
    bucket_name = null
  }

  expect_failures = [var.bucket_name]
}

run "dotted_bucket_name_fails" {
  command = plan

  variables {
    bucket_name = "orders.payloads"
  }

  expect_failures = [var.bucket_name]
}

run "uppercase_bucket_name_fails" {
  command = plan

  variables {
    bucket_name = "Orders-Payloads"
  }

  expect_failures = [var.bucket_name]
}

run "key_prefix_with_a_wildcard_fails" {
  command = plan

  variables {
    key_prefix = "payloads/*"
  }

  expect_failures = [var.key_prefix]
}

run "key_prefix_with_a_leading_slash_fails" {
  command = plan

  variables {
    key_prefix = "/sqsinbox/"
  }

  expect_failures = [var.key_prefix]
}

run "empty_key_prefix_fails" {
  command = plan

  variables {
    key_prefix = ""
  }

  expect_failures = [var.key_prefix]
}
