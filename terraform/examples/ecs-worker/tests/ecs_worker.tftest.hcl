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

  # The payload bucket (payload_bucket = true), named as S3 completes its prefix. A default rather
  # than an override_resource: the bucket is in a module with count, and OpenTofu's overrides
  # name a resource with all its instances (module.payload_bucket.aws_s3_bucket.this, like the
  # sns-fanout tests), while Terraform applies only one that names the instance
  # (module.payload_bucket[0].aws_s3_bucket.this). A default fits both.
  mock_resource "aws_s3_bucket" {
    defaults = {
      id     = "warehouse-payloads-20250101000000000000000001"
      bucket = "warehouse-payloads-20250101000000000000000001"
      arn    = "arn:aws:s3:::warehouse-payloads-20250101000000000000000001"
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
  image                    = "123456789012.dkr.ecr.us-east-1.amazonaws.com/warehouse:1"
  database_url_secret_arn  = "arn:aws:secretsmanager:us-east-1:123456789012:secret:warehouse-db-AbCdEf"
  cluster_arn              = "arn:aws:ecs:us-east-1:123456789012:cluster/workers"
  subnet_ids               = ["subnet-0123456789abcdef0"]
  security_group_ids       = ["sg-0123456789abcdef0"]
  target_messages_per_task = 4800 # 40 messages/s x 120 s (an example)
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

# Migrations: a non-essential migrate container runs `<worker> migrate`, and the worker waits for
# it to exit 0.

run "migrate_container_runs_before_the_worker" {
  command = plan

  assert {
    condition     = length(jsondecode(aws_ecs_task_definition.worker.container_definitions)) == 2
    error_message = "The task must have two containers: the worker and migrate."
  }

  assert {
    condition = [for c in jsondecode(aws_ecs_task_definition.worker.container_definitions) : {
      essential = c.essential, image = c.image, entryPoint = c.entryPoint, command = c.command, secrets = c.secrets
      } if c.name == "migrate"] == [{
      essential  = false
      image      = "123456789012.dkr.ecr.us-east-1.amazonaws.com/warehouse:1"
      entryPoint = ["/worker"]
      command    = ["migrate"]
      secrets    = [{ name = "DATABASE_URL", valueFrom = "arn:aws:secretsmanager:us-east-1:123456789012:secret:warehouse-db-AbCdEf" }]
    }]
    error_message = "The migrate container must be non-essential and run `/worker migrate` from the worker's image, with DATABASE_URL from the secret."
  }

  assert {
    condition     = jsondecode(aws_ecs_task_definition.worker.container_definitions)[0].name == "worker" && jsondecode(aws_ecs_task_definition.worker.container_definitions)[0].essential == true
    error_message = "The worker stays the essential container."
  }

  assert {
    condition     = jsondecode(aws_ecs_task_definition.worker.container_definitions)[0].dependsOn == [{ containerName = "migrate", condition = "SUCCESS" }]
    error_message = "The worker must start only after migrate exited 0 (dependsOn, condition SUCCESS)."
  }

  assert {
    condition     = [for c in jsondecode(aws_ecs_task_definition.worker.container_definitions) : c.logConfiguration.options["awslogs-stream-prefix"] if c.name == "migrate"] == ["migrate"]
    error_message = "The migrate container logs to the worker's log group under its own prefix."
  }
}

run "migrations_off" {
  command = plan

  variables {
    run_migrations = false
  }

  assert {
    condition     = [for c in jsondecode(aws_ecs_task_definition.worker.container_definitions) : c.name] == ["worker"]
    error_message = "run_migrations = false leaves the worker alone in the task."
  }

  assert {
    condition     = try(jsondecode(aws_ecs_task_definition.worker.container_definitions)[0].dependsOn, null) == null
    error_message = "run_migrations = false leaves the worker without a dependency."
  }
}

# Autoscaling: target tracking on the queue's visible messages per running task.

run "autoscaling_tracks_the_backlog_per_task" {
  command = plan

  assert {
    condition = (
      aws_appautoscaling_target.worker.service_namespace == "ecs" &&
      aws_appautoscaling_target.worker.scalable_dimension == "ecs:service:DesiredCount" &&
      aws_appautoscaling_target.worker.resource_id == "service/workers/warehouse-worker"
    )
    error_message = "The scalable target must be the service's DesiredCount (service/CLUSTER_NAME/SERVICE_NAME)."
  }

  assert {
    condition     = aws_appautoscaling_target.worker.min_capacity == 1 && aws_appautoscaling_target.worker.max_capacity == 10
    error_message = "Default range: 1 to 10 tasks."
  }

  assert {
    condition = (
      aws_appautoscaling_policy.backlog_per_task.policy_type == "TargetTrackingScaling" &&
      aws_appautoscaling_policy.backlog_per_task.resource_id == "service/workers/warehouse-worker" &&
      aws_appautoscaling_policy.backlog_per_task.scalable_dimension == "ecs:service:DesiredCount" &&
      aws_appautoscaling_policy.backlog_per_task.service_namespace == "ecs"
    )
    error_message = "The policy must be target tracking on the service's DesiredCount."
  }

  assert {
    condition     = aws_appautoscaling_policy.backlog_per_task.target_tracking_scaling_policy_configuration[0].target_value == 4800
    error_message = "The target must be target_messages_per_task."
  }

  assert {
    condition = (
      aws_appautoscaling_policy.backlog_per_task.target_tracking_scaling_policy_configuration[0].scale_out_cooldown == 60 &&
      aws_appautoscaling_policy.backlog_per_task.target_tracking_scaling_policy_configuration[0].scale_in_cooldown == 300
    )
    error_message = "Default cooldowns: 60 s after a scale-out, 300 s after a scale-in."
  }

  assert {
    condition = [for m in aws_appautoscaling_policy.backlog_per_task.target_tracking_scaling_policy_configuration[0].customized_metric_specification[0].metrics :
    { expression = m.expression, return_data = m.return_data } if m.id == "backlog_per_task"] == [{ expression = "visible / tasks", return_data = true }]
    error_message = "The policy must track visible / tasks, and only that expression."
  }

  assert {
    condition = [for m in aws_appautoscaling_policy.backlog_per_task.target_tracking_scaling_policy_configuration[0].customized_metric_specification[0].metrics : {
      namespace   = m.metric_stat[0].metric[0].namespace
      metric_name = m.metric_stat[0].metric[0].metric_name
      dimensions  = { for d in m.metric_stat[0].metric[0].dimensions : d.name => d.value }
      stat        = m.metric_stat[0].stat
      return_data = m.return_data
      } if m.id == "visible"] == [{
      namespace   = "AWS/SQS"
      metric_name = "ApproximateNumberOfMessagesVisible"
      dimensions  = { QueueName = "warehouse" }
      stat        = "Average"
      return_data = false
    }]
    error_message = "visible must be the queue's ApproximateNumberOfMessagesVisible (QueueName = the module's queue)."
  }

  assert {
    condition = [for m in aws_appautoscaling_policy.backlog_per_task.target_tracking_scaling_policy_configuration[0].customized_metric_specification[0].metrics : {
      namespace   = m.metric_stat[0].metric[0].namespace
      metric_name = m.metric_stat[0].metric[0].metric_name
      dimensions  = { for d in m.metric_stat[0].metric[0].dimensions : d.name => d.value }
      stat        = m.metric_stat[0].stat
      return_data = m.return_data
      } if m.id == "tasks"] == [{
      namespace   = "ECS/ContainerInsights"
      metric_name = "RunningTaskCount"
      dimensions  = { ClusterName = "workers", ServiceName = "warehouse-worker" }
      stat        = "Average"
      return_data = false
    }]
    error_message = "tasks must be Container Insights' RunningTaskCount of this service (ClusterName and ServiceName)."
  }

  assert {
    condition     = length(aws_appautoscaling_policy.backlog_per_task.target_tracking_scaling_policy_configuration[0].customized_metric_specification[0].metrics) == 3
    error_message = "Three metrics: the queue's, the service's, and their quotient."
  }
}

run "autoscaling_settings_reach_the_policy" {
  command = plan

  variables {
    min_tasks                  = 2
    max_tasks                  = 20
    desired_count              = 4
    target_messages_per_task   = 1000
    scale_out_cooldown_seconds = 30
    scale_in_cooldown_seconds  = 600
  }

  assert {
    condition     = aws_appautoscaling_target.worker.min_capacity == 2 && aws_appautoscaling_target.worker.max_capacity == 20
    error_message = "min_tasks and max_tasks must reach the scalable target."
  }

  assert {
    condition     = aws_ecs_service.worker.desired_count == 4
    error_message = "desired_count is the service's count at creation."
  }

  assert {
    condition = (
      aws_appautoscaling_policy.backlog_per_task.target_tracking_scaling_policy_configuration[0].target_value == 1000 &&
      aws_appautoscaling_policy.backlog_per_task.target_tracking_scaling_policy_configuration[0].scale_out_cooldown == 30 &&
      aws_appautoscaling_policy.backlog_per_task.target_tracking_scaling_policy_configuration[0].scale_in_cooldown == 600
    )
    error_message = "The target and the cooldowns must reach the policy."
  }
}

run "min_tasks_over_max_tasks_fails" {
  command = plan

  variables {
    min_tasks     = 5
    max_tasks     = 3
    desired_count = 4
  }

  expect_failures = [var.min_tasks]
}

run "min_tasks_zero_fails" {
  command = plan

  variables {
    min_tasks = 0
  }

  expect_failures = [var.min_tasks]
}

run "desired_count_over_max_tasks_fails" {
  command = plan

  variables {
    desired_count = 11
  }

  expect_failures = [var.desired_count]
}

run "target_of_zero_messages_per_task_fails" {
  command = plan

  variables {
    target_messages_per_task = 0
  }

  expect_failures = [var.target_messages_per_task]
}

# Large payloads offloaded to S3: off by default; on, a bucket whose objects outlive the queue's
# redeliveries, readable by the task role, named to the worker.

run "payload_bucket_off_by_default" {
  command = plan

  assert {
    condition     = length(module.payload_bucket) == 0 && output.payload_bucket_name == null
    error_message = "No payload bucket unless payload_bucket is set."
  }

  assert {
    condition     = length([for e in jsondecode(aws_ecs_task_definition.worker.container_definitions)[0].environment : e if e.name == "SQSINBOX_PAYLOAD_BUCKETS"]) == 0
    error_message = "Without a payload bucket the worker gets no SQSINBOX_PAYLOAD_BUCKETS."
  }
}

run "payload_bucket" {
  command = plan

  variables {
    payload_bucket = true
  }

  assert {
    condition = contains(
      jsondecode(aws_ecs_task_definition.worker.container_definitions)[0].environment,
      { name = "SQSINBOX_PAYLOAD_BUCKETS", value = "warehouse-payloads-20250101000000000000000001" },
    )
    error_message = "The worker must be allowed to read the payload bucket (SQSINBOX_PAYLOAD_BUCKETS)."
  }

  assert {
    condition     = output.payload_bucket_name == "warehouse-payloads-20250101000000000000000001"
    error_message = "The bucket's name must be an output, for the producers."
  }

  assert {
    condition     = module.payload_bucket[0].expiration_days == 19 && module.payload_bucket[0].minimum_expiration_days == 19
    error_message = "The payloads must outlive the queue's horizon (14 days), a redriven copy's retention (4) and a day: 19 days."
  }

  assert {
    condition = jsondecode(module.payload_bucket[0].reader_policy_json).Statement == [{
      Sid      = "ReadPayloads"
      Effect   = "Allow"
      Action   = ["s3:GetObject"]
      Resource = "arn:aws:s3:::warehouse-payloads-20250101000000000000000001/sqsinbox/*"
    }]
    error_message = "The task role's payload policy must allow only GetObject on the payloads."
  }

  assert {
    condition     = jsondecode(output.payload_writer_policy_json).Statement[0].Action == ["s3:PutObject"]
    error_message = "The producers' policy must be an output."
  }

  assert {
    condition     = aws_iam_policy.consume.policy == module.queue.consumer_policy_json
    error_message = "The consumer policy must stay as it was."
  }
}
