# A worker on ECS Fargate consuming a queue made by the sqs-worker module. The module's outputs
# feed the task definition: QUEUE_URL from queue_url, the task role's policy from
# consumer_policy_json, and the inbox retention is checked against the queue's at plan time.
# Each task first runs `<worker> migrate` in a short-lived container (run_migrations), and the
# service scales on the queue's backlog per running task (autoscaling.tf). With payload_bucket,
# a bucket for payloads offloaded to S3 (../../modules/payload-bucket), which the worker may read.

locals {
  # The cluster's name, the part of its ARN after "cluster/" (a bare name stays as it is):
  # Application Auto Scaling and Container Insights name the cluster by name.
  cluster_name = reverse(split("/", var.cluster_arn))[0]

  database_url_secret = [
    { name = "DATABASE_URL", valueFrom = var.database_url_secret_arn },
  ]

  # `<worker> migrate` applies the inbox's migrations and the worker's own, then exits 0. The
  # worker refuses to start on an unmigrated database, so it waits for this container to succeed
  # (dependsOn, condition SUCCESS). Every task runs it: with nothing to apply it returns at once,
  # and tasks starting together are serialised by the migration's advisory lock. If it fails, the
  # worker container never starts, the task stops, and the service starts another. The entry
  # point is set, so the command does not depend on the image's ENTRYPOINT or CMD.
  migrate_containers = var.run_migrations ? [{
    name       = "migrate"
    image      = var.image
    essential  = false
    entryPoint = [var.worker_command]
    command    = ["migrate"]
    secrets    = local.database_url_secret

    logConfiguration = {
      logDriver = "awslogs"
      options = {
        awslogs-group         = aws_cloudwatch_log_group.worker.name
        awslogs-region        = var.region
        awslogs-stream-prefix = "migrate"
      }
    }
  }] : []

  # With payload_bucket: the buckets the worker may read offloaded payloads from
  # (s3payload.ReaderConfig.Buckets, comma-separated). A pointer to any other bucket is refused.
  payload_environment = var.payload_bucket ? [
    { name = "SQSINBOX_PAYLOAD_BUCKETS", value = module.payload_bucket[0].bucket_name },
  ] : []
}

module "queue" {
  source = "../../modules/sqs-worker"

  name                       = var.name
  visibility_timeout_seconds = 30
  message_retention_seconds  = 345600 # 4 days
  max_receive_count          = 5
  inbox_retention_seconds    = var.inbox_retention_seconds
  alarm_actions              = var.alarm_actions
}

# Payloads too large for a message, offloaded to S3 by the producers (the outbox relay, `sqsinbox
# send`), kept until no delivery of this queue can need them: the queue's redelivery horizon, plus
# its retention once more for a copy redriven from the DLQ (`sqsinbox redrive --mode copy`), plus a
# day; 14 + 4 + 1 = 19 days with this queue. The task role may read them (only that: the worker
# never deletes a payload; the lifecycle rule does). Producers need the writer policy (output
# payload_writer_policy_json).
module "payload_bucket" {
  source = "../../modules/payload-bucket"
  count  = var.payload_bucket ? 1 : 0

  bucket_name_prefix         = "${lower(replace(var.name, "_", "-"))}-payloads-"
  redelivery_horizon_seconds = module.queue.redelivery_horizon_seconds
  redrive_copies             = true
  queue_retention_seconds    = module.queue.message_retention_seconds
  reader_role_names          = [aws_iam_role.task.name]
}

# The task role: what the worker's code may do. Exactly the consumer policy.
resource "aws_iam_role" "task" {
  name = "${var.name}-worker-task"
  assume_role_policy = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Effect    = "Allow"
      Action    = "sts:AssumeRole"
      Principal = { Service = "ecs-tasks.amazonaws.com" }
    }]
  })
}

resource "aws_iam_policy" "consume" {
  name        = "${var.name}-consume"
  description = "Consume ${module.queue.queue_name} (sqsinbox worker)."
  policy      = module.queue.consumer_policy_json
}

resource "aws_iam_role_policy_attachment" "task_consume" {
  role       = aws_iam_role.task.name
  policy_arn = aws_iam_policy.consume.arn
}

# The execution role: what ECS needs to start the task (pull the image, write logs, read the
# DATABASE_URL secret). The worker's code never gets these.
resource "aws_iam_role" "execution" {
  name               = "${var.name}-worker-execution"
  assume_role_policy = aws_iam_role.task.assume_role_policy
}

