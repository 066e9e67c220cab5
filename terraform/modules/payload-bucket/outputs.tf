output "bucket_name" {
  description = "Name of the bucket: the writers' s3payload.WriterConfig.Bucket, and one of the buckets the worker may read (SQSINBOX_PAYLOAD_BUCKETS, s3payload.ReaderConfig.Buckets)."
  value       = aws_s3_bucket.this.id
}

output "bucket_arn" {
  description = "ARN of the bucket."
  value       = aws_s3_bucket.this.arn
}

output "key_prefix" {
  description = "The key prefix the payloads go under, that the lifecycle rule expires and the policies name: the writers' s3payload.WriterConfig.Prefix."
  value       = var.key_prefix
}

output "objects_arn" {
  description = "The ARN pattern of the payload objects (the bucket's ARN, /, key_prefix, *), the resource of both policies."
  value       = local.objects_arn
}

output "expiration_days" {
  description = "Days after its last write at which a payload object is deleted (the lifecycle rule's)."
  value       = local.expiration_days
}

output "minimum_expiration_days" {
  description = "The fewest days the horizon arithmetic accepts: ceil((redelivery_horizon_seconds + (redrive_copies ? queue_retention_seconds : 0) + margin_days x 86400) / 86400)."
  value       = local.minimum_expiration_days
}

output "required_lifetime_seconds" {
  description = "How long after its write a payload must stay readable, in seconds: redelivery_horizon_seconds + (redrive_copies ? queue_retention_seconds : 0) + margin_days x 86400."
  value       = local.required_lifetime_seconds
}

output "reader_policy_json" {
  description = "IAM policy (JSON) for the worker: s3:GetObject on the objects under key_prefix, and kms:Decrypt on kms_key_arn if set. Attach it to the worker's task or instance role (or name the role in reader_role_names)."
  value       = local.reader_policy_json
}

output "writer_policy_json" {
  description = "IAM policy (JSON) for the writers (the outbox relay, `sqsinbox send`): s3:PutObject on the objects under key_prefix, and kms:GenerateDataKey on kms_key_arn if set. No delete, no list."
  value       = local.writer_policy_json
}
