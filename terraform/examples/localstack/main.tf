# The sqs-worker module applied against a local SQS endpoint: LocalStack from localstack/ (SQS and
# CloudWatch), or any server that implements the calls the AWS provider makes.
#
#   docker compose -f localstack/docker-compose.yml up -d --wait
#   cd terraform/examples/localstack && tofu init && tofu apply
#
# The queues are named tf-* so they never collide with the ones localstack/init creates.

terraform {
  required_version = ">= 1.9"

  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = ">= 5.0"
    }
  }
}

variable "endpoint" {
  description = "Endpoint of the local AWS (LocalStack's edge port)."
  type        = string
  default     = "http://127.0.0.1:4566"
}

variable "name" {
  description = "Name of the queue."
  type        = string
  default     = "tf-warehouse"
}

variable "create_alarms" {
  description = "Create the CloudWatch alarms (LocalStack serves CloudWatch; set false for an SQS-only server)."
  type        = bool
  default     = true
}

provider "aws" {
  region     = "us-east-1"
  access_key = "test"
  secret_key = "test"

  # Nothing here is real AWS: do not look for credentials, an account id or instance metadata.
  skip_credentials_validation = true
  skip_requesting_account_id  = true
  skip_metadata_api_check     = true
  skip_region_validation      = true

  endpoints {
    sqs        = var.endpoint
    cloudwatch = var.endpoint
    sts        = var.endpoint
  }
}

module "queue" {
  source = "../../modules/sqs-worker"

  name                    = var.name
  create_alarms           = var.create_alarms
  inbox_retention_seconds = 1209600
}

output "queue_url" {
  description = "QUEUE_URL for a worker run against LocalStack (with AWS_ENDPOINT_URL_SQS=http://127.0.0.1:4566)."
  value       = module.queue.queue_url
}

output "dlq_url" {
  description = "The DLQ's URL."
  value       = module.queue.dlq_url
}

output "consumer_policy_json" {
  description = "The consumer policy (LocalStack does not enforce IAM)."
  value       = module.queue.consumer_policy_json
}
