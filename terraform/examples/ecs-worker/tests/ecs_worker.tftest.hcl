# Plan-level test of the example: the module's outputs reach the task definition and the task role.

mock_provider "aws" {
  # The provider validates ARNs it is given, so the mocked ones must look like ARNs.
  mock_resource "aws_iam_role" {
    defaults = {
      arn = "arn:aws:iam::123456789012:role/mock"
    }
  }

  mock_resource "aws_iam_policy" {
    defaults = {
      arn = "arn:aws:iam::123456789012:policy/mock"
    }
  }

  mock_resource "aws_ecs_task_definition" {
    defaults = {
      arn = "arn:aws:ecs:us-east-1:123456789012:task-definition/mock:1"
    }
  }
}

override_resource {
  target = module.queue.aws_sqs_queue.this
  values = {
    arn = "arn:aws:sqs:us-east-1:123456789012:warehouse"
    url = "https://sqs.us-east-1.amazonaws.com/123456789012/warehouse"
  }
}

override_resource {
  target = module.queue.aws_sqs_queue.dlq
  values = {
    arn = "arn:aws:sqs:us-east-1:123456789012:warehouse-dlq"
    url = "https://sqs.us-east-1.amazonaws.com/123456789012/warehouse-dlq"
  }
}

variables {
  image                   = "123456789012.dkr.ecr.us-east-1.amazonaws.com/warehouse:1"
  database_url_secret_arn = "arn:aws:secretsmanager:us-east-1:123456789012:secret:warehouse-db-AbCdEf"
  cluster_arn             = "arn:aws:ecs:us-east-1:123456789012:cluster/workers"
  subnet_ids              = ["subnet-0123456789abcdef0"]
  security_group_ids      = ["sg-0123456789abcdef0"]
}

run "task_definition_takes_the_module_outputs" {
  command = plan

  assert {
    condition     = jsondecode(aws_ecs_task_definition.worker.container_definitions)[0].stopTimeout == 120
    error_message = "The container must have stopTimeout 120 for a graceful stop."
  }

  assert {
    condition = contains(
      jsondecode(aws_ecs_task_definition.worker.container_definitions)[0].environment,
      { name = "QUEUE_URL", value = "https://sqs.us-east-1.amazonaws.com/123456789012/warehouse" },
    )
    error_message = "QUEUE_URL must come from the module's queue_url."
  }

  assert {
    condition = jsondecode(aws_ecs_task_definition.worker.container_definitions)[0].secrets == [
      { name = "DATABASE_URL", valueFrom = "arn:aws:secretsmanager:us-east-1:123456789012:secret:warehouse-db-AbCdEf" },
    ]
    error_message = "DATABASE_URL must come from the secret, not plain environment."
  }

  assert {
    condition     = jsondecode(aws_ecs_task_definition.worker.container_definitions)[0].healthCheck.command == ["CMD", "/worker", "healthcheck"]
    error_message = "The container health check must run the worker's own healthcheck subcommand (liveness), not curl and not readiness."
  }

  assert {
    condition = contains(
      jsondecode(aws_ecs_task_definition.worker.container_definitions)[0].environment,
      { name = "HEALTH_ADDR", value = "127.0.0.1:8081" },
    )
    error_message = "HEALTH_ADDR must be set so that the worker serves /livez for the health check."
  }

  assert {
    condition     = aws_iam_policy.consume.policy == module.queue.consumer_policy_json
    error_message = "The task role's policy must be the module's consumer policy."
  }

  assert {
    condition     = jsondecode(aws_iam_role.task.assume_role_policy).Statement[0].Principal.Service == "ecs-tasks.amazonaws.com"
    error_message = "The task role must be assumable by ECS tasks."
  }
}

run "stop_timeout_over_the_fargate_limit_fails" {
  command = plan

  variables {
    stop_timeout_seconds = 121
  }

  expect_failures = [var.stop_timeout_seconds]
}