resource "aws_iam_role_policy_attachment" "execution" {
  role       = aws_iam_role.execution.name
  policy_arn = "arn:aws:iam::aws:policy/service-role/AmazonECSTaskExecutionRolePolicy"
}

resource "aws_iam_role_policy" "execution_secret" {
  name = "read-database-url"
  role = aws_iam_role.execution.id
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Effect   = "Allow"
      Action   = "secretsmanager:GetSecretValue"
      Resource = var.database_url_secret_arn
    }]
  })
}

resource "aws_cloudwatch_log_group" "worker" {
  name              = "/ecs/${var.name}-worker"
  retention_in_days = 30
}

resource "aws_ecs_task_definition" "worker" {
  family                   = "${var.name}-worker"
  requires_compatibilities = ["FARGATE"]
  network_mode             = "awsvpc"
  cpu                      = 256
  memory                   = 512
  task_role_arn            = aws_iam_role.task.arn
  execution_role_arn       = aws_iam_role.execution.arn

  # The worker first (tests read it as [0]), then the migrate container when run_migrations.
  container_definitions = jsonencode(concat([{
    name      = "worker"
    image     = var.image
    essential = true
    # The worker program with no subcommand; set, like migrate's, so that it does not depend on
    # the image's ENTRYPOINT or CMD.
    entryPoint = [var.worker_command]

    # Start only after `migrate` exited 0 (null, left out, without run_migrations).
    dependsOn = var.run_migrations ? [{ containerName = "migrate", condition = "SUCCESS" }] : null

    # SIGTERM starts a graceful stop: no new receives, in-flight handlers finish, their deletes
    # are flushed. ECS sends SIGKILL after stopTimeout seconds. A message cut off by SIGKILL is
    # not lost: its transaction rolls back and SQS redelivers it after the visibility timeout.
    stopTimeout = var.stop_timeout_seconds

    environment = concat([
      { name = "QUEUE_URL", value = module.queue.queue_url },
      { name = "AWS_REGION", value = var.region },
      { name = "HEALTH_ADDR", value = "127.0.0.1:8081" },
      # The worker's settings, which workerapp reads (docs/configuration.md lists the others).
      # format, not "${...}": a lone interpolation keeps the number, and ECS wants strings.
      { name = "CONCURRENCY", value = format("%d", var.concurrency) },
      { name = "MAX_PER_GROUP", value = format("%d", var.max_per_group) },
      { name = "SHUTDOWN_TIMEOUT", value = format("%ds", var.shutdown_timeout_seconds) },
    ], local.payload_environment)

    # Liveness, not readiness: /livez fails only when the worker is wedged. In a database outage
    # every task pauses and is not ready, and a readiness check here would have ECS kill them all.
    # The worker binary asks its own /livez (`<binary> healthcheck`), so the image needs no curl.
    healthCheck = {
      command     = ["CMD", var.worker_command, "healthcheck"]
      interval    = 30
      timeout     = 5
      retries     = 3
      startPeriod = 60
    }
    # The worker's own setting that must agree with this file (set it in code):
    #   - inbox.Config.Retention at least module.queue.redelivery_horizon_seconds (the default,
    #     28 days, is). The worker checks it against the queues at start and refuses to run;
    #     inbox_retention_seconds above makes plan fail first.
    secrets = local.database_url_secret

    logConfiguration = {
      logDriver = "awslogs"
      options = {
        awslogs-group         = aws_cloudwatch_log_group.worker.name
        awslogs-region        = var.region
        awslogs-stream-prefix = "worker"
      }
    }
  }], local.migrate_containers))
}

resource "aws_ecs_service" "worker" {
  name            = "${var.name}-worker"
  cluster         = var.cluster_arn
  task_definition = aws_ecs_task_definition.worker.arn
  desired_count   = var.desired_count
  launch_type     = "FARGATE"

  # Start new tasks before stopping old ones; duplicates during the overlap are the inbox's job.
  deployment_minimum_healthy_percent = 100
  deployment_maximum_percent         = 200

  network_configuration {
    subnets          = var.subnet_ids
    security_groups  = var.security_group_ids
    assign_public_ip = false
  }

  lifecycle {
    # Autoscaling (autoscaling.tf) sets the count once the service exists; desired_count is only
    # where it starts, and a later apply must not reset it.
    ignore_changes = [desired_count]
  }
}
