# The least a reader (the worker) and a writer (the outbox relay, `sqsinbox send`) need, as policy
# documents. Built with jsonencode rather than the aws_iam_policy_document data source, like
# ../sqs-worker's: the plan-level tests mock the provider, and a mocked data source returns a
# made-up string for its json, which the tests could not read and aws_iam_role_policy would refuse
# as a policy.
#
# Only the objects under key_prefix. No s3:DeleteObject for anyone: the lifecycle rule deletes
# the payloads, after the last delivery that can need them. No s3:ListBucket: neither side lists.
# (Without it S3 answers a GetObject of a missing object with 403 AccessDenied rather than 404
# NoSuchKey, since it does not tell a caller who may not list whether a key exists; so a payload
# that expired too early shows as access denied. Granting s3:ListBucket to tell the two apart
# would let the worker list every key in the bucket.)

locals {
  reader_statements = concat(
    [
      {
        Sid      = "ReadPayloads"
        Effect   = "Allow"
        Action   = ["s3:GetObject"]
        Resource = local.objects_arn
      },
    ],
    # SSE-KMS: S3 decrypts with the caller's permission on the key. SSE-S3 needs nothing.
    local.sse_kms ? [
      {
        Sid      = "DecryptPayloads"
        Effect   = "Allow"
        Action   = ["kms:Decrypt"]
        Resource = var.kms_key_arn
      },
    ] : [],
  )

  writer_statements = concat(
    [
      {
        Sid      = "WritePayloads"
        Effect   = "Allow"
        Action   = ["s3:PutObject"]
        Resource = local.objects_arn
      },
    ],
    # SSE-KMS: a PutObject makes S3 generate a data key with the caller's permission. (kms:Encrypt
    # is never called; kms:Decrypt would be needed only for multipart uploads, and the writers
    # put each payload in one PutObject.)
    local.sse_kms ? [
      {
        Sid      = "EncryptPayloads"
        Effect   = "Allow"
        Action   = ["kms:GenerateDataKey"]
        Resource = var.kms_key_arn
      },
    ] : [],
  )

  reader_policy_json = jsonencode({
    Version   = "2012-10-17"
    Statement = local.reader_statements
  })

  writer_policy_json = jsonencode({
    Version   = "2012-10-17"
    Statement = local.writer_statements
  })
}

# The policies as inline policies of the roles named, when asked. count, not for_each: a role's
# name may be unknown until apply.
resource "aws_iam_role_policy" "reader" {
  count = length(var.reader_role_names)

  # Unique per bucket: a role may read from several payload buckets.
  name   = "${aws_s3_bucket.this.id}-payload-reader"
  role   = var.reader_role_names[count.index]
  policy = local.reader_policy_json
}

resource "aws_iam_role_policy" "writer" {
  count = length(var.writer_role_names)

  name   = "${aws_s3_bucket.this.id}-payload-writer"
  role   = var.writer_role_names[count.index]
  policy = local.writer_policy_json
}
